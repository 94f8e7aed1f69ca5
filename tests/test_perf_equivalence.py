"""The fast paths give the same results as the plain ones (issue 17). No timings here: speed is
measured by the scripts in benchmarks/; these tests pin that the faster code changes nothing a
user sees."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest

from kbvqa.data.schema import Article, Section
from kbvqa.kb.importer import build_kb, import_wiki_json
from kbvqa.kb.store import KBStore

W = "https://en.wikipedia.org/wiki/"

# --------------------------------------------------------------------------------------------------
# KB import: sharded FTS build == one-process build

_WORDS = ("tower bridge river castle museum cathedral island lake mountain station palace abbey fort "
          "running runs runner ran built building builds painted painting paintings Zürich Café naïve "
          "résumé Ångström façade über straße Kraków São Paulo 1889 330 metres tall wrought iron lattice "
          "the of and in to a is was for on as with by that from at it were which are be this also").split()


def _articles(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        secs = []
        for j in range(rng.randint(0, 6)):
            text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 60)))
            if rng.random() < 0.1:
                text += " snake_case_word hyphen-ated O'Brien"
            secs.append((rng.choice(["Summary", "History", "Design", "Café"]) if j else "Summary", text))
        title = f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} {i}"
        out.append({"url": W + title.replace(" ", "_"), "title": title,
                    "section_titles": [t for t, _ in secs], "section_texts": [x for _, x in secs],
                    "image_urls": [f"https://upload.wikimedia.org/{i}.jpg"] * rng.randint(0, 2)})
    # duplicates (another spelling of an earlier url): kept out of the index in every mode
    for k in range(0, n, 37):
        dup = dict(out[k], url=out[k]["url"].replace("https://", "http://"), title="dup")
        dup["section_texts"] = ["duplicate text zebra"]
        dup["section_titles"] = ["Dup"]
        out.append(dup)
    return out


def _queries(seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    qs = ["the of and", "Zürich café", "zurich cafe", "run", "paintings built", "snake_case_word",
          "hyphen-ated tower", "o'brien", "ångström façade", "zebra", "1889 330", "what is the tower?"]
    qs += [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 5))) for _ in range(60)]
    return qs


@pytest.fixture(scope="module")
def kb_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("kbshards")
    src = d / "wiki.jsonl"
    src.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in _articles(400)), encoding="utf-8")
    one = import_wiki_json(src, d / "one.sqlite", workers=1, batch_size=50)
    three = import_wiki_json(src, d / "three.sqlite", workers=3, batch_size=7)  # many batches, every shard used
    return d, one, three


def test_sharded_import_counts_and_index_match(kb_pair):
    d, one, three = kb_pair
    assert (three.articles, three.sections, three.duplicates) == (one.articles, one.sections, one.duplicates)
    assert three.workers == 3 and len(three.shard_peak_rss_mb) == 3
    assert one.duplicates > 0
    a, b = sqlite3.connect(d / "one.sqlite"), sqlite3.connect(d / "three.sqlite")
    for db in (a, b):
        db.execute("INSERT INTO fts(fts) VALUES('integrity-check')")  # index == what the content tokenises to
    assert a.execute("SELECT block FROM fts_data WHERE id=1").fetchone() == \
        b.execute("SELECT block FROM fts_data WHERE id=1").fetchone()  # row count and tokens per column
    assert a.execute("SELECT id, sz FROM fts_docsize ORDER BY id").fetchall() == \
        b.execute("SELECT id, sz FROM fts_docsize ORDER BY id").fetchall()
    for table in ("articles", "sections", "term_df"):
        assert a.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() == \
            b.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    # every term's doclist (rowids and positions) is the same: compare via the fts5vocab view
    for db in (a, b):
        db.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, fts, instance)")
    q = "SELECT term, doc, col, offset FROM v ORDER BY term, doc, col, offset"
    assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_sharded_import_search_results_identical(kb_pair):
    d, _, _ = kb_pair
    with KBStore(d / "one.sqlite") as one, KBStore(d / "three.sqlite") as three:
        for small_budget in (False, True):
            if small_budget:  # rare-first planning (AND of rare words, fallbacks) on both
                one.max_scored = three.max_scored = 5
            for q in _queries():
                assert three.search(q, k=10) == one.search(q, k=10), q
            url = next(one.iter_urls())
            assert three.search_in(url, "tower built", k=5) == one.search_in(url, "tower built", k=5)


def test_build_kb_workers_and_bad_workers(tmp_path):
    arts = [Article(url=W + f"A{i}", title=f"A{i}", sections=[Section(index=0, title="S", text=f"word{i % 7} tower")])
            for i in range(50)]
    st1 = build_kb(arts, tmp_path / "a.sqlite")
    st2 = build_kb(arts, tmp_path / "b.sqlite", workers=2, batch_size=10)
    assert st1.workers == 1 and st2.workers == 2 and st2.sections == st1.sections == 50
    with KBStore(tmp_path / "a.sqlite") as a, KBStore(tmp_path / "b.sqlite") as b:
        for q in ("tower", "word3", "word5 tower"):
            assert a.search(q, k=20) == b.search(q, k=20)
    with pytest.raises(ValueError):
        build_kb(arts, tmp_path / "c.sqlite", workers=0)


def test_sharded_import_failure_leaves_nothing(tmp_path):
    p = tmp_path / "bad.jsonl"
    good = json.dumps({"url": W + "A", "title": "A", "section_titles": ["S"], "section_texts": ["x"]})
    p.write_text(good + "\n" + '{"url": 3}\n', encoding="utf-8")
    with pytest.raises(ValueError):
        import_wiki_json(p, tmp_path / "kb.sqlite", workers=2)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad.jsonl"]


# --------------------------------------------------------------------------------------------------
# Composites: the panel cache and the skipped exif copy give byte-identical files

def _decode_before(path, height):
    """kbvqa's decode before issue 17 (every use decoded; exif_transpose always), the reference."""
    from PIL import Image, ImageOps

    from kbvqa.pipelines.augment import composite as comp

    with Image.open(path) as im:
        w, h = im.size
        if im.getexif().get(0x0112, 1) in comp._ROTATED:
            w, h = h, w
        width = max(1, round(w * height / h))
        if im.format == "JPEG":
            im.draft("RGB", (height, 1) if im.getexif().get(0x0112, 1) in comp._ROTATED else (1, height))
        im = ImageOps.exif_transpose(im)
        if im.mode != "RGB":
            im = im.convert("RGB")
        if (width, height) != im.size:
            im = comp.resize_panel(im, (width, height))  # the resampling itself is tested in test_augment_units
        else:
            im.load()
        return im


def test_composites_identical_to_decoding_every_use(tmp_path):
    import numpy as np
    from PIL import Image
    from skimage import data

    from kbvqa.pipelines.augment import composite as comp

    srcs = {}
    for name, arr in (("coffee", data.coffee()), ("chelsea", data.chelsea()), ("rocket", data.rocket()),
                      ("astro", data.astronaut())):
        im = Image.fromarray(arr)
        p = tmp_path / f"{name}.jpg"
        if name == "rocket":
            exif = im.getexif()
            exif[0x0112] = 6
            im.save(p, exif=exif, quality=90)
        elif name == "astro":
            p = tmp_path / "astro.png"
            im.convert("P").save(p)  # palette PNG: converted to RGB
        else:
            im.save(p, quality=90)
        srcs[name] = str(p)
    names = list(srcs)
    style = comp.Style(height=200)
    tasks = []
    for i, a in enumerate(names * 2):  # every image is an anchor twice and a distractor several times
        d, e = names[(i + 1) % 4], names[(i + 2) % 4]
        jobs = (comp.Job(str(tmp_path / "new" / f"{i}_1.jpg"), ("anchor", "d")),
                comp.Job(str(tmp_path / "new" / f"{i}_2.jpg"), ("e", "anchor")),
                comp.Job(str(tmp_path / "new" / f"{i}_3.jpg"), ("anchor", "blank:d")),
                comp.Job(str(tmp_path / "new" / f"{i}_4.jpg"), ("anchor", "anchor")))
        tasks.append(comp.Task({"anchor": srcs[a], "d": srcs[d], "e": srcs[e]}, jobs, style))
    for workers in (1, 2):
        out = comp.run_tasks(tasks, workers)
        assert all(r.status == "saved" for rs in out for r in rs)
        for t in tasks:
            for j in t.jobs:
                panels = []
                for p in j.panels:
                    if p.startswith("blank:"):
                        panels.append(Image.new("RGB", _decode_before(t.images[p[6:]], 200).size, style.blank_colour))
                    else:
                        panels.append(_decode_before(t.images[p], 200))
                size, pos = comp.layout([x.size for x in panels], "row", 0, 0)
                canvas = Image.new("RGB", size, style.background)
                for x, xy in zip(panels, pos):
                    canvas.paste(x, xy)
                ref = tmp_path / "ref.jpg"
                canvas.save(ref, "JPEG", quality=95)
                got = Path(j.out_path).read_bytes()
                assert got == ref.read_bytes(), j.out_path
                assert np.abs(np.asarray(Image.open(j.out_path), dtype=int)
                              - np.asarray(Image.open(ref), dtype=int)).mean() == 0
    assert comp._PANELS.bytes == 0  # the in-process run keeps nothing afterwards


def test_panel_cache_bounded_and_sees_changed_files(tmp_path):
    from PIL import Image

    from kbvqa.pipelines.augment import composite as comp

    cache = comp.PanelCache(max_bytes=100 * 100 * 3 * 2)  # room for two 100x100 panels
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.png"
        Image.new("RGB", (50, 50), (i * 40, 0, 0)).save(p)
        paths.append(str(p))
    a = cache.get(paths[0], 100)
    assert cache.get(paths[0], 100) is a and cache.hits == 1
    cache.get(paths[1], 100)
    cache.get(paths[2], 100)  # evicts the least recently used
    assert cache.bytes <= cache.max_bytes and len(cache._items) == 2
    Image.new("RGB", (60, 50), (0, 255, 0)).save(paths[2])  # the file changes on disk
    assert cache.get(paths[2], 100).size == (120, 100)


# --------------------------------------------------------------------------------------------------
# InfoSeek normalisation: the fast path == the regex rule on any text

def _infoseek_normalize_before(text: str) -> str:
    import re
    import string

    return " ".join(re.sub(r"\b(a|an|the)\b", " ",
                           text.lower().translate(str.maketrans("", "", string.punctuation))).split())


def test_infoseek_normalize_fast_path_matches_rule():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kbvqa.evaluate.normalize import infoseek_normalize

    fixed = ["The U.S.  Army", "a\x00b the", "an\tapple", "x_the_y", "THE", "¿Qué?", "rock ’n’ roll", "2a the b",
             "", "   ", "a", "the the", "A-an-THE", "o'the", "an\x1cthe x", "Ünïcode the Café", "1,234.5 m"]
    for t in fixed:
        assert infoseek_normalize(t) == _infoseek_normalize_before(t), t

    pieces = st.sampled_from(list("aAnNtThHeE -.,_'\t\n\x00\x1c09é’") + ["the", "an", " a ", "The "])

    @settings(max_examples=400, deadline=None)
    @given(st.lists(pieces, max_size=15).map("".join) | st.text(max_size=20))
    def check(t):
        assert infoseek_normalize(t) == _infoseek_normalize_before(t)

    check()


def test_norm_memo_gives_the_rule_and_stops_remembering_at_its_cap():
    from kbvqa.evaluate.normalize import NormMemo, infoseek_normalize

    memo = NormMemo(infoseek_normalize, cap=2)
    texts = ["The U.S. Army", "an Apple", "The U.S. Army", "Paris.", "Lyon!"]
    assert [memo[t] for t in texts] == [infoseek_normalize(t) for t in texts]
    assert list(memo) == ["The U.S. Army", "an Apple"]  # the first two distinct texts, no more


def test_gc_paused_restores_the_collector_even_on_errors():
    import gc

    from kbvqa.data.jsonl import gc_paused

    assert gc.isenabled()

    @gc_paused()
    def load(fail: bool) -> bool:
        with gc_paused():  # nested: the inner exit must not switch it back on early
            pass
        if fail:
            raise ValueError("bad line")
        return gc.isenabled()

    assert load(False) is False and gc.isenabled()
    with pytest.raises(ValueError):
        load(True)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that had it off keeps it off
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# --------------------------------------------------------------------------------------------------
# The model client's plain-http transport: HTTP/1.1 forms a server may answer with

import asyncio  # noqa: E402
import gzip  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

_OK_BODY = json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": "fine"}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


class _RawServer:
    """A socket server answering each request with the next scripted raw reply; `close_after`
    replies close the connection; counts connections."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        buf = b""
        with c:
            while self.replies:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                n = int([x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")][0].split(b":")[1])
                while len(rest) < n:
                    rest += c.recv(65536)
                buf = rest[n:]
                raw, close = self.replies.pop(0)
                c.sendall(raw)
                if close:
                    return

    def close(self):
        self.sock.close()


def _chunked(body: bytes) -> bytes:
    parts = [body[:10], body[10:]]
    out = b"".join(b"%x;ext=1\r\n" % len(p) + p + b"\r\n" for p in parts)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n" + out + \
        b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.mark.parametrize("raw,close", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(_OK_BODY) + _OK_BODY, False),
    (_chunked(_OK_BODY), False),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(_OK_BODY) + _OK_BODY, False),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(gzip.compress(_OK_BODY))
     + gzip.compress(_OK_BODY), False),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(_OK_BODY) + _OK_BODY, True),
    (b"HTTP/1.0 200 OK\r\n\r\n" + _OK_BODY, True),  # no length: the body ends when the server closes
])
def test_plain_http_transport_reply_forms(raw, close):
    from kbvqa.models.client import OpenAIChatClient, _fast_path

    srv = _RawServer([(raw, close)] * 3)
    try:
        url = f"http://127.0.0.1:{srv.port}/v1"
        assert _fast_path(url) is not None

        async def go():
            async with OpenAIChatClient(url, "m", concurrency=2, max_retries=0) as c:
                return [await c.chat([{"role": "user", "content": f"q{i}"}]) for i in range(3)]

        rs = asyncio.run(go())
        assert [r.status for r in rs] == ["ok"] * 3, [r.reason for r in rs]
        assert rs[0].text == "fine" and rs[0].usage.prompt_tokens == 3 and rs[0].usage.calls == 1
        assert srv.connections == (3 if close else 1)  # keep-alive reuse unless the server closes
    finally:
        srv.close()


def test_plain_http_transport_survives_idle_close_and_reports_disconnects():
    from kbvqa.models.client import OpenAIChatClient

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(_OK_BODY) + _OK_BODY
    # 1st reply then the server drops that idle connection; 2nd request must open a new one.
    # 3rd: the server closes without answering -> a connection error (retried once: 4th is ok)
    srv = _RawServer([(ok, True), (ok, False), (b"", True), (ok, False)])
    try:
        async def go():
            async with OpenAIChatClient(f"http://127.0.0.1:{srv.port}", "m", concurrency=1, max_retries=1,
                                        backoff_base=0.01) as c:
                first = await c.chat([{"role": "user", "content": "a"}])
                await asyncio.sleep(0.1)  # the close reaches the client while the connection is idle
                second = await c.chat([{"role": "user", "content": "b"}])
                third = await c.chat([{"role": "user", "content": "c"}])
                return first, second, third

        a, b, c = asyncio.run(go())
        assert a.status == b.status == "ok"
        assert c.status == "ok" and c.usage.calls == 2  # one failed attempt, then the retry
    finally:
        srv.close()


def test_transport_choice_follows_scheme_and_proxy_env(monkeypatch):
    from kbvqa.models.client import _fast_path

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    assert _fast_path("http://127.0.0.1:8000/v1") is not None
    assert _fast_path("https://api.example.com/v1") is None  # certificates: httpx
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert _fast_path("http://10.1.2.3:8000/v1") is None  # httpx honours the proxy
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    assert _fast_path("http://10.1.2.3:8000/v1") is not None


def test_sharded_build_with_idle_shards_and_unknown_format_fallback(tmp_path, monkeypatch):
    from kbvqa.kb import importer

    arts = [Article(url=W + f"B{i}", title=f"B{i}", sections=[Section(index=0, title="S", text=f"alpha beta{i}")])
            for i in range(5)]
    build_kb(arts, tmp_path / "one.sqlite")
    build_kb(arts, tmp_path / "idle.sqlite", workers=3)  # one batch: two shards index nothing
    real = importer._parse_structure

    def refuse(block):
        if len(block) > 7:  # a shard's (non-empty) structure: pretend its layout is unknown
            raise importer._FormatUnknown("test")
        return real(block)

    monkeypatch.setattr(importer, "_parse_structure", refuse)
    build_kb(arts, tmp_path / "fallback.sqlite", workers=2, batch_size=2)
    with KBStore(tmp_path / "one.sqlite") as a:
        for other in ("idle.sqlite", "fallback.sqlite"):
            with KBStore(tmp_path / other) as b:
                for q in ("alpha", "beta3", "alpha beta1"):
                    assert a.search(q) == b.search(q)
