"""PNG plots for study results, drawn with matplotlib's object API on the Agg canvas.

No pyplot: no global figure state, no GUI backend, safe in threads and on headless machines. Every
plot title or axis names the scorer that produced the numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["plot_funnel", "plot_group_bars", "plot_ivr12_dimensions", "plot_recall_at_k", "plot_rank_changes"]


def _save(fig: Figure, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(p, format="png", dpi=110, bbox_inches="tight")
    return p


def plot_group_bars(groups: Sequence[str], series: Mapping[str, Sequence[tuple[float, float, float]]],
                    path: str | Path, *, title: str, scorer: str, ylabel: str = "accuracy (%)",
                    error_bars: bool = True) -> Path:
    """Grouped bars: one group per category, one bar per series, with (estimate, low, high) error bars."""
    groups = list(groups)
    names = list(series)
    fig = Figure(figsize=(max(5.0, 1.0 + 0.9 * len(groups) * max(1, len(names)) ** 0.6), 3.8))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(groups), dtype=float)
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        vals = np.array([v[0] for v in series[name]], dtype=float)
        lo = np.array([v[1] for v in series[name]], dtype=float)
        hi = np.array([v[2] for v in series[name]], dtype=float)
        err = np.vstack([np.clip(vals - lo, 0, None), np.clip(hi - vals, 0, None)])
        ax.bar(x + (j - (len(names) - 1) / 2) * width, vals, width, yerr=err if error_bars else None,
               capsize=3, label=name)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=30 if max((len(g) for g in groups), default=0) > 10 else 0, ha="right"
                       if max((len(g) for g in groups), default=0) > 10 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\nscorer: {scorer}" + ("; bars: 95% bootstrap CI" if error_bars else ""), fontsize=9)
    if len(names) > 1:
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_recall_at_k(curves: Mapping[str, Mapping[int, float]], path: str | Path, *, title: str = "Recall@K",
                     scorer: str = "kbvqa retrieval") -> Path:
    """One line per curve (label -> {K: recall in [0, 1] or %}); log-scaled K axis."""
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    all_k: set[int] = set()
    for label, pts in curves.items():
        ks = sorted(int(k) for k in pts)
        all_k.update(ks)
        vals = [float(pts[k]) for k in ks]
        ax.plot(ks, vals, marker="o", label=label)
    if all_k:
        ax.set_xscale("log")
        ax.set_xticks(sorted(all_k))
        ax.set_xticklabels([str(k) for k in sorted(all_k)])
    ax.set_xlabel("K")
    ax.set_ylabel("recall")
    ax.set_title(f"{title}\n{scorer}", fontsize=9)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_rank_changes(ranks_a: Mapping[str, int], ranks_b: Mapping[str, int], path: str | Path, *,
                      labels: tuple[str, str] = ("A", "B"), scorer: str = "",
                      reversed_methods: set[str] | None = None) -> Path:
    """Slope chart: each method's rank on split A (left) and B (right); methods in a reversed pair
    are drawn solid and labelled, others faded."""
    names = [m for m in ranks_a if m in ranks_b]
    rev = reversed_methods or set()
    fig = Figure(figsize=(4.6, max(3.0, 0.45 * len(names) + 1.5)))
    ax = fig.add_subplot(1, 1, 1)
    for m in names:
        a, b = ranks_a[m], ranks_b[m]
        strong = m in rev or a != b
        ax.plot([0, 1], [a, b], marker="o", alpha=1.0 if strong else 0.45, linewidth=2 if m in rev else 1.2)
        ax.text(-0.05, a, m, ha="right", va="center", fontsize=8)
        ax.text(1.05, b, m, ha="left", va="center", fontsize=8)
    n = max([*ranks_a.values(), *ranks_b.values(), 1])
    ax.set_ylim(n + 0.5, 0.5)  # rank 1 on top
    ax.set_xlim(-0.6, 1.6)
    ax.set_xticks([0, 1])
    ax.set_xticklabels(list(labels))
    ax.set_yticks(range(1, n + 1))
    ax.set_ylabel("rank (1 = best)")
    ax.set_title(f"Rank changes\nscorer: {scorer}", fontsize=9)
    return _save(fig, path)


def plot_ivr12_dimensions(dimensions: Sequence[tuple[str, bool]],
                          series: Mapping[str, Sequence[tuple[float | None, float | None, float | None]]],
                          path: str | Path, *, title: str, scorer: str) -> Path:
    """IVR-12 per dimension, one bar per side (e.g. references vs answers) on the 1-5 scale.
    `dimensions`: (title, measured by rule); `series`: name -> (mean, CI low, CI high) per dimension,
    None where the figure does not exist. An absent mean gets no bar (an "n/a" mark at the axis), a
    missing CI no error bar, and a rule measure is hatched and its label marked "(rule)"."""
    labels = [f"{t} (rule)" if rule else t for t, rule in dimensions]
    names = list(series)
    fig = Figure(figsize=(max(6.0, 0.75 * len(labels) * max(1, len(names)) ** 0.5), 4.2))
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(labels), dtype=float)
    width = 0.8 / max(1, len(names))
    any_ci = False
    for j, name in enumerate(names):
        offset = x + (j - (len(names) - 1) / 2) * width
        for i, (mean, low, high) in enumerate(series[name]):
            if mean is None:
                ax.text(offset[i], 1.05, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, color="0.4")
                continue
            err = None
            if low is not None and high is not None:
                err = [[max(0.0, mean - low)], [max(0.0, high - mean)]]
                any_ci = True
            ax.bar(offset[i], mean - 1.0, width, bottom=1.0, yerr=err, capsize=3, color=f"C{j}",
                   hatch="//" if dimensions[i][1] else None, edgecolor="white" if dimensions[i][1] else None,
                   label=name if i == next(k for k, v in enumerate(series[name]) if v[0] is not None) else None)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylim(1.0, 5.2)
    ax.set_ylabel("mean score (1-5)")
    ax.set_title(f"{title}\nscorer: {scorer}; hatched: rule measure (kbvqa's stand-in); n/a: no score"
                 + ("; bars: CI" if any_ci else "; no CI in the summary"), fontsize=9)
    if any(v[0] is not None for vals in series.values() for v in vals):
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_funnel(stages: Sequence[tuple[str, int, int, int]], path: str | Path, *, start: tuple[str, int],
                title: str) -> Path:
    """A funnel: how many items are left after each stage (`stages`: name, kept, dropped, stopped),
    starting from `start` (name, count), as horizontal bars with what each stage dropped and stopped
    written beside them."""
    names = [start[0], *(s[0] for s in stages)]
    kept = [start[1], *(s[1] for s in stages)]
    fig = Figure(figsize=(6.4, max(2.5, 0.34 * len(names) + 1.2)))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(names))
    ax.barh(y, kept, color="C0")
    top = max(kept + [1])
    for i, (_name, _kept, dropped, stopped) in enumerate(stages, start=1):
        said = ", ".join(x for x in (f"{dropped} dropped" if dropped else "", f"{stopped} stopped" if stopped else "")
                         if x)
        if said:
            ax.text(kept[i] + 0.01 * top, i, said, va="center", fontsize=7, color="0.3")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.45)
    ax.set_xlabel("items left (count)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)
