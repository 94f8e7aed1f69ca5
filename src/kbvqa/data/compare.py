"""Benchmark comparison in the shape of seed 001 Table 1: how long the queries are, how long the answers
are, how many images an item has, which category and intent cells it covers — computed the same way
for every format kbvqa reads, so InfoSeek, E-VQA, ARA, NoteVQA-style and generic files line up in one
table. (The mean estimated reasoning hops needs a judge model: `kbvqa.pipelines.curate.hops` adds it.)

Lengths are in words: whitespace-separated tokens, and each CJK character counts as one word (Chinese
and Japanese are written without spaces; a character is the closest unit to an English word that needs
no segmenter). An interleaved NoteVQA reference is measured with its image tags removed; its embedded
images are counted per item over all items (the paper's 378 images over 252 items = 1.5) and over the
items that have one. `answer_words` is the short reference (NoteVQA's are expert paragraphs), and
`reference_words` the interleaved one; `NOTEVQA_PUBLISHED` holds the paper's own figures to set a
curated set beside.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kbvqa.data.schema import Sample

__all__ = ["NOTEVQA_PUBLISHED", "benchmark_profile", "reference_word_count", "word_count"]

#: NoteVQA as seed 001 §3.2 reports it: items, mean query / short-reference / interleaved-reference
#: lengths in words, embedded images in all and per item.
NOTEVQA_PUBLISHED = {"items": 252, "query_words": 22.7, "answer_words": 107.5, "reference_words": 219.4,
                     "reference_images": 378, "reference_images_per_item": 1.5}

_CJK_CHAR = r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
_WORD = re.compile(rf"{_CJK_CHAR}|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_TAG = re.compile(r"<image>.*?</image>", re.S)


def word_count(text: str | None) -> int:
    """Words in `text` (see the module docstring)."""
    return len(_WORD.findall(text or ""))


def reference_word_count(text: str | None) -> int:
    """Words of an interleaved reference, its image tags removed."""
    return word_count(_TAG.sub(" ", text or ""))


def _dist(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"mean": None, "median": None, "n": 0}
    return {"mean": round(statistics.fmean(values), 2), "median": float(statistics.median(values)), "n": len(values)}


def benchmark_profile(samples: Iterable[Sample], *, name: str, fmt: str) -> dict[str, Any]:
    """One benchmark's row: items; query, short-answer and (where present) interleaved-reference
    lengths; images per item; category and intent coverage (None where the format has no such field)."""
    q: list[int] = []
    a: list[int] = []
    ref: list[int] = []
    ref_imgs: list[int] = []
    imgs: list[int] = []
    cats: Counter[str] = Counter()
    intents: Counter[str] = Counter()
    no_answer = 0
    for s in samples:
        q.append(word_count(s.question))
        imgs.append(len(s.images))
        if s.answers:
            a.append(word_count(s.answers[0].text))
        else:
            no_answer += 1
        reference = s.meta.get("reference")
        if isinstance(reference, dict) and isinstance(reference.get("text"), str):
            ref.append(reference_word_count(reference["text"]))
            ref_imgs.append(len(reference.get("images") or []))
        if s.meta.get("category"):
            cats[str(s.meta["category"])] += 1
        if s.meta.get("intent"):
            intents[str(s.meta["intent"])] += 1
    n = len(q)
    return {
        "name": name, "format": fmt, "items": n,
        "query_words": _dist(q), "answer_words": _dist(a),
        "reference_words": _dist(ref) if ref else None,
        "reference_images": {"total": sum(ref_imgs), "per_item": round(sum(ref_imgs) / n, 3),
                             "per_referenced_item": round(statistics.fmean(ref_imgs), 3), "items_with_reference": len(ref)}
        if ref else None,
        "images_per_item": round(statistics.fmean(imgs), 3) if imgs else None,
        "items_without_answer": no_answer,
        "categories": {"n": len(cats), "covered_items": sum(cats.values()), "counts": dict(cats.most_common())}
        if cats else None,
        "intents": {"n": len(intents), "covered_items": sum(intents.values()), "counts": dict(intents.most_common())}
        if intents else None,
        "hops": None,
    }
