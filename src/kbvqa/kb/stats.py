"""Section- and article-length statistics of a KB (`kbvqa kb stats --lengths`).

Why: the paper localises the verifiers' evidence context to KB sections and reports their length
(seed 000 §4.1: mean / 95th-percentile 868 / 2,360 tokens for E-VQA's KB, 877 / 2,545 for
InfoSeek's), which says how much a verifier reads per call. The paper does not say which tokeniser
it counted with, so the count is named with every figure: whitespace tokens (`str.split()`) unless
a Hugging Face tokenizer folder is given (its tokens, no special tokens). Percentiles are numpy's
linear interpolation. A section's text is counted without its title; an article's length is the
sum of its sections'.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

import numpy as np

from kbvqa.data.schema import Article

__all__ = ["length_rows", "length_stats", "token_counter"]


def token_counter(tokenizer: str | Path | None = None) -> tuple[Callable[[str], int], str]:
    """(count, name): whitespace tokens, or the tokens of the tokenizer saved in the folder `tokenizer`
    (read offline; a folder that holds none is an error naming it)."""
    if tokenizer is None:
        return (lambda text: len(text.split())), "whitespace"
    path = Path(tokenizer)
    if not path.is_dir():
        raise ValueError(f"--tokenizer {path}: not a folder holding a saved tokenizer")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # an optional extra
        raise ValueError(f"--tokenizer needs the transformers package ({exc})") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"--tokenizer {path}: no tokenizer read ({first})") from None
    return (lambda text: len(tok.encode(text, add_special_tokens=False))), f"tokenizer:{path.name}"


def _summary(xs: list[int]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "max": None}
    a = np.asarray(xs, dtype=np.int64)
    return {"n": int(a.size), "mean": round(float(a.mean()), 1), "p50": round(float(np.percentile(a, 50)), 1),
            "p95": round(float(np.percentile(a, 95)), 1), "max": int(a.max())}


def length_stats(articles: Iterable[Article], *, tokenizer: str | Path | None = None,
                 limit: int | None = None) -> dict[str, Any]:
    """Tokens per section and per article over `articles` (the first `limit` of them, when given):
    n, mean, median, p95 and max of each, the tokenisation's name and the empty sections (counted in
    the section figures as 0 tokens, and apart)."""
    count, name = token_counter(tokenizer)
    sections: list[int] = []
    per_article: list[int] = []
    empty = 0
    for i, art in enumerate(articles):
        if limit is not None and i >= limit:
            break
        lens = [count(s.text) for s in art.sections]
        empty += sum(1 for n in lens if n == 0)
        sections.extend(lens)
        per_article.append(sum(lens))
    return {"tokenisation": name, "articles_read": len(per_article), "limit": limit,
            "section_tokens": _summary(sections), "article_tokens": _summary(per_article),
            "empty_sections": empty}


def length_rows(st: dict[str, Any]) -> list[tuple[str, Any]]:
    """The statistics as (name, value) rows for the `kb stats` table, each naming the tokenisation."""
    rows: list[tuple[str, Any]] = [("tokens counted as", st["tokenisation"]), ("articles read", st["articles_read"])]
    for unit in ("section", "article"):
        s = st[f"{unit}_tokens"]
        rows += [(f"{unit}s counted" if k == "n" else f"{unit} tokens {k}", s[k]) for k in ("n", "mean", "p50", "p95", "max")]
    rows.append(("empty sections", st["empty_sections"]))
    return rows
