"""Dataset statistics: what a benchmark author checks first (types, splits, answer shapes, gaps)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kbvqa.data.schema import Sample


def _summary(values: list[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "median": 0.0, "max": 0}
    return {"mean": round(statistics.fmean(values), 3), "median": float(statistics.median(values)),
            "max": max(values)}


def _label(v: str | None) -> str:
    return v if v is not None else "(none)"


def dataset_stats(samples: Iterable[Sample]) -> dict[str, Any]:
    """Counts by question_type / answer_type / split / dataset, length of the canonical (first)
    answer in words and characters, multi-part and numeric-with-range answers, and missing fields."""
    total = 0
    by: dict[str, Counter[str]] = {k: Counter() for k in ("question_type", "answer_type", "split", "dataset")}
    words: list[int] = []
    chars: list[int] = []
    multipart = numeric_range = 0
    missing = Counter({"answers": 0, "entity_url": 0, "images": 0, "evidence": 0})
    for s in samples:
        total += 1
        for k, c in by.items():
            c[_label(getattr(s, k))] += 1
        if s.answers:
            canon = s.answers[0].text
            words.append(len(canon.split()))
            chars.append(len(canon))
        else:
            missing["answers"] += 1
        if any(a.is_multipart for a in s.answers):
            multipart += 1
        if any(a.range is not None for a in s.answers):
            numeric_range += 1
        if s.entity is None or not s.entity.url:
            missing["entity_url"] += 1
        if not s.images:
            missing["images"] += 1
        if not s.evidence:
            missing["evidence"] += 1
    return {
        "total": total,
        **{f"by_{k}": dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for k, c in by.items()},
        "answer_words": _summary(words),
        "answer_chars": _summary(chars),
        "multipart": multipart,
        "numeric_with_range": numeric_range,
        "missing": dict(missing),
    }


def render_stats(stats: dict[str, Any], title: str = "dataset") -> Any:
    """A rich Table of `dataset_stats` output (print it with a rich Console)."""
    from rich.table import Table

    t = Table(title=f"{title}: {stats['total']} samples", show_lines=False)
    t.add_column("group")
    t.add_column("value")
    t.add_column("count", justify="right")
    for key in ("by_question_type", "by_answer_type", "by_split", "by_dataset"):
        for i, (label, n) in enumerate(stats[key].items()):
            t.add_row(key[3:] if i == 0 else "", label, str(n))
    for key in ("answer_words", "answer_chars"):
        s = stats[key]
        t.add_row(key.replace("_", " "), "mean / median / max", f"{s['mean']} / {s['median']} / {s['max']}")
    t.add_row("answers", "multi-part", str(stats["multipart"]))
    t.add_row("", "numeric with range", str(stats["numeric_with_range"]))
    for i, (k, n) in enumerate(stats["missing"].items()):
        t.add_row("missing" if i == 0 else "", k.replace("_", " "), str(n))
    return t
