"""Reliability statistics: Krippendorff's α and the length–score correlations for model judges;
Cohen's and Fleiss' κ and the mean ± sample standard deviation across raters for human evaluation.

Why these: a rubric judge is only worth its numbers if it agrees with itself (repeats) and with
other judges, and if its scores do not merely track answer length (WildBench's length bias). α
handles any number of raters per item, missing ratings and ordinal scales, so one statistic serves
"k repeats of one judge" and "several judges" alike (inspect_ai's scorer/_metrics/krippendorff.py
reports the same statistic across graders).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Literal

import numpy as np

__all__ = ["METRICS", "cohen_kappa", "fleiss_kappa", "krippendorff_alpha", "mean_std", "pearson", "spearman"]

Metric = Literal["nominal", "ordinal", "interval"]
METRICS: tuple[Metric, ...] = ("nominal", "ordinal", "interval")


def krippendorff_alpha(units: Iterable[Sequence[Hashable | float | None]], metric: Metric = "ordinal") -> float | None:
    """Krippendorff's α over reliability data: one sequence of ratings per unit (item), any number
    of raters per unit, None for a missing rating. Returns None when α is undefined (fewer than two
    pairable values, or no variation at all: every rating the same).

    The formula (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"):

        α = 1 − D_o / D_e
        o_ck = Σ_u (n_uc · n_uk − [c = k] · n_uc) / (m_u − 1)     coincidences; units with m_u ≥ 2 values
        n_c  = Σ_k o_ck,  n = Σ_c n_c
        D_o  = (1 / n) Σ_c Σ_k o_ck · δ²_ck
        D_e  = (1 / (n (n − 1))) Σ_c Σ_k n_c · n_k · δ²_ck

    with δ²_ck = [c ≠ k] (nominal), (c − k)² (interval), and for ordinal data, over the values in
    rank order, δ²_ck = (Σ_{g = c..k} n_g − (n_c + n_k) / 2)².

    Hand-computed example (tests/test_ivr12.py): units (1, 1), (2, 3), (3, 3) give
    o_11 = 2, o_23 = o_32 = 1, o_33 = 2; n_1 = 2, n_2 = 1, n_3 = 3, n = 6; D_o = 2/6 (interval and
    nominal), D_e = 58/30 (interval) and 22/30 (nominal), so α_interval = 24/29 ≈ 0.8276 and
    α_nominal = 6/11 ≈ 0.5455; ordinal δ²_12 = 1.5², δ²_23 = 2², δ²_13 = 3.5², so D_o = 8/6,
    D_e = 180/30 and α_ordinal = 7/9 ≈ 0.7778."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
    rows = [[v for v in u if v is not None and not (isinstance(v, float) and math.isnan(v))] for u in units]
    rows = [r for r in rows if len(r) >= 2]  # a unit with one value has nothing to pair it with
    if not rows:
        return None
    values = sorted({v for r in rows for v in r}, key=_order) if metric != "nominal" else \
        list(dict.fromkeys(v for r in rows for v in r))
    if len(values) < 2:
        return None  # no variation: agreement is perfect but α is 0/0
    index = {v: i for i, v in enumerate(values)}
    m = len(values)
    o = np.zeros((m, m))
    for r in rows:
        counts = np.zeros(m)
        for v in r:
            counts[index[v]] += 1
        o += (np.outer(counts, counts) - np.diag(counts)) / (len(r) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    delta2 = _delta2(values, n_c, metric)
    d_o = (o * delta2).sum() / n
    d_e = (np.outer(n_c, n_c) * delta2).sum() / (n * (n - 1))
    if d_e == 0:
        return None
    return float(1.0 - d_o / d_e)


def _order(v: Hashable | float) -> tuple[int, float | str]:
    return (0, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def _delta2(values: list, n_c: np.ndarray, metric: Metric) -> np.ndarray:
    m = len(values)
    if metric == "nominal":
        return 1.0 - np.eye(m)
    if metric == "interval":
        x = np.asarray([float(v) for v in values])
        return (x[:, None] - x[None, :]) ** 2
    cum = np.concatenate([[0.0], np.cumsum(n_c)])  # cum[i] = Σ_{g < i} n_g
    d = np.zeros((m, m))
    for c in range(m):
        for k in range(m):
            lo, hi = min(c, k), max(c, k)
            d[c, k] = (cum[hi + 1] - cum[lo] - (n_c[c] + n_c[k]) / 2) ** 2
    return d


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than 3 pairs or when either side does not vary."""
    if len(x) != len(y):
        raise ValueError(f"pearson: {len(x)} x values but {len(y)} y values")
    if len(x) < 3:
        return None
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return None if den == 0 else float((a * b).sum() / den)


def _ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank."""
    a = np.asarray(x, dtype=float)
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a))
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and a[order[j + 1]] == a[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson's r of the average ranks (ties handled)."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} x values but {len(y)} y values")
    if len(x) < 3:
        return None
    return pearson(list(_ranks(x)), list(_ranks(y)))


def cohen_kappa(x: Sequence[Hashable], y: Sequence[Hashable]) -> float | None:
    """Cohen's κ of two raters' labels on the same items; None with no items or when both raters used
    one category only (chance agreement 1: κ undefined, not 1)."""
    n = len(x)
    if n != len(y):
        raise ValueError(f"cohen_kappa: {n} labels against {len(y)}")
    if n == 0:
        return None
    po = sum(a == b for a, b in zip(x, y)) / n
    xs, ys = list(x), list(y)
    pe = sum((xs.count(c) / n) * (ys.count(c) / n) for c in set(xs) | set(ys))
    if pe >= 1.0:
        return None
    return (po - pe) / (1 - pe)


def fleiss_kappa(table: Sequence[Sequence[Hashable]]) -> float | None:
    """Fleiss' κ over items × raters labels (the same number of raters, at least 2, per item); None
    when undefined (no items, one rater, or every label the same)."""
    if not table or len(table[0]) < 2:
        return None
    m = len(table[0])
    if any(len(row) != m for row in table):
        raise ValueError("fleiss_kappa: every item needs the same number of raters")
    cats = sorted({c for row in table for c in row}, key=str)
    n = len(table)
    p_j = {c: sum(list(row).count(c) for row in table) / (n * m) for c in cats}
    p_i = [(sum(list(row).count(c) ** 2 for c in cats) - m) / (m * (m - 1)) for row in table]
    p_bar = sum(p_i) / n
    pe = sum(v * v for v in p_j.values())
    if pe >= 1.0:
        return None
    return (p_bar - pe) / (1 - pe)


def mean_std(xs: Sequence[float], digits: int = 4) -> dict[str, float | None]:
    """Mean ± sample standard deviation (n − 1) across raters: how seed 000 reports human accuracy.
    Its pairs of two annotators on 100 items fit only this reading: 96.0 ± 1.4 is 97 and 95 (the
    population deviation would be 1.0), 89.5 ± 3.5 is 92 and 87. One rater: std 0; none: both None."""
    if not xs:
        return {"mean": None, "std": None}
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return {"mean": round(mean, digits), "std": round(std, digits)}
