"""The one guarded HTTP fetcher: every page or image the project downloads from an address it did not
configure itself goes through `GuardedFetcher` (the web tools' `visit` now, image harvesting later).

Why a guard: those URLs come from a model (tool arguments) or from the web (search results, redirects,
og:image tags), so anyone can choose them. A fetch must not reach this machine's own services, the
cluster network or the cloud metadata endpoint (SSRF), must not fill memory or hang a run, and must not
crash the agent loop: expected failures are a `FetchResult` with a status and a reason.

What it enforces, on every redirect hop (redirects are followed by hand, never by httpx):
- http/https only, no credentials in the URL;
- no loopback, private (RFC 1918), link-local (169.254.169.254 metadata), CGNAT 100.64/10, unspecified,
  multicast, reserved or other non-global address, in IPv4 or IPv6 (ULA, link-local, loopback) or as
  IPv4 embedded in IPv6 (::ffff:a.b.c.d, 6to4, NAT64). Numeric spellings that the C resolver accepts
  (http://2130706433/, http://0x7f.0.0.1/) are read as the addresses they are. Only `allow_hosts`
  (exact host spelling) or `allow_private=True` lifts this — tests use `allow_hosts=("127.0.0.1",)`;
- DNS rebinding: checking and connecting use ONE resolution. The httpx transport runs on a network
  backend that resolves the host, refuses it if ANY address is disallowed, and connects to a checked
  address itself. httpx still sees the hostname, so the Host header, TLS SNI and certificate checks
  are those of the name. Environment proxies are ignored (a proxy would connect for us, unchecked);
- a byte cap on the wire AND after decoding: Content-Length first, then while streaming. The fetcher
  asks for `Accept-Encoding: identity`, but a hostile server may compress anyway (a twice-gzipped
  body of 2 KB inflates to 1 GiB), so the body is read raw and decoded here, layer by layer, in
  pieces of at most `DECODE_STEP` bytes, with the cap checked before each piece is kept
  (`CappedBody`): gzip, deflate (zlib-wrapped or raw), brotli when a `brotli` module with bounded
  output is installed, stacked in any order. Any other Content-Encoding is refused (`bad_encoding`).
  Peak memory stays near the cap whatever the server sends; the model client and the web API client
  read their replies the same way (`read_capped`);
- a total time cap per attempt (connect, every hop and the body), the caller's content types,
  retries with backoff on 429/5xx/timeouts (never after a refusal), bounded concurrency;
- reasons pass through `kbvqa.data.redact.redact` (a URL's password, an echoed key never reach a record).
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import re
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, TypeVar
from urllib.parse import urljoin

import httpcore
import httpx

from kbvqa.data.redact import redact

FetchStatus = Literal["ok", "blocked", "error", "too_large", "bad_type", "bad_encoding", "http_error"]
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
T = TypeVar("T")

HTML_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
IMAGE_TYPES = ("image/*",)
DEFAULT_USER_AGENT = "kbvqa/0.1 (knowledge-VQA research; guarded fetcher)"
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NUMERIC_HOST = re.compile(r"^[0-9a-fx.]+$", re.IGNORECASE)
_META_CHARSET = re.compile(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9_-]+)", re.IGNORECASE)


class AddressRefused(Exception):
    """A destination the fetcher may not contact. Raised inside the transport (not an httpcore error,
    so httpx lets it through unchanged) and reported as status `blocked`."""


def address_refusal(ip: IP) -> str | None:
    """Why `ip` may not be contacted, or None for a globally routable address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
                                                      if ip in _NAT64 else None)
        if embedded is not None:
            why = address_refusal(embedded)
            return f"{why} (embedded in {ip})" if why else None
    for name, hit in (("loopback", ip.is_loopback), ("link-local (cloud metadata lives here)", ip.is_link_local),
                      ("shared (CGNAT 100.64/10)", ip in _CGNAT), ("unspecified", ip.is_unspecified),
                      ("multicast", ip.is_multicast), ("private", ip.is_private), ("reserved", ip.is_reserved)):
        if hit:
            return f"{name} address {ip}"
    return None if ip.is_global else f"non-public address {ip}"


def literal_ip(host: str) -> IP | None:
    """The address a host spells literally — including the decimal/hex/octal/short IPv4 forms that
    inet_aton (and so getaddrinfo) accepts — or None for a name."""
    h = host.strip("[]")
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(h):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return None
    return None


def _norm_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def host_refusal(host: str, *, allow_hosts: Iterable[str] = (), allow_private: bool = False) -> str | None:
    """Why `host` may not be contacted, judged from its spelling alone (no DNS), or None."""
    host = _norm_host(host)
    if not host:
        return "no host"
    if allow_private or host in {_norm_host(h) for h in allow_hosts}:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is this machine"
    ip = literal_ip(host)
    return address_refusal(ip) if ip is not None else None


def url_refusal(url: str, *, allow_hosts: Iterable[str] = (), allow_private: bool = False) -> str | None:
    """Why `url` may not be fetched, judged from the URL alone (no DNS), or None. Names are checked
    again, with their addresses, when the fetcher's transport connects."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        return f"malformed URL ({exc})"
    if u.scheme not in ("http", "https"):
        return f"scheme {u.scheme or '(none)'!r} is not http/https"
    if u.userinfo:
        return "credentials in the URL"
    return host_refusal(u.host, allow_hosts=allow_hosts, allow_private=allow_private)


def _accepts(content_type: str, accept: tuple[str, ...]) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    for a in (x.lower() for x in accept):
        if a in ("*", "*/*") or media == a or (a.endswith("/*") and media.startswith(a[:-1])):
            return True
    return False


def retry_after_seconds(resp: httpx.Response) -> float | None:
    """A numeric Retry-After header (an HTTP date is rare on the APIs this talks to; backoff covers it)."""
    try:
        return max(0.0, float(resp.headers.get("retry-after", "")))
    except ValueError:
        return None


# -- bodies: decoded here, under a cap --------------------------------------------------------------
DECODE_STEP = 64 * 1024  # the most bytes one decoding layer produces at a time


class BodyTooLarge(Exception):
    """A body passed its byte cap (on the wire, or once decoded)."""


class BodyUnreadable(Exception):
    """A Content-Encoding kbvqa does not decode, or a body that does not decode as it claims."""


def _brotli_module() -> Any:
    """The installed `brotli` module when its Decompressor can bound its output (brotli ≥ 1.2), else None:
    without a bound a brotli bomb would inflate in one call."""
    try:
        import brotli  # type: ignore[import-not-found]
    except ImportError:
        return None
    return brotli if hasattr(getattr(brotli, "Decompressor", None), "can_accept_more_data") else None


def accept_encoding() -> str:
    """The Accept-Encoding a client that reads through `CappedBody` may send: what it can decode."""
    return "gzip, deflate, br" if _brotli_module() is not None else "gzip, deflate"


class _Zlib:
    """One gzip or deflate layer. gzip may hold several members; deflate is zlib-wrapped (RFC 9110)
    but some servers send it raw, so a zlib header error on the first bytes switches to raw."""

    def __init__(self, coding: str):
        self.coding = coding
        self._d = zlib.decompressobj(zlib.MAX_WBITS | 16 if coding == "gzip" else zlib.MAX_WBITS)
        self._started = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                out = self._d.decompress(data, DECODE_STEP)
            except zlib.error as exc:
                if self.coding == "deflate" and not self._started:
                    self._d, self._started = zlib.decompressobj(-zlib.MAX_WBITS), True
                    continue
                raise BodyUnreadable(f"the {self.coding} body does not decode ({exc})") from None
            self._started = True
            data = self._d.unconsumed_tail
            if out:
                yield out
            if self._d.eof:
                rest = self._d.unused_data
                if self.coding != "gzip" or not rest:
                    return  # anything after a deflate stream is ignored, as zlib's own readers do
                self._d = zlib.decompressobj(zlib.MAX_WBITS | 16)  # the next gzip member
                data = rest
                continue
            if not data and len(out) < DECODE_STEP:
                return  # all input used and no output pending: wait for more


class _Brotli:
    def __init__(self, module: Any):
        self._error, self._d = module.error, module.Decompressor()

    def decode(self, data: bytes) -> Iterator[bytes]:
        try:
            out = self._d.process(data, output_buffer_limit=DECODE_STEP)
            while True:
                if out:
                    yield out
                if self._d.can_accept_more_data() or self._d.is_finished():
                    return
                out = self._d.process(b"", output_buffer_limit=DECODE_STEP)
        except self._error as exc:
            raise BodyUnreadable(f"the br body does not decode ({exc})") from None


def content_codings(header: str | Iterable[str] | None) -> list[str]:
    """The codings a Content-Encoding header (or its repeated values) lists, in the order applied."""
    values = [header] if isinstance(header, str) else list(header or [])
    return [c for v in values for c in (x.strip().lower() for x in v.split(",")) if c and c != "identity"]


class CappedBody:
    """A response body read chunk by chunk as it arrives on the wire, decoded layer by layer (the last
    coding listed is undone first) in pieces of at most DECODE_STEP bytes, with `max_bytes` checked on
    the wire and after every decoded piece — before the piece is kept. So a body holds at most
    max_bytes + DECODE_STEP bytes whatever it claims or inflates to. Raises BodyTooLarge or
    BodyUnreadable."""

    def __init__(self, content_encoding: str | Iterable[str] | None, max_bytes: int):
        self.codings, self.max_bytes = content_codings(content_encoding), max_bytes
        self.wire = 0
        self._body = bytearray()
        self._layers: list[Any] = []
        for coding in reversed(self.codings):
            if coding in ("gzip", "x-gzip", "deflate"):
                self._layers.append(_Zlib("gzip" if coding == "x-gzip" else coding))
            elif coding == "br" and _brotli_module() is not None:
                self._layers.append(_Brotli(_brotli_module()))
            else:
                raise BodyUnreadable(f"Content-Encoding {coding!r} is not decoded by kbvqa "
                                     f"(it decodes {accept_encoding()})")

    def _label(self) -> str:
        return f" (decoded from Content-Encoding {', '.join(self.codings)})" if self.codings else ""

    def _through(self, layers: list[Any], data: bytes) -> Iterator[bytes]:
        if not layers:
            yield data
            return
        for piece in layers[0].decode(data):
            yield from self._through(layers[1:], piece)

    def feed(self, chunk: bytes) -> None:
        self.wire += len(chunk)
        if self.wire > self.max_bytes:
            raise BodyTooLarge(f"body passed the {self.max_bytes}-byte cap on the wire")
        for piece in self._through(self._layers, chunk):
            if len(self._body) + len(piece) > self.max_bytes:
                raise BodyTooLarge(f"body passed the {self.max_bytes}-byte cap{self._label()}")
            self._body += piece

    def content(self) -> bytes:
        return bytes(self._body)


def declared_too_large(content_length: str | None, max_bytes: int) -> str | None:
    """Why a declared Content-Length is refused before reading, or None."""
    declared = (content_length or "").strip()
    return f"Content-Length {declared} > cap {max_bytes}" if declared.isdigit() and int(declared) > max_bytes else None


async def read_capped(chunks: AsyncIterator[bytes], content_encoding: str | Iterable[str] | None,
                      max_bytes: int, content_length: str | None = None) -> bytes:
    """A whole body from its raw (undecoded) chunks, decoded under the cap (`CappedBody`)."""
    why = declared_too_large(content_length, max_bytes)
    if why:
        raise BodyTooLarge(why)
    body = CappedBody(content_encoding, max_bytes)
    async for chunk in chunks:
        body.feed(chunk)
    return body.content()


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with jittered exponential backoff, shared by the fetcher and the web API client."""

    retries: int = 3
    backoff: float = 0.5
    backoff_max: float = 8.0

    def delay(self, attempt: int, hint: float | None = None) -> float:
        if hint is not None:
            return min(hint, self.backoff_max)
        return min(self.backoff_max, self.backoff * 2 ** attempt) * (0.5 + random.random() / 2)

    async def run(self, attempt: Callable[[], Awaitable[tuple[T, bool, float | None]]]) -> tuple[T, int]:
        """(last result, attempts made). `attempt` returns (result, retry?, Retry-After hint)."""
        for n in range(self.retries + 1):
            result, again, hint = await attempt()
            if not again or n == self.retries:
                return result, n + 1
            await asyncio.sleep(self.delay(n, hint))
        raise AssertionError("unreachable")


@dataclass
class FetchResult:
    url: str
    status: FetchStatus = "error"
    final_url: str | None = None
    http_status: int | None = None
    content_type: str = ""
    content: bytes = b""
    encoding: str | None = None  # the charset the server declared
    redirects: list[str] = field(default_factory=list)  # each Location followed, in order
    reason: str = ""
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def text(self) -> str:
        """The body decoded: declared charset, else an HTML <meta charset>, else UTF-8 (lossy, never raises)."""
        m = _META_CHARSET.search(self.content[:4096])
        for enc in (self.encoding, m.group(1).decode("ascii") if m else None, "utf-8"):
            if enc:
                try:
                    return self.content.decode(enc, errors="replace")
                except LookupError:
                    continue
        return self.content.decode("utf-8", errors="replace")


@lru_cache(maxsize=1)
def shared_ssl_context() -> ssl.SSLContext:
    """One verifying TLS context per process (loading the CA bundle costs ~0.1 s per client)."""
    return httpx.create_ssl_context()


async def system_resolve(host: str, port: int) -> list[str]:
    """getaddrinfo in a thread, so a slow DNS server does not stall the event loop."""
    infos = await asyncio.to_thread(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    return list(dict.fromkeys(str(i[4][0]) for i in infos))


class _PinnedNetwork(httpcore.AsyncNetworkBackend):
    """httpcore network backend that connects only to addresses `checked` approved (see module doc)."""

    def __init__(self, checked: Callable[[str, int], Awaitable[list[str]]]):
        self._checked, self._inner = checked, httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        last: Exception | None = None
        for ip in await self._checked(host, port):
            try:
                return await self._inner.connect_tcp(ip, port, timeout=timeout, local_address=local_address,
                                                     socket_options=socket_options)
            except httpcore.ConnectError as exc:
                last = exc
        raise last or httpcore.ConnectError(f"no address to connect to for {host}")

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedFetcher:
    """Async GET with the SSRF guard, caps and retries described in the module docstring. `timeout` caps
    one attempt (all hops and the body); a call takes at most (retries+1)·timeout plus backoff. One
    fetcher per event loop; `aclose()` when done. `resolver` is for tests (no real DNS)."""

    def __init__(self, *, allow_hosts: Iterable[str] = (), allow_private: bool = False, max_bytes: int = 5_000_000,
                 timeout: float = 20.0, connect_timeout: float = 5.0, max_redirects: int = 5, concurrency: int = 8,
                 user_agent: str = DEFAULT_USER_AGENT, allowed_content_types: Iterable[str] | None = None,
                 retries: int = 3, backoff: float = 0.5, resolver: Resolver | None = None):
        self.allow_hosts = tuple(_norm_host(h) for h in allow_hosts)
        self.allow_private, self.max_bytes, self.timeout = allow_private, max_bytes, timeout
        self.max_redirects, self.concurrency, self.user_agent = max_redirects, concurrency, user_agent
        self.allowed_content_types = tuple(allowed_content_types or HTML_TYPES)
        self.retry = RetryPolicy(retries=retries, backoff=backoff)
        self._resolve = resolver or system_resolve
        self._slots = asyncio.Semaphore(concurrency)
        transport = httpx.AsyncHTTPTransport(verify=shared_ssl_context(), retries=0, trust_env=False,
                                             limits=httpx.Limits(max_connections=max(concurrency, 1) * 2))
        pool = getattr(transport, "_pool", None)
        if not hasattr(pool, "_network_backend"):  # fail at construction, never fetch unpinned
            raise RuntimeError("this httpx/httpcore version hides the pool's network backend; the guarded "
                               "fetcher cannot pin connections to checked addresses")
        pool._network_backend = _PinnedNetwork(self._checked_addresses)
        self._client = httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False,
                                         timeout=httpx.Timeout(timeout, connect=connect_timeout),
                                         headers={"User-Agent": user_agent, "Accept-Encoding": "identity"})

    def describe(self) -> dict[str, Any]:
        return {"max_bytes": self.max_bytes, "timeout": self.timeout, "max_redirects": self.max_redirects,
                "concurrency": self.concurrency, "retries": self.retry.retries, "allow_hosts": list(self.allow_hosts),
                "allow_private": self.allow_private, "content_types": list(self.allowed_content_types)}

    async def aclose(self) -> None:
        await self._client.aclose()

    def _allowed(self, host: str) -> bool:
        return self.allow_private or _norm_host(host) in self.allow_hosts

    async def _checked_addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to — resolved once and all checked — or AddressRefused."""
        why = host_refusal(host, allow_hosts=self.allow_hosts, allow_private=self.allow_private)
        if why:
            raise AddressRefused(why)
        ip = literal_ip(host)
        if ip is not None:
            return [str(ip)]
        try:
            addrs = await self._resolve(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        if not self._allowed(host):
            for a in addrs:
                why = address_refusal(ipaddress.ip_address(a.split("%", 1)[0]))
                if why:
                    raise AddressRefused(f"{host} resolves to a {why}")
        return addrs

    async def fetch(self, url: str, *, accept: Iterable[str] | None = None) -> FetchResult:
        """GET `url` (following redirects by hand). Never raises for an expected failure."""
        types = tuple(accept) if accept is not None else self.allowed_content_types
        res = FetchResult(url=url)

        async def attempt() -> tuple[FetchResult, bool, float | None]:
            res.redirects, res.content, res.http_status = [], b"", None
            async with self._slots:
                try:
                    async with asyncio.timeout(self.timeout):
                        return await self._follow(res, types)
                except (TimeoutError, httpx.TimeoutException):
                    return self._fail(res, "error", f"timed out (cap {self.timeout:g}s)"), True, None
                except AddressRefused as exc:
                    return self._fail(res, "blocked", f"refused {res.final_url}: {exc}"), False, None
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    return self._fail(res, "error", f"{type(exc).__name__}: {exc}"), False, None

        _, res.attempts = await self.retry.run(attempt)
        return res

    @staticmethod
    def _fail(res: FetchResult, status: FetchStatus, reason: str) -> FetchResult:
        res.status, res.reason, res.content = status, redact(reason), b""
        return res

    async def _follow(self, res: FetchResult, accept: tuple[str, ...]) -> tuple[FetchResult, bool, float | None]:
        current = res.url
        for hop in range(self.max_redirects + 1):
            why = url_refusal(current, allow_hosts=self.allow_hosts, allow_private=self.allow_private)
            if why:
                where = f"redirect to {current}" if hop else current
                return self._fail(res, "blocked", f"refused {where}: {why}"), False, None
            res.final_url = current
            async with self._client.stream("GET", current, headers={"Accept": ", ".join(accept)}) as resp:
                code = res.http_status = resp.status_code
                if code in REDIRECT_CODES and resp.headers.get("location"):
                    current = urljoin(str(resp.url), resp.headers["location"])
                    res.redirects.append(current)
                    continue
                if code == 429 or code >= 500:
                    return self._fail(res, "http_error", f"HTTP {code}"), True, retry_after_seconds(resp)
                if not 200 <= code < 300:
                    return self._fail(res, "http_error", f"HTTP {code}"), False, None
                res.content_type, res.encoding = resp.headers.get("content-type", ""), resp.charset_encoding
                if not _accepts(res.content_type, accept):
                    reason = f"content type {res.content_type or '(none)'!r} is not one of {', '.join(accept)}"
                    return self._fail(res, "bad_type", reason), False, None
                try:  # raw bytes, decoded by CappedBody: httpx would inflate whatever arrives before any cap
                    res.content = await read_capped(resp.aiter_raw(), resp.headers.get_list("content-encoding"),
                                                    self.max_bytes, resp.headers.get("content-length"))
                except BodyTooLarge as exc:
                    return self._fail(res, "too_large", str(exc)), False, None
                except BodyUnreadable as exc:
                    return self._fail(res, "bad_encoding", str(exc)), False, None
                res.status, res.reason = "ok", ""
                return res, False, None
        return self._fail(res, "error", f"more than {self.max_redirects} redirects"), False, None
