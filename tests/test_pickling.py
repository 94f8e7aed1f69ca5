"""Everything a job puts in a Context pickles (the Ray executor ships it to actors) and the copy works:
live handles (HTTP pools, SQLite connections, FAISS objects, locks) are reopened on the other side."""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest

from fake_llm_server import FakeLLMServer, ok
from kbvqa.data.schema import Article, Section
from kbvqa.kb.image_index import ImageIndex
from kbvqa.kb.importer import build_kb
from kbvqa.kb.store import KBStore
from kbvqa.kb.text_index import TextIndex
from kbvqa.models.cache import ResponseCache
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.replay import ReplayClient
from kbvqa.runner.stage import Context

W = "https://en.wikipedia.org/wiki/"
MSG = [{"role": "user", "content": "Which city is the Eiffel Tower in?"}]


def copy(obj):
    return pickle.loads(pickle.dumps(obj))


@pytest.fixture(scope="module")
def server():
    with FakeLLMServer(default=ok("Paris")) as srv:
        yield srv


def test_client_copy_reopens_pools_and_cache(server, tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    client = OpenAIChatClient(server.base_url, "fake", api_key="sk-test", concurrency=3, cache=cache)
    first = asyncio.run(client.chat(MSG))  # opens pools and a semaphore on that loop
    assert first.status == "ok" and client._pools
    twin = copy(client)
    assert twin._pools == [] and twin._sem is None and twin._loop is None
    assert (twin.base_url, twin.model, twin.concurrency) == (client.base_url, "fake", 3)
    n = len(server.requests)
    again = asyncio.run(twin.chat(MSG))  # same request: answered from the reopened cache file
    assert again.status == "ok" and again.cached and again.text == "Paris" and len(server.requests) == n
    other = asyncio.run(twin.chat([{"role": "user", "content": "And the Big Ben?"}]))
    assert other.status == "ok" and not other.cached and len(server.requests) == n + 1
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer sk-test"  # the key travels
    assert len(cache) == 2  # the copy wrote to the same file
    asyncio.run(twin.aclose())
    cache.close()


def test_response_cache_copy_counts_afresh(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    assert cache.get("missing") is None and cache.misses == 1
    twin = copy(cache)
    assert twin.path == cache.path.resolve() and twin.misses == 0 and len(twin) == 0
    cache.close()
    twin.close()


def test_replay_client_copy_answers_from_the_recording(server, tmp_path):
    cassette = tmp_path / "cassette.jsonl"
    recorder = ReplayClient(cassette, mode="record", inner=OpenAIChatClient(server.base_url, "fake"))
    assert asyncio.run(recorder.chat(MSG)).status == "ok"
    asyncio.run(recorder.aclose())
    player = copy(ReplayClient(cassette))
    cassette.unlink()  # the copy carries its entries: a worker elsewhere needs no file
    res = asyncio.run(player.chat(MSG))
    assert res.status == "ok" and res.cached and res.text == "Paris"
    assert asyncio.run(player.chat([{"role": "user", "content": "unrecorded"}])).status == "error"


def test_kb_store_copy_reopens_by_path(tmp_path):
    path = tmp_path / "kb.sqlite"
    build_kb([Article(url=W + "Eiffel_Tower", title="Eiffel Tower",
                      sections=[Section(index=0, title="Summary", text="A lattice tower in Paris.")])], path)
    with KBStore(path, max_scored=500) as kb:
        twin = copy(kb)
    with twin:  # the original is closed: the copy has its own connection
        assert twin.max_scored == 500 and len(twin) == 1
        assert twin.get(W + "Eiffel_Tower").sections[0].text == "A lattice tower in Paris."
        assert twin.search("lattice tower")[0].url == W + "Eiffel_Tower"


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_image_index_copy_searches_the_same(kind, tmp_path):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((400, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = ImageIndex("enc", 16, kind, nlist=8, nprobe=3, ef_search=32)
    index.add(vecs[:250], [f"{W}A{i % 60}" for i in range(250)])
    index.add(vecs[250:], [f"{W}A{i % 60}" for i in range(250, 400)])  # two chunks: merged when pickled
    queries = vecs[:5] + 0.01
    expected = index.search(queries, k=5)  # builds (trains) the FAISS structure
    twin = copy(index)
    if kind == "flat":
        assert twin._faiss is None  # rebuilt from the vectors on first search
    else:
        assert twin._faiss is not None  # deserialised, not retrained
        assert (twin._faiss.nprobe if kind == "ivf" else twin._faiss.hnsw.efSearch) == (3 if kind == "ivf" else 32)
    assert twin.search(queries, k=5) == expected
    np.testing.assert_array_equal(twin.vectors, index.vectors)
    assert twin.checksum() == index.checksum() and twin.urls == index.urls
    index.save(tmp_path / "idx")
    loaded = copy(ImageIndex.load(tmp_path / "idx"))  # vectors memory-mapped from the .npy
    assert loaded.search(queries, k=5) == expected


def test_text_index_copy_drops_faiss():
    pytest.importorskip("faiss")
    index = TextIndex("emb", 4)
    index.vectors = np.eye(4, dtype=np.float32)
    index.ranges = {W + "A": (0, 2), W + "B": (2, 4)}
    index.section_ids = [0, 1, 0, 1]
    index._reindex()
    q = np.array([0, 0, 1, 0.1], dtype=np.float32)
    expected = index.search(q, k=2)
    assert index._faiss is not None
    twin = copy(index)
    assert twin._faiss is None and twin.search(q, k=2) == expected and twin.search_in(W + "B", q, k=1) == [(0, 1.0)]


def test_context_with_every_resource_pickles(server, tmp_path):
    path = tmp_path / "kb.sqlite"
    build_kb([Article(url=W + "Bee", title="Bee", sections=[Section(index=0, title="S", text="Bees fly.")])], path)
    client = OpenAIChatClient(server.base_url, "fake", cache=ResponseCache(tmp_path / "c.sqlite"))
    ctx = Context(roles={"answerer": client, "verifier": [client]}, kb=KBStore(path),
                  resources={"text_index": TextIndex("emb", 4), "image_root": tmp_path})
    twin = copy(ctx)
    assert twin.kb.get(W + "Bee").title == "Bee"
    assert asyncio.run(twin.role("answerer").chat(MSG)).text == "Paris"
    assert twin.log.name == "kbvqa" and twin.resource("image_root") == tmp_path
    ctx.kb.close()
    twin.kb.close()
