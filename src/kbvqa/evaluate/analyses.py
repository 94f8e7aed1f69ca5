"""Seed 000's remaining analyses (§6.2-6.3, Tables 3, 4 and 6, Appendix 0.D) as studies over files
kbvqa already writes: no model call, no runner, every count printed.

- **What the audit changed.** `version_changes(A, B)` joins two versions of a benchmark on id (or
  reads one audited file's `audit.question_before/answers_before` against its final question and
  answers) and gives every item a change kind: question_only / answer_only / both / neither.
  "Changed" is the ARA rule: different after lower-casing, punctuation to spaces and collapsing
  spaces; answers compared as sets of `|` alternatives. `kbvqa audit diff` (pipelines.audit_tools)
  counts these same rows, so its table and the studies below always agree.
- **Accuracy by fix kind** (`fix_kinds`): one method's unfixed and fixed runs paired on the same ids,
  split by change kind, accuracy before -> after with paired deltas (seed 000 §6.2: question-only
  fixes 60.1 -> 75.1 on the grounded subset).
- **The grounded subset** (`grounded_subset`, `restrict`): items whose final evidence (top-k of a
  retrieval stage, e.g. the reranked `post` stage, or the `pool` of evidence sections the answer was
  conditioned on) belongs to the gold entity, by canonical URL; any study takes it as `subset`.
  The share of grounded items is seed 000's post-retrieval recall (Table 3).
- **Modification rates** (`modification_rates`, Table 6 shape): questions and answers modified per
  dataset and question type, dropped share, tags.
- **Per-variant accuracy** (`variant_accuracy`, Table 4 shape) on anchor / intra / inter / blank /
  double predictions by question type, with the paired change against the anchor, plus the
  post-retrieval recall per variant (Table 3 shape) from the same predictions' retrieval trails.
- **Correctness buckets** (`correctness_buckets`): the 2^N patterns of which of N runs answer an
  item correctly (the ARA code's buckets), with counts and example ids; with a second split, the
  items whose pattern the fix changed.

Every mean comes with a seeded percentile-bootstrap interval (kbvqa.evaluate.studies); accuracies
and shares are percentages. `demo_analyses(out)` runs them all on `kbvqa demo`'s outputs.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kbvqa.data.schema import Answer, Sample
from kbvqa.data.urls import canonical_url
from kbvqa.data.variants import VARIANTS, split_variant
from kbvqa.evaluate.studies import (DEFAULT_RESAMPLES, ItemScores, _boot_meta, _sub_seed, _subset_info, bootstrap_ci,
                                    load_references, mcnemar_exact_p, restrict, save_study, score_items,
                                    semantic_backend)

__all__ = [
    "CHANGE_KINDS", "norm_text", "answer_alternatives", "answer_set", "change_kind", "load_records", "question_type_of", "ItemChange",
    "VersionChanges", "version_changes", "Subset", "prediction_stages", "final_evidence", "grounded_flags",
    "grounded_subset",
    "grounded_study", "restrict", "paired_accuracy", "fix_kinds", "fix_kinds_study", "MODIFICATION_RULE",
    "MODIFICATION_DENOMINATORS", "modification_counts", "modification_rates",
    "modification_rates_study", "variant_accuracy", "variant_runs", "variants_study", "correctness_buckets", "buckets_study",
    "demo_analyses",
]

CHANGE_KINDS = ("question_only", "answer_only", "both", "neither")
#: Seed 000's question-type order (Tables 1 and 4).
INFOSEEK_TYPES = ("Time", "Numerical", "String")


# --------------------------------------------------------------------------------------------------
# what the audit changed


def norm_text(s: str | None) -> str:
    """Lower case, punctuation to spaces, spaces collapsed (the ARA comparison rule)."""
    return " ".join(re.sub(r"[^\w\s]", " ", (s or "").lower()).split())


def answer_alternatives(answers: Iterable[Any]) -> frozenset[str]:
    """The normalised `|` alternatives of an answer list (strings, answer dicts or `Answer`s), so a
    reordering of alternatives is not a change."""
    out = set()
    for a in answers:
        text = a.text if isinstance(a, Answer) else Answer.model_validate(a).text
        out.update(n for n in (norm_text(alt) for alt in text.split("|")) if n)
    return frozenset(out)


def answer_set(sample: Sample) -> frozenset[str]:
    return answer_alternatives(sample.answers)


def change_kind(question_a: str | None, answers_a: Iterable[Any], question_b: str | None,
                answers_b: Iterable[Any]) -> str:
    """question_only / answer_only / both / neither between version A and version B of one item."""
    qc = norm_text(question_a) != norm_text(question_b)
    ac = answer_alternatives(answers_a) != answer_alternatives(answers_b)
    return "both" if qc and ac else "question_only" if qc else "answer_only" if ac else "neither"


def _is_records_file(path: Path) -> bool:
    if path.suffix.lower() not in (".jsonl", ".ndjson"):
        return False
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                return isinstance(obj, dict) and ("audit" in obj or "status" in obj)
    return False


def load_records(path: str | Path, fmt: str | None = None) -> list[tuple[Sample, dict[str, Any], dict[str, Any]]]:
    """(Sample, audit dict or {}, raw record) per row. Audited/runner JSONL keeps its `audit` object;
    any other file goes through read_samples (format detected unless `fmt`)."""
    path = Path(path)
    out = []
    if fmt in (None, "kbvqa") and _is_records_file(path):
        from kbvqa.runner import read_results

        for raw in read_results(path):
            obj = {k: v for k, v in raw.items() if k not in ("audit", "status", "reason", "attempts", "stage", "error")}
            try:
                s = Sample.model_validate(obj)
            except Exception as exc:
                raise ValueError(f"{path}: record {raw.get('id')!r} is not a valid sample: {exc}") from exc
            out.append((s, dict(raw.get("audit") or {}), raw))
        return out
    from kbvqa.data.formats import read_samples

    return [(s, {}, s.dump()) for s in read_samples(path, fmt)]


def question_type_of(s: Sample) -> str:
    """The type an item is grouped under: its question type, else its answer type, else 'unknown'."""
    return str(s.question_type or s.answer_type or "unknown")


@dataclass(frozen=True)
class ItemChange:
    """One item of version A and what version B made of it. `kind` is None for an item B lacks;
    `tags` None when neither version carries an audit; `status` is B's runner status ("ok" for a
    plain file, "absent" when B lacks the item)."""

    id: str
    kind: str | None
    question_type: str
    dataset: str
    tags: tuple[str, ...] | None
    action: str | None
    status: str
    question_a: str
    question_b: str | None
    answers_a: list[str]
    answers_b: list[str] | None

    @property
    def dropped(self) -> bool:
        return self.kind is None or self.action == "drop"


@dataclass
class VersionChanges:
    """Every item of A: `items` (joined with B, in A's order) and `only_in_a` (B lacks them); ids
    only B has. `a`/`b` name the sources (b is None for one audited file)."""

    a: str
    b: str | None
    items: list[ItemChange]
    only_in_a: list[ItemChange]
    only_in_b: list[str]

    def kinds(self) -> dict[str, str]:
        """id -> change kind of the joined items B finished (status ok): what a fix-kind split reads."""
        return {it.id: it.kind for it in self.items if it.kind is not None and it.status == "ok"}


def _tags(audit: Mapping[str, Any], samples: Sequence[Sample], tag_field: str | None) -> tuple[str, ...] | None:
    """The item's tags: the audit's (None without an audit), or with `tag_field` the value of that
    meta key in the first of `samples` that has it (B before A)."""
    if tag_field:
        key = tag_field[5:] if tag_field.startswith("meta.") else tag_field
        val = next((s.meta[key] for s in samples if s.meta and s.meta.get(key) not in (None, "")), None)
        return (str(val),) if val is not None else ()
    return tuple(audit.get("tags") or ()) if audit else None


def version_changes(a: str | Path, b: str | Path | None = None, *, fmt_a: str | None = None,
                    fmt_b: str | None = None, tag_field: str | None = None) -> VersionChanges:
    """Join version A (before) with version B (after) on id, or (b None) compare one audited file's
    `audit.question_before/answers_before` with its final question and answers. Tags come from B's
    audit (else A's), or from `tag_field` (a `meta.KEY` of the samples, e.g. the ARA
    `final_check_tag`). An audited record without `question_before` is an error, never a guess."""
    ra = load_records(a, fmt_a)
    if b is None:
        items = []
        for s, audit, raw in ra:
            status = str(raw.get("status", "ok"))
            if audit and "question_before" not in audit:
                raise ValueError(f"{a}: record {s.id!r} has an audit without question_before/answers_before; "
                                 "compare two versions instead (A B)")
            if not audit and status == "ok":
                raise ValueError(f"{a}: record {s.id!r} has no audit: not an audited file (give A and B)")
            before_q = audit.get("question_before", s.question) if audit else s.question
            before_a = [Answer.model_validate(x).text for x in audit.get("answers_before", s.answers)] if audit \
                else s.answer_texts
            items.append(ItemChange(
                s.id, change_kind(before_q, before_a, s.question, s.answers), question_type_of(s), str(s.dataset or "(none)"),
                _tags(audit, [s], tag_field), audit.get("action"), status, before_q, s.question, before_a,
                s.answer_texts))
        return VersionChanges(str(a), None, items, [], [])
    rb = load_records(b, fmt_b)
    ib = {s.id: (s, au, raw) for s, au, raw in rb}
    items, only_a = [], []
    for sa, aud_a, _ in ra:
        if sa.id not in ib:
            only_a.append(ItemChange(sa.id, None, question_type_of(sa), str(sa.dataset or "(none)"), _tags(aud_a, [sa], tag_field),
                                     aud_a.get("action"), "absent", sa.question, None, sa.answer_texts, None))
            continue
        sb, aud_b, raw_b = ib[sa.id]
        aud = aud_b or aud_a
        items.append(ItemChange(
            sa.id, change_kind(sa.question, sa.answers, sb.question, sb.answers), question_type_of(sa),
            str(sa.dataset or "(none)"), _tags(aud, [sb, sa], tag_field), aud.get("action"),
            str(raw_b.get("status", "ok")), sa.question, sb.question, sa.answer_texts, sb.answer_texts))
    ids_a = {s.id for s, _, _ in ra}
    return VersionChanges(str(a), str(b), items, only_a, sorted(set(ib) - ids_a))


# --------------------------------------------------------------------------------------------------
# small shared pieces


def _ci(values: np.ndarray, name: str, n_resamples: int, seed: int) -> dict[str, float] | None:
    """Mean of `values` in percent with its seeded CI; None for no values (never a NaN in JSON)."""
    if len(values) == 0:
        return None
    return bootstrap_ci(np.asarray(values, dtype=np.float64), n_resamples=n_resamples,
                        seed=_sub_seed(seed, name)).scaled(100.0).to_json()  # type: ignore[arg-type]


def paired_accuracy(before: Sequence[bool] | np.ndarray, after: Sequence[bool] | np.ndarray, *, name: str,
                    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Accuracy before and after on the same items, the paired delta (after - before) with its CI,
    items gained / lost and the exact McNemar p; CIs are None for an empty group."""
    xa = np.asarray(before, dtype=bool)
    xb = np.asarray(after, dtype=bool)
    if xa.shape != xb.shape:
        raise ValueError(f"paired arrays differ in shape: {xa.shape} vs {xb.shape}")
    gained, lost = int((~xa & xb).sum()), int((xa & ~xb).sum())
    return {"n": int(xa.size), "correct_before": int(xa.sum()), "correct_after": int(xb.sum()),
            "before": _ci(xa, name + "/before", n_resamples, seed), "after": _ci(xb, name + "/after", n_resamples, seed),
            "delta": _ci(xb.astype(np.float64) - xa, name + "/delta", n_resamples, seed),
            "gained": gained, "lost": lost, "mcnemar_p": mcnemar_exact_p(lost, gained)}


def _types_in_order(qtypes: Iterable[str]) -> list[str]:
    seen = set(qtypes)
    return [t for t in INFOSEEK_TYPES if t in seen] + sorted(seen - set(INFOSEEK_TYPES))


# --------------------------------------------------------------------------------------------------
# the grounded subset


def prediction_stages(prediction: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every retrieval stage a prediction line really holds, stage -> {"retrieved": [...], ...}:
    kbvqa's trail (`meta.retrieval`, or `retrieval` / `rerank` / `image_retrieval`), a bare
    `retrieved` list as the initial stage, and the published methods' own fields
    (`kbvqa.evaluate.methods.method_stages`: EchoSight reranked_entries, IBA candidate_urls /
    selected_url, Wiki-PRF retrieved_urls with its hits). A stage nothing wrote is absent: never an
    empty stand-in, so a run without it is refused rather than scored 0."""
    from kbvqa.evaluate.methods import method_stages
    from kbvqa.stages.answer.retrieve import retrieval_trail

    obj = dict(prediction)
    trail = (obj.get("meta") or {}).get("retrieval") or retrieval_trail(obj)
    out = {st: dict(v) for st, v in trail.items() if isinstance(v, dict) and isinstance(v.get("retrieved"), list)}
    if not out and isinstance(obj.get("retrieved"), list):
        out["initial"] = {"retrieved": obj["retrieved"], "from": "retrieved"}
    for st, v in method_stages(obj).items():
        out.setdefault(st, v)
    return out


def _depth(rec: Mapping[str, Any], k: int | None) -> int:
    """How much of a stage counts: `k` when given; by default (None) the whole stage when it is an
    aggregated pool (Wiki-PRF's post stage: the answer read all of it, seed 000 §6), else its top 1."""
    from kbvqa.evaluate.methods import is_pool

    if k is not None:
        return k
    return len(rec["retrieved"]) if is_pool(rec) else 1


def final_evidence(prediction: Mapping[str, Any], stage: str = "post", k: int | None = None) -> list[str] | None:
    """Canonical urls of a prediction's final evidence: the top-`k` of retrieval stage `stage`
    (`post` = the evidence the answer read: kbvqa's rerank, EchoSight's reranked_entries, IBA's
    selected_url, Wiki-PRF's aggregated pool; `initial`; or any stage `prediction_stages` finds), or
    with stage `pool` every url of the `evidence_used` sections the answer was conditioned on. `k`
    None: the top 1, or the whole stage when it is an aggregated pool (`_depth`). None when the
    prediction has no such stage (or its evidence names no url): that is unknown, not "not
    grounded"."""
    if stage == "pool":
        ev = prediction.get("evidence_used")
        if not isinstance(ev, list):
            return None
        urls = [e["url"] for e in ev if isinstance(e, dict) and isinstance(e.get("url"), str) and e["url"]]
        return None if ev and not urls else [canonical_url(u) for u in urls]
    rec = prediction_stages(prediction).get(stage)
    return None if rec is None else [canonical_url(u) for u in rec["retrieved"][:_depth(rec, k)]]


def _authors_hit(rec: Mapping[str, Any], k: int | None) -> bool | None:
    """The method's own top-k hit flag for a stage record (Wiki-PRF `hits.<stage>.top<k>`, k as
    `_depth` reads it), if it wrote one."""
    hits = rec.get("hits")
    return hits.get(f"top{_depth(rec, k)}") if isinstance(hits, dict) else None


def _stage_sources(stage: str) -> str:
    """Where a stage is looked for, for a refusal to name."""
    from kbvqa.evaluate.methods import stage_fields

    if stage == "pool":
        return "evidence_used (the sections the answer read)"
    return ", ".join([f"kbvqa meta.retrieval.{stage} (or retrieval/rerank)", *stage_fields(stage)])


def _read_predictions(path: str | Path) -> tuple[dict[str, dict[str, Any]], int]:
    """id -> last prediction line, and the duplicate count: kbvqa runs and converted files, and the
    published methods' files as released (`kbvqa.evaluate.methods.read_records`: JSONL, a JSON list,
    or EchoSight's data_id -> record reranker object)."""
    from kbvqa.evaluate.io import ScoreInputError
    from kbvqa.evaluate.methods import read_records

    out: dict[str, dict[str, Any]] = {}
    dup = 0
    for where, obj in read_records(path):
        pid = obj.get("id") or obj.get("sample_id") or obj.get("data_id")
        if not isinstance(pid, str) or not pid:
            raise ScoreInputError(where, None, "id", f"a prediction names no id: {str(obj)[:80]}")
        dup += pid in out
        out[pid] = obj
    return out, dup


def grounded_flags(predictions: Mapping[str, Mapping[str, Any]], gold: Mapping[str, Any], *, stage: str = "post",
                   k: int | None = None, source: str = "predictions") -> tuple[dict[str, bool], dict[str, Any]]:
    """Per reference id (`gold`: id -> RetrievalRef or gold url list): is the item's final evidence
    the gold entity? A reference without a prediction, a failed prediction (status error/invalid)
    and a prediction without the stage count as not grounded, each counted. A run with no
    prediction holding the stage is a ValueError naming the fields looked for and the stages there
    are, and so is a run none of whose ids is a reference: a wrong --stage is not a 0%. Where the
    method wrote its own hit flags (Wiki-PRF `hits`), they are compared and the disagreements counted."""
    flags: dict[str, bool] = {}
    counts: Counter = Counter()
    stages_seen: Counter = Counter()
    for rid, ref in gold.items():
        gold_urls = {canonical_url(u) for u in getattr(ref, "gold", ref)}
        pred = predictions.get(rid)
        if pred is None:
            counts["missing"] += 1
            flags[rid] = False
            continue
        if pred.get("status", "ok") != "ok":
            counts["failed"] += 1
            flags[rid] = False
            continue
        ev = final_evidence(pred, stage, k)
        if ev is None:
            counts["no_stage"] += 1
            stages_seen.update(list(prediction_stages(pred)))
            flags[rid] = False
            continue
        flags[rid] = bool(gold_urls.intersection(ev))
        hit = None
        if stage != "pool":
            rec = prediction_stages(pred)[stage]  # the stage final_evidence read (it is there: ev is not None)
            if k is None:
                from kbvqa.evaluate.methods import is_pool

                counts["read_as_pool"] += is_pool(rec)
            hit = _authors_hit(rec, k)
        if hit is not None:
            counts["authors_hits"] += 1
            counts["authors_hits_disagree"] += hit != flags[rid]
    n_ok = len(gold) - counts["missing"] - counts["failed"]
    n_unknown = sum(1 for p in predictions if p not in gold)
    if not n_ok and not counts["failed"]:
        raise ValueError(f"{source}: none of its {len(predictions)} predictions has a reference id "
                         f"({n_unknown} unknown ids, e.g. {list(predictions)[:3]}): nothing to measure")
    if n_ok and counts["no_stage"] == n_ok:
        found = ", ".join(sorted(stages_seen)) or "none"
        raise ValueError(f"{source}: no prediction has retrieval stage {stage!r}: none holds "
                         f"{_stage_sources(stage)} (stages there: {found}); choose a stage it has, or convert "
                         "the method's file that holds it")
    info = {"n": len(gold), "grounded": sum(flags.values()), "missing": counts["missing"], "failed": counts["failed"],
            "no_stage": counts["no_stage"], "unknown_ids": n_unknown, "read_as_pool": counts["read_as_pool"]}
    if counts["authors_hits"]:
        info["authors_hits"] = {"n": counts["authors_hits"], "disagree": counts["authors_hits_disagree"],
                                "rule": f"the method's own hits.<stage>.top{'K' if k is None else k} flag (K as "
                                        "counted here) against its own gold url"}
    return flags, info


@dataclass
class Subset:
    """A set of reference ids a study is restricted to, with how it was made (`info`, which the
    study result carries so every table can print the subset's size)."""

    ids: frozenset[str]
    info: dict[str, Any] = field(default_factory=dict)


def _named(files: Sequence[str | Path] | Mapping[str, str | Path]) -> dict[str, Path]:
    if isinstance(files, Mapping):
        return {str(k): Path(v) for k, v in files.items()}
    out: dict[str, Path] = {}
    for f in files:
        name, path = str(f).split("=", 1) if "=" in str(f) and not Path(str(f)).exists() else (Path(f).stem, f)
        if name in out:
            raise ValueError(f"two grounded-prediction files are named {name!r}: write NAME=PATH")
        out[name] = Path(path)
    if not out:
        raise ValueError("no prediction files given")
    return out


def _grounded_runs(predictions: Sequence[str | Path] | Mapping[str, str | Path], references: str | Path, stage: str,
                   k: int | None) -> tuple[dict[str, Any], dict[str, tuple[dict[str, bool], dict[str, Any]]]]:
    from kbvqa.evaluate.retrieval import load_retrieval_references

    gold = load_retrieval_references(references)
    runs = {}
    for name, path in _named(predictions).items():
        preds, dup = _read_predictions(path)
        flags, info = grounded_flags(preds, gold, stage=stage, k=k, source=str(path))
        runs[name] = (flags, {"predictions": str(path), **info, "duplicate_lines": dup})
    return gold, runs


def _rule(stage: str, k: int | None) -> str:
    if stage == "pool":
        return "gold entity among the evidence_used urls (pool)"
    if k is None:
        return (f"gold entity in the top-1 of retrieval stage {stage!r}, or anywhere in it when the stage is an "
                "aggregated evidence pool (Wiki-PRF: k = the pool's size)")
    return f"gold entity in the top-{k} of retrieval stage {stage!r}"


def grounded_subset(predictions: Sequence[str | Path] | Mapping[str, str | Path], references: str | Path, *,
                    stage: str = "post", k: int | None = None) -> Subset:
    """Reference ids grounded in *every* prediction file (one file: that method's grounded subset;
    the unfixed and the fixed run: seed 000's shared grounded subset). Gold entities come from
    `references` (kbvqa JSONL entity urls, or a CSV with wikipedia_url); files are paths or
    NAME=PATH (or a {name: path} mapping)."""
    gold, runs = _grounded_runs(predictions, references, stage, k)
    ids = set(gold)
    for flags, _ in runs.values():
        ids &= {i for i, g in flags.items() if g}
    return Subset(frozenset(ids), {"rule": _rule(stage, k), "stage": stage, "k": k, "references": str(references),
                                   "n_references": len(gold), "n": len(ids),
                                   "files": {n: info for n, (_, info) in runs.items()}})


def grounded_study(predictions: Sequence[str | Path] | Mapping[str, str | Path], references: str | Path, *,
                   stage: str = "post", k: int | None = None, n_resamples: int = DEFAULT_RESAMPLES,
                   seed: int = 0) -> dict[str, Any]:
    """Post-retrieval recall per run (seed 000 Table 3's unfixed / fixed columns): the share of
    reference items whose final evidence is the gold entity, with CIs, and the size of the subset
    grounded in every run."""
    gold, runs = _grounded_runs(predictions, references, stage, k)
    shared = set(gold)
    rows = []
    for name, (flags, info) in runs.items():
        shared &= {i for i, g in flags.items() if g}
        rows.append({"run": name, **info, "recall": _ci(np.fromiter(flags.values(), dtype=bool, count=len(flags)),
                                                        name, n_resamples, seed)})
    return {"kind": "grounded", "scorer": f"post-retrieval recall: {_rule(stage, k)} (canonical URLs)",
            "stage": stage, "k": k, "references": str(references), "n_references": len(gold), "runs": rows,
            "n_grounded_in_all": len(shared), "bootstrap": _boot_meta(n_resamples, seed)}


# --------------------------------------------------------------------------------------------------
# 1. accuracy by fix kind


def fix_kinds(unfixed: ItemScores, fixed: ItemScores, kinds: Mapping[str, str], *, subset: Subset | None = None,
              examples: int = 3, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """One method's runs before and after the fix, paired on the ids both score, split by what the
    audit changed (`kinds`: id -> change kind): accuracy before -> after, paired delta, gained/lost,
    per kind, per kind x question type, and overall. Ids only one run scores (dropped by the audit,
    added) and paired ids without a kind are counted, never silently left out."""
    ib = {d: i for i, d in enumerate(fixed.ids)}
    ia = {d: i for i, d in enumerate(unfixed.ids)}
    paired = [d for d in unfixed.ids if d in ib]
    n_paired_all = len(paired)
    if subset is not None:
        paired = [d for d in paired if d in subset.ids]
    xa = unfixed.correct[[ia[d] for d in paired]] if paired else np.zeros(0, dtype=bool)
    xb = fixed.correct[[ib[d] for d in paired]] if paired else np.zeros(0, dtype=bool)
    kind = [kinds.get(d, "(unknown)") for d in paired]
    qtype = [fixed.qtype[ib[d]] for d in paired]
    order = [k for k in (*CHANGE_KINDS, "(unknown)") if k in kind]
    groups, by_type = [], []
    for k in ["all", *order]:
        mask = np.array([k == "all" or x == k for x in kind], dtype=bool)
        row = {"kind": k, **paired_accuracy(xa[mask], xb[mask], name=k, n_resamples=n_resamples, seed=seed)}
        if k != "all":
            row["examples"] = {lab: [d for d, m, a, b in zip(paired, mask, xa, xb) if m and (a, b) == cell][:examples]
                               for lab, cell in (("gained", (False, True)), ("lost", (True, False)))}
        groups.append(row)
        for t in _types_in_order(qtype):
            tm = mask & np.array([q == t for q in qtype], dtype=bool)
            if tm.any():
                by_type.append({"kind": k, "question_type": t,
                                **paired_accuracy(xa[tm], xb[tm], name=f"{k}/{t}", n_resamples=n_resamples, seed=seed)})
    return {"kind": "fix-kinds", "scorer": unfixed.scorer if unfixed.scorer == fixed.scorer
            else f"{unfixed.scorer} / {fixed.scorer}", "scorer_detail": fixed.scorer_detail,
            "method": unfixed.label or fixed.label, "groups": groups, "by_question_type": by_type,
            "pairing": {"n_unfixed": unfixed.n, "n_fixed": fixed.n, "n_paired": n_paired_all,
                        "n_only_unfixed": unfixed.n - n_paired_all, "n_only_fixed": fixed.n - n_paired_all,
                        "n_without_kind": kind.count("(unknown)"), "n_analysed": len(paired)},
            "subset": _subset_info(subset, n_paired_all, len(paired)),
            "delta": "accuracy after the fix minus before, paired on the same ids",
            "accounting_unfixed": unfixed.accounting(), "accounting_fixed": fixed.accounting(),
            "bootstrap": _boot_meta(n_resamples, seed)}


def fix_kinds_study(unfixed_predictions: str | Path, fixed_predictions: str | Path, references_unfixed: str | Path,
                    references_fixed: str | Path, scorer: str, *, audited: str | Path | None = None,
                    subset: Subset | None = None, qtypes: str | Path | None = None, label: str = "",
                    examples: int = 3, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                    semantic_threshold: float | None = None, bem_dir: str | Path | None = None) -> dict[str, Any]:
    """`fix_kinds` from files: each run scored on its own split; the change kinds from the audited
    file (`audit.question_before/answers_before` vs final) when given, else from comparing the two
    reference files (what `kbvqa audit diff` reports)."""
    sem = semantic_backend(scorer, semantic_threshold, bem_dir=bem_dir)
    name = label or Path(fixed_predictions).stem
    a = score_items(unfixed_predictions, load_references(references_unfixed, scorer, qtypes=qtypes), scorer,
                    label=name, semantic_backend=sem)
    b = score_items(fixed_predictions, load_references(references_fixed, scorer, qtypes=qtypes), scorer,
                    label=name, semantic_backend=sem)
    changes = version_changes(audited) if audited is not None else version_changes(references_unfixed, references_fixed)
    res = fix_kinds(a, b, changes.kinds(), subset=subset, examples=examples, n_resamples=n_resamples, seed=seed)
    res["kinds_from"] = f"audited file {audited}" if audited is not None else \
        f"diff of {references_unfixed} and {references_fixed}"
    res["predictions"] = {"unfixed": str(unfixed_predictions), "fixed": str(fixed_predictions)}
    res["references"] = {"unfixed": str(references_unfixed), "fixed": str(references_fixed)}
    return res


# --------------------------------------------------------------------------------------------------
# 3. modification rates (Table 6 shape)


#: The one modification-rate definition (`kbvqa audit diff` and `kbvqa study modification-rates`).
MODIFICATION_RULE = ("ARA change rule (case/punctuation/space-normalised; answers as sets of | alternatives)")
MODIFICATION_DENOMINATORS = ("dropped % of the items of A (B lacks them or its audit dropped them); question / "
                             "answer modified and the change kinds % of the kept items (in B, not dropped, status "
                             "ok); tags % of the items of A")


def _modification_flags(members: Sequence[ItemChange]) -> dict[str, np.ndarray]:
    """Per item of A: dropped, not finished; per kept item: question modified, answer modified."""
    dropped = np.array([it.dropped for it in members], dtype=bool)
    failed = np.array([not it.dropped and it.status != "ok" for it in members], dtype=bool)
    kept = [it for it, d, f in zip(members, dropped, failed) if not d and not f]
    return {"dropped": dropped, "not_finished": failed,
            "question": np.array([it.kind in ("question_only", "both") for it in kept], dtype=bool),
            "answer": np.array([it.kind in ("answer_only", "both") for it in kept], dtype=bool),
            "kinds": np.array([it.kind for it in kept], dtype=object)}


def modification_counts(members: Sequence[ItemChange]) -> dict[str, Any]:
    """Seed 000 Table 6's counts for a group of items of A, by MODIFICATION_DENOMINATORS: n, dropped,
    not_finished, kept, questions / answers modified, the change kinds of the kept items, and their
    shares in percent (2 decimals; 0.0 for an empty denominator). `audit diff` prints these; the study
    adds bootstrap intervals around the same shares."""
    return _modification_counts(members, _modification_flags(members))


def _modification_counts(members: Sequence[ItemChange], f: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """`modification_counts` from the group's `_modification_flags` (which the study's intervals reuse)."""
    n, kept = len(members), len(f["question"])
    kinds = Counter(f["kinds"].tolist())

    def pct(x: int, d: int) -> float:
        return round(100.0 * x / d, 2) if d else 0.0

    q, a = int(f["question"].sum()), int(f["answer"].sum())
    return {"n": n, "dropped": int(f["dropped"].sum()), "dropped_share": pct(int(f["dropped"].sum()), n),
            "not_finished": int(f["not_finished"].sum()), "kept": kept,
            "question_modified": q, "question_share": pct(q, kept), "answer_modified": a, "answer_share": pct(a, kept),
            **{k: kinds.get(k, 0) for k in CHANGE_KINDS}, "pct": {k: pct(kinds.get(k, 0), kept) for k in CHANGE_KINDS}}


def modification_rates(changes: VersionChanges, *, n_resamples: int = DEFAULT_RESAMPLES,
                       seed: int = 0) -> dict[str, Any]:
    """Per dataset and per dataset x question type, `modification_counts` with a bootstrap interval
    around each share (dropped of the items of A; question / answer modified of the kept ones); the
    items not finished (B's status error/invalid) counted apart; tags per group (% of its items)."""
    everything = [*changes.items, *changes.only_in_a]
    datasets = sorted({it.dataset for it in everything})

    def row(ds: str, qt: str, members: list[ItemChange]) -> dict[str, Any]:
        f = _modification_flags(members)
        c = _modification_counts(members, f)
        tags = Counter(t for it in members for t in (it.tags or ()))
        name = f"{ds}/{qt}"
        return {"dataset": ds, "question_type": qt, "n": c["n"], "dropped": c["dropped"],
                "dropped_pct": _ci(f["dropped"], name + "/dropped", n_resamples, seed),
                "not_finished": c["not_finished"], "kept": c["kept"], "question_modified": c["question_modified"],
                "question_pct": _ci(f["question"], name + "/question", n_resamples, seed),
                "answer_modified": c["answer_modified"],
                "answer_pct": _ci(f["answer"], name + "/answer", n_resamples, seed),
                **{k: c[k] for k in CHANGE_KINDS},
                "tags": {t: {"n": k, "pct": round(100.0 * k / len(members), 2)} for t, k in tags.most_common()},
                "with_audit": sum(it.tags is not None for it in members)}

    rows = []
    if len(datasets) > 1:
        rows.append(row("all", "all", everything))
    for ds in datasets:
        members = [it for it in everything if it.dataset == ds]
        rows.append(row(ds, "all", members))
        for qt in _types_in_order(it.question_type for it in members):
            rows.append(row(ds, qt, [it for it in members if it.question_type == qt]))
    return {"kind": "modification-rates", "scorer": MODIFICATION_RULE,
            "a": changes.a, "b": changes.b, "rows": rows, "n_a": len(everything), "n_joined": len(changes.items),
            "only_in_b": {"count": len(changes.only_in_b), "ids": changes.only_in_b[:5]},
            "denominators": MODIFICATION_DENOMINATORS, "bootstrap": _boot_meta(n_resamples, seed)}


def modification_rates_study(a: str | Path, b: str | Path | None = None, *, fmt_a: str | None = None,
                             fmt_b: str | None = None, tag_field: str | None = None,
                             n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """`modification_rates` of `version_changes(a, b)` (b None: one audited file)."""
    res = modification_rates(version_changes(a, b, fmt_a=fmt_a, fmt_b=fmt_b, tag_field=tag_field),
                             n_resamples=n_resamples, seed=seed)
    res["tags_from"] = tag_field or "audit.tags"
    return res


# --------------------------------------------------------------------------------------------------
# 4. per-variant accuracy (Table 4) and post-retrieval recall (Table 3)


def _require_variants(ids: Iterable[str]) -> None:
    """Refuse references without augmented ids (before anything else is read from them)."""
    if not any(split_variant(d)[1] is not None for d in ids):
        raise ValueError("no reference id carries a variant suffix (__anchor, __intra, ...): score the augmented "
                         "samples (`kbvqa augment` OUT/samples.jsonl, or the ARA augmented CSV) as references")


def variant_accuracy(scores: ItemScores, grounded: Mapping[str, bool] | None = None, *, by_type: bool | None = None,
                     original_as: str = "original", n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = 0) -> dict[str, Any]:
    """Accuracy per augmentation variant (ids `<anchor>__intra` ..., kbvqa.data.variants) and per
    question type, with the paired change against the anchor over the anchors both have; with
    `grounded` (id -> final evidence is the gold entity, `grounded_flags`) the same for
    post-retrieval recall. `by_type` None: per type when the types are InfoSeek's (Time / Numerical
    / String), overall only otherwise (E-VQA)."""
    variant_of = {}
    for d in scores.ids:
        base, v = split_variant(d)
        variant_of[d] = (base, v or original_as)
    present = {v for _, v in variant_of.values()}
    if present <= {original_as}:
        _require_variants([])
    order = [v for v in (*VARIANTS, original_as) if v in present] + sorted(present - {*VARIANTS, original_as})
    types = _types_in_order(scores.qtype)
    if by_type is None:
        by_type = set(types) <= set(INFOSEEK_TYPES)
    if not by_type:
        types = []
    index = {v: {variant_of[d][0]: i for i, d in enumerate(scores.ids) if variant_of[d][1] == v} for v in order}
    g = np.array([bool(grounded.get(d, False)) for d in scores.ids], dtype=bool) if grounded is not None else None
    anchor = index.get("anchor", {})
    rows, recall = [], []
    for v in order:
        idx = np.array(list(index[v].values()), dtype=int)
        qt = np.array(scores.qtype, dtype=object)[idx] if idx.size else np.zeros(0, dtype=object)
        row: dict[str, Any] = {"variant": v, "n": int(idx.size), "correct": int(scores.correct[idx].sum()),
                               "missing": int(scores.missing[idx].sum()),
                               "accuracy": _ci(scores.correct[idx], v, n_resamples, seed),
                               "by_type": {t: {"n": int((qt == t).sum()),
                                               "accuracy": _ci(scores.correct[idx[qt == t]], f"{v}/{t}",
                                                               n_resamples, seed)} for t in types}}
        bases = [b for b in index[v] if b in anchor] if v != "anchor" else []
        if bases:
            pa = [anchor[b] for b in bases]
            pv = [index[v][b] for b in bases]
            row["vs_anchor"] = paired_accuracy(scores.correct[pa], scores.correct[pv], name=f"{v}-anchor",
                                               n_resamples=n_resamples, seed=seed)
        rows.append(row)
        if g is not None:
            rrow: dict[str, Any] = {"variant": v, "n": int(idx.size), "grounded": int(g[idx].sum()),
                                    "recall": _ci(g[idx], f"recall/{v}", n_resamples, seed)}
            if bases:
                rrow["vs_anchor"] = paired_accuracy(g[[anchor[b] for b in bases]], g[[index[v][b] for b in bases]],
                                                    name=f"recall/{v}-anchor", n_resamples=n_resamples, seed=seed)
            recall.append(rrow)
    return {"kind": "variant-accuracy", "scorer": scores.scorer, "scorer_detail": scores.scorer_detail,
            "method": scores.label, "types": types, "variants": rows, "recall": recall or None,
            "delta": "variant minus anchor, paired on the anchors both have", "accounting": scores.accounting(),
            "bootstrap": _boot_meta(n_resamples, seed)}


def variants_study(predictions: str | Path, references: str | Path, scorer: str, *, stage: str | None = "post",
                   k: int | None = None, qtypes: str | Path | None = None, label: str = "", by_type: bool | None = None,
                   n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                   semantic_threshold: float | None = None, bem_dir: str | Path | None = None) -> dict[str, Any]:
    """`variant_accuracy` from files: predictions on the augmented samples scored against them
    (every variant keeps the anchor's answers); post-retrieval recall from the same predictions'
    trails at `stage` (None: accuracy only)."""
    refs = load_references(references, scorer, qtypes=qtypes)
    sc = score_items(predictions, refs, scorer, label=label or Path(predictions).stem,
                     semantic_backend=semantic_backend(scorer, semantic_threshold, bem_dir=bem_dir))
    _require_variants(sc.ids)
    flags = None
    rinfo = None
    if stage is not None:
        from kbvqa.evaluate.retrieval import load_retrieval_references

        preds, dup = _read_predictions(predictions)
        flags, rinfo = grounded_flags(preds, load_retrieval_references(references), stage=stage, k=k,
                                      source=str(predictions))
        rinfo = {**rinfo, "duplicate_lines": dup, "stage": stage, "k": k, "rule": _rule(stage, k)}
    res = variant_accuracy(sc, flags, by_type=by_type, n_resamples=n_resamples, seed=seed)
    res.update({"recall_info": rinfo, "predictions": str(predictions), "references": str(references)})
    return res


# --------------------------------------------------------------------------------------------------
# 5. correctness buckets across methods


def _patterns(runs: Mapping[str, ItemScores]) -> tuple[list[str], np.ndarray]:
    names = list(runs)
    ids = runs[names[0]].ids
    for n in names[1:]:
        if set(runs[n].ids) != set(ids):
            raise ValueError(f"runs {names[0]!r} and {n!r} were scored against different reference ids")
    cols = []
    for n in names:
        pos = {d: i for i, d in enumerate(runs[n].ids)}
        cols.append(runs[n].correct[[pos[d] for d in ids]])
    return ids, np.column_stack(cols) if cols else np.zeros((len(ids), 0), dtype=bool)


def _label(names: Sequence[str], pattern: Sequence[bool]) -> str:
    right = [n for n, p in zip(names, pattern) if p]
    return "all" if len(right) == len(names) else "none" if not right else " + ".join(right)


def _bucket_rows(names: list[str], ids: list[str], mat: np.ndarray, qtype: list[str], split: str, examples: int,
                 n_resamples: int, seed: int, max_full: int) -> list[dict[str, Any]]:
    keys = [tuple(bool(x) for x in r) for r in mat]
    counts = Counter(keys)
    patterns = list(product((True, False), repeat=len(names))) if len(names) <= max_full else \
        sorted(counts, key=lambda p: (-sum(p), [not x for x in p]))
    rows = []
    for p in patterns:
        mask = np.array([k == p for k in keys], dtype=bool)
        rows.append({"pattern": list(p), "label": _label(names, p), "count": int(mask.sum()),
                     "share": _ci(mask, f"{split}/{''.join('1' if x else '0' for x in p)}", n_resamples, seed),
                     "by_type": dict(sorted(Counter(q for q, m in zip(qtype, mask) if m).items())),
                     "examples": [d for d, m in zip(ids, mask) if m][:examples]})
    return rows


def correctness_buckets(runs: Mapping[str, ItemScores], runs_b: Mapping[str, ItemScores] | None = None, *,
                        subset: Subset | None = None, split_names: tuple[str, str] = ("A", "B"), examples: int = 5,
                        max_full: int = 4, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Which of N runs (methods) answer each item correctly: the 2^N patterns with counts, shares
    (CIs), counts by question type and example ids (every pattern listed up to `max_full` runs, the
    ones that occur beyond). With `runs_b` (the same methods on a second split, e.g. fixed) the
    patterns there too and the items whose pattern changed, paired on the ids both splits hold."""
    if not runs:
        raise ValueError("correctness buckets need at least one run")
    names = list(runs)
    sub = {n: restrict(s, subset) for n, s in runs.items()}
    ids, mat = _patterns(sub)
    qtype = sub[names[0]].qtype
    pos0 = {d: i for i, d in enumerate(sub[names[0]].ids)}
    qtype = [qtype[pos0[d]] for d in ids]
    accuracy = [{"method": n, "correct": int(mat[:, j].sum()), "accuracy": _ci(mat[:, j], f"acc/{n}", n_resamples,
                                                                                  seed)} for j, n in enumerate(names)]
    res: dict[str, Any] = {"kind": "correctness-buckets", "scorer": " / ".join(sorted({s.scorer for s in runs.values()})),
                           "methods": names, "n": len(ids), "splits": [split_names[0]],
                           "buckets": _bucket_rows(names, ids, mat, qtype, split_names[0], examples, n_resamples,
                                                   seed, max_full),
                           "n_patterns": 2 ** len(names), "all_patterns_listed": len(names) <= max_full,
                           "accuracy": accuracy, "accounting": {n: s.accounting() for n, s in runs.items()},
                           "subset": _subset_info(subset, runs[names[0]].n, len(ids)),
                           "bootstrap": _boot_meta(n_resamples, seed)}
    if runs_b is not None:
        if list(runs_b) != names:
            raise ValueError(f"the second split's runs {list(runs_b)} are not the same methods {names}")
        sub_b = {n: restrict(s, subset) for n, s in runs_b.items()}
        ids_b, mat_b = _patterns(sub_b)
        pos_b = {d: i for i, d in enumerate(sub_b[names[0]].ids)}
        qtype_b = [sub_b[names[0]].qtype[pos_b[d]] for d in ids_b]
        res["splits"] = list(split_names)
        res["n_b"] = len(ids_b)
        res["buckets_b"] = _bucket_rows(names, ids_b, mat_b, qtype_b, split_names[1], examples, n_resamples, seed,
                                        max_full)
        res["accuracy_b"] = [{"method": n, "correct": int(mat_b[:, j].sum()),
                              "accuracy": _ci(mat_b[:, j], f"acc_b/{n}", n_resamples, seed)}
                             for j, n in enumerate(names)]
        row_b = {d: i for i, d in enumerate(ids_b)}
        paired = [(i, row_b[d]) for i, d in enumerate(ids) if d in row_b]
        moves: dict[tuple[tuple[bool, ...], tuple[bool, ...]], list[str]] = defaultdict(list)
        for i, j in paired:
            pa, pb = tuple(bool(x) for x in mat[i]), tuple(bool(x) for x in mat_b[j])
            if pa != pb:
                moves[(pa, pb)].append(ids[i])
        res["transitions"] = [{"from": _label(names, pa), "to": _label(names, pb), "pattern_from": list(pa),
                               "pattern_to": list(pb), "count": len(v), "examples": v[:examples]}
                              for (pa, pb), v in sorted(moves.items(), key=lambda kv: -len(kv[1]))]
        res["pairing"] = {"n_paired": len(paired), "n_changed": sum(len(v) for v in moves.values()),
                          "n_only_a": len(ids) - len(paired), "n_only_b": len(ids_b) - len(paired)}
    return res


def variant_runs(scores: ItemScores, *, prefix: str = "") -> dict[str, ItemScores]:
    """One run per augmentation variant, keyed by anchor id: `correctness_buckets` of these shows
    which variants a method still answers (anchor right, intra wrong, ...). Only anchors every
    variant has are kept, so the runs align; the others are counted in each run's `n_unknown`."""
    by_variant: dict[str, dict[str, int]] = defaultdict(dict)
    for i, d in enumerate(scores.ids):
        base, v = split_variant(d)
        if v is not None:
            by_variant[v][base] = i
    if not by_variant:
        raise ValueError("no reference id carries a variant suffix (__anchor, __intra, ...)")
    common = set.intersection(*(set(m) for m in by_variant.values()))
    order = [v for v in VARIANTS if v in by_variant] + sorted(set(by_variant) - set(VARIANTS))
    out = {}
    for v in order:
        bases = [b for b in by_variant[v] if b in common]
        idx = [by_variant[v][b] for b in bases]
        out[f"{prefix}{v}"] = ItemScores(scorer=scores.scorer, ids=bases, correct=scores.correct[idx],
                                         missing=scores.missing[idx], qtype=[scores.qtype[i] for i in idx],
                                         label=f"{prefix}{v}", n_unknown=len(by_variant[v]) - len(bases),
                                         n_duplicates=scores.n_duplicates, scorer_detail=scores.scorer_detail)
    return out


def buckets_study(references: str | Path, methods: Mapping[str, tuple[Path, Path]], scorer: str, *,
                  references_b: str | Path | None = None, split_names: tuple[str, str] = ("A", "B"),
                  by_variant: bool = False, subset: Subset | None = None, qtypes: str | Path | None = None,
                  examples: int = 5, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                  semantic_threshold: float | None = None, bem_dir: str | Path | None = None) -> dict[str, Any]:
    """`correctness_buckets` from files (`methods` from `parse_method_specs`); with `references_b`
    each method's second file (or its one file) is scored on split B too. `by_variant`: the
    references are augmented samples and each method becomes one run per variant (`variant_runs`)."""
    if references_b is None and any(pa != pb for pa, pb in methods.values()):
        raise ValueError("a method with two prediction files needs the second split's references (references_b)")
    if by_variant and references_b is not None:
        raise ValueError("by_variant buckets take one split (the augmented samples)")
    sem = semantic_backend(scorer, semantic_threshold, bem_dir=bem_dir)
    ra = load_references(references, scorer, qtypes=qtypes)
    runs = {n: score_items(pa, ra, scorer, label=n, semantic_backend=sem) for n, (pa, _) in methods.items()}
    if by_variant:
        runs = {k: v for n, sc in runs.items()
                for k, v in variant_runs(sc, prefix=f"{n} " if len(methods) > 1 else "").items()}
    runs_b = None
    if references_b is not None:
        rb = load_references(references_b, scorer, qtypes=qtypes)
        runs_b = {n: score_items(pb, rb, scorer, label=n, semantic_backend=sem) for n, (_, pb) in methods.items()}
    res = correctness_buckets(runs, runs_b, subset=subset, split_names=split_names, examples=examples,
                              n_resamples=n_resamples, seed=seed)
    res["references"] = {split_names[0]: str(references), **({split_names[1]: str(references_b)} if references_b else {})}
    if by_variant:
        res["variants_of"] = list(methods)
    return res


# --------------------------------------------------------------------------------------------------
# the demo's studies


def demo_analyses(out: str | Path, *, augmented_predictions: str | Path | None = None, stage: str = "pool",
                  studies_dir: str | Path | None = None, n_resamples: int = DEFAULT_RESAMPLES,
                  seed: int = 0) -> dict[str, Any]:
    """Every analysis of this module on `kbvqa demo`'s outputs under `out`, saved as
    `<studies_dir>/<name>.study.json` (default OUT/studies, what `kbvqa report build` reads):
    post-retrieval recall of the original and repaired runs and their shared grounded subset,
    accuracy by fix kind (all items, then that subset), modification rates (samples vs audited),
    and on the augmented samples the per-variant accuracy and recall and the correctness buckets
    across variants (the demo has one answerer, so its variants are the runs compared).

    The demo's answerer reads the top retrieved article without a rerank stage, so its final
    evidence is the `pool`. The augmented studies need predictions on the augmented samples
    (default OUT/answers/predictions_augmented.jsonl); without them they are listed under
    "skipped" with the reason. Returns {"studies": {name: result}, "paths", "skipped", "studies_dir"}."""
    out = Path(out)
    sdir = Path(studies_dir) if studies_dir is not None else out / "studies"
    samples, audited, fixed = out / "bench" / "samples.jsonl", out / "audit" / "audited.jsonl", out / "audit" / "fixed.jsonl"
    p_orig, p_fixed = out / "answers" / "predictions_original.jsonl", out / "answers" / "predictions_fixed.jsonl"
    scorer = "infoseek-official"  # seed 000's InfoSeek metric (VQA accuracy, §6)
    boot = {"n_resamples": n_resamples, "seed": seed}
    studies: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    runs = {"original": p_orig, "fixed": p_fixed}
    studies["grounded"] = grounded_study(runs, fixed, stage=stage, **boot)
    shared = grounded_subset(runs, fixed, stage=stage)
    for sub in (None, shared):
        res = fix_kinds_study(p_orig, p_fixed, samples, fixed, scorer, audited=audited, subset=sub,
                              label="extractive", **boot)
        studies[f"fix-kinds{'-grounded' if sub else ''}"] = res
    studies["modification-rates"] = modification_rates_study(samples, audited, **boot)
    aug = Path(augmented_predictions) if augmented_predictions is not None else \
        out / "answers" / "predictions_augmented.jsonl"
    if aug.is_file():
        studies["variants"] = variants_study(aug, out / "augment" / "samples.jsonl", scorer, stage=stage,
                                             label="extractive", **boot)
    else:
        skipped["variants"] = f"no predictions on the augmented samples at {aug}"
    if aug.is_file():
        studies["buckets"] = buckets_study(out / "augment" / "samples.jsonl", {"extractive": (aug, aug)}, scorer,
                                           by_variant=True, **boot)
    else:
        skipped["buckets"] = f"no predictions on the augmented samples at {aug}"
    paths = [str(save_study(sdir, r)) for r in studies.values()]
    return {"studies": studies, "paths": paths, "skipped": skipped, "studies_dir": str(sdir)}
