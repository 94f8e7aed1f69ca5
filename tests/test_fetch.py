"""The guarded fetcher: every refusal, cap and retry, against a local server on 127.0.0.1 only (the
`loopback_only` fixture fails a test that connects or resolves anything else)."""

from __future__ import annotations

import asyncio
import ipaddress
import time

import pytest
from fake_web_server import FakeWebServer, Resp, loopback_only, redirect

from kbvqa.data.fetch import GuardedFetcher, address_refusal, literal_ip, url_refusal

HTML = "<html><head><title>t</title></head><body><p>hello</p></body></html>"
LOCAL = ("127.0.0.1",)


@pytest.fixture(autouse=True)
def _only_loopback(monkeypatch):
    yield from loopback_only(monkeypatch)


@pytest.fixture
def srv():
    with FakeWebServer() as s:
        yield s


def fetch(url, **kw):
    accept = kw.pop("accept", None)

    async def go():
        f = GuardedFetcher(**{"backoff": 0.01, **kw})
        try:
            return await f.fetch(url, accept=accept)
        finally:
            await f.aclose()

    return asyncio.run(go())


def test_allowed_local_fetch_succeeds(srv):
    srv.route("/p", Resp(body=HTML))
    r = fetch(srv.url("/p"), allow_hosts=LOCAL)
    assert r.status == "ok", r.reason
    assert r.text == HTML and r.http_status == 200 and r.final_url == srv.url("/p")
    assert r.content_type.startswith("text/html") and r.attempts == 1
    assert srv.hits("/p")[0]["headers"]["accept-encoding"] == "identity"


def test_allow_private_also_reaches_local(srv):
    srv.route("/p", Resp(body=HTML))
    assert fetch(srv.url("/p"), allow_private=True).ok


def test_loopback_refused_without_allow_list(srv):
    srv.route("/p", Resp(body=HTML))
    r = fetch(srv.url("/p"))
    assert r.status == "blocked" and "loopback" in r.reason
    assert srv.requests == []


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1:70/_x",
                                 "data:text/html,<p>x</p>", "javascript:alert(1)"])
def test_non_http_schemes_refused(url):
    r = fetch(url, allow_hosts=LOCAL)
    assert r.status == "blocked" and "not http/https" in r.reason


@pytest.mark.parametrize("url", ["http://2130706433/", "http://0x7f.0.0.1/", "http://0x7f000001/",
                                 "http://017700000001/", "http://127.1/", "http://[::ffff:127.0.0.1]/",
                                 "http://[::ffff:7f00:1]/", "http://[::1]/", "http://localhost/",
                                 "http://app.localhost/", "http://169.254.169.254/latest/meta-data/",
                                 "http://[::ffff:169.254.169.254]/", "http://[64:ff9b::a9fe:a9fe]/",
                                 "http://10.0.0.1/", "http://172.16.5.4/", "http://192.168.1.1/",
                                 "http://100.64.0.1/", "http://0.0.0.0/", "http://[fd00::1]/",
                                 "http://[fe80::1]/", "http://224.0.0.1/", "http://240.0.0.1/",
                                 "http://[2002:7f00:1::]/"])
def test_literal_private_addresses_refused_in_every_spelling(url):
    r = fetch(url)
    assert r.status == "blocked", r
    # the allow-list names one exact spelling: odd spellings of 127.0.0.1 stay refused
    if "127" in url or "7f" in url:
        assert fetch(url, allow_hosts=LOCAL).status == "blocked"


def test_address_policy_units():
    assert literal_ip("2130706433") == ipaddress.ip_address("127.0.0.1")
    assert literal_ip("0x7f.0.0.1") == ipaddress.ip_address("127.0.0.1")
    assert literal_ip("example.org") is None and literal_ip("deadbeef") is None
    assert "link-local" in address_refusal(ipaddress.ip_address("169.254.169.254"))
    assert "CGNAT" in address_refusal(ipaddress.ip_address("100.100.1.1"))
    assert address_refusal(ipaddress.ip_address("93.184.216.34")) is None
    assert address_refusal(ipaddress.ip_address("::ffff:93.184.216.34")) is None
    assert address_refusal(ipaddress.ip_address("2606:4700::1111")) is None
    assert "credentials" in url_refusal("http://user:pw@example.org/")
    assert url_refusal("https://example.org/a?b=c") is None


def test_redirect_to_metadata_refused_on_the_hop(srv):
    srv.route("/go", redirect("http://169.254.169.254/latest/meta-data/iam"))
    r = fetch(srv.url("/go"), allow_hosts=LOCAL)
    assert r.status == "blocked" and "redirect to http://169.254.169.254" in r.reason
    assert r.redirects == ["http://169.254.169.254/latest/meta-data/iam"]


def test_redirect_to_private_name_refused_at_connect(srv):
    """A name on a redirect hop is resolved once, checked, and refused before any connect."""
    srv.route("/go", redirect("http://intranet.corp.test/admin"))
    calls = []

    async def resolver(host, port):
        calls.append(host)
        return ["10.1.2.3"]

    r = fetch(srv.url("/go"), allow_hosts=LOCAL, resolver=resolver)
    assert r.status == "blocked" and "intranet.corp.test resolves to a private address 10.1.2.3" in r.reason
    assert calls == ["intranet.corp.test"]


def test_name_with_one_private_address_refused_as_a_whole():
    async def resolver(host, port):
        return ["93.184.216.34", "127.0.0.1"]  # never connected: the whole answer is refused

    r = fetch("http://mixed.test/", resolver=resolver)
    assert r.status == "blocked" and "loopback" in r.reason


def test_connection_goes_to_the_checked_address_with_the_original_host(srv):
    """DNS-rebinding defence: one resolution, and the socket goes to the address that was checked,
    while the request keeps the name (Host header; SNI/cert for https)."""
    srv.route("/p", Resp(body=HTML))
    port = srv.base_url.rsplit(":", 1)[1]
    calls = []

    async def resolver(host, p):
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["10.9.9.9"]  # a rebinding answer, never asked for

    r = fetch(f"http://pages.test:{port}/p", allow_hosts=("pages.test",), resolver=resolver)
    assert r.ok, r.reason
    assert calls == ["pages.test"]
    assert srv.hits("/p")[0]["headers"]["host"] == f"pages.test:{port}"


def test_body_past_the_byte_cap(srv):
    srv.route("/declared", Resp(body="x" * 5000))
    srv.route("/streamed", Resp(body="x" * 5000, declare_length=False))
    r = fetch(srv.url("/declared"), allow_hosts=LOCAL, max_bytes=1000)
    assert r.status == "too_large" and "Content-Length 5000" in r.reason and r.content == b""
    r = fetch(srv.url("/streamed"), allow_hosts=LOCAL, max_bytes=1000)
    assert r.status == "too_large" and "1000-byte cap" in r.reason


def test_slow_body_past_the_time_cap(srv):
    srv.route("/drip", Resp(body="y" * 400, trickle=0.05))  # ~1.25 s in total, each piece quick
    t0 = time.perf_counter()
    r = fetch(srv.url("/drip"), allow_hosts=LOCAL, timeout=0.4, retries=0)
    assert r.status == "error" and "timed out" in r.reason
    assert time.perf_counter() - t0 < 1.0


def test_timeouts_are_retried(srv):
    srv.route("/slow", Resp(body=HTML, delay=0.6))
    r = fetch(srv.url("/slow"), allow_hosts=LOCAL, timeout=0.2, retries=1)
    assert r.status == "error" and r.attempts == 2 and len(srv.hits("/slow")) == 2


def test_wrong_content_type(srv):
    srv.route("/bin", Resp(body=b"\x00\x01", content_type="application/octet-stream"))
    srv.route("/img", Resp(body=b"\x89PNG", content_type="image/png"))
    r = fetch(srv.url("/bin"), allow_hosts=LOCAL)
    assert r.status == "bad_type" and "application/octet-stream" in r.reason
    assert fetch(srv.url("/img"), allow_hosts=LOCAL, accept=("image/*",)).ok
    assert fetch(srv.url("/p-missing"), allow_hosts=LOCAL).status == "http_error"


def test_retries_429_then_ok_and_gives_up_on_5xx(srv):
    srv.route("/busy", Resp(429, headers={"Retry-After": "0"}), Resp(body=HTML))
    r = fetch(srv.url("/busy"), allow_hosts=LOCAL)
    assert r.ok and r.attempts == 2
    srv.route("/down", Resp(503))
    r = fetch(srv.url("/down"), allow_hosts=LOCAL, retries=2)
    assert r.status == "http_error" and r.http_status == 503 and r.attempts == 3
    srv.route("/gone", Resp(404))
    r = fetch(srv.url("/gone"), allow_hosts=LOCAL)
    assert r.status == "http_error" and r.attempts == 1  # a 404 is an answer, not a hiccup


def test_refusals_are_never_retried(srv):
    srv.route("/go", redirect("http://10.0.0.1/"))
    r = fetch(srv.url("/go"), allow_hosts=LOCAL, retries=3)
    assert r.status == "blocked" and r.attempts == 1 and len(srv.hits("/go")) == 1


def test_redirect_chain_and_limit(srv):
    srv.route("/a", redirect("/b"))
    srv.route("/b", redirect("/c", 301))
    srv.route("/c", Resp(body=HTML))
    r = fetch(srv.url("/a"), allow_hosts=LOCAL)
    assert r.ok and r.redirects == [srv.url("/b"), srv.url("/c")] and r.final_url == srv.url("/c")
    srv.route("/loop", redirect("/loop"))
    r = fetch(srv.url("/loop"), allow_hosts=LOCAL, max_redirects=3)
    assert r.status == "error" and "more than 3 redirects" in r.reason and len(srv.hits("/loop")) == 4


def test_bounded_concurrency(srv):
    srv.route("/p", Resp(body=HTML, delay=0.1))

    async def go():
        f = GuardedFetcher(allow_hosts=LOCAL, concurrency=2)
        try:
            return await asyncio.gather(*(f.fetch(srv.url("/p")) for _ in range(6)))
        finally:
            await f.aclose()

    assert all(r.ok for r in asyncio.run(go()))
    assert srv.max_in_flight <= 2


def test_charset_from_meta_when_the_header_has_none(srv):
    body = '<html><head><meta charset="gbk"></head><body>故宫</body></html>'.encode("gbk")
    srv.route("/gbk", Resp(body=body, content_type="text/html"))
    r = fetch(srv.url("/gbk"), allow_hosts=LOCAL)
    assert "故宫" in r.text


def test_a_password_in_a_refused_url_is_redacted_from_the_reason(srv):
    srv.route("/to-creds", redirect("http://admin:hunter2-secret@127.0.0.1/x"))
    r = fetch(srv.url("/to-creds"), allow_hosts=LOCAL)
    assert r.status == "blocked" and "credentials in the URL" in r.reason
    assert "hunter2-secret" not in r.reason and "[redacted]@127.0.0.1" in r.reason
