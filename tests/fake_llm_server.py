"""A local OpenAI-compatible chat server for tests and benchmarks (127.0.0.1, ephemeral port).

Each request takes the next scripted `Reply` from a queue (or, when the queue is empty, the
`default` reply / `handler(request) -> Reply`). Every request is logged, and the server tracks how
many requests were in flight at once, so tests can assert retries, headers and concurrency limits.

    with FakeLLMServer(latency=0.01) as srv:
        srv.push(rate_limited(0.01), ok('{"label": "yes"}'))
        client = OpenAIChatClient(srv.base_url, "fake")

Fault injection (`faults=Faults(...)`): every reply that is not scripted with `push` may be replaced,
at seeded rates, by a 429, a 500, a reply slower than the client's timeout, a malformed body or a
reply whose JSON is cut off (finish_reason "length"). The draw depends only on the seed, the request
body and how many identical bodies came before it, so a run injects the same faults whatever order
concurrent requests arrive in. Each logged request says which fault it got (`entry["fault"]`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    """One scripted response. `raw_body` (bytes) replaces the JSON body when set."""

    status: int = 200
    content: str | None = "ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str = "stop"
    raw_body: bytes | None = None
    error: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # native tool calling: the message's tool_calls


def ok(content: str, *, prompt_tokens: int = 10, completion_tokens: int = 5, delay: float = 0.0,
       finish_reason: str = "stop") -> Reply:
    return Reply(content=content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 delay=delay, finish_reason=finish_reason)


def rate_limited(retry_after: float = 0.01) -> Reply:
    return Reply(status=429, headers={"Retry-After": f"{retry_after:g}"}, error="rate limit exceeded")


def server_error(status: int = 500) -> Reply:
    return Reply(status=status, error="internal server error")


def slow(seconds: float, content: str = "late") -> Reply:
    """A reply that arrives after `seconds` (longer than the client timeout → client times out)."""
    return Reply(content=content, delay=seconds)


def malformed() -> Reply:
    """HTTP 200 whose body is not JSON (a broken proxy)."""
    return Reply(raw_body=b"<html>bad gateway</html>")


def schema_unsupported(status: int = 400) -> Reply:
    """A server refusing structured output: 400 with an OpenAI-style error, or 422 with a
    FastAPI-style validation body (as several OpenAI-compatible wrappers answer)."""
    if status == 422:
        detail = {"detail": [{"type": "extra_forbidden", "loc": ["body", "response_format"],
                              "msg": "Extra inputs are not permitted", "input": {"type": "json_schema"}}]}
        return Reply(status=422, raw_body=json.dumps(detail).encode())
    return Reply(status=status, error="response_format json_schema is not supported by this server")


def bad_request(msg: str = "bad request") -> Reply:
    return Reply(status=400, error=msg)


FAULT_KINDS = ("429", "500", "timeout", "malformed", "truncated")


@dataclass
class Faults:
    """Seeded fault rates (each in [0, 1], summing to at most 1) for `FakeLLMServer(faults=...)`.

    `timeout_delay` must exceed the client's read timeout (the client gives up, the server answers
    late into a closed socket); `retry_after` is the 429's Retry-After in seconds."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    rate_truncated: float = 0.0
    timeout_delay: float = 1.0
    retry_after: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        rates = self.rates()
        if any(r < 0 for r in rates.values()) or sum(rates.values()) > 1 + 1e-9:
            raise ValueError(f"fault rates must be ≥ 0 and sum to ≤ 1: {rates}")

    @classmethod
    def spread(cls, total: float, *, kinds: tuple[str, ...] = FAULT_KINDS, **kw: Any) -> "Faults":
        """`total` split evenly over `kinds` (default: all five)."""
        return cls(**{f"rate_{k}": total / len(kinds) for k in kinds}, **kw)

    def rates(self) -> dict[str, float]:
        return {k: getattr(self, f"rate_{k}") for k in FAULT_KINDS}

    def draw(self, body_key: str, occurrence: int) -> str | None:
        """The fault for the `occurrence`-th request with this body (0-based), or None."""
        h = hashlib.sha256(f"{self.seed}\0{occurrence}\0{body_key}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2 ** 64
        edge = 0.0
        for kind, rate in self.rates().items():
            edge += rate
            if u < edge:
                return kind
        return None

    def apply(self, kind: str, reply: Reply) -> Reply:
        """`reply` with fault `kind` injected."""
        if kind == "429":
            return rate_limited(self.retry_after)
        if kind == "500":
            return server_error(500)
        if kind == "timeout":
            return Reply(**{**reply.__dict__, "delay": reply.delay + self.timeout_delay})
        if kind == "malformed":
            return malformed()
        text = reply.content or ""
        return Reply(**{**reply.__dict__, "content": text[: max(1, len(text) // 2)], "finish_reason": "length"})


class FakeLLMServer:
    """Threaded HTTP/1.1 (keep-alive) server speaking enough of `/v1/chat/completions`.

    `latency` is added to every reply; `max_concurrency` makes the server process at most that many
    requests at once (others wait: a model server's ceiling); `reject_json_schema` refuses any
    request carrying response_format json_schema with `reject_status` (400 OpenAI-style, 422
    FastAPI-style); `faults` injects seeded faults (see the module docstring; `injected` counts them)."""

    def __init__(self, *, latency: float = 0.0, max_concurrency: int | None = None,
                 default: Reply | None = None, handler: Callable[[dict], Reply] | None = None,
                 reject_json_schema: bool = False, reject_status: int = 400, faults: Faults | None = None,
                 port: int = 0):
        self.port = port  # 0: an ephemeral one; a test that resumes "under the same server" passes the first's
        self.latency = latency
        self.default = default or Reply()
        self.handler = handler
        self.reject_json_schema = reject_json_schema
        self.reject_status = reject_status
        self.faults = faults
        self.injected: Counter[str] = Counter()
        self._seen: Counter[str] = Counter()
        self.queue: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._gate = threading.BoundedSemaphore(max_concurrency) if max_concurrency else None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting --------------------------------------------------------------------------
    def push(self, *replies: Reply) -> "FakeLLMServer":
        with self._lock:
            self.queue.extend(replies)
        return self

    def _next(self, req: dict, entry: dict[str, Any]) -> Reply:
        with self._lock:
            if self.queue:
                return self.queue.popleft()
        if self.reject_json_schema and (req.get("response_format") or {}).get("type") == "json_schema":
            return schema_unsupported(self.reject_status)
        reply = self.handler(req) if self.handler is not None else self.default
        if self.faults is not None:
            key = json.dumps(req, sort_keys=True)
            with self._lock:
                occurrence = self._seen[key]
                self._seen[key] += 1
            kind = self.faults.draw(key, occurrence)
            entry["fault"] = kind
            if kind is not None:
                with self._lock:
                    self.injected[kind] += 1
                reply = self.faults.apply(kind, reply)
        return reply

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> "FakeLLMServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are separate writes; real servers set TCP_NODELAY too

            def log_message(self, *a: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                try:
                    req = json.loads(raw or b"{}")
                except ValueError:
                    req = {"_unparsed": raw.decode("utf-8", "replace")}
                entry = {"path": self.path, "client_port": self.client_address[1], "headers": dict(self.headers.items()), "json": req,
                         "t_start": time.perf_counter()}
                with server._lock:
                    server.requests.append(entry)
                if server._gate:
                    server._gate.acquire()
                try:
                    with server._lock:
                        server.in_flight += 1
                        server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    try:
                        reply = server._next(req, entry)
                        wait = server.latency + reply.delay
                        if wait:
                            time.sleep(wait)
                    finally:
                        with server._lock:
                            server.in_flight -= 1
                finally:
                    if server._gate:
                        server._gate.release()
                entry["t_end"] = time.perf_counter()
                self._send(reply, req)

            def _send(self, reply: Reply, req: dict) -> None:
                if reply.raw_body is not None:
                    body = reply.raw_body
                elif reply.status >= 400:
                    body = json.dumps({"error": {"message": reply.error or "error", "code": reply.status}}).encode()
                else:
                    body = json.dumps({
                        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                        "model": req.get("model", "fake"),
                        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                                     "message": {"role": "assistant", "content": reply.content,
                                                 **({"tool_calls": reply.tool_calls} if reply.tool_calls else {})}}],
                        "usage": {"prompt_tokens": reply.prompt_tokens,
                                  "completion_tokens": reply.completion_tokens,
                                  "total_tokens": reply.prompt_tokens + reply.completion_tokens},
                    }).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
                    self.close_connection = True

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out and closed its socket is expected here

        self._httpd = Server(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="fake-llm-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- assertions helpers -----------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.requests)

    def last(self) -> dict[str, Any]:
        return self.requests[-1]


def scripted_auditor(req: dict[str, Any]) -> Reply:
    """The audit's four kinds of request (verify, repair, posedness, final check), each answered in the
    shape it asks for: every answer supported, nothing to repair, a clear question, no leak."""
    system = req["messages"][0]["content"]
    if "check benchmark annotations" in system:
        return ok(json.dumps({"label": "entailed", "rationale": "stated"}))
    if "repair benchmark answers" in system:
        return ok(json.dumps({"status": "not_answerable"}))
    if "flag questions" in system:
        return ok(json.dumps({"tags": [], "suggested_question": None, "rationale": "clear"}))
    return ok(json.dumps({"leak": False, "answerable": True, "unique": True, "rationale": "fine"}))
