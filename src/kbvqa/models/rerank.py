"""Section rerankers: order candidate KB sections by how well they answer a question.

All share one async interface, `rerank(question, candidates, ctx) -> (ranked candidates, usage)`, so
the rerank stage does not care whether the score came from BM25, an embedding, a cross-encoder or
an LLM:

- `BM25Reranker`: the KB store's FTS5 BM25 (`search_in`) when available, else an in-process BM25
  over the candidates (same formula, k1=1.2, b=0.75). No model.
- `DenseReranker`: cosine between question and section embeddings (sentence-transformers, offline);
  reuses a prebuilt `TextIndex` when the section is in it.
- `CrossEncoderReranker`: a sentence-transformers CrossEncoder from a local directory (optional).
- `LLMReranker`: asks a configured model role to order numbered sections (JSON reply); an unusable
  reply (off-schema, or numbers of which none names a passage) raises `Invalid`, a failed call raises
  `ModelCallError`, so no ordering is ever invented. The call's usage goes to `ctx` and back to the
  stage, so the run and the record count it.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import StrictInt

from kbvqa.data.schema import Evidence, Usage
from kbvqa.data.text import SEARCH_STOPWORDS, section_text
from kbvqa.models.prompts.answer import RERANK_SECTIONS
from kbvqa.models.replies import Reply
from kbvqa.models.result import call_model
from kbvqa.registry import Registry

_TOK = re.compile(r"\w+", re.UNICODE)


@dataclass
class SectionCandidate:
    url: str
    title: str
    section_index: int
    section_title: str
    text: str
    visual: float | None = None  # the article's retrieval score (image similarity), when known
    article_rank: int = 0  # 0-based rank of the article in the retrieval list
    score: float = 0.0  # the reranker's score (higher is better)
    fused: float = 0.0  # what the stage finally sorts by

    def evidence(self) -> Evidence:
        return Evidence(text=self.text, section_id=str(self.section_index), section_title=self.section_title,
                        url=self.url)

    def dump(self, max_chars: int | None = None) -> dict[str, Any]:
        d = asdict(self)
        if max_chars is not None:
            d["text"] = d["text"][:max_chars]
        return d


def _tokens(text: str) -> list[str]:
    return [t for t in _TOK.findall(text.lower()) if t not in SEARCH_STOPWORDS]


def bm25_scores(query: str, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of `query` against each doc, with IDF from the docs themselves."""
    q = set(_tokens(query))
    toks = [_tokens(d) for d in docs]
    n = len(docs)
    if not n or not q:
        return [0.0] * n
    avg = sum(len(t) for t in toks) / n or 1.0
    df = Counter(w for t in toks for w in set(t) if w in q)
    idf = {w: math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) for w in df}
    out = []
    for t in toks:
        tf = Counter(w for w in t if w in idf)
        out.append(sum(idf[w] * c * (k1 + 1) / (c + k1 * (1 - b + b * len(t) / avg)) for w, c in tf.items()))
    return out


class Reranker:
    name = "reranker"

    def score(self, question: str, candidates: Sequence[SectionCandidate], ctx: Any = None) -> list[float]:
        raise NotImplementedError

    async def rerank(self, question: str, candidates: list[SectionCandidate], ctx: Any = None
                     ) -> tuple[list[SectionCandidate], Usage]:
        if not candidates:
            return [], Usage()
        scores = await asyncio.to_thread(self.score, question, candidates, ctx)
        for c, s in zip(candidates, scores):
            c.score = float(s)
        return sorted(candidates, key=lambda c: -c.score), Usage()


class BM25Reranker(Reranker):
    """FTS5 BM25 from the KB store per article (so IDF is the whole KB's), else in-process BM25."""

    name = "bm25"

    def score(self, question: str, candidates: Sequence[SectionCandidate], ctx: Any = None) -> list[float]:
        kb = getattr(ctx, "kb", None)
        if kb is not None and hasattr(kb, "search_in"):
            by_url: dict[str, dict[int, float]] = {}
            for url in dict.fromkeys(c.url for c in candidates):
                try:
                    hits = kb.search_in(url, question, k=1000)
                except KeyError:
                    hits = []
                by_url[url] = {h.section_index: h.score for h in hits}
            return [by_url.get(c.url, {}).get(c.section_index, 0.0) for c in candidates]
        return bm25_scores(question, [f"{c.section_title} {c.text}" for c in candidates])


class DenseReranker(Reranker):
    """Cosine(question, section) with a sentence-transformers embedder."""

    name = "dense"

    def __init__(self, embedder: Any = None, text_index: Any = None, model_dir: str | Path | None = None):
        if embedder is None:
            from kbvqa.models.text_embed import shared_embedder

            embedder = shared_embedder(model_dir)
        if text_index is not None and text_index.embedder != embedder.name:
            raise ValueError(f"text index was built with {text_index.embedder!r}, embedder is {embedder.name!r}")
        self.embedder, self.text_index = embedder, text_index
        self.name = f"dense:{embedder.name}"

    def score(self, question: str, candidates: Sequence[SectionCandidate], ctx: Any = None) -> list[float]:
        q = self.embedder.encode([question])[0]
        cached: dict[str, dict[int, Any]] = {}
        vecs: list[Any] = [None] * len(candidates)
        todo = []
        for i, c in enumerate(candidates):
            if self.text_index is not None:
                if c.url not in cached:
                    cached[c.url] = self.text_index.section_vectors(c.url)
                vecs[i] = cached[c.url].get(c.section_index)
            if vecs[i] is None:
                todo.append(i)
        if todo:
            enc = self.embedder.encode([section_text(candidates[i].title, candidates[i].section_title,
                                                     candidates[i].text) for i in todo])
            for i, v in zip(todo, enc):
                vecs[i] = v
        return [float(v @ q) for v in vecs]


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder from a local directory (never downloaded)."""

    name = "cross-encoder"

    def __init__(self, model_dir: str | Path, max_chars: int = 2000):
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import CrossEncoder

        if not Path(model_dir).is_dir():
            raise FileNotFoundError(f"{model_dir}: not a local cross-encoder directory")
        self.model = CrossEncoder(str(model_dir), local_files_only=True)
        self.max_chars = max_chars
        self.name = f"cross-encoder:{Path(model_dir).name}"

    def score(self, question: str, candidates: Sequence[SectionCandidate], ctx: Any = None) -> list[float]:
        pairs = [(question, f"{c.section_title}: {c.text[: self.max_chars]}") for c in candidates]
        return [float(s) for s in self.model.predict(pairs)]


class Ranking(Reply):
    """Passage numbers (JSON integers), most useful first. `LLMReranker` ignores a number that names
    no passage shown (passages may be omitted anyway) but refuses a ranking in which no number names
    one: that is not a ranking of these passages."""

    ranking: list[StrictInt]


class LLMReranker(Reranker):
    """Orders sections with a model role (default `checker`); sections it omits keep their order after it."""

    name = "llm"

    def __init__(self, role: str = "checker", max_chars: int = 600):
        self.role, self.max_chars = role, max_chars
        self.name = f"llm:{role}"

    async def rerank(self, question: str, candidates: list[SectionCandidate], ctx: Any = None
                     ) -> tuple[list[SectionCandidate], Usage]:
        if not candidates:
            return [], Usage()
        listing = "\n\n".join(f"[{i + 1}] {c.title} / {c.section_title}: {c.text[: self.max_chars]}"
                              for i, c in enumerate(candidates))
        messages = RERANK_SECTIONS.messages(question_raw=question, passages_raw=listing)
        client = ctx.role(self.role)
        payload = {"question": question, "passages": [c.dump(self.max_chars) for c in candidates]}
        kwargs = {"payload": payload} if getattr(client, "backend", "") == "rules" else {}
        reply, result = await call_model(client, messages, Ranking, ctx=ctx, who="reranker",
                                         prompt_version=RERANK_SECTIONS.id, **kwargs)
        order = list(dict.fromkeys(i - 1 for i in reply.ranking if 1 <= i <= len(candidates)))
        if reply.ranking and not order:
            raise result.reject(f"reranker reply unusable: passage numbers {reply.ranking} name no passage "
                                f"(1..{len(candidates)})")
        rest = [i for i in range(len(candidates)) if i not in set(order)]
        n = len(candidates)
        ranked = []
        for pos, i in enumerate(order + rest):
            c = candidates[i]
            c.score = float(n - pos) / n if i in set(order) else 0.0
            ranked.append(c)
        return ranked, result.usage


RERANKERS: Registry[Callable[..., Reranker]] = Registry("reranker")
RERANKERS.add("bm25", lambda **_: BM25Reranker(), help="FTS5 BM25 within each article (no model)")
RERANKERS.add("dense", lambda *, model_dir=None, text_index=None, **_: DenseReranker(model_dir=model_dir,
                                                                                  text_index=text_index),
              help="cosine with a local sentence-transformers model (MiniLM by default)")


def _cross_encoder(*, model_dir: str | Path | None = None, **_: Any) -> Reranker:
    if model_dir is None:
        raise ValueError("the cross-encoder reranker needs a local model directory")
    return CrossEncoderReranker(model_dir)


RERANKERS.add("cross-encoder", _cross_encoder, help="a local sentence-transformers CrossEncoder")
RERANKERS.add("llm", lambda *, role="checker", **_: LLMReranker(role=role), help="a model role orders the sections")


def get_reranker(name: str, *, model_dir: str | Path | None = None, text_index: Any = None,
                 role: str = "checker") -> Reranker:
    """A reranker by registered name (`kbvqa.models.rerank.RERANKERS`)."""
    return RERANKERS.get("cross-encoder" if name == "cross" else name)(model_dir=model_dir, text_index=text_index,
                                                                        role=role)
