"""The per-item scorers a study can use, by name: `SCORERS` (the `--scorer` choices of `kbvqa study`).

`kbvqa.evaluate.METRICS` names the scorers of `kbvqa score`; these are the per-item, all-references
variants a paired study needs (a missing prediction is wrong and counted, so two runs are scored on
the same items). Kept apart from studies.py so the command line can list them without importing
numpy and the scorers: each entry imports its scorer when it runs.

Seed 000 (§6) scores "BEM on E-VQA; for InfoSeek ... VQA accuracy", so those are the defaults
(`paper_scorer`): `infoseek-official` (the official scorer's per-item rules) and `evqa-bem` (exact
match, then BEM from a local model directory; refused without one). The other readings stay as named
options and say what they are: `infoseek-reward` (the ARA authors' released scorer), `infoseek-strict`
(kbvqa's: official rules plus a Time leniency), `evqa` (exact match only) and `evqa-semantic` (MiniLM
cosine) — the last two are not BEM, and their names in every table say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kbvqa.registry import Registry

__all__ = ["SCORERS", "StudyScorer", "semantic_backend", "paper_scorer", "benchmark_of", "PAPER_SCORERS",
           "BEM_NEEDED"]


@dataclass(frozen=True)
class StudyScorer:
    """A per-item scorer for studies: read references once (`load(path, qtypes)`), then score any
    number of prediction files against them (`score(preds, refs, semantic_backend)` -> per-item rows,
    summary, the scorer's name as reported)."""

    load: Callable[[str | Path, str | Path | None], Any]
    score: Callable[[list[Any], Any, Any], tuple[list[dict[str, Any]], dict[str, Any], str]]
    semantic: bool = False  # takes a semantic-approximation backend
    read: Callable[[str | Path], Any] | None = None  # how a run's file is read (default: prediction lines)
    bem: bool = False  # takes a BEM backend: needs a local BEM model directory (`--bem-dir`)


SCORERS: Registry[StudyScorer] = Registry("scorer")


def _infoseek_refs(raw: bool) -> Callable[[str | Path, str | Path | None], Any]:
    def load(path: str | Path, qtypes: str | Path | None) -> Any:
        from kbvqa.evaluate.io import load_infoseek_references

        return load_infoseek_references(path, qtypes_path=qtypes, keep_raw=raw)

    return load


def _evqa_refs(path: str | Path, qtypes: str | Path | None) -> Any:
    from kbvqa.evaluate.evqa import load_evqa_references

    return load_evqa_references(path)


def _official(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """The official scorer's per-item decision (what `score infoseek --mode official` applies) on every
    reference id; strict mode's loop without its Time leniency is exactly that."""
    from kbvqa.evaluate.infoseek import score_strict

    res = score_strict(preds, refs, per_item=True, time_leniency=False)
    return res.items, res.summary, "infoseek-official"


def _strict(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.infoseek import score_strict

    res = score_strict(preds, refs, per_item=True)
    return res.items, res.summary, "infoseek-strict (kbvqa's reading)"


def _reward(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.infoseek import score_reward

    res = score_reward(preds, refs, per_item=True)
    return res.items, res.summary, "infoseek-reward (ARA authors' scorer)"


def _evqa(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.evqa import score_evqa

    res = score_evqa(preds, refs, per_item=True)
    return res.items, res.summary, "evqa (exact match only, not BEM)"


def _evqa_semantic(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.evqa import score_evqa

    backend = backend if backend is not None else semantic_backend("evqa-semantic")
    res = score_evqa(preds, refs, backend=backend, per_item=True)
    return res.items, res.summary, f"evqa-semantic [{backend.name}]"


def _evqa_bem(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.evqa import score_evqa

    if backend is None:  # score_items called without the backend study_backend builds
        raise ValueError(BEM_NEEDED)
    res = score_evqa(preds, refs, backend=backend, per_item=True)
    return res.items, res.summary, f"evqa-bem [{backend.name}]"


SCORERS.add("infoseek-official", StudyScorer(_infoseek_refs(False), _official),
            help="InfoSeek VQA accuracy, the paper's metric (default for InfoSeek): the official scorer's per-item "
                 "rules (normalised exact match, numeric ranges), every reference counted, missing = wrong")
SCORERS.add("infoseek-strict", StudyScorer(_infoseek_refs(False), _strict),
            help="kbvqa's reading: official per-item rules plus a ±1-year Time leniency, missing = wrong")
SCORERS.add("infoseek-reward", StudyScorer(_infoseek_refs(True), _reward),
            help="the ARA authors' released scorer: containment, ±10% numeric band (ReflectiVA's reward)")
SCORERS.add("evqa-bem", StudyScorer(_evqa_refs, _evqa_bem, bem=True),
            help="E-VQA accuracy, the paper's metric (default for E-VQA): exact match, then BEM >= 0.5 from a "
                 "local model directory (--bem-dir; refused without one)")
SCORERS.add("evqa", StudyScorer(_evqa_refs, _evqa),
            help="E-VQA exact match only (evqa-em), not BEM: a stand-in that never credits a paraphrase")
SCORERS.add("evqa-semantic", StudyScorer(_evqa_refs, _evqa_semantic, semantic=True),
            help="E-VQA exact match + semantic-approx (all-MiniLM-L6-v2 cosine), not BEM: a stand-in")


def _reference_ids(path: str | Path, qtypes: str | Path | None) -> Any:
    from kbvqa.data.formats import read_samples

    return {s.id: s.answer_type or s.question_type or (s.meta.get("intent") if s.meta else None)
            for s in read_samples(path)}


def _verdicts(path: str | Path) -> Any:
    from kbvqa.evaluate.agent import read_verdicts

    return read_verdicts(path)


def _judged(verdicts: Any, refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Correct = the judge said correct. Every reference id is an item. An `invalid` verdict (unusable
    reply) or an `error` (failed call: a None label) is no grade — flagged, so the studies leave it out
    of every accuracy and count it apart, never as wrong; an id without any verdict line (the run did
    not cover it) counts as missing and wrong, like a missing prediction."""
    items = [{"data_id": rid, "correct": verdicts.get(rid) == "correct", "missing": rid not in verdicts,
              "invalid": verdicts.get(rid) == "invalid", "error": rid in verdicts and verdicts[rid] is None,
              "question_type": qt} for rid, qt in refs.items()]
    unknown = sum(1 for rid in verdicts if rid not in refs)
    return items, {"n_unknown_ids": unknown}, "simpleqa-judge verdicts"


SCORERS.add("judge-verdicts", StudyScorer(_reference_ids, _judged, read=_verdicts),
            help="the SimpleQA-style judge's labels (the runs are `kbvqa score judge` outputs; any format of "
                 "references, e.g. NoteVQA); accuracy over graded verdicts, invalid and error counted apart, "
                 "with seed 001's accuracy over all responses beside it")


BEM_NEEDED = ("evqa-bem (BEM, seed 000's E-VQA metric) needs a local BEM model directory: pass --bem-dir DIR (a "
              "transformers BertForSequenceClassification port of BEM). kbvqa does not fall back on its own; to use "
              "a stand-in, say so: --scorer evqa (exact match only, not BEM) or --scorer evqa-semantic (MiniLM "
              "cosine, not BEM)")


def semantic_backend(scorer: str, threshold: float | None = None, *, bem_dir: str | Path | None = None) -> Any:
    """The equivalence backend `scorer` needs (None for scorers without one): the semantic
    approximation, or BEM from `bem_dir` (a ValueError without one, or when the directory holds no
    usable model: never a silent fallback). Build it once and pass it to every `score_items` call of a
    study, so the model loads once."""
    entry = SCORERS.get(scorer)
    if entry.bem:
        if bem_dir is None:
            raise ValueError(BEM_NEEDED)
        from kbvqa.evaluate.evqa import load_bem

        try:
            return load_bem(bem_dir)
        except RuntimeError as exc:
            raise ValueError(f"{exc} ({BEM_NEEDED})") from exc
    if not entry.semantic:
        return None
    from kbvqa.evaluate.semantic import SemanticBackend

    return SemanticBackend() if threshold is None else SemanticBackend(threshold=threshold)


#: What a study scores with when `--scorer` is left out: the paper's metric for the references' benchmark.
PAPER_SCORERS = {"infoseek": "infoseek-official", "evqa": "evqa-bem"}
_INFOSEEK_TYPES = frozenset({"string", "numerical", "time"})


def benchmark_of(references: str | Path) -> str | None:
    """'infoseek' or 'evqa' from the first rows of a reference file (its question types: String /
    Numerical / Time vs E-VQA's templated / automatic / multi_answer / 2_hop; an official InfoSeek
    JSONL by its fields), None when the rows do not tell."""
    from kbvqa.data.evqa import EVQA_QUESTION_TYPES
    from kbvqa.evaluate.io import read_csv, read_jsonl

    path = Path(references)
    rows = read_csv(path) if path.suffix.lower() in (".csv", ".tsv") else read_jsonl(path)
    infoseek = False
    for i, (_, obj) in enumerate(rows):
        if i >= 200:
            break
        if str(obj.get("question_type") or "").strip() in EVQA_QUESTION_TYPES:
            return "evqa"  # an E-VQA sample may carry an InfoSeek-like answer_type too: E-VQA's type decides
        infoseek = infoseek or "answer_eval" in obj or "data_split" in obj or any(
            str(obj.get(key) or "").strip().lower() in _INFOSEEK_TYPES
            for key in ("question_type", "anchor_question_type", "answer_type"))  # ARA augmented CSV, kbvqa samples
    return "infoseek" if infoseek else None


def paper_scorer(references: str | Path) -> str:
    """The scorer seed 000 (§6) uses for these references' benchmark; a ValueError naming the choices
    when the file does not tell which benchmark it holds."""
    bench = benchmark_of(references)
    if bench is None:
        raise ValueError(f"{references}: cannot tell whether these are InfoSeek or E-VQA references (no "
                         "question_type the two benchmarks use in the first rows); pass --scorer "
                         f"(one of {', '.join(SCORERS.names())})")
    return PAPER_SCORERS[bench]
