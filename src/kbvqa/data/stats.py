"""Dataset statistics: what a benchmark author checks first (types, splits, answer shapes, gaps)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kbvqa.data.compare import reference_word_count, word_count
from kbvqa.data.schema import Sample


#: Community-VQA groupings kept in `meta` (NoteVQA-style data): counted when present.
META_GROUPS = ("category", "intent", "language")


def _summary(values: list[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "median": 0.0, "max": 0}
    return {"mean": round(statistics.fmean(values), 3), "median": float(statistics.median(values)),
            "max": max(values)}


def _label(v: str | None) -> str:
    return v if v is not None else "(none)"


def dataset_stats(samples: Iterable[Sample]) -> dict[str, Any]:
    """Counts by question_type / answer_type / split / dataset, length of the canonical (first)
    answer — the short reference — in words (`kbvqa.data.compare.word_count`: a CJK character is a
    word) and characters, the interleaved references' length (tags removed) and embedded images per
    item (over all items, as seed 001 reports 1.5), multi-part and numeric-with-range answers, and missing fields."""
    total = 0
    by: dict[str, Counter[str]] = {k: Counter() for k in ("question_type", "answer_type", "split", "dataset")}
    by_meta: dict[str, Counter[str]] = {k: Counter() for k in META_GROUPS}
    words: list[int] = []
    chars: list[int] = []
    multipart = numeric_range = interleaved = ref_images = 0
    ref_words: list[int] = []
    missing = Counter({"answers": 0, "entity_url": 0, "images": 0, "evidence": 0})
    for s in samples:
        total += 1
        for k, c in by.items():
            c[_label(getattr(s, k))] += 1
        for k, c in by_meta.items():
            if k in s.meta:
                c[_label(str(s.meta[k]))] += 1
        if isinstance(s.meta.get("reference"), dict):
            interleaved += 1
            ref_images += len(s.meta["reference"].get("images") or [])
            ref_words.append(reference_word_count(str(s.meta["reference"].get("text") or "")))
        if s.answers:
            canon = s.answers[0].text
            words.append(word_count(canon))
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
        **{f"by_{k}": dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for k, c in by_meta.items() if c},
        **({"interleaved_references": interleaved, "reference_images": ref_images,
            "reference_images_per_item": round(ref_images / total, 3),
            "interleaved_reference_words": _summary(ref_words)} if interleaved else {}),
        "answer_words": _summary(words),
        "answer_chars": _summary(chars),
        "multipart": multipart,
        "numeric_with_range": numeric_range,
        "missing": dict(missing),
    }
