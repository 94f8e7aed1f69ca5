"""A scripted HTTP server on 127.0.0.1 for the fetcher and web-tool tests: pages, redirects, slow and
oversized bodies, and a Serper-compatible API (`/search`, `/images`, `/lens`, a scrape endpoint).

Each path answers from a script: a list of `Resp` played in order (the last one repeats), or a
handler `request -> Resp`. Every request is logged (method, path, headers, parsed JSON body), and the
server tracks the most requests in flight at once, so tests can assert bodies, retries and limits.

    with FakeWebServer() as srv:
        srv.route("/search", Resp(429), json_resp({"organic": []}))
        srv.url("/search")  # http://127.0.0.1:PORT/search

`compressed(resp, "gzip", "gzip")` encodes a reply (a server ignoring `Accept-Encoding: identity`);
`gzip_bomb()` / `zlib_bomb()` / `raw_deflate_zeros()` build valid streams that inflate to 1 GiB of
zeros from about 1 MB (and ~2.5 KB once gzipped again: `encode(gzip_bomb(), "gzip")`).

`loopback_only` is a pytest fixture body: it makes any socket connect or name lookup other than
127.0.0.1 fail the test, which proves a refusal never touched the network.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Resp:
    status: int = 200
    body: bytes | str = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # before the status line (a server that thinks)
    trickle: float = 0.0  # seconds between 16-byte pieces of the body (a server that drips)
    declare_length: bool = True  # False: no Content-Length, the body ends when the connection closes


def json_resp(data: Any, status: int = 200, **kw: Any) -> Resp:
    return Resp(status=status, body=json.dumps(data, ensure_ascii=False), content_type="application/json", **kw)


def redirect(location: str, status: int = 302) -> Resp:
    return Resp(status=status, headers={"Location": location})


Handler = Callable[[dict[str, Any]], Resp]


# -- hostile bodies: compressed, stacked, and decompression bombs ----------------------------------
MiB = 1 << 20


def encode(body: bytes, *codings: str) -> bytes:
    """`body` with each Content-Encoding applied in the order listed (as the header lists them):
    gzip, deflate (zlib-wrapped), raw-deflate (raw deflate sent as `deflate`), br (needs brotli)."""
    for c in codings:
        if c == "gzip":
            body = gzip.compress(body, 9)
        elif c == "deflate":
            body = zlib.compress(body, 9)
        elif c == "raw-deflate":
            co = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
            body = co.compress(body) + co.flush()
        elif c == "br":
            import brotli  # type: ignore[import-not-found]

            body = brotli.compress(body, quality=5)  # 11 takes ~50 s on a 256 MiB bomb
        else:
            raise ValueError(f"unknown coding {c!r}")
    return body


def compressed(resp: Resp, *codings: str) -> Resp:
    """`resp` with its body encoded by `codings` and the matching Content-Encoding header."""
    body = resp.body.encode("utf-8") if isinstance(resp.body, str) else resp.body
    header = ", ".join("deflate" if c == "raw-deflate" else c for c in codings)
    return Resp(**{**resp.__dict__, "body": encode(body, *codings),
                   "headers": {**resp.headers, "Content-Encoding": header}})


def _crc32_zeros(n: int) -> int:
    """CRC-32 of `n` zero bytes without touching n bytes: zlib's crc32_combine (GF(2) matrices) over
    the CRC of one MiB, so a 1 GiB bomb costs milliseconds to build."""
    def times(mat: list[int], vec: int) -> int:
        s, i = 0, 0
        while vec:
            if vec & 1:
                s ^= mat[i]
            vec, i = vec >> 1, i + 1
        return s

    def square(mat: list[int]) -> list[int]:
        return [times(mat, mat[k]) for k in range(32)]

    def combine(crc1: int, crc2: int, len2: int) -> int:
        odd = [0xEDB88320] + [1 << k for k in range(31)]
        even = square(odd)
        odd = square(even)
        while True:
            even = square(odd)
            if len2 & 1:
                crc1 = times(even, crc1)
            len2 >>= 1
            if not len2:
                break
            odd = square(even)
            if len2 & 1:
                crc1 = times(odd, crc1)
            len2 >>= 1
            if not len2:
                break
        return crc1 ^ crc2

    assert n % MiB == 0
    one = zlib.crc32(bytes(MiB))
    crc, done, block, block_len = 0, 0, one, MiB
    left = n
    while left:  # binary decomposition: combine the CRC of 2^k MiB blocks
        if left & block_len:
            crc = combine(crc, block, block_len) if done else block
            done += block_len
            left -= block_len
        block, block_len = combine(block, block, block_len), block_len * 2
    return crc


@lru_cache(maxsize=4)
def raw_deflate_zeros(n: int) -> bytes:
    """A raw deflate stream inflating to `n` zero bytes (n a multiple of 1 MiB), about 1 KiB per MiB:
    one fully flushed MiB block repeated, then an empty final block."""
    co = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    unit = co.compress(bytes(MiB)) + co.flush(zlib.Z_FULL_FLUSH)
    return unit * (n // MiB) + co.flush()


@lru_cache(maxsize=4)
def gzip_bomb(n: int = 1 << 30) -> bytes:
    """One valid gzip member (CRC and size right) inflating to `n` zero bytes; ~1 MB on the wire for 1 GiB."""
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + raw_deflate_zeros(n)
            + struct.pack("<II", _crc32_zeros(n), n & 0xFFFFFFFF))


@lru_cache(maxsize=4)
def zlib_bomb(n: int = 1 << 30) -> bytes:
    """A valid zlib stream (HTTP `deflate`) inflating to `n` zero bytes (adler32 of zeros: 1 + n·65536)."""
    return b"\x78\xda" + raw_deflate_zeros(n) + struct.pack(">I", ((n % 65521) << 16) | 1)


class FakeWebServer:
    def __init__(self) -> None:
        self.routes: dict[str, list[Resp] | Handler] = {}
        self.requests: list[dict[str, Any]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def route(self, path: str, *script: Resp | Handler) -> FakeWebServer:
        one = script[0] if len(script) == 1 else None
        self.routes[path] = one if callable(one) else list(script)  # type: ignore[assignment]
        return self

    def hits(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def _answer(self, req: dict[str, Any]) -> Resp:
        with self._lock:
            self.requests.append(req)
            script = self.routes.get(req["path"])
            if script is None:
                return Resp(404, "not found", "text/plain")
            if callable(script):
                handler = script
            else:
                return script.pop(0) if len(script) > 1 else script[0]
        return handler(req)

    def start(self) -> FakeWebServer:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *a: Any) -> None:
                pass

            def _serve(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body_json = json.loads(raw) if raw else None
                except ValueError:
                    body_json = None
                req = {"method": self.command, "path": self.path.split("?", 1)[0], "raw_path": self.path,
                       "headers": {k.lower(): v for k, v in self.headers.items()}, "json": body_json}
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._write(server._answer(req))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a cap or a timeout): expected in these tests
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _write(self, r: Resp) -> None:
                time.sleep(r.delay)
                body = r.body.encode("utf-8") if isinstance(r.body, str) else r.body
                self.send_response(r.status)
                if r.content_type:
                    self.send_header("Content-Type", r.content_type)
                for k, v in r.headers.items():
                    self.send_header(k, v)
                if r.declare_length:
                    self.send_header("Content-Length", str(len(body)))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if not r.trickle:
                    self.wfile.write(body)
                    return
                for i in range(0, len(body), 16):
                    self.wfile.write(body[i:i + 16])
                    self.wfile.flush()
                    time.sleep(r.trickle)

            do_GET = do_POST = do_HEAD = _serve

        class _Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up on a trickling or oversized reply closed its socket: expected

        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeWebServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def loopback_only(monkeypatch: Any) -> Iterator[None]:
    """Fail the test on any connect or name lookup that is not 127.0.0.1 (use as a pytest fixture)."""
    real_connect, real_gai = socket.socket.connect, socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] != "127.0.0.1":
            raise AssertionError(f"test tried to connect to {address!r}")
        return real_connect(self, address)

    def getaddrinfo(host: Any, *a: Any, **kw: Any) -> Any:
        if host not in ("127.0.0.1", b"127.0.0.1", None):
            raise AssertionError(f"test tried to resolve {host!r}")
        return real_gai(host, *a, **kw)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield
