"""Benchmark comparison in the shape of seed 001 Table 1: how long the queries are, how long the answers
are, how many images an item has, which category and intent cells it covers — computed the same way
for every format kbvqa reads, so InfoSeek, E-VQA, ARA, NoteVQA-style and generic files line up in one
table. (The mean estimated reasoning hops needs a judge model: `kbvqa.pipelines.curate.hops` adds it.)

Lengths are in words: whitespace-separated tokens, and each CJK character counts as one word (Chinese
and Japanese are written without spaces; a character is the closest unit to an English word that needs
no segmenter). An interleaved NoteVQA reference is measured with its image tags removed.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kbvqa.data.schema import Sample

__all__ = ["benchmark_profile", "word_count"]

_CJK_CHAR = r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
_WORD = re.compile(rf"{_CJK_CHAR}|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_TAG = re.compile(r"<image>.*?</image>", re.S)


def word_count(text: str | None) -> int:
    """Words in `text` (see the module docstring)."""
    return len(_WORD.findall(text or ""))


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
            ref.append(word_count(_TAG.sub(" ", reference["text"])))
        if s.meta.get("category"):
            cats[str(s.meta["category"])] += 1
        if s.meta.get("intent"):
            intents[str(s.meta["intent"])] += 1
    n = len(q)
    return {
        "name": name, "format": fmt, "items": n,
        "query_words": _dist(q), "answer_words": _dist(a),
        "reference_words": _dist(ref) if ref else None,
        "images_per_item": round(statistics.fmean(imgs), 3) if imgs else None,
        "items_without_answer": no_answer,
        "categories": {"n": len(cats), "covered_items": sum(cats.values()), "counts": dict(cats.most_common())}
        if cats else None,
        "intents": {"n": len(intents), "covered_items": sum(intents.values()), "counts": dict(intents.most_common())}
        if intents else None,
        "hops": None,
    }
