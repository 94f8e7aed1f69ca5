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

__all__ = ["plot_group_bars", "plot_recall_at_k", "plot_rank_changes"]


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
