"""Dense section index (offline MiniLM) and the BM25 / dense / LLM section rerankers."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kbvqa.data.schema import Article, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.kb.importer import build_kb
from kbvqa.kb.store import KBStore
from kbvqa.kb.text_index import TextIndex
from kbvqa.models.rerank import (BM25Reranker, DenseReranker, LLMReranker, SectionCandidate, bm25_scores,
                                 get_reranker)
from kbvqa.models.result import ChatResult
from kbvqa.models.rules import RulesClient
from kbvqa.pipelines.index import build_text_index
from kbvqa.runner.stage import Context, Invalid

ARTICLES = [
    Article(url="https://en.wikipedia.org/wiki/Red_fox", title="Red fox", sections=[
        Section(index=0, title="Red fox", text="The red fox is the largest of the true foxes."),
        Section(index=1, title="Diet", text="Red foxes eat rodents, rabbits, birds and fruit; they cache surplus food."),
        Section(index=2, title="Range", text="Its range spans the Northern Hemisphere from the Arctic Circle to North Africa.")]),
    Article(url="https://en.wikipedia.org/wiki/Eiffel_Tower", title="Eiffel Tower", sections=[
        Section(index=0, title="Eiffel Tower", text="The Eiffel Tower is a wrought-iron lattice tower in Paris."),
        Section(index=1, title="Height", text="The tower is 330 metres tall, about the height of an 81-storey building."),
        Section(index=2, title="", text="")]),
]


@pytest.fixture(scope="module")
def embedder():
    from kbvqa.models.text_embed import shared_embedder

    return shared_embedder(device="cpu")


def _cands(kb, urls):
    out = []
    for rank, u in enumerate(urls):
        a = kb.get(u)
        out += [SectionCandidate(a.url, a.title, s.index, s.title, s.text, article_rank=rank) for s in a.sections if s.text]
    return out


def test_embedder_is_offline_and_normalised(embedder):
    assert embedder.name.startswith("st:") and embedder.dim == 384
    v = embedder.encode(["what do foxes eat", "red foxes eat rodents", "iron tower in Paris"])
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2]


def test_text_index_build_search_and_persist(tmp_path, embedder):
    kb = InMemoryKB(ARTICLES)
    idx, stats = build_text_index(kb, embedder)
    assert stats["articles"] == 2 and stats["sections"] == 5  # the empty section is not embedded
    q = embedder.encode(["How tall is it?"])[0]
    assert idx.search_in("https://en.wikipedia.org/wiki/Eiffel_Tower", q, k=1)[0][0] == 1
    assert idx.search_in("http://en.wikipedia.org/wiki/Eiffel_Tower/", q, k=2)  # any url spelling
    assert idx.search_in("https://en.wikipedia.org/wiki/Nope", q) == []
    top = idx.search(embedder.encode(["what does the fox eat"])[0], k=2)
    assert top[0][:2] == ("https://en.wikipedia.org/wiki/Red_fox", 1)
    idx.save(tmp_path / "t")
    back = TextIndex.load(tmp_path / "t", expect_embedder=embedder.name)
    assert back.search(embedder.encode(["what does the fox eat"])[0], k=1)[0][:2] == top[0][:2]
    with pytest.raises(ValueError, match="built with embedder"):
        TextIndex.load(tmp_path / "t", expect_embedder="st:other")
    arr = np.load(tmp_path / "t.npy")
    arr[0, 0] += 0.5
    np.save(tmp_path / "t.npy", arr)
    with pytest.raises(ValueError, match="checksum"):
        TextIndex.load(tmp_path / "t")


def test_dense_reranker_with_and_without_index(embedder):
    kb = InMemoryKB(ARTICLES)
    idx, _ = build_text_index(kb, embedder)
    urls = [a.url for a in ARTICLES]
    for rr in (DenseReranker(embedder), DenseReranker(embedder, text_index=idx)):
        ranked, usage = asyncio.run(rr.rerank("What does this animal eat?", _cands(kb, urls)))
        assert (ranked[0].url, ranked[0].section_index) == ("https://en.wikipedia.org/wiki/Red_fox", 1)
        assert usage.calls == 0
    other = TextIndex("st:other", 384)
    with pytest.raises(ValueError, match="text index was built"):
        DenseReranker(embedder, text_index=other)


def test_bm25_reranker_uses_store_or_falls_back(tmp_path):
    build_kb(ARTICLES, tmp_path / "kb.sqlite", overwrite=True)
    urls = [a.url for a in ARTICLES]
    q = "How many metres tall is the tower?"
    with KBStore(tmp_path / "kb.sqlite") as store:
        ranked, _ = asyncio.run(BM25Reranker().rerank(q, _cands(store, urls), Context(kb=store)))
    assert (ranked[0].url, ranked[0].section_index) == ("https://en.wikipedia.org/wiki/Eiffel_Tower", 1)
    kb = InMemoryKB(ARTICLES)
    ranked2, _ = asyncio.run(BM25Reranker().rerank(q, _cands(kb, urls), Context(kb=kb)))
    assert (ranked2[0].url, ranked2[0].section_index) == ("https://en.wikipedia.org/wiki/Eiffel_Tower", 1)
    s = bm25_scores("fox diet", ["the fox", "diet of the fox", "a tower"])
    assert s[1] > s[0] > s[2] == 0.0
    assert bm25_scores("the of", ["x"]) == [0.0]


def test_llm_reranker_orders_and_refuses_bad_replies():
    kb = InMemoryKB(ARTICLES)
    cands = _cands(kb, [a.url for a in ARTICLES])
    seen = {}

    def rule(payload):
        seen.update(payload)
        return {"ranking": [5, 2, 99]}  # out-of-range numbers are ignored

    ctx = Context(kb=kb, roles={"checker": RulesClient("test-rank", rule)})
    ranked, usage = asyncio.run(LLMReranker().rerank("How tall?", list(cands), ctx))
    assert [c.section_index for c in ranked[:2]] == [1, 1] and ranked[0].url.endswith("Eiffel_Tower")
    assert ranked[0].score > ranked[1].score > ranked[2].score == 0.0
    assert len(ranked) == len(cands) and usage.calls == 1 and seen["question"] == "How tall?"
    bad = Context(kb=kb, roles={"checker": RulesClient("bad", lambda p: {"order": "?"})})
    with pytest.raises(Invalid):
        asyncio.run(LLMReranker().rerank("q", list(cands), bad))

    class Down:
        backend = "openai"
        provenance = None

        async def chat(self, *a, **kw):
            from kbvqa.data.schema import Provenance
            return ChatResult(status="error", reason="HTTP 503", provenance=Provenance(backend="openai"))

    with pytest.raises(RuntimeError, match="503"):
        asyncio.run(LLMReranker().rerank("q", list(cands), Context(roles={"checker": Down()})))
    with pytest.raises(ValueError, match="unknown reranker"):
        get_reranker("colbert")
