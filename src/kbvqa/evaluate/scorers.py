"""The per-item scorers a study can use, by name: `SCORERS` (the `--scorer` choices of `kbvqa study`).

`kbvqa.evaluate.METRICS` names the scorers of `kbvqa score`; these are the per-item, all-references
variants a paired study needs (a missing prediction is wrong and counted, so two runs are scored on
the same items). Kept apart from studies.py so the command line can list them without importing
numpy and the scorers: each entry imports its scorer when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kbvqa.registry import Registry

__all__ = ["SCORERS", "StudyScorer", "semantic_backend"]


@dataclass(frozen=True)
class StudyScorer:
    """A per-item scorer for studies: read references once (`load(path, qtypes)`), then score any
    number of prediction files against them (`score(preds, refs, semantic_backend)` -> per-item rows,
    summary, the scorer's name as reported)."""

    load: Callable[[str | Path, str | Path | None], Any]
    score: Callable[[list[Any], Any, Any], tuple[list[dict[str, Any]], dict[str, Any], str]]
    semantic: bool = False  # takes a semantic-approximation backend
    read: Callable[[str | Path], Any] | None = None  # how a run's file is read (default: prediction lines)


SCORERS: Registry[StudyScorer] = Registry("scorer")


def _infoseek_refs(raw: bool) -> Callable[[str | Path, str | Path | None], Any]:
    def load(path: str | Path, qtypes: str | Path | None) -> Any:
        from kbvqa.evaluate.io import load_infoseek_references

        return load_infoseek_references(path, qtypes_path=qtypes, keep_raw=raw)

    return load


def _evqa_refs(path: str | Path, qtypes: str | Path | None) -> Any:
    from kbvqa.evaluate.evqa import load_evqa_references

    return load_evqa_references(path)


def _strict(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.infoseek import score_strict

    res = score_strict(preds, refs, per_item=True)
    return res.items, res.summary, "infoseek-strict"


def _reward(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.infoseek import score_reward

    res = score_reward(preds, refs, per_item=True)
    return res.items, res.summary, "infoseek-reward"


def _evqa(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.evqa import score_evqa

    res = score_evqa(preds, refs, per_item=True)
    return res.items, res.summary, "evqa"


def _evqa_semantic(preds: list[Any], refs: Any, backend: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    from kbvqa.evaluate.evqa import score_evqa

    backend = backend if backend is not None else semantic_backend("evqa-semantic")
    res = score_evqa(preds, refs, backend=backend, per_item=True)
    return res.items, res.summary, f"evqa-semantic [{backend.name}]"


SCORERS.add("infoseek-strict", StudyScorer(_infoseek_refs(False), _strict),
            help="InfoSeek strict (official per-item rules, missing = wrong, kbvqa Time leniency on)")
SCORERS.add("infoseek-reward", StudyScorer(_infoseek_refs(True), _reward),
            help="InfoSeek reward (ARA/ReflectiVA containment and ±10% numeric band)")
SCORERS.add("evqa", StudyScorer(_evqa_refs, _evqa), help="E-VQA exact match (evqa-em)")
SCORERS.add("evqa-semantic", StudyScorer(_evqa_refs, _evqa_semantic, semantic=True),
            help="E-VQA exact match + semantic-approx (all-MiniLM-L6-v2, not BEM)")


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


def semantic_backend(scorer: str, threshold: float | None = None) -> Any:
    """The semantic-approximation backend `scorer` needs (None for scorers without one): build it
    once and pass it to every `score_items` call of a study, so the model loads once."""
    if not SCORERS.get(scorer).semantic:
        return None
    from kbvqa.evaluate.semantic import SemanticBackend

    return SemanticBackend() if threshold is None else SemanticBackend(threshold=threshold)
