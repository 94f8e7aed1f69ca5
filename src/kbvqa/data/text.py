"""Text shapes shared by the KB store, the rerankers and the index builders.

`SEARCH_STOPWORDS` are the function words dropped from search and rerank queries (they carry no
signal for BM25 but match nearly every section); `section_text` is what a section looks like to a
text encoder, so the index builder and the dense reranker embed exactly the same string.
"""

from __future__ import annotations

SEARCH_STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from had has have how i if
in into is it its of on or that the their there these they this to was were what when where which who whom
whose why will with would you your""".split())


def section_text(article_title: str, section_title: str, text: str, max_chars: int = 1500) -> str:
    """What gets embedded for a section: titles give the (often pronoun-only) body its subject."""
    head = article_title if not section_title or section_title == article_title else f"{article_title} - {section_title}"
    return f"{head}: {text[:max_chars]}"
