"""The `web` tool backend against a fake Serper-compatible API and page server on 127.0.0.1 (the
`loopback_only` fixture fails any test that connects or resolves anything else)."""

from __future__ import annotations

import asyncio

import pytest
from fake_web_server import FakeWebServer, Resp, json_resp, loopback_only, redirect

from kbvqa.data.urls import canonical_url
from kbvqa.runner.stage import Context
from kbvqa.tools import TOOL_BACKENDS
from kbvqa.tools.base import (VISIT_HEADER, EpisodeInfo, ImageSearchArgs, SearchArgs, TextToImageSearchArgs,
                              VisitArgs, item_id)
from kbvqa.tools.toolbox import Toolbox
from kbvqa.tools.web import WebTools, WebToolsConfigError, html_to_page

KEY_ENV = "KBVQA_TEST_SERPER_KEY"
EP = EpisodeInfo(record_id="r1", question="What is this building?")
PAGE = """<html><head><title>Edificio España</title>
<meta property="og:image" content="/img/espana.jpg">
<script>var secret = "tracking code that must not be read";</script><style>p {color: red}</style></head>
<body><nav>Home | About | Login</nav><svg><title>menu icon</title></svg>
<h1>Edificio España</h1>
<p>Edificio España is a skyscraper in Madrid. It was completed in 1953 and is 117 metres tall.</p>
<p>The building stands on the Plaza de España.</p>
<footer>Cookie settings</footer></body></html>"""


@pytest.fixture(autouse=True)
def _only_loopback(monkeypatch):
    yield from loopback_only(monkeypatch)


@pytest.fixture
def srv(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)  # the API client honours proxies; the fake API is local
    with FakeWebServer() as s:
        yield s


def run(tools: WebTools, coro):
    async def go():
        try:
            return await coro
        finally:
            await tools.aclose()

    return asyncio.run(go())


def web(srv: FakeWebServer, **kw) -> WebTools:
    return WebTools(**{"base_url": srv.base_url, "api_key_env": KEY_ENV, "allow_hosts": ("127.0.0.1",),
                       "backoff": 0.01, **kw})


def organic(q: str, n: int = 3) -> dict:
    return {"organic": [{"title": f"{q} {i}", "link": f"https://example.org/{i}?q=1", "snippet": f"snippet {i}",
                         "position": i + 1} for i in range(n)]}


def test_search_ok_with_ids_ranks_key_header_and_body(srv):
    srv.route("/search", lambda req: json_resp(organic(req["json"]["q"])))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query=["edificio españa", "plaza de españa"]), EP, None))
    assert r.status == "ok" and len(r.items) == 6
    assert [it.rank for it in r.items] == [1, 2, 3, 1, 2, 3]
    assert r.items[0].id == item_id(canonical_url("https://example.org/0?q=1"))
    assert r.items[0].url == "https://example.org/0?q=1" and r.items[0].text == "snippet 0"
    hits = srv.hits("/search")
    assert hits[0]["headers"]["x-api-key"] == "sk-test-123"
    assert {h["json"]["q"] for h in hits} == {"edificio españa", "plaza de españa"}
    assert hits[0]["json"] | {"q": None} == {"q": None, "num": 10, "gl": "us", "hl": "en"}


def test_search_cjk_query_switches_locale(srv):
    srv.route("/search", lambda req: json_resp(organic(req["json"]["q"], 1)))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query=["故宫 建于哪一年", "Forbidden City"]), EP, None))
    bodies = {h["json"]["q"]: h["json"] for h in srv.hits("/search")}
    assert bodies["故宫 建于哪一年"]["gl"] == "cn" and bodies["故宫 建于哪一年"]["hl"] == "zh-cn"
    assert bodies["Forbidden City"]["gl"] == "us" and bodies["Forbidden City"]["hl"] == "en"
    assert r.provenance["locales"] == {"故宫 建于哪一年": "zh-cn", "Forbidden City": "en"}


def test_search_empty(srv):
    srv.route("/search", json_resp({"organic": []}))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query="nothing here"), EP, None))
    assert r.status == "empty" and r.items == []


def test_search_429_then_200_is_retried(srv):
    srv.route("/search", Resp(429, headers={"Retry-After": "0"}), json_resp(organic("q")))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "ok" and len(srv.hits("/search")) == 2


def test_search_persistent_429_is_quota(srv):
    srv.route("/search", Resp(429, "slow down", "text/plain"))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "quota" and "429" in r.reason and "after 4 attempts" in r.reason
    assert len(srv.hits("/search")) == 4  # retries ×3


def test_search_500_is_error_with_the_http_status(srv):
    srv.route("/search", Resp(500, "boom", "text/plain"))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "error" and "HTTP 500" in r.reason and len(srv.hits("/search")) == 4
    srv.route("/search", json_resp({"message": "Unauthorized."}, 403))
    t = web(srv)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "error" and "HTTP 403" in r.reason  # not retried: a 403 is an answer


def test_search_partial_failure_keeps_results_and_says_which_failed(srv):
    srv.route("/search", lambda req: json_resp(organic("x")) if req["json"]["q"] == "good" else Resp(500))
    t = web(srv, retries=0)
    r = run(t, t.search(SearchArgs(query=["good", "bad"]), EP, None))
    assert r.status == "ok" and {it.query for it in r.items} == {"good"}
    assert "'bad'" in r.reason and "bad" in r.provenance["failed_queries"]


def test_html_to_page_drops_boilerplate_and_reads_og_image():
    page = html_to_page(PAGE, "https://es.example.org/wiki/x")
    assert page.title == "Edificio España"
    assert page.image == "https://es.example.org/img/espana.jpg"
    assert "117 metres" in page.text and "Edificio España" in page.text.splitlines()
    for junk in ("tracking code", "color: red", "Home | About", "Cookie settings", "menu icon"):
        assert junk not in page.text


def test_visit_one_good_one_blocked(srv):
    srv.route("/page", Resp(body=PAGE))
    srv.route("/to-metadata", redirect("http://169.254.169.254/latest/meta-data/"))
    t = web(srv)
    good, bad = srv.url("/page"), srv.url("/to-metadata")
    r = run(t, t.visit(VisitArgs(url=[good, bad], goal="how tall is Edificio España"), EP, None))
    assert r.status == "ok"
    ok_item, blocked = r.items
    assert ok_item.error is None and ok_item.rank == 1 and ok_item.id == item_id(canonical_url(good))
    assert ok_item.text.startswith(VISIT_HEADER.format(url=good, goal="how tall is Edificio España"))
    assert "117 metres" in ok_item.text and "tracking code" not in ok_item.text
    assert ok_item.image == srv.url("/img/espana.jpg") and ok_item.title == "Edificio España"
    assert blocked.error.startswith("blocked:") and "169.254.169.254" in blocked.error and blocked.text == ""
    pages = r.provenance["pages"]
    assert pages[1]["status"] == "blocked" and pages[1]["redirects"] == ["http://169.254.169.254/latest/meta-data/"]


def test_visit_all_failed_is_error(srv):
    srv.route("/to-metadata", redirect("http://169.254.169.254/"))
    srv.route("/binary", Resp(body=b"\x00", content_type="application/octet-stream"))
    t = web(srv)
    r = run(t, t.visit(VisitArgs(url=[srv.url("/to-metadata"), "file:///etc/passwd", srv.url("/binary"),
                                      srv.url("/missing")], goal="g"), EP, None))
    assert r.status == "error" and all(it.error for it in r.items)
    assert [it.error.split(":")[0] for it in r.items] == ["blocked", "blocked", "bad_type", "http_error"]
    assert "file:///etc/passwd" in r.reason


def test_visit_through_the_toolbox_renders_errors_as_errors(srv):
    srv.route("/page", Resp(body=PAGE))
    t = web(srv)
    box = Toolbox(t)
    args = {"url": [srv.url("/page"), "http://10.0.0.7/admin"], "goal": "how tall is the building in metres"}
    parsed = box.parse("visit", args)
    r = run(t, box.call("visit", *parsed, EP, Context()))
    assert r.status == "ok" and "117 metres" in r.text
    assert "[visit: error] the page http://10.0.0.7/admin could not be read: blocked" in r.text


def test_visit_via_scrape(srv):
    srv.route("/scrape", json_resp({"text": "Edificio España is 117 metres tall. It is in Madrid.",
                                    "metadata": {"title": "Edificio", "og:image": "https://img.example/e.jpg"}}))
    t = web(srv, visit_via="scrape", scrape_url=srv.url("/scrape"))
    r = run(t, t.visit(VisitArgs(url=["https://es.example.org/e", "http://192.168.0.1/"], goal="how tall"), EP, None))
    assert r.status == "ok" and "117 metres" in r.items[0].text and r.items[0].image == "https://img.example/e.jpg"
    assert r.items[1].error.startswith("blocked:") and len(srv.hits("/scrape")) == 1  # private URL never sent
    assert srv.hits("/scrape")[0]["json"] == {"url": "https://es.example.org/e"}


def test_image_search_needs_a_public_image_url(srv):
    t = web(srv)
    r = run(t, t.image_search(ImageSearchArgs(), EP, None))
    assert r.status == "error" and "public URL" in r.reason
    t = web(srv)
    r = run(t, t.image_search(ImageSearchArgs(), EP.model_copy(update={"image_url": "http://10.0.0.1/q.jpg"}), None))
    assert r.status == "error" and "not public" in r.reason
    assert srv.hits("/lens") == []


def test_image_search_with_a_public_url(srv):
    rows = [{"title": f"match {i}", "source": "example.org", "link": f"https://example.org/{i}",
             "imageUrl": f"https://img.example.org/{i}.jpg"} for i in range(3)]
    srv.route("/lens", json_resp({"organic": rows}))
    t = web(srv)
    ep = EP.model_copy(update={"image_url": "https://cdn.example.org/query.jpg"})
    r = run(t, t.image_search(ImageSearchArgs(goal="identify"), ep, None))
    assert r.status == "ok" and [it.rank for it in r.items] == [1, 2, 3]
    assert r.items[0].id == item_id("https://img.example.org/0.jpg") and r.items[0].kind == "image"
    assert srv.hits("/lens")[0]["json"] == {"url": "https://cdn.example.org/query.jpg", "gl": "us", "hl": "en"}


def test_text_to_image_search_capped_at_five_distinct(srv):
    rows = [{"title": f"img {i}", "imageUrl": f"https://img.example.org/{i % 7}.jpg", "link": f"https://p.example/{i}",
             "source": "p.example"} for i in range(9)]
    rows.insert(1, dict(rows[0]))  # a duplicate image is not a new index
    srv.route("/images", json_resp({"images": rows}))
    t = web(srv)
    r = run(t, t.text_to_image_search(TextToImageSearchArgs(query="Edificio España"), EP, None))
    assert r.status == "ok" and [it.rank for it in r.items] == [1, 2, 3, 4, 5]
    assert len({it.image for it in r.items}) == 5 and all(it.query == "Edificio España" for it in r.items)
    assert srv.hits("/images")[0]["json"]["q"] == "Edificio España"


def test_text_to_image_search_empty(srv):
    srv.route("/images", json_resp({"images": []}))
    t = web(srv)
    assert run(t, t.text_to_image_search(TextToImageSearchArgs(query="x"), EP, None)).status == "empty"


def test_missing_key_is_a_clear_error_at_construction(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(WebToolsConfigError, match=KEY_ENV):
        TOOL_BACKENDS.get("web")(api_key_env=KEY_ENV)
    monkeypatch.setenv(KEY_ENV, "k")
    with pytest.raises(WebToolsConfigError, match="visit_via"):
        WebTools(api_key_env=KEY_ENV, visit_via="browser")


def test_describe_names_the_variable_never_the_key(srv):
    t = web(srv)
    d = t.describe()
    assert d["api_key_env"] == KEY_ENV and d["base_url"] == srv.base_url and d["visit_via"] == "fetch"
    assert "sk-test-123" not in repr(d) and "sk-test-123" not in repr(t)
    asyncio.run(t.aclose())


def test_search_api_timeout_is_retried_then_error(srv):
    srv.route("/search", Resp(delay=0.4, body="{}", content_type="application/json"))
    t = web(srv, timeout=0.1, retries=1)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "error" and "timed out" in r.reason and len(srv.hits("/search")) == 2


# -- hostile servers: echoed keys, unfetchable image results ----------------------------------------
def _echo_key(status: int):
    """A gateway that quotes the request headers back in its error body (some proxies do)."""
    def handler(req):
        h = req["headers"]
        return json_resp({"error": "denied", "received_headers": {"X-API-KEY": h.get("x-api-key"),
                                                                   "Authorization": h.get("authorization")},
                          "hint": f"key {h.get('x-api-key')} is not valid"}, status)
    return handler


@pytest.mark.parametrize("status", [401, 500])
def test_an_echoed_key_never_reaches_the_result_or_the_model(srv, status):
    srv.route("/search", _echo_key(status))
    t = web(srv, retries=0)
    box = Toolbox(t)
    r = run(t, box.call("search", *box.parse("search", {"query": ["q"]}), EP, Context()))
    assert r.status == "error" and f"HTTP {status}" in r.reason and "[redacted]" in r.reason
    assert "sk-test-123" not in r.reason and "sk-test-123" not in r.text and "sk-test-123" not in r.model_dump_json()
    assert srv.hits("/search")[0]["headers"]["x-api-key"] == "sk-test-123"  # it was sent, and echoed


def test_an_echoed_key_under_another_variable_is_redacted_too(srv, monkeypatch):
    monkeypatch.setenv("MY_SEARCH_CREDENTIAL_VAR", "plainvalue-987")  # a name that does not look secret
    srv.route("/images", lambda req: Resp(403, f"bad key {req['headers']['x-api-key']}", "text/plain"))
    t = web(srv, api_key_env="MY_SEARCH_CREDENTIAL_VAR")
    r = run(t, t.text_to_image_search(TextToImageSearchArgs(query="x"), EP, None))
    assert r.status == "error" and "plainvalue-987" not in r.reason and "bad key [redacted]" in r.reason


HOSTILE_IMAGES = ["file:///etc/passwd", "javascript:alert(1)", "data:image/svg+xml;base64,PHN2Zz4=",
                  "ftp://files.example.org/a.jpg", "http://10.0.0.7/admin.png", "https://u:pw@img.example.org/c.jpg",
                  "/relative/path.jpg"]


def test_image_results_that_are_not_fetchable_urls_are_dropped_and_counted(srv):
    rows = [{"title": f"bad {i}", "imageUrl": u, "link": "https://p.example/"} for i, u in enumerate(HOSTILE_IMAGES)]
    rows += [{"title": "good", "imageUrl": "https://img.example.org/ok.jpg", "link": "https://p.example/ok"},
             {"title": "thumb", "imageUrl": "javascript:void(0)", "thumbnailUrl": "//thumbs.example.org/t.jpg"}]
    srv.route("/images", json_resp({"images": rows}))
    t = web(srv)
    box = Toolbox(t)
    r = run(t, box.call("text_to_image_search", *box.parse("text_to_image_search", {"query": "x"}), EP, Context()))
    assert r.status == "ok" and [it.image for it in r.items] == ["https://img.example.org/ok.jpg",
                                                                 "https://thumbs.example.org/t.jpg"]
    assert [it.rank for it in r.items] == [1, 2]  # the indices an image tag cites count kept images only
    assert r.provenance["dropped_images"] == {"credentials": 1, "no_scheme": 1, "non_public_host": 1, "scheme_data": 1,
                                              "scheme_file": 1, "scheme_ftp": 1, "scheme_javascript": 1}
    assert "dropped 7 image result(s)" in r.reason and "scheme_file ×1" in r.text  # the model reads it too
    for bad in ("passwd", "alert(1)", "svg+xml", "10.0.0.7"):
        assert bad not in r.text


def test_only_unfetchable_images_is_empty_with_the_reason(srv):
    srv.route("/lens", json_resp({"organic": [{"title": "x", "imageUrl": "file:///etc/passwd", "link": "https://e/"}]}))
    t = web(srv)
    r = run(t, t.image_search(ImageSearchArgs(), EP.model_copy(update={"image_url": "https://cdn.example.org/q.jpg"}),
                              None))
    assert r.status == "empty" and r.items == [] and "scheme_file" in r.reason
    assert r.provenance["dropped_images"] == {"scheme_file": 1}


def test_a_scraped_pages_hostile_og_image_is_dropped(srv):
    srv.route("/scrape", json_resp({"text": "Edificio España is 117 metres tall.",
                                    "metadata": {"og:image": "javascript:alert(document.cookie)"}}))
    t = web(srv, visit_via="scrape", scrape_url=srv.url("/scrape"))
    r = run(t, t.visit(VisitArgs(url=["https://es.example.org/e"], goal="how tall"), EP, None))
    assert r.status == "ok" and r.items[0].image is None
    assert r.provenance["pages"][0]["image_dropped"] == "scheme_javascript"


def test_search_api_error_body_is_capped(srv):
    srv.route("/search", Resp(500, "x" * 50_000, "text/plain"),  # declared, then streamed without a length
              Resp(200, "[" * 50_000, "application/json", declare_length=False))
    t = web(srv, retries=0, max_api_bytes=10_000)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "error" and "Content-Length 50000 > cap 10000" in r.reason and len(r.reason) < 400
    t = web(srv, retries=0, max_api_bytes=10_000)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "error" and "10000-byte cap on the wire" in r.reason


# -- the searxng provider ------------------------------------------------------------------------------
def _query(req) -> dict:
    from urllib.parse import parse_qs, urlsplit

    return {k: v[0] for k, v in parse_qs(urlsplit(req["raw_path"]).query).items()}


def searx(req):
    q = _query(req)
    if q.get("format") != "json":
        return Resp(403, "Forbidden", "text/plain")
    if q.get("categories") == "images":
        return json_resp({"query": q["q"], "results": [
            {"url": "https://p.example/a", "title": "A", "img_src": "https://img.example.org/a.jpg",
             "thumbnail_src": "https://img.example.org/a_t.jpg", "engine": "bing images"},
            {"url": "https://p.example/b", "title": "B", "img_src": "data:image/png;base64,AAAA", "engine": "x"},
            {"url": "https://p.example/c", "title": "C", "img_src": "//img.example.org/c.jpg", "source": "c.org"}]})
    return json_resp({"query": q["q"], "number_of_results": 2, "results": [
        {"url": "https://en.example.org/espana", "title": "Edificio España", "content": "117 metres tall",
         "engine": "duckduckgo"},
        {"url": "https://es.example.org/e", "title": "Edificio", "content": "Madrid", "engine": "brave"}]})


def searxng(srv: FakeWebServer, **kw) -> WebTools:
    return WebTools(**{"provider": "searxng", "base_url": srv.base_url, "allow_hosts": ("127.0.0.1",),
                       "backoff": 0.01, **kw})


def test_searxng_text_search_needs_no_key_and_asks_for_json(srv, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    srv.route("/search", searx)
    t = searxng(srv)
    r = run(t, t.search(SearchArgs(query=["edificio españa", "故宫"]), EP, None))
    assert r.status == "ok" and [it.rank for it in r.items] == [1, 2, 1, 2]
    assert r.items[0].url == "https://en.example.org/espana" and r.items[0].text == "117 metres tall"
    assert r.items[0].id == item_id(canonical_url("https://en.example.org/espana"))
    sent = {_query(h)["q"]: _query(h) for h in srv.hits("/search")}
    assert sent["edificio españa"] == {"q": "edificio españa", "format": "json", "language": "en"}
    assert sent["故宫"]["language"] == "zh-CN" and r.provenance["provider"] == "searxng"
    assert all(h["method"] == "GET" and "x-api-key" not in h["headers"] and "authorization" not in h["headers"]
               for h in srv.hits("/search"))


def test_searxng_images_and_reverse_search_unavailable(srv):
    srv.route("/search", searx)
    t = searxng(srv)
    r = run(t, t.text_to_image_search(TextToImageSearchArgs(query="Edificio España"), EP, None))
    assert r.status == "ok" and [it.image for it in r.items] == ["https://img.example.org/a.jpg",
                                                                 "https://img.example.org/c.jpg"]
    assert r.items[0].url == "https://p.example/a" and r.items[0].text == "bing images" and r.items[1].text == "c.org"
    assert r.provenance["dropped_images"] == {"scheme_data": 1}
    assert _query(srv.hits("/search")[0])["categories"] == "images"
    t = searxng(srv)
    ep = EP.model_copy(update={"image_url": "https://cdn.example.org/q.jpg"})
    r = run(t, t.image_search(ImageSearchArgs(), ep, None))
    assert r.status == "unavailable" and "searxng" in r.reason and len(srv.hits("/search")) == 1  # nothing sent


def test_searxng_key_is_optional_sent_as_bearer_and_redacted(srv, monkeypatch):
    monkeypatch.setenv("KBVQA_TEST_SEARX_TOKEN", "searx-tok-4242")
    srv.route("/search", lambda req: Resp(401, f"bad {req['headers'].get('authorization')}", "text/plain"))
    t = searxng(srv, api_key_env="KBVQA_TEST_SEARX_TOKEN", retries=0)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert srv.hits("/search")[0]["headers"]["authorization"] == "Bearer searx-tok-4242"
    assert r.status == "error" and "searx-tok-4242" not in r.reason and "[redacted]" in r.reason
    assert t.describe()["provider"] == "searxng" and "searx-tok-4242" not in repr(t.describe())


def test_searxng_without_json_format_says_how_to_enable_it(srv):
    srv.route("/search", Resp(403, "Forbidden", "text/plain"))
    t = searxng(srv)
    r = run(t, t.search(SearchArgs(query="q"), EP, None))
    assert r.status == "error" and "search.formats" in r.reason and len(srv.hits("/search")) == 1


def test_provider_settings_are_checked_at_construction(monkeypatch):
    monkeypatch.delenv("KBVQA_TEST_SEARX_TOKEN", raising=False)
    with pytest.raises(WebToolsConfigError, match="needs base_url"):
        WebTools(provider="searxng")
    with pytest.raises(WebToolsConfigError, match="KBVQA_TEST_SEARX_TOKEN"):
        WebTools(provider="searxng", base_url="http://127.0.0.1:8888", api_key_env="KBVQA_TEST_SEARX_TOKEN")
    with pytest.raises(WebToolsConfigError, match="scrape"):
        WebTools(provider="searxng", base_url="http://127.0.0.1:8888", visit_via="scrape")
    with pytest.raises(WebToolsConfigError, match="unknown web provider"):
        WebTools(provider="bing", base_url="http://127.0.0.1:8888")
