"""The KB interface stages code against, and a small in-memory implementation for tests and demos."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Protocol

from kbvqa.data.schema import Article
from kbvqa.data.urls import canonical_url


@dataclass(frozen=True)
class SearchHit:
    url: str
    title: str
    section_index: int
    section_title: str
    text: str
    score: float  # higher is better


class KnowledgeBase(Protocol):
    def get(self, url: str) -> Article | None: ...

    def search(self, query: str, k: int = 10) -> list[SearchHit]: ...

    def __contains__(self, url: object) -> bool: ...

    def __len__(self) -> int: ...


class InMemoryKB:
    """Dict-backed KB with naive token-overlap search; for tests and tiny KBs only."""

    def __init__(self, articles: Iterable[Article] = ()):
        self._by_url: dict[str, Article] = {}
        for a in articles:
            self.add(a)

    def add(self, article: Article) -> None:
        self._by_url[canonical_url(article.url)] = article

    def get(self, url: str) -> Article | None:
        return self._by_url.get(canonical_url(url))

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and canonical_url(url) in self._by_url

    def __len__(self) -> int:
        return len(self._by_url)

    def __iter__(self):
        return iter(self._by_url.values())

    def search(self, query: str, k: int = 10) -> list[SearchHit]:
        q = set(re.findall(r"\w+", query.lower()))
        hits = []
        for a in self._by_url.values():
            for s in a.sections:
                toks = re.findall(r"\w+", (s.title + " " + s.text).lower())
                score = sum(1 for t in toks if t in q) / (1 + len(toks)) ** 0.5
                if score > 0:
                    hits.append(SearchHit(a.url, a.title, s.index, s.title, s.text, score))
        hits.sort(key=lambda h: -h.score)
        return hits[:k]
