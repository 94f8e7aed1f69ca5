"""InfoSeek answer accuracy in three explicitly named modes.

* ``official`` – bit-exact re-implementation of the community InfoSeek scorer (field-anchors §4.1):
  only predictions whose id is in the reference are scored, references without a prediction are not
  counted, duplicate predictions count twice, split by ``data_split`` suffix, per-split scores rounded
  to 2 decimals, final = round(harmonic mean of the rounded split scores, 2) with 0 -> 1e-12.
  Division by zero (a split or a type with no scored item) yields 0, as the scorer's
  ``safe_division`` does. When NO reference carries a ``data_split`` (ARA's CSVs, converted
  benchmarks), every item lands in unseen_entity and the harmonic mean would read 0.0: the headline is
  then the all-items score instead, marked ``"final_score_basis": "all_items_no_split"`` (a kbvqa
  deviation, applied only in that case; with splits the summary is exactly the official one).
* ``strict`` – the same per-item rules, but every reference counts (a missing prediction is wrong),
  duplicates keep the last line, coverage is reported, and *as a kbvqa extension* Time answers get
  year leniency (see `time_lenient`). The per-item output flags items rescued by the extension.
* ``reward`` – the ARA / ReflectiVA "answer reward" variant (ara-protocol §3): number words ->
  digits, a single numeric reference v widened to [0.9v, 1.1v] (for v < 0 this gives an inverted
  interval that never matches – reproduced and reported under ``warnings``), range IoU >= 0.5,
  containment of the E-VQA-normalised reference in the normalised prediction for String/Time,
  accuracy over all reference ids by question type.

Known divergence from the official script: a token such as "-.5.3" made it call ``float("-")`` and
crash; here that token is skipped (documented in `parse_numeric`). A ``null`` prediction (kbvqa
``Prediction.answer = None``) is scored as wrong; the official script would crash on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kbvqa.evaluate import METRICS
from kbvqa.evaluate.io import InfoSeekRef, PredictionRecord, last_prediction_per_id, ref_norm_aliases
from kbvqa.evaluate.normalize import NormMemo, evqa_normalize, infoseek_normalize, number_words_to_digits
from kbvqa.evaluate.numeric import parse_numeric

__all__ = [
    "parse_numeric", "range_iou", "numeric_correct", "time_lenient", "score_official", "score_strict",
    "score_reward", "reward_numeric_correct", "InfoSeekResult", "harmonic_mean", "QTYPES",
]

QTYPES = ("String", "Numerical", "Time")
_TYPE_KEY = {"Time": "score_time", "Numerical": "score_num", "String": "score_string"}


def range_iou(x: Iterable[float], y: Iterable[float]) -> float:
    """Interval IoU with the scorer's 1e-12 length terms (so equal points give IoU 0, not NaN)."""
    x, y = list(x), list(y)
    min1, max1, min2, max2 = min(x), max(x), min(y), max(y)
    overlap = max(0.0, min(max1, max2) - max(min1, min2))
    denom = ((max1 - min1) + 1e-12) + ((max2 - min2) + 1e-12) - overlap
    return overlap / denom if denom != 0 else 0.0


def numeric_correct(pred: float | list[float], lo: float, hi: float) -> bool:
    """Scalar: lo <= p <= hi. Range: both ends inside, else IoU >= 0.5 - 1e-12."""
    if isinstance(pred, list):
        a, b = pred[0], pred[1]
        if lo <= a <= hi and lo <= b <= hi:
            return True
        return range_iou(pred, (lo, hi)) >= 0.5 - 1e-12
    return lo <= pred <= hi


def harmonic_mean(*values: float) -> float:
    """The scorer's harmonic mean: zeros become 1e-12 so an empty split drives the result to ~0."""
    safe = [v if v != 0 else 1e-12 for v in values]
    return len(safe) / sum(1.0 / v for v in safe)


# --------------------------------------------------------------------------------------------------
# Time leniency (strict mode only: a kbvqa extension, not in the official code)

_YEAR_RE = re.compile(r"\b\d{3,4}\b")
_BARE_YEAR_RE = re.compile(r"\d{1,4}")
_MONTHS = frozenset("january february march april may june july august september october november "
                    "december jan feb mar apr jun jul aug sep sept oct nov dec".split())


def time_lenient(norm_pred: str, norm_aliases: Iterable[str]) -> bool:
    """kbvqa extension for Time answers (both sides already InfoSeek-normalised).

    Correct when the prediction names exactly one year (3–4 digits) and either
    (a) some reference is a bare year within ±1 of it, or
    (b) the prediction is year-only (no other digits, no month name) and equals the year of a dated
        reference ("1989" vs "27 october 1989").
    """
    years = set(_YEAR_RE.findall(norm_pred))
    if len(years) != 1:
        return False
    py = int(next(iter(years)))
    rest = _YEAR_RE.sub(" ", norm_pred)
    year_only = not any(c.isdigit() for c in rest) and not (_MONTHS & set(rest.split()))
    for a in norm_aliases:
        if _BARE_YEAR_RE.fullmatch(a):
            if abs(py - int(a)) <= 1:
                return True
        elif year_only and str(py) in _YEAR_RE.findall(a):
            return True
    return False


# --------------------------------------------------------------------------------------------------
# results


@dataclass
class InfoSeekResult:
    """What a scoring run produced: `summary` is the JSON the CLI prints; `items` the per-item rows."""

    summary: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def _split_name(split: str | None) -> str:
    return "unseen_question" if split is not None and split.endswith("unseen_question") else "unseen_entity"


def _split_of(ref: InfoSeekRef) -> str:
    return _split_name(ref.split)


class _SplitOf(dict):
    """split value -> the official scorer's split name, memoised per distinct value (hot loops)."""

    def __missing__(self, split: str | None) -> str:
        name = self[split] = _split_name(split)
        return name


def _split_scores(tally: dict[str, list[int]]) -> dict[str, float]:
    """tally: qtype -> [correct, n]. Same operation order as the official (divide, *100, round)."""
    c_all = sum(v[0] for v in tally.values())
    n_all = sum(v[1] for v in tally.values())
    out = {"score": round((c_all / n_all if n_all else 0) * 100, 2)}
    for qt in ("Time", "Numerical", "String"):
        c, n = tally[qt]
        out[_TYPE_KEY[qt]] = round((c / n if n else 0) * 100, 2)
    return out


def _headline(summary: dict[str, Any], refs: dict[str, InfoSeekRef]) -> dict[str, Any]:
    """With no data_split anywhere in the references, the harmonic mean of an empty split and the
    all-items score is 0.0, which reads as "nothing was right": report the all-items score instead
    (every item is in unseen_entity then) and say so."""
    if refs and all(r.split is None for r in refs.values()):
        summary["final_score"] = summary["unseen_entity_score"]["score"]
        summary["final_score_basis"] = "all_items_no_split"
    return summary


def _new_tally() -> dict[str, dict[str, list[int]]]:
    return {sp: {qt: [0, 0] for qt in QTYPES} for sp in ("unseen_question", "unseen_entity")}


class _Official:
    """Per-item official correctness (normalised aliases were computed at load time). Predictions
    repeat too, so each distinct one is normalised once per run."""

    def __init__(self) -> None:
        self.normalize = NormMemo(infoseek_normalize).__getitem__

    norm_aliases = staticmethod(ref_norm_aliases)

    def correct(self, ref: InfoSeekRef, pred: str | None) -> bool:
        if pred is None:
            return False
        if ref.qtype == "Numerical":
            lo, hi = ref.range  # type: ignore[misc]
            return numeric_correct(parse_numeric(pred), lo, hi)  # type: ignore[arg-type]
        return self.normalize(pred) in (ref.norm_aliases or ref_norm_aliases(ref))


def _check_numeric(refs: dict[str, InfoSeekRef]) -> None:
    for r in refs.values():
        if r.qtype == "Numerical" and r.range is None:
            raise ValueError(f"reference {r.data_id!r} (line {r.line}) is Numerical but no number could be read "
                             "from its answers, so it cannot be scored")


@METRICS.register("infoseek-official", family="infoseek", mode="official",
                  help="official InfoSeek scorer, bit-exact: scored predictions only, harmonic mean of splits")
def score_official(preds: list[PredictionRecord], refs: dict[str, InfoSeekRef], *,
                   per_item: bool = False) -> InfoSeekResult:
    """Official InfoSeek rules (see module docstring). `summary` has exactly the official keys."""
    _check_numeric(refs)
    tally = _new_tally()
    items: list[dict[str, Any]] = []
    unknown = 0
    seen: set[str] = set()
    dup = 0
    correct, split_of = _Official().correct, _SplitOf()
    for p in preds:
        did, pred = p.data_id, p.prediction
        ref = refs.get(did)
        if ref is None:
            unknown += 1
            continue
        if did in seen:
            dup += 1
        else:
            seen.add(did)
        ok = correct(ref, pred)
        qtype = ref.qtype
        sp = split_of[ref.split]
        t = tally[sp][qtype]
        t[0] += ok
        t[1] += 1
        if per_item:
            items.append({"data_id": did, "question_type": qtype, "data_split": sp,
                          "prediction": pred, "correct": ok})
    uq = _split_scores(tally["unseen_question"])
    ue = _split_scores(tally["unseen_entity"])
    summary = _headline({"final_score": round(harmonic_mean(uq["score"], ue["score"]), 2),
                         "unseen_question_score": uq, "unseen_entity_score": ue}, refs)
    counts = {"n_references": len(refs), "n_predictions": len(preds), "n_scored": len(preds) - unknown,
              "n_unknown_ids": unknown, "n_duplicate_predictions": dup,
              "n_references_without_prediction": len(refs) - len(seen),
              "n_references_without_split": sum(1 for r in refs.values() if r.split is None)}
    return InfoSeekResult(summary, items, counts)


@METRICS.register("infoseek-strict", family="infoseek", mode="strict",
                  help="official rules over every reference (missing = wrong), coverage, Time leniency extension")
def score_strict(preds: list[PredictionRecord], refs: dict[str, InfoSeekRef], *,
                 per_item: bool = False, time_leniency: bool = True) -> InfoSeekResult:
    """Official per-item rules, every reference counted, coverage reported, Time year leniency."""
    _check_numeric(refs)
    judge = _Official()
    by_id, unknown, dup = last_prediction_per_id(preds, refs)
    tally = _new_tally()
    predicted = {"unseen_question": 0, "unseen_entity": 0}
    n_split = {"unseen_question": 0, "unseen_entity": 0}
    items: list[dict[str, Any]] = []
    rescued = 0
    for did, ref in refs.items():
        sp = _split_of(ref)
        n_split[sp] += 1
        has = did in by_id
        pred = by_id.get(did)
        ok = has and judge.correct(ref, pred)
        lenient = False
        if has and not ok and time_leniency and ref.qtype == "Time" and pred is not None:
            lenient = ok = time_lenient(judge.normalize(pred), judge.norm_aliases(ref))
            rescued += lenient
        predicted[sp] += has
        t = tally[sp][ref.qtype]
        t[0] += ok
        t[1] += 1
        if per_item:
            row = {"data_id": did, "question_type": ref.qtype, "data_split": sp, "prediction": pred,
                   "correct": bool(ok), "missing": not has}
            if lenient:
                row["time_leniency"] = True
            items.append(row)
    uq = _split_scores(tally["unseen_question"])
    ue = _split_scores(tally["unseen_entity"])
    for sc, sp in ((uq, "unseen_question"), (ue, "unseen_entity")):
        sc["n"] = n_split[sp]
        sc["n_predicted"] = predicted[sp]
        sc["coverage"] = round(predicted[sp] / n_split[sp], 4) if n_split[sp] else 0.0
    n_pred = predicted["unseen_question"] + predicted["unseen_entity"]
    summary = {
        "mode": "strict",
        "final_score": round(harmonic_mean(uq["score"], ue["score"]), 2),
        "unseen_question_score": uq, "unseen_entity_score": ue,
        "coverage": round(n_pred / len(refs), 4) if refs else 0.0,
        "n": len(refs), "n_predicted": n_pred, "n_missing": len(refs) - n_pred,
        "n_unknown_ids": unknown, "n_duplicate_predictions": dup,
        "extensions": {"time_leniency": {
            "enabled": time_leniency, "n_rescued": rescued,
            "note": "kbvqa extension, not in the official scorer: Time answers within ±1 year of a "
                    "bare-year reference, or year-only answers matching a dated reference's year"}},
        "duplicates": "last prediction per id wins",
    }
    _headline(summary, refs)
    return InfoSeekResult(summary, items, {"n_unknown_ids": unknown, "n_duplicate_predictions": dup})


# --------------------------------------------------------------------------------------------------
# ARA / ReflectiVA reward mode


def _reward_ref_intervals(aliases: list[str]) -> tuple[list[tuple[float, float]], int]:
    """Each alias -> accepted interval. Returns (intervals, n_negative_scalar_aliases)."""
    out: list[tuple[float, float]] = []
    neg = 0
    for a in aliases:
        v = parse_numeric(number_words_to_digits(a), strict=True)
        if v is None:
            continue
        if isinstance(v, list):
            out.append((v[0], v[1]))
        else:
            # ARA widens a scalar by ±10% as [0.9v, 1.1v]; for v < 0 this is inverted and never
            # matches. Reproduced on purpose (the reward mode is a re-implementation), reported.
            out.append((v * 0.9, v * 1.1))
            neg += v < 0
    return out, neg


def reward_numeric_correct(pred: str, intervals: list[tuple[float, float]]) -> bool:
    """ARA numeric reward: no number in the prediction -> wrong; otherwise the official range test
    (min/max of the reference interval, as ARA builds it) against any reference interval."""
    v = parse_numeric(number_words_to_digits(pred), strict=True)
    if v is None:
        return False
    for lo, hi in intervals:
        if numeric_correct(v, lo, hi):
            return True
    return False


@METRICS.register("infoseek-reward", family="infoseek", mode="reward", raw_aliases=True,
                  help="ARA / ReflectiVA answer reward: containment and ±10% numeric, accuracy by question type")
def score_reward(preds: list[PredictionRecord], refs: dict[str, InfoSeekRef], *,
                 per_item: bool = False, normalize: Callable[[str], str] = evqa_normalize) -> InfoSeekResult:
    """ARA reward accuracy over all reference ids (missing = wrong), by question type."""
    by_id, unknown, dup = last_prediction_per_id(preds, refs)
    tally = {qt: [0, 0] for qt in QTYPES}
    items: list[dict[str, Any]] = []
    neg_refs = 0
    n_pred = 0
    for did, ref in refs.items():
        has = did in by_id
        pred = by_id.get(did)
        n_pred += has
        ok = False
        if ref.qtype == "Numerical":
            intervals, neg = _reward_ref_intervals(ref.aliases)
            if not intervals and ref.range is not None:
                intervals = [ref.range]
            if not intervals:
                raise ValueError(f"reference {did!r} (line {ref.line}): no number in {ref.aliases!r}")
            neg_refs += neg > 0
            if pred is not None:
                ok = reward_numeric_correct(pred, intervals)
        else:
            norm_refs = [normalize(a) for a in ref.aliases]
            if any(not r for r in norm_refs):
                raise ValueError(f"reference {did!r} (line {ref.line}): an answer is empty after "
                                 f"normalisation ({ref.aliases!r}); containment would accept anything")
            if pred is not None:
                np_ = normalize(pred)
                ok = any(r in np_ for r in norm_refs)
        t = tally[ref.qtype]
        t[0] += ok
        t[1] += 1
        if per_item:
            items.append({"data_id": did, "question_type": ref.qtype, "data_split": ref.split,
                          "prediction": pred, "correct": ok, "missing": not has})
    c_all = sum(v[0] for v in tally.values())
    n_all = len(refs)
    warnings = []
    if neg_refs:
        warnings.append(f"{neg_refs} numerical reference(s) are negative scalars: ARA's ±10% interval "
                        "[0.9v, 1.1v] is inverted for v < 0, so they can never be answered correctly "
                        "(reproduced from the original scorer)")
    summary = {
        "mode": "reward",
        "accuracy": round(100 * c_all / n_all, 2) if n_all else 0.0,
        "n": n_all, "correct": c_all, "n_predicted": n_pred, "n_missing": n_all - n_pred,
        "coverage": round(n_pred / n_all, 4) if n_all else 0.0,
        "by_question_type": {qt: {"accuracy": round(100 * c / n, 2) if n else 0.0, "correct": c, "n": n}
                             for qt, (c, n) in tally.items()},
        "n_unknown_ids": unknown, "n_duplicate_predictions": dup,
        "duplicates": "last prediction per id wins",
        "warnings": warnings,
    }
    return InfoSeekResult(summary, items, {"n_unknown_ids": unknown, "n_duplicate_predictions": dup,
                                           "n_negative_numeric_refs": neg_refs})
