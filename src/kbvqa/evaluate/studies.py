"""Studies over per-item correctness: grouped tables with bootstrap CIs, paired split comparisons,
ranking reversals, and the 2x2 with/without-retrieval outcome table.

Everything starts from `ItemScores`: one scorer's per-item correctness over *all* reference ids (a
missing prediction is wrong and counted), so two runs or two splits can be compared item by item.
Accuracies are percentages (0-100), like the scorers'.

Judge verdicts (`--scorer judge-verdicts`) follow kbvqa's rule for judge figures (kbvqa.evaluate.judge):
an item whose verdict is `invalid` (an unusable judge reply) or `error` (a failed call) has no grade —
it is neither right nor wrong. Every accuracy here is over the *graded* items; the ungraded are
counted apart (n_graded, n_invalid, n_error beside every figure), and a paired comparison pairs only
items graded in both runs. Scorers that read predictions grade every item (graded = n).

Bootstrap: percentile 95% intervals, seeded, default 2000 resamples. The resampled mean of n items
only depends on how many times each distinct value is drawn, so when the values take few distinct
values (0/1 correctness; paired differences in {-1, 0, 1}) the resample counts are drawn directly from
a multinomial – the same distribution as index resampling, in O(resamples) instead of
O(resamples x n). Other values fall back to chunked index resampling.

The official InfoSeek scorer's aggregate is not used here: it drops references without a prediction,
so two runs would not be scored on the same items; the study scorer `infoseek-official` (the default
for InfoSeek, the paper's VQA accuracy) applies its per-item rules to every reference, and a study's
accuracy is the mean over items (the official headline is the harmonic mean of the unseen-question
and unseen-entity splits; it is the all-items mean where, as in ARA's CSVs, there is no split).
`SCORERS` names the study scorers (the CLI's `--scorer` choices come from it).

The `*_study` functions are what `kbvqa study ...` runs: from files to one JSON-ready result, which
`save_study` writes as `<name>.study.json` for `kbvqa report build`.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kbvqa.evaluate.scorers import SCORERS, StudyScorer, semantic_backend

__all__ = [
    "SCORERS", "StudyScorer", "ItemScores", "CI", "bootstrap_ci", "cluster_bootstrap_ci", "paired_delta_ci",
    "load_references", "score_items", "semantic_backend", "group_labels", "by_group", "compare_splits", "ranking",
    "ranking_reversals", "retrieval_2x2", "mcnemar_exact_p", "parse_method_specs", "by_type_study",
    "compare_study", "retrieval_2x2_study", "study_name", "save_study",
]

DEFAULT_RESAMPLES = 2000


# --------------------------------------------------------------------------------------------------
# bootstrap


@dataclass(frozen=True)
class CI:
    estimate: float
    low: float
    high: float

    def scaled(self, k: float) -> "CI":
        return CI(self.estimate * k, self.low * k, self.high * k)

    def to_json(self, ndigits: int = 4) -> dict[str, float]:
        return {"estimate": round(self.estimate, ndigits), "low": round(self.low, ndigits),
                "high": round(self.high, ndigits)}


def _resampled_ratios(num: np.ndarray, den: np.ndarray | None, n_resamples: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of sum(num) / sum(den) over n units drawn with replacement; `den` None
    means every unit counts 1 (the plain mean). A unit is one item, or one cluster with its sum and
    its size. Units with the same (num, den) are exchangeable, so with few distinct units the draw
    counts come from one multinomial (module docstring); otherwise indices are resampled in chunks."""
    n = num.shape[0]
    if den is None:
        uniq, counts = np.unique(num, return_counts=True)
        u_num, u_den = uniq.astype(np.float64), None
    else:
        uniq, counts = np.unique(np.column_stack([num, den]), axis=0, return_counts=True)
        u_num, u_den = uniq[:, 0], uniq[:, 1]
    if len(uniq) <= 64:
        draws = rng.multinomial(n, counts / n, size=n_resamples)  # [B, k] counts per distinct unit
        return draws @ u_num / n if u_den is None else (draws @ u_num) / (draws @ u_den)
    out = np.empty(n_resamples, dtype=np.float64)
    step = max(1, 20_000_000 // n)  # bound memory at ~160 MB of indices per chunk
    for s in range(0, n_resamples, step):
        e = min(n_resamples, s + step)
        idx = rng.integers(0, n, size=(e - s, n))
        out[s:e] = num[idx].mean(axis=1) if den is None else num[idx].sum(axis=1) / den[idx].sum(axis=1)
    return out


def _percentile_ci(estimate: float, replicates: np.ndarray, confidence: float) -> CI:
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(replicates, [a, 1.0 - a])
    return CI(float(estimate), float(lo), float(hi))


def bootstrap_ci(values: Sequence[float] | np.ndarray, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                 confidence: float = 0.95) -> CI:
    """Mean of `values` with a seeded percentile-bootstrap interval (same seed, same interval)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return CI(float("nan"), float("nan"), float("nan"))
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    means = _resampled_ratios(v, None, n_resamples, np.random.default_rng(seed))
    return _percentile_ci(v.mean(), means, confidence)


def cluster_bootstrap_ci(values: Sequence[float] | np.ndarray, clusters: Sequence[Any], *,
                         n_resamples: int = DEFAULT_RESAMPLES, seed: Any = 0, confidence: float = 0.95) -> CI:
    """Mean of `values` with a seeded percentile interval from a cluster bootstrap: whole clusters
    (`clusters[i]` names the cluster of `values[i]`, e.g. the reference item a probe was written
    from) are drawn with replacement and every resample's estimate is sum / count over the drawn
    clusters. Items nested in a cluster are correlated; resampling them one by one would make the
    interval too narrow. Paired differences: pass the per-item differences."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if len(clusters) != v.size:
        raise ValueError(f"{v.size} values but {len(clusters)} cluster labels")
    if v.size == 0:
        return CI(float("nan"), float("nan"), float("nan"))
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    _, inverse = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    sums = np.bincount(inverse, weights=v)
    sizes = np.bincount(inverse).astype(np.float64)
    reps = _resampled_ratios(sums, sizes, n_resamples, np.random.default_rng(seed))
    return _percentile_ci(v.mean(), reps, confidence)


def paired_delta_ci(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> CI:
    """mean(b) - mean(a) over aligned items, items resampled jointly (the bootstrap of b - a)."""
    a_ = np.asarray(a, dtype=np.float64)
    b_ = np.asarray(b, dtype=np.float64)
    if a_.shape != b_.shape:
        raise ValueError(f"paired arrays differ in shape: {a_.shape} vs {b_.shape}")
    return bootstrap_ci(b_ - a_, n_resamples=n_resamples, seed=seed, confidence=confidence)


def _sub_seed(seed: int, name: str) -> list[int]:
    """A stable per-group seed: the same group gets the same stream whatever else is in the table."""
    return [seed, zlib.crc32(name.encode("utf-8"))]


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar test (binomial on the discordant pairs)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


# --------------------------------------------------------------------------------------------------
# per-item scores


@dataclass
class ItemScores:
    """One scorer's verdict on every reference id (reference order)."""

    scorer: str
    ids: list[str]
    correct: np.ndarray  # bool [n]
    missing: np.ndarray  # bool [n]
    qtype: list[str]
    label: str = ""  # method / run name
    n_unknown: int = 0
    n_duplicates: int = 0
    scorer_detail: str = ""
    invalid: np.ndarray = None  # type: ignore[assignment]  # bool [n]: unusable judge reply, no grade (None: none)
    error: np.ndarray = None  # type: ignore[assignment]  # bool [n]: the judge call failed, no grade (None: none)
    judged: bool = False  # the items are judge verdicts (tables show graded / invalid / error)

    def __post_init__(self) -> None:
        if self.invalid is None:
            self.invalid = np.zeros(len(self.ids), dtype=bool)
        if self.error is None:
            self.error = np.zeros(len(self.ids), dtype=bool)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def graded(self) -> np.ndarray:
        """bool [n]: the items with a grade (all but invalid and error verdicts)."""
        return ~(self.invalid | self.error)

    @property
    def accuracy(self) -> float | None:
        """Percent correct over the graded items; None when no item was graded (0.0 for no items)."""
        g = self.graded
        if not g.any():
            return None if self.n else 0.0
        return 100.0 * float(self.correct[g].mean())

    def accounting(self) -> dict[str, Any]:
        return {"n": self.n, "n_graded": int(self.graded.sum()), "n_invalid": int(self.invalid.sum()),
                "n_error": int(self.error.sum()), "n_missing": int(self.missing.sum()),
                "n_unknown_ids": self.n_unknown, "n_duplicate_predictions": self.n_duplicates,
                "duplicates": "last prediction per id wins",
                "accuracy_over": "graded items (invalid and error verdicts excluded, counted apart)"
                if self.judged else "every item (a missing prediction is wrong)",
                # judge verdicts: seed 001's accuracy (correct / all responses) beside the graded one
                **({"accuracy_all": round(100.0 * float(self.correct.mean()), 4) if self.n else None}
                   if self.judged else {})}


def load_references(path: str | Path, scorer: str, *, qtypes: str | Path | None = None) -> Any:
    """Reference object for `score_items` (load once, score many prediction files)."""
    return SCORERS.get(scorer).load(path, qtypes)


def score_items(predictions: str | Path | list[Any], references: Any, scorer: str, *, label: str = "",
                semantic_backend: Any = None) -> ItemScores:
    """Per-item correctness with one of `SCORERS`. `predictions` is a path or PredictionRecords;
    `references` what `load_references` returned for the same scorer."""
    from kbvqa.evaluate.io import load_predictions

    entry = SCORERS.entry(scorer)
    read = entry.obj.read or load_predictions
    preds = read(predictions) if isinstance(predictions, (str, Path)) else predictions
    items, s, name = entry.obj.score(preds, references, semantic_backend)

    def flags(key: str) -> np.ndarray:
        return np.fromiter((bool(r.get(key)) for r in items), dtype=bool, count=len(items))

    return ItemScores(
        scorer=name, ids=[r["data_id"] for r in items], correct=flags("correct"), missing=flags("missing"),
        qtype=[str(r.get("question_type")) for r in items], label=label,
        n_unknown=int(s.get("n_unknown_ids", 0)), n_duplicates=int(s.get("n_duplicate_predictions", 0)),
        scorer_detail=entry.help, invalid=flags("invalid"), error=flags("error"), judged=entry.obj.read is not None)


# --------------------------------------------------------------------------------------------------
# grouped tables


def group_labels(references: str | Path, by: str) -> dict[str, str]:
    """id -> value of field `by` in the reference file: a CSV column, a JSONL key, or a key of the
    line's `meta` (write `meta.KEY`, or just KEY when the line has no top-level KEY)."""
    from kbvqa.evaluate.io import read_csv, read_jsonl

    path = Path(references)
    out: dict[str, str] = {}
    key = by[5:] if by.startswith("meta.") else by
    rows: Iterable[tuple[int, dict[str, Any]]] = read_csv(path) if path.suffix.lower() == ".csv" else read_jsonl(path)
    for _, obj in rows:
        did = obj.get("data_id") or obj.get("id")
        if not did:
            continue
        if not by.startswith("meta.") and by in obj:
            val = obj[by]
        else:
            meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else {}
            val = meta.get(key)
        out[str(did)] = "(none)" if val is None or val == "" else str(val)
    return out


def by_group(scores: ItemScores, by: str = "question_type", labels: dict[str, str] | None = None, *,
             n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Accuracy per group with bootstrap CIs. `labels` None and by == question_type: the scorer's own
    question types. Ids without a label go to '(none)' and are counted."""
    if labels is None:
        if by not in ("question_type", "qtype"):
            raise ValueError(f"grouping by {by!r} needs labels (group_labels(references, by))")
        lab = scores.qtype
        n_unlabelled = 0
    else:
        lab = [labels.get(i, "(none)") for i in scores.ids]
        n_unlabelled = sum(1 for i in scores.ids if i not in labels)
    groups: dict[str, list[int]] = {}
    for idx, g in enumerate(lab):
        groups.setdefault(g, []).append(idx)
    graded = scores.graded
    rows = []
    for g in sorted(groups):
        idx = np.asarray(groups[g])
        ci = _graded_ci(scores.correct[idx][graded[idx]], n_resamples, _sub_seed(seed, g))
        rows.append({"group": g, "n": int(idx.size), **_graded_counts(scores, idx),
                     "correct": int(scores.correct[idx].sum()), "n_missing": int(scores.missing[idx].sum()), "accuracy": ci["estimate"],
                     "ci_low": ci["low"], "ci_high": ci["high"], **_over_all(scores, idx, n_resamples, seed, g)})
    overall = _graded_ci(scores.correct[graded], n_resamples, _sub_seed(seed, "__all__"))
    everything = np.arange(scores.n)
    return {"kind": "by-group", "scorer": scores.scorer, "scorer_detail": scores.scorer_detail, "by": by,
            "method": scores.label, "groups": rows, "judged": scores.judged,
            "overall": {"n": scores.n, **_graded_counts(scores, everything), "correct": int(scores.correct.sum()),
                        **overall, **_over_all(scores, everything, n_resamples, seed, "__all__")},
            "n_unlabelled": n_unlabelled, "bootstrap": _boot_meta(n_resamples, seed),
            "accounting": scores.accounting()}


def _over_all(scores: ItemScores, idx: np.ndarray, n_resamples: int, seed: Any, group: str) -> dict[str, Any]:
    """For judge verdicts, seed 001's accuracy beside the graded one: correct / all responses of `idx`
    (invalid, failed and missing count as not correct), with its CI; nothing for other scorers."""
    if not scores.judged:
        return {}
    ci = _graded_ci(scores.correct[idx], n_resamples, _sub_seed(seed, f"{group}/all"))
    return {"accuracy_all": ci["estimate"], "ci_all_low": ci["low"], "ci_all_high": ci["high"]}


def _graded_counts(scores: ItemScores, idx: np.ndarray) -> dict[str, int]:
    """n_graded / n_invalid / n_error of the items `idx` (what stands beside every accuracy)."""
    return {"n_graded": int(scores.graded[idx].sum()), "n_invalid": int(scores.invalid[idx].sum()),
            "n_error": int(scores.error[idx].sum())}


def _graded_ci(values: np.ndarray, n_resamples: int, seed: Any) -> dict[str, float | None]:
    """Percent correct over graded items with its bootstrap CI; all None when nothing was graded
    (an accuracy of no grades is absent, not 0 and not NaN)."""
    if values.size == 0:
        return {"estimate": None, "low": None, "high": None}
    return bootstrap_ci(values, n_resamples=n_resamples, seed=seed).scaled(100.0).to_json()


def _boot_meta(n_resamples: int, seed: int) -> dict[str, Any]:
    return {"method": "percentile bootstrap, 95%", "n_resamples": n_resamples, "seed": seed,
            "unit": "accuracy in percent"}


# --------------------------------------------------------------------------------------------------
# paired split comparison and ranking reversals


def _index(scores: ItemScores) -> dict[str, int]:
    return {d: i for i, d in enumerate(scores.ids)}


def ranking(acc: dict[str, float]) -> dict[str, int]:
    """Competition ranks, 1 = best; equal accuracies share the better rank ("1224")."""
    ordered = sorted(acc.values(), reverse=True)
    return {m: 1 + ordered.index(a) for m, a in acc.items()}


def ranking_reversals(acc_a: dict[str, float], acc_b: dict[str, float]) -> list[dict[str, Any]]:
    """Every pair of methods with its order on A and B; status same / reversed / tie-on-a / tie-on-b."""
    names = [m for m in acc_a if m in acc_b]
    out = []
    for i, m1 in enumerate(names):
        for m2 in names[i + 1:]:
            da, db = acc_a[m1] - acc_a[m2], acc_b[m1] - acc_b[m2]
            if da * db < 0:
                status = "reversed"
            elif da == 0 and db == 0:
                status = "tie"
            elif da == 0:
                status = "tie-on-a"
            elif db == 0:
                status = "tie-on-b"
            else:
                status = "same"
            out.append({"method_1": m1, "method_2": m2, "diff_a": round(da, 4), "diff_b": round(db, 4),
                        "status": status})
    return out


def compare_splits(runs: dict[str, tuple[ItemScores, ItemScores]], *, split_names: tuple[str, str] = ("A", "B"),
                   n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, allow_partial: bool = False) -> dict[str, Any]:
    """Per method: accuracy on split A and on split B (each over its own references' graded items), the
    paired delta B - A over the common ids graded on both with a bootstrap CI, and items gained/lost;
    then ranks and reversals.

    The two splits must hold the same ids (e.g. unfixed vs fixed); otherwise a ValueError, unless
    `allow_partial`, which pairs on the intersection and reports the counts."""
    if not runs:
        raise ValueError("compare_splits needs at least one method")
    methods = []
    acc_a: dict[str, float] = {}
    acc_b: dict[str, float] = {}
    scorers = {s.scorer for pair in runs.values() for s in pair}
    alignment: dict[str, Any] = {}
    for name, (sa, sb) in runs.items():
        ia, ib = _index(sa), _index(sb)
        common = [d for d in sa.ids if d in ib]
        only_a, only_b = len(ia) - len(common), len(ib) - len(common)
        if (only_a or only_b) and not allow_partial:
            raise ValueError(f"{name}: the splits hold different ids ({only_a} only in {split_names[0]}, "
                             f"{only_b} only in {split_names[1]}); pass allow_partial to pair on the intersection")
        alignment = {"n_common": len(common), "n_only_a": only_a, "n_only_b": only_b}
        pa_, pb_ = [ia[d] for d in common], [ib[d] for d in common]
        both = sa.graded[pa_] & sb.graded[pb_]  # a pair counts only when both items were graded
        xa = sa.correct[pa_][both].astype(np.float64)
        xb = sb.correct[pb_][both].astype(np.float64)
        if not both.any():
            raise ValueError(f"{name}: no item was graded on both splits (every verdict invalid or error)")
        delta = paired_delta_ci(xa, xb, n_resamples=n_resamples, seed=_sub_seed(seed, name)).scaled(100.0)  # type: ignore[arg-type]
        ci_a = _graded_ci(sa.correct[sa.graded], n_resamples, _sub_seed(seed, name + "/a"))
        ci_b = _graded_ci(sb.correct[sb.graded], n_resamples, _sub_seed(seed, name + "/b"))
        if ci_a["estimate"] is None or ci_b["estimate"] is None:
            raise ValueError(f"{name}: no item was graded on one split (every verdict invalid or error)")
        acc_a[name], acc_b[name] = ci_a["estimate"], ci_b["estimate"]
        gained = int(((xa == 0) & (xb == 1)).sum())
        lost = int(((xa == 1) & (xb == 0)).sum())
        methods.append({"method": name, "accuracy_a": ci_a["estimate"], "ci_a": ci_a,
                        "accuracy_b": ci_b["estimate"], "ci_b": ci_b,
                        "delta": round(delta.estimate, 4), "delta_ci": delta.to_json(),
                        "n_paired": int(both.sum()), "n_unpaired_ungraded": len(common) - int(both.sum()),
                        "n_only_a": only_a, "n_only_b": only_b,
                        "gained": gained, "lost": lost,
                        "mcnemar_p": mcnemar_exact_p(lost, gained),
                        "accounting_a": sa.accounting(), "accounting_b": sb.accounting()})
    ra, rb = ranking(acc_a), ranking(acc_b)
    for m in methods:
        m["rank_a"], m["rank_b"] = ra[m["method"]], rb[m["method"]]
    pairs = ranking_reversals(acc_a, acc_b)
    return {"kind": "compare", "scorer": " / ".join(sorted(scorers)), "splits": list(split_names),
            "methods": methods, "pairs": pairs, "n_reversals": sum(p["status"] == "reversed" for p in pairs),
            "alignment": alignment, "bootstrap": _boot_meta(n_resamples, seed),
            "judged": any(s.judged for pair in runs.values() for s in pair),
            "delta": f"accuracy on {split_names[1]} minus accuracy on {split_names[0]}, paired on common ids "
                     "graded on both splits"}


# --------------------------------------------------------------------------------------------------
# 2x2 with / without retrieval


def retrieval_2x2(with_r: ItemScores, without_r: ItemScores, *, n_resamples: int = DEFAULT_RESAMPLES,
                  seed: int = 0, by_type: bool = True) -> dict[str, Any]:
    """Outcome groups for two runs of the same model on the same references: both correct, only
    with retrieval, only without, neither (counts and % of n), plus the paired gain with a CI and an
    exact McNemar p-value. The runs must cover the same reference ids. With judge verdicts, only items
    graded in both runs are paired (`n`); the others are counted in `n_items` / `ungraded`."""
    if set(with_r.ids) != set(without_r.ids):
        raise ValueError("the two runs were scored against different reference ids")
    iw = _index(with_r)
    order = [iw[d] for d in without_r.ids]
    paired = with_r.graded[order] & without_r.graded
    w = with_r.correct[order][paired]
    wo = without_r.correct[paired]
    qtypes = [q for q, k in zip(without_r.qtype, paired) if k]
    if not paired.any():
        raise ValueError("no item was graded in both runs (every verdict of one run invalid or error)")

    def cells(mask: np.ndarray) -> dict[str, Any]:
        n = int(mask.sum())
        c = {"both_correct": int((w & wo & mask).sum()), "only_with": int((w & ~wo & mask).sum()),
             "only_without": int((~w & wo & mask).sum()), "neither": int((~w & ~wo & mask).sum())}
        out: dict[str, Any] = {"n": n, **c}
        out.update({f"{k}_pct": round(100.0 * v / n, 2) if n else 0.0 for k, v in c.items()})
        return out

    everything = np.ones(len(wo), dtype=bool)
    gain = paired_delta_ci(wo.astype(np.float64), w.astype(np.float64), n_resamples=n_resamples,
                           seed=_sub_seed(seed, "2x2")).scaled(100.0)  # type: ignore[arg-type]
    all_cells = cells(everything)
    all_cells["n_items"] = without_r.n
    result: dict[str, Any] = {
        "kind": "retrieval-2x2", "scorer": with_r.scorer if with_r.scorer == without_r.scorer
        else f"{with_r.scorer} / {without_r.scorer}",
        "with": with_r.label or "with retrieval", "without": without_r.label or "without retrieval",
        "overall": all_cells,
        "accuracy_with": _round(with_r.accuracy), "accuracy_without": _round(without_r.accuracy),
        "ungraded": {run: {"n_invalid": int(r.invalid.sum()), "n_error": int(r.error.sum())}
                     for run, r in (("with", with_r), ("without", without_r))} | {"n_unpaired": int((~paired).sum())},
        "gain": gain.to_json(), "mcnemar_p": mcnemar_exact_p(all_cells["only_with"], all_cells["only_without"]),
        "accounting_with": with_r.accounting(), "accounting_without": without_r.accounting(),
        "bootstrap": _boot_meta(n_resamples, seed),
    }
    if by_type:
        qt = np.asarray(qtypes)
        result["by_question_type"] = {t: cells(qt == t) for t in sorted(set(qtypes))}
    return result


def _round(v: float | None, ndigits: int = 4) -> float | None:
    return None if v is None else round(v, ndigits)


def restrict(scores: ItemScores, subset: Any) -> ItemScores:
    """The same scores on the subset's ids only (reference order kept); `subset`: an object with
    `ids` (kbvqa.evaluate.analyses.Subset, e.g. the grounded subset), a collection of ids, or None
    (unchanged)."""
    if subset is None:
        return scores
    ids = subset.ids if hasattr(subset, "ids") else set(subset)
    keep = np.fromiter((i in ids for i in scores.ids), dtype=bool, count=scores.n)
    return ItemScores(scorer=scores.scorer, ids=[i for i, k in zip(scores.ids, keep) if k],
                      correct=scores.correct[keep], missing=scores.missing[keep],
                      qtype=[q for q, k in zip(scores.qtype, keep) if k], label=scores.label,
                      n_unknown=scores.n_unknown, n_duplicates=scores.n_duplicates, scorer_detail=scores.scorer_detail,
                      invalid=scores.invalid[keep], error=scores.error[keep], judged=scores.judged)


def _subset_info(subset: Any, n_before: int, n_after: int) -> dict[str, Any] | None:
    """What a restricted result says about its subset (how it was made, items before and in it)."""
    if subset is None:
        return None
    return {**dict(getattr(subset, "info", {}) or {}), "n_items_before": n_before, "n_items_in_subset": n_after}


# --------------------------------------------------------------------------------------------------
# studies from files (what `kbvqa study ...` runs)


def by_type_study(predictions: str | Path, references: str | Path, scorer: str, *, by: str = "question_type",
                  qtypes: str | Path | None = None, label: str = "", n_resamples: int = DEFAULT_RESAMPLES,
                  seed: int = 0, semantic_threshold: float | None = None, subset: Any = None,
                  bem_dir: str | Path | None = None) -> dict[str, Any]:
    """Accuracy per question type, or per any reference field / `meta.KEY` (`by`), with bootstrap
    CIs; `label` names the method (default: the predictions file's stem); `subset` (e.g. the
    grounded subset) restricts the items, and the result says how many were kept."""
    refs = load_references(references, scorer, qtypes=qtypes)
    sc = score_items(predictions, refs, scorer, label=label or Path(predictions).stem,
                     semantic_backend=semantic_backend(scorer, semantic_threshold, bem_dir=bem_dir))
    kept = restrict(sc, subset)
    labels = None if by in ("question_type", "qtype") else group_labels(references, by)
    res = by_group(kept, by, labels, n_resamples=n_resamples, seed=seed)
    if subset is not None:
        res["subset"] = _subset_info(subset, sc.n, kept.n)
    return res


def parse_method_specs(specs: Iterable[str]) -> dict[str, tuple[Path, Path]]:
    """`NAME=PRED.jsonl` (one file scored on both splits) or `NAME=PRED_A.jsonl,PRED_B.jsonl` ->
    {name: (predictions on A, predictions on B)}; a bad spec is a ValueError naming it."""
    out: dict[str, tuple[Path, Path]] = {}
    for spec in specs:
        if "=" not in spec:
            raise ValueError(f"--method expects NAME=PRED.jsonl or NAME=PRED_A.jsonl,PRED_B.jsonl, got {spec!r}")
        name, paths = spec.split("=", 1)
        if not name or name in out:
            raise ValueError(f"--method names must be non-empty and unique, got {name!r}")
        parts = paths.split(",")
        if len(parts) not in (1, 2):
            raise ValueError(f"--method {name}: one prediction file, or two separated by a comma")
        pa, pb = Path(parts[0]), Path(parts[-1])
        for p in {pa, pb}:
            if not p.is_file():
                raise ValueError(f"--method {name}: {p} is not a file")
        out[name] = (pa, pb)
    return out


def compare_study(references_a: str | Path, references_b: str | Path, methods: Mapping[str, tuple[Path, Path]],
                  scorer: str, *, split_names: tuple[str, str] = ("A", "B"), qtypes: str | Path | None = None,
                  allow_partial: bool = False, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                  semantic_threshold: float | None = None, subset: Any = None,
                  bem_dir: str | Path | None = None) -> dict[str, Any]:
    """Every method scored on both splits (`methods` from `parse_method_specs`), then
    `compare_splits`; the result names the two reference files. `subset` (e.g. the grounded subset)
    restricts both splits to its ids first."""
    if len(split_names) != 2 or not all(split_names):
        raise ValueError(f"two non-empty split names are needed, got {list(split_names)}")
    ra = load_references(references_a, scorer, qtypes=qtypes)
    rb = load_references(references_b, scorer, qtypes=qtypes)
    sem = semantic_backend(scorer, semantic_threshold, bem_dir=bem_dir)
    runs = {n: (score_items(pa, ra, scorer, label=n, semantic_backend=sem),
                score_items(pb, rb, scorer, label=n, semantic_backend=sem))
            for n, (pa, pb) in methods.items()}
    n_before = next(iter(runs.values()))[1].n if runs else 0
    runs = {n: (restrict(a, subset), restrict(b, subset)) for n, (a, b) in runs.items()}
    res = compare_splits(runs, split_names=split_names, n_resamples=n_resamples, seed=seed,
                         allow_partial=allow_partial)
    res["references"] = {split_names[0]: str(references_a), split_names[1]: str(references_b)}
    if subset is not None:
        res["subset"] = _subset_info(subset, n_before, next(iter(runs.values()))[1].n if runs else 0)
    return res


def _run_file_kind(path: str | Path) -> str | None:
    """"verdicts" (a `score judge` journal), "predictions" (an answer run's lines) or None, by the first
    record of a JSONL file (another format, or an unreadable file, is left to the scorer to refuse)."""
    try:
        with open(path, "rb") as f:
            first = next((line for line in f if line.strip()), b"")
        rec = json.loads(first) if first else None
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    if isinstance(rec.get("verdict"), dict):
        return "verdicts"
    return "predictions" if any(k in rec for k in ("answer", "prediction")) else None


def retrieval_2x2_study(with_predictions: str | Path, without_predictions: str | Path, references: str | Path,
                        scorer: str, *, qtypes: str | Path | None = None, n_resamples: int = DEFAULT_RESAMPLES,
                        seed: int = 0, semantic_threshold: float | None = None,
                        bem_dir: str | Path | None = None) -> dict[str, Any]:
    """Two runs of one model (with / without retrieval) on the same references: `retrieval_2x2`. Files of
    the wrong kind are refused saying what to run: predictions under `--scorer judge-verdicts` (they need
    `kbvqa score judge` first), judge verdicts under an answer scorer."""
    for flag, path in (("--with", with_predictions), ("--without", without_predictions)):
        kind = _run_file_kind(path)
        if scorer == "judge-verdicts" and kind == "predictions":
            raise ValueError(f"{flag} {path}: these are predictions, not judge verdicts; run `kbvqa score judge "
                             f"-p {path} -r {references} --out {Path(path).with_suffix('')}.judge.jsonl` first "
                             "and pass its output")
        if scorer != "judge-verdicts" and kind == "verdicts":
            raise ValueError(f"{flag} {path}: these are judge verdicts; score them with --scorer judge-verdicts, "
                             f"or pass the predictions they judged to --scorer {scorer}")
    refs = load_references(references, scorer, qtypes=qtypes)
    sem = semantic_backend(scorer, semantic_threshold, bem_dir=bem_dir)
    w = score_items(with_predictions, refs, scorer, label=Path(with_predictions).stem, semantic_backend=sem)
    wo = score_items(without_predictions, refs, scorer, label=Path(without_predictions).stem, semantic_backend=sem)
    return retrieval_2x2(w, wo, n_resamples=n_resamples, seed=seed)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def study_name(result: Mapping[str, Any]) -> str:
    """The file stem a study result is saved under: `by-<field>-<method>`, `compare`, `retrieval-2x2`."""
    kind = result.get("kind")
    sub = "-grounded" if result.get("subset") else ""  # a restricted run is saved beside the full one
    if kind == "by-group":
        return f"by-{_slug(str(result['by']))}-{_slug(str(result.get('method') or 'predictions'))}{sub}"
    if kind == "compare":
        return f"compare{sub}"
    if kind in ("retrieval-2x2", "agent-tools", "agent-failures", "image-ablation", "augmentation-recall"):
        return str(kind)
    if kind == "fix-kinds":
        return f"fix-kinds-{_slug(str(result.get('method') or 'predictions'))}{sub}"
    if kind == "variant-accuracy":
        return f"variants-{_slug(str(result.get('method') or 'predictions'))}"
    if kind == "grounded":
        return f"grounded-{_slug(str(result.get('stage')))}"
    if kind == "correctness-buckets":
        return f"buckets{sub}"
    if kind == "modification-rates":
        return str(kind)
    raise ValueError(f"not a study result (kind {kind!r})")


def save_study(out_dir: str | Path, result: Mapping[str, Any]) -> Path:
    """Write `result` as OUT_DIR/<study_name>.study.json (what `kbvqa report build` reads)."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{study_name(result)}.study.json"
    path.write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
    return path
