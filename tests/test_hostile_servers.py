"""What a server sends back, against the byte caps: compressed bodies the client did not ask for,
stacked encodings and decompression bombs (1 GiB of zeros from ~2.5 KB on the wire), for the guarded
fetcher (pages and images), the web search API client and both transports of the model client.

Peak memory is measured where it cannot be confused by the test process: a child Python runs the
client against the local servers here and reports its ru_maxrss growth."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from fake_llm_server import FakeLLMServer, Reply
from fake_web_server import (MiB, FakeWebServer, Resp, compressed, encode, gzip_bomb, json_resp, loopback_only,
                             raw_deflate_zeros, zlib_bomb)

from kbvqa.data.fetch import CappedBody, GuardedFetcher, _brotli_module, accept_encoding
from kbvqa.models.client import OpenAIChatClient

GIB = 1 << 30
HTML = "<html><head><title>t</title></head><body><p>" + "hello world " * 500 + "</p></body></html>"
KEY_ENV = "KBVQA_TEST_SERPER_KEY"
GROWTH_LIMIT = 100 * MiB

# the child: import everything first (the baseline includes the libraries), then run each scenario
CHILD = r'''
import asyncio, json, resource, sys

import aiohttp  # noqa: F401
from kbvqa.data.fetch import GuardedFetcher
from kbvqa.models import client as mc
from kbvqa.tools.base import EpisodeInfo, SearchArgs
from kbvqa.tools.web import WebTools


def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


async def fetch(a):
    f = GuardedFetcher(allow_hosts=("127.0.0.1",), max_bytes=a["cap"], retries=0)
    try:
        r = await f.fetch(a["url"], accept=a.get("accept"))
        return {"status": r.status, "reason": r.reason, "bytes": len(r.content)}
    finally:
        await f.aclose()


async def llm(a):
    if a["kind"] == "llm_httpx":
        mc._fast_path = lambda url: None  # plain http through httpx, as https servers are
    c = mc.OpenAIChatClient(a["url"], "m", max_retries=0, max_reply_bytes=a["cap"])
    try:
        r = await c.chat([{"role": "user", "content": "hi"}])
        return {"status": r.status, "reason": r.reason, "transport": type(c._pools[0]).__name__}
    finally:
        await c.aclose()


async def web(a):
    t = WebTools(base_url=a["url"], api_key_env="KBVQA_TEST_SERPER_KEY", max_api_bytes=a["cap"], retries=0)
    try:
        r = await t.search(SearchArgs(query="q"), EpisodeInfo(record_id="r"), None)
        return {"status": r.status, "reason": r.reason}
    finally:
        await t.aclose()


base = peak()
out = []
for a in json.loads(sys.argv[1]):
    r = asyncio.run({"fetch": fetch, "llm": llm, "llm_httpx": llm, "web": web}[a["kind"]](a))
    r["growth"] = peak() - base
    out.append(r)
print(json.dumps(out))
'''


def run_child(scenarios: list[dict]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env[KEY_ENV] = "sk-test-123"
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(scenarios)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def twice_gzipped_bomb(n: int = GIB, **kw) -> Resp:
    """n zero bytes gzipped twice, declared as such: ~2.5 KB on the wire for 1 GiB."""
    return Resp(body=encode(gzip_bomb(n), "gzip"), headers={"Content-Encoding": "gzip, gzip"}, **kw)


@pytest.fixture
def srv():
    with FakeWebServer() as s:
        yield s


# -- the bombs are what they claim -------------------------------------------------------------------
def test_the_bombs_are_valid_streams_of_the_size_they_claim():
    import gzip
    import zlib

    assert gzip.decompress(gzip_bomb(3 * MiB)) == bytes(3 * MiB)
    assert zlib.decompress(zlib_bomb(2 * MiB)) == bytes(2 * MiB)
    assert zlib.decompress(raw_deflate_zeros(2 * MiB), -zlib.MAX_WBITS) == bytes(2 * MiB)
    # the 1 GiB ones are the same unit repeated 1024 times: ~1 MB, and ~2.5 KB once gzipped again
    assert len(gzip_bomb(GIB)) < 1.1e6 and len(encode(gzip_bomb(GIB), "gzip")) < 4000
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)  # spot check: the first 64 MiB really come out
    assert len(d.decompress(gzip_bomb(GIB)[:70_000], 64 * MiB)) == 64 * MiB


# -- the decoder itself --------------------------------------------------------------------------------
@pytest.mark.parametrize("codings", [(), ("gzip",), ("deflate",), ("raw-deflate",), ("gzip", "gzip"),
                                     ("deflate", "gzip"), ("gzip", "raw-deflate", "gzip")])
def test_capped_body_decodes_every_supported_stack(codings):
    data = HTML.encode() * 20
    wire = encode(data, *codings)
    body = CappedBody(", ".join("deflate" if c == "raw-deflate" else c for c in codings), 10 * MiB)
    for i in range(0, len(wire), 1000):  # as it arrives: in small pieces
        body.feed(wire[i:i + 1000])
    assert body.content() == data


def test_capped_body_stops_a_bomb_at_the_cap_in_process():
    body = CappedBody(["gzip", "gzip"], 2 * MiB)
    with pytest.raises(Exception, match="2097152-byte cap.*decoded from Content-Encoding gzip, gzip"):
        body.feed(encode(gzip_bomb(GIB), "gzip"))
    assert len(body.content()) <= 2 * MiB


# -- the guarded fetcher (pages and images) ------------------------------------------------------------
def fetch(url, **kw):
    accept = kw.pop("accept", None)

    async def go():
        f = GuardedFetcher(**{"allow_hosts": ("127.0.0.1",), "backoff": 0.01, **kw})
        try:
            return await f.fetch(url, accept=accept)
        finally:
            await f.aclose()

    return asyncio.run(go())


class TestFetcherInProcess:
    @pytest.fixture(autouse=True)
    def _only_loopback(self, monkeypatch):
        yield from loopback_only(monkeypatch)

    def test_a_server_that_compresses_anyway_is_decoded(self, srv):
        srv.route("/gz", compressed(Resp(body=HTML), "gzip"))
        srv.route("/gz2", compressed(Resp(body=HTML), "gzip", "gzip"))
        srv.route("/raw", compressed(Resp(body=HTML), "raw-deflate"))
        for path in ("/gz", "/gz2", "/raw"):
            r = fetch(srv.url(path))
            assert r.status == "ok" and r.text == HTML, (path, r.reason)
        assert srv.hits("/gz")[0]["headers"]["accept-encoding"] == "identity"  # asked for none

    def test_bombs_end_too_large_with_the_encoding_named(self, srv):
        srv.route("/gz2", twice_gzipped_bomb())
        srv.route("/deflate", Resp(body=zlib_bomb(GIB), headers={"Content-Encoding": "deflate"}))
        r = fetch(srv.url("/gz2"), max_bytes=1 * MiB)
        assert r.status == "too_large" and "decoded from Content-Encoding gzip, gzip" in r.reason and not r.content
        r = fetch(srv.url("/deflate"), max_bytes=5 * MiB)  # ~1 MB on the wire: within the cap until inflated
        assert r.status == "too_large" and "deflate" in r.reason

    def test_unknown_or_broken_encodings_are_refused_with_a_reason(self, srv):
        srv.route("/zstd", Resp(body=b"\x28\xb5\x2f\xfd", headers={"Content-Encoding": "zstd"}))
        srv.route("/broken", Resp(body=b"\x1f\x8b\x08\x00garbage-not-gzip", headers={"Content-Encoding": "gzip"}))
        r = fetch(srv.url("/zstd"))
        assert r.status == "bad_encoding" and "'zstd' is not decoded" in r.reason and r.attempts == 1
        r = fetch(srv.url("/broken"))
        assert r.status == "bad_encoding" and "gzip body does not decode" in r.reason

    def test_brotli_is_decoded_under_the_cap_only_when_bounded_brotli_is_installed(self, srv):
        srv.route("/br", compressed(Resp(body=HTML), "br") if _brotli_module() else
                  Resp(body=b"\x0b", headers={"Content-Encoding": "br"}))
        r = fetch(srv.url("/br"))
        if _brotli_module() is None:
            assert "br" not in accept_encoding() and r.status == "bad_encoding"
            return
        assert r.status == "ok" and r.text == HTML and "br" in accept_encoding()
        srv.route("/brbomb", compressed(Resp(body=bytes(64 * MiB)), "br"))
        r = fetch(srv.url("/brbomb"), max_bytes=1 * MiB)
        assert r.status == "too_large" and "br" in r.reason

    def test_an_image_download_is_capped_after_decoding_too(self, srv):
        srv.route("/img.jpg", twice_gzipped_bomb(64 * MiB, content_type="image/jpeg"))
        r = fetch(srv.url("/img.jpg"), accept=("image/*",), max_bytes=2 * MiB)
        assert r.status == "too_large" and "gzip, gzip" in r.reason


def test_fetcher_peak_memory_stays_near_the_cap_for_1_gib_bombs(srv):
    srv.route("/gzip2", twice_gzipped_bomb())  # 1 GiB from ~2.5 KB
    srv.route("/deflate", Resp(body=zlib_bomb(GIB), headers={"Content-Encoding": "deflate"}))
    srv.route("/raw", Resp(body=raw_deflate_zeros(GIB), headers={"Content-Encoding": "deflate"}))
    srv.route("/stacked", Resp(body=encode(zlib_bomb(GIB), "gzip"), headers={"Content-Encoding": "deflate, gzip"}))
    srv.route("/image", twice_gzipped_bomb(content_type="image/png"))
    out = run_child([{"kind": "fetch", "url": srv.url(p), "cap": 5_000_000} for p in
                     ("/gzip2", "/deflate", "/raw", "/stacked")]
                    + [{"kind": "fetch", "url": srv.url("/image"), "cap": 10_000_000, "accept": ["image/*"]}])
    for path, r in zip(("/gzip2", "/deflate", "/raw", "/stacked", "/image"), out):
        assert r["status"] == "too_large" and "cap" in r["reason"], (path, r)
        assert r["growth"] < GROWTH_LIMIT, (path, r["growth"] / MiB)


# -- the web search API client -------------------------------------------------------------------------
def test_search_api_bomb_is_an_error_and_memory_stays_flat(srv):
    srv.route("/search", twice_gzipped_bomb(content_type="application/json"))
    srv.route("/ok/search", compressed(json_resp({"organic": [{"title": "t", "link": "https://e.org/",
                                                                "snippet": "s"}]}), "gzip"))
    out = run_child([{"kind": "web", "url": srv.base_url, "cap": 2_000_000},
                     {"kind": "web", "url": srv.url("/ok"), "cap": 2_000_000}])
    bomb, fine = out
    assert bomb["status"] == "error" and "was refused" in bomb["reason"] and "2000000-byte cap" in bomb["reason"]
    assert fine["status"] == "ok"  # a gzip reply within the cap is read as usual
    assert max(bomb["growth"], fine["growth"]) < GROWTH_LIMIT, bomb["growth"] / MiB
    assert "sk-test-123" not in json.dumps(out)


# -- the model client, on both transports ----------------------------------------------------------------
def test_model_reply_bombs_are_errors_on_both_transports_and_memory_stays_flat():
    bomb = Reply(raw_body=encode(gzip_bomb(GIB), "gzip"), headers={"Content-Encoding": "gzip, gzip"})
    with FakeLLMServer(default=bomb) as s:
        out = run_child([{"kind": k, "url": s.base_url, "cap": 4_000_000} for k in ("llm", "llm_httpx")])
        assert s.count == 2  # an over-cap reply is not retried
    assert [r["transport"] for r in out] == ["_AiohttpPool", "AsyncClient"]
    for r in out:
        assert r["status"] == "error" and "reply refused" in r["reason"] and "4000000-byte cap" in r["reason"], r
        assert "max_reply_bytes = 4000000" in r["reason"] and r["growth"] < GROWTH_LIMIT, r["growth"] / MiB


def _chat(srv: FakeLLMServer, httpx_path: bool, monkeypatch, **kw):
    from kbvqa.models import client as mc

    if httpx_path:
        monkeypatch.setattr(mc, "_fast_path", lambda url: None)

    async def go():
        async with OpenAIChatClient(srv.base_url, "m", max_retries=0, **kw) as c:
            return await c.chat([{"role": "user", "content": "hi"}])

    return asyncio.run(go())


@pytest.mark.parametrize("httpx_path", [False, True])
def test_model_replies_decoded_capped_and_refused_by_content_length(httpx_path, monkeypatch):
    payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
    with FakeLLMServer() as s:
        s.push(Reply(raw_body=encode(payload, "deflate", "gzip"), headers={"Content-Encoding": "deflate, gzip"}))
        r = _chat(s, httpx_path, monkeypatch)
        assert r.status == "ok" and r.text == "Paris", r.reason
        assert s.last()["headers"].get("Accept-Encoding") == accept_encoding()  # only what kbvqa can decode
        s.push(Reply(raw_body=b'{"choices": [{"message": {"content": "' + b"x" * 300_000 + b'"}}]}'))
        r = _chat(s, httpx_path, monkeypatch, max_reply_bytes=100_000)
        assert r.status == "error" and "Content-Length" in r.reason and "cap 100000" in r.reason
        s.push(Reply(raw_body=b"\x00\x01", headers={"Content-Encoding": "zstd"}))
        r = _chat(s, httpx_path, monkeypatch)
        assert r.status == "error" and "unreadable reply" in r.reason and "zstd" in r.reason


def test_reply_cap_is_a_role_setting():
    from kbvqa.models.config import RoleConfig, _build_one

    rc = RoleConfig(backend="openai", base_url="http://127.0.0.1:1/v1", model="m", max_reply_bytes=1234)
    assert _build_one("judge", rc, None, {}).max_reply_bytes == 1234
    rc = RoleConfig(backend="openai", base_url="http://127.0.0.1:1/v1", model="m")
    assert _build_one("judge", rc, None, {}).max_reply_bytes == 4 * MiB  # a 10 MB reply is refused


# -- reference harvest: hostile image references and image bombs ------------------------------------------
@pytest.fixture
def only_loopback(monkeypatch):
    yield from loopback_only(monkeypatch)


def test_harvest_drops_non_http_references_and_caps_image_bombs(tmp_path, srv, only_loopback):
    from kbvqa.pipelines.reference import ReferenceConfig, reference_context, stage_job
    from kbvqa.pipelines.reference.harvest import HarvestConfig, LoopFetcher, pre_gate
    from kbvqa.runner import read_results

    block = __import__("re").compile(r"(?!)")
    for ref in ("javascript:alert(1)", "file:/etc/passwd", "file:///etc/passwd", "ftp://x.org/a.jpg",
                "vbscript:msgbox", "//cdn.example.org/a.jpg"):
        assert pre_gate(ref, block, remote_allowed=True) == "bad_url", ref
    assert pre_gate(r"C:\images\a.jpg", block, remote_allowed=True) is None  # a drive letter is a path

    srv.route("/page", Resp(body='<p>x</p><img src="/bomb.png"> <img src="javascript:alert(1)">'))
    srv.route("/bomb.png", twice_gzipped_bomb(content_type="image/png"))
    cfg = ReferenceConfig(harvest=HarvestConfig(backend="web", page_source="html"))  # the page read as HTML
    ctx = reference_context(tmp_path, cfg, fetcher=LoopFetcher(allow_hosts=["127.0.0.1"], retries=0, max_bytes=MiB))
    pool = ["file:///etc/passwd", "file:/etc/passwd", "javascript:alert(document.domain)",
            "data:image/svg+xml;base64,PHN2Zz4=", "/etc/passwd"]
    rec = {"id": "h", "urls": {"selected": [{"url": srv.url("/page"), "rank": 1}],
                               "image_results": [{"image": p, "page_url": "https://e.org/"} for p in pool]}}
    stage_job("harvest", cfg, ctx).run([rec], out=tmp_path / "h.jsonl", progress=False)
    (line,) = read_results(tmp_path / "h.jsonl")
    assert line["status"] == "ok", line.get("reason")
    assert line["funnel"]["harvest"]["dropped"] == {"bad_url": 4, "data_uri": 1, "outside_image_root": 1,
                                                    "too_large": 1}
    assert line["harvest"]["candidates"] == [] and len(srv.hits("/bomb.png")) == 1
