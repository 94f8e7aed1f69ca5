"""The one OpenAI-compatible chat client (vLLM, SGLang, Ollama, llama.cpp server, hosted APIs).

What the old scripts got wrong and this fixes: one base-URL rule; pooled keep-alive connections and
a concurrency limit instead of one request at a time on a fresh connection; bounded retries with
backoff instead of none (or forever); API failures come back as `status="error"`, never as answers;
unparseable or schema-violating replies come back as `status="invalid"`, never as a default label.
An `ok` reply served from or written to the response cache carries the hook that makes the cache
forget it if the stage refuses it (`ChatResult.reject`); the run's cassette keeps it regardless.

Base-URL rule: `base_url` is the OpenAI SDK's base_url, i.e. it ends in `/v1`
(`http://127.0.0.1:8000/v1`). A URL without a `/v1` path segment gets `/v1` appended, so
`http://127.0.0.1:8000` works too. Requests go to `{base_url}/chat/completions`.

Structured output (`structured_output`): `json_schema` sends the reply schema as
`response_format={"type": "json_schema", ...}`, `json_object` sends `{"type": "json_object"}`, `off`
sends no response_format; in every mode the reply is parsed and validated strictly here. `auto` (the
default) sends json_schema until a server refuses it: any 4xx (400, FastAPI's 422, ...) whose body
names the structured-output field (response_format / json_schema / guided_json / ...) gets the
request resent once without it, and the client remembers (`supports_json_schema = False`) so later
calls go prompt-only straight away. An explicit mode never falls back: its refusal is an error.

Time limits: `connect_timeout` (opening a connection), `timeout` (the read timeout: the longest wait
for the server's next bytes) and `deadline` (seconds for one whole call — every attempt, the waits
for a concurrency slot after the first, and the backoff sleeps; None = bounded by retries only). A
call that would pass its deadline stops with an `error` saying so instead of sleeping into it.

Reply size: `max_reply_bytes` (4 MiB by default) caps a reply on the wire and once decoded; a
compressed reply is read raw and inflated under that cap (kbvqa.data.fetch.CappedBody), never whole
by the HTTP library. An over-cap reply is an `error` saying so, not retried.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import os
import random
import re
import time
import urllib.request
from typing import Any

import httpx
import orjson
from pydantic import BaseModel

from kbvqa.data.fetch import BodyTooLarge, BodyUnreadable, accept_encoding, read_capped
from kbvqa.data.redact import excerpt
from kbvqa.data.schema import Provenance, Usage
from kbvqa.models.cache import ResponseCache, is_deterministic, make_key, schema_json
from kbvqa.models.jsonx import strip_think
from kbvqa.models.replies import interpret_reply
from kbvqa.models.result import STRUCTURED_OUTPUT_MODES, ChatResult, StructuredOutput, normalize_base_url

POOL_SHARD = 8  # connections per httpx pool (see _ensure_loop_state)
RETRY_AFTER_CAP = 300.0  # seconds; a Retry-After beyond this is treated as this
#: the most bytes a reply may have, on the wire and once decoded (a compressed reply is inflated here,
#: under this cap, never by the HTTP library: kbvqa.data.fetch.CappedBody); over it the call is an error
DEFAULT_MAX_REPLY_BYTES = 4 * 1024 * 1024  # a reply is text for one record; 4 MiB is ~1M tokens
# A 4xx body naming one of these is a server refusing structured output (vLLM, SGLang, llama.cpp,
# TGI, FastAPI-style 422 validation of wrappers), not a bad request of ours.
_SCHEMA_REFUSAL = re.compile(r"response_format|json_schema|json_object|guided_(?:json|decoding|grammar)"
                             r"|structured[ _-]?output", re.IGNORECASE)


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds from a Retry-After header (delta seconds, fractional allowed, or an HTTP date)."""
    h = resp.headers.get("retry-after") or resp.headers.get("retry-after-ms")
    if not h:
        return None
    try:
        s = float(h)
        if "retry-after-ms" in resp.headers and "retry-after" not in resp.headers:
            s /= 1000.0
        return max(0.0, min(s, RETRY_AFTER_CAP))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(h)
        return max(0.0, min(dt.timestamp() - time.time(), RETRY_AFTER_CAP))
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------------
# Transport. Plain-http servers (a local vLLM / SGLang / llama.cpp / Ollama, the usual case) are
# reached through aiohttp: measured side by side (benchmarks/llm_saturation.py, a 50 ms server at
# concurrency 64), one httpx client managed about a third of what a raw keep-alive client gets out
# of a fast server — its per-request CPU and pool bookkeeping, which grows with connections x
# waiters — and aiohttp several times more. https and proxied hosts keep httpx (certificates and
# proxies as httpx resolves them). aiohttp's failures are re-raised as the httpx exceptions the call
# loop maps (ConnectTimeout, ReadTimeout, ConnectError, ReadError, RemoteProtocolError), so retries,
# messages and deadlines are the same on both paths; note that aiohttp's timeouts are TimeoutErrors,
# which the call loop would otherwise take for its own deadline.

_ORJSON_STRICT = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                  | orjson.OPT_PASSTHROUGH_SUBCLASS)


class _Reply:
    """What the call loop reads from a response (the subset of httpx.Response it uses)."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: Any, content: bytes):
        self.status_code = status_code
        self.headers = headers  # case-insensitive (aiohttp's CIMultiDictProxy)
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        try:
            return orjson.loads(self.content)
        except orjson.JSONDecodeError:
            return json.loads(self.text)  # what httpx would accept (NaN, ...) or its ValueError


class _AiohttpPool:
    """The client's requests to one plain-http origin, over one aiohttp session whose connector
    holds `concurrency` keep-alive connections (the client's semaphore bounds requests in flight)."""

    def __init__(self, headers: dict[str, str], timeout: float, connect_timeout: float, concurrency: int):
        import aiohttp  # imported here: only plain-http clients need it

        self._aiohttp = aiohttp
        self._session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60.0, ssl=False),  # plain http
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_timeout, sock_read=timeout),
            trust_env=False,  # _fast_path already sent proxied hosts to httpx
            auto_decompress=False)  # read_capped decodes, under the reply cap

    async def post(self, url: str, *, json: Any, max_bytes: int = DEFAULT_MAX_REPLY_BYTES  # noqa: A002
                   ) -> _Reply:
        try:  # what json.dumps accepts, nothing more (no dataclass / datetime / numpy magic)
            body = orjson.dumps(json, option=_ORJSON_STRICT)
        except TypeError:
            body = _json_dumps(json)  # e.g. non-str keys or huge ints: json's answer, or its error
        ah = self._aiohttp
        try:
            async with self._session.post(url, data=body) as r:
                return _Reply(r.status, r.headers, await read_capped(
                    r.content.iter_any(), r.headers.getall("Content-Encoding", []), max_bytes,
                    r.headers.get("Content-Length")))
        except ah.ConnectionTimeoutError as e:
            raise httpx.ConnectTimeout(str(e) or "connect timeout") from None
        except ah.ServerTimeoutError as e:  # sock_read: no bytes for `timeout` seconds
            raise httpx.ReadTimeout(str(e) or "read timeout") from None
        except ah.ClientConnectorError as e:
            raise httpx.ConnectError(str(e)) from None
        except ah.ClientOSError as e:
            if "Can not write request body" in str(e):  # the server closed a kept-alive connection
                raise httpx.ConnectError(f"request not delivered: {e}") from None  # first: never received
            raise httpx.ReadError(f"{type(e).__name__}: {e}") from None
        except (ah.ServerDisconnectedError, ah.ClientPayloadError, ah.ClientResponseError) as e:
            raise httpx.RemoteProtocolError(f"{type(e).__name__}: {e}") from None
        except ah.ClientError as e:
            raise httpx.ReadError(f"{type(e).__name__}: {e}") from None

    async def aclose(self) -> None:
        if not self._session.closed:
            await self._session.close()

    def abandon(self) -> None:
        """Let go of the session without awaiting (its event loop has ended: a client reused by a
        second asyncio.run, or dropped without aclose): mark it and its connector closed so neither
        logs "Unclosed client session" at exit; the sockets close when collected, as httpx's do."""
        session = self._session
        connector = session.connector
        if connector is not None and not session.closed:
            session.detach()
            connector._close()  # synchronous; a no-op beyond marking it when the loop is closed

    def __del__(self) -> None:
        try:
            self.abandon()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to tidy
            pass


async def _post_capped(pool: Any, url: str, body: Any, max_bytes: int) -> _Reply:
    """POST on either transport and read the reply raw, decoded under `max_bytes` (BodyTooLarge /
    BodyUnreadable otherwise): httpx and aiohttp would inflate a compressed reply whole."""
    if isinstance(pool, _AiohttpPool):
        return await pool.post(url, json=body, max_bytes=max_bytes)
    async with pool.stream("POST", url, json=body) as r:
        return _Reply(r.status_code, r.headers, await read_capped(
            r.aiter_raw(), r.headers.get_list("content-encoding"), max_bytes, r.headers.get("content-length")))


def _json_dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _fast_path(base_url: str) -> httpx.URL | None:
    """The URL when requests can go through `_AiohttpPool`: plain http and no proxy from the environment
    for that host (httpx would use it)."""
    url = httpx.URL(base_url)
    if url.scheme != "http" or not url.host:
        return None
    proxies = urllib.request.getproxies_environment()
    if (proxies.get("http") or proxies.get("all")) and not urllib.request.proxy_bypass_environment(url.host):
        return None
    return url


class _Retryable(Exception):
    def __init__(self, reason: str, delay: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class OpenAIChatClient:
    """Async client for `POST {base_url}/chat/completions` with pooling, a concurrency limit,
    bounded retries, structured output with prompt-only fallback, time limits, cache and usage
    accounting (see the module docstring).

    `max_retries` counts retries after the first attempt (max_retries=4 → at most 5 requests; one
    more when `auto` structured output falls back, which happens once per client that needs it).
    `usage.calls` counts every attempt — refused, timed-out and ones that never connected included
    (a job against a closed port reports its tries, not "0 requests"); `usage.seconds` is the call's
    wall time."""

    backend = "openai"

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, concurrency: int = 8,
                 timeout: float = 60, max_retries: int = 4, backoff_base: float = 0.5,
                 backoff_max: float = 20, temperature: float = 0.0, max_tokens: int | None = None,
                 price_in_per_mtok: float = 0.0, price_out_per_mtok: float = 0.0,
                 cache: ResponseCache | None = None, extra_params: dict[str, Any] | None = None,
                 json_schema_strict: bool = False, connect_timeout: float = 10.0, deadline: float | None = None,
                 structured_output: StructuredOutput = "auto", max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES):
        if concurrency < 1:
            raise ValueError("concurrency must be ≥ 1")
        if max_retries < 0:
            raise ValueError("max_retries must be ≥ 0")
        if timeout <= 0 or connect_timeout <= 0 or (deadline is not None and deadline <= 0):
            raise ValueError("timeout, connect_timeout and deadline must be > 0")
        if max_reply_bytes < 1:
            raise ValueError("max_reply_bytes must be ≥ 1")
        if structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ValueError(f"structured_output must be one of {', '.join(STRUCTURED_OUTPUT_MODES)} "
                             f"(got {structured_output!r})")
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self._api_key = api_key or os.environ.get("KBVQA_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.concurrency = concurrency
        self.timeout = float(timeout)  # the read timeout
        self.connect_timeout = float(connect_timeout)
        self.deadline = None if deadline is None else float(deadline)
        self.structured_output = structured_output
        self.max_reply_bytes = int(max_reply_bytes)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.price_in_per_mtok = price_in_per_mtok
        self.price_out_per_mtok = price_out_per_mtok
        self.cache = cache
        # A run's model cassette (models.cache.ModelCassette): recording writes every call into it, whatever
        # `cache` does; `cassette_replay` answers from it only (a miss is an error, never a live call).
        self.cassette: ResponseCache | None = None
        self.cassette_replay = False
        self.extra_params = dict(extra_params or {})
        self.json_schema_strict = json_schema_strict
        self.supports_json_schema: bool | None = None  # None = not yet known; False once a server refused it
        self.provenance = Provenance(backend="openai", model=model, base_url=self.base_url)
        self.total_usage = Usage()
        self._pools: list[httpx.AsyncClient] = []
        self._pool_cap: list[int] = []
        self._pool_busy: list[int] = []
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatClient(model={self.model!r}, base_url={self.base_url!r}, concurrency={self.concurrency})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle for another process (Ray actors): pools, semaphore and loop belong to this process's
        event loop, so they are dropped and `_ensure_loop_state` rebuilds them on first use there."""
        state = self.__dict__.copy()
        state.update(_pools=[], _pool_cap=[], _pool_busy=[], _sem=None, _loop=None)
        return state

    # -- plumbing ---------------------------------------------------------------------------
    def _ensure_loop_state(self) -> tuple[list[httpx.AsyncClient], asyncio.Semaphore]:
        """Pool and semaphore belong to one event loop; a new loop (a second asyncio.run) gets new ones.

        A plain-http server gets one `_AiohttpPool` (see the transport notes above). Otherwise the
        connections are split over several small httpx pools (POOL_SHARD each): httpcore's pool
        bookkeeping costs O(connections × waiting requests) per event, which at 32+ connections
        in one pool eats most of a core and keeps the client below the server's ceiling."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or not self._pools or self._sem is None:
            for old in self._pools:  # from an event loop that has ended
                if isinstance(old, _AiohttpPool):
                    old.abandon()
            headers = {"Content-Type": "application/json", "Accept-Encoding": accept_encoding()}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            fast = _fast_path(self.base_url)
            if fast is not None:
                self._pools = [_AiohttpPool(headers, self.timeout, self.connect_timeout,  # type: ignore[list-item]
                                            self.concurrency)]
                sizes = [self.concurrency]
            else:
                sizes = [POOL_SHARD] * (self.concurrency // POOL_SHARD)
                if self.concurrency % POOL_SHARD:
                    sizes.append(self.concurrency % POOL_SHARD)
                self._pools = [httpx.AsyncClient(
                    headers=headers,
                    timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                    limits=httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=60.0),
                ) for n in sizes]
            self._pool_cap = sizes
            self._pool_busy = [0] * len(sizes)
            self._sem = asyncio.Semaphore(self.concurrency)
            self._loop = loop
        return self._pools, self._sem

    def _pick_pool(self) -> int:
        """Least-busy shard; called with the semaphore held, so one has a free slot."""
        if len(self._pools) == 1:
            return 0
        return min(range(len(self._pools)), key=lambda i: self._pool_busy[i] - self._pool_cap[i])

    async def aclose(self) -> None:
        for pool in self._pools:
            try:
                await pool.aclose()
            except RuntimeError:  # pool created on a loop that has since closed
                pass
        self._pools = []
        self._sem = None
        self._loop = None

    async def __aenter__(self) -> "OpenAIChatClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter in [50%, 100%] of the capped step."""
        step = min(self.backoff_max, self.backoff_base * (2 ** attempt))
        return step * (0.5 + random.random() * 0.5)

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {"temperature": self.temperature}
        if self.max_tokens is not None:
            merged["max_tokens"] = self.max_tokens
        merged.update(self.extra_params)
        merged.update(params)
        return {k: v for k, v in merged.items() if v is not None}

    # -- the call ---------------------------------------------------------------------------
    async def chat(self, messages: list[dict], *, schema: type[BaseModel] | dict | None = None,
                   prompt_version: str = "", **params: Any) -> ChatResult:
        """One chat completion → ChatResult (ok / invalid / error). Never raises for API trouble."""
        t0 = time.perf_counter()
        prov = self.provenance.model_copy(update={"prompt_version": prompt_version or None})
        call_params = self._params(params)
        cacheable = self.cache is not None and is_deterministic(call_params)
        key = None
        if cacheable or self.cassette is not None:
            key = make_key("openai", self.base_url, self.model, messages, call_params, prompt_version, schema)
        if self.cassette_replay:
            hit = self.cassette.get(key) if self.cassette is not None else None  # type: ignore[arg-type]
            if hit is None:
                res = ChatResult(status="error", provenance=prov, usage=Usage(seconds=time.perf_counter() - t0),
                                 reason="cassette miss: this request was not recorded (replay never goes live)")
            else:
                res = hit.model_copy(update={"cached": True, "provenance": prov,
                                             "usage": Usage(seconds=time.perf_counter() - t0)})
            self.total_usage = self.total_usage.add(res.usage)
            return res
        hit = self.cache.get(key) if cacheable else None  # type: ignore[union-attr, arg-type]
        if hit is not None:
            res = hit.model_copy(update={"cached": True, "provenance": prov,
                                         "usage": Usage(seconds=time.perf_counter() - t0)})
        else:
            res = await self._call(messages, schema, call_params, prov, t0)
            if cacheable and res.status == "ok":
                self.cache.put(key, res)  # type: ignore[union-attr, arg-type]
        if cacheable and res.status == "ok":  # a stage that refuses it makes the cache forget it
            res.on_reject(functools.partial(self.cache.forget, key))  # type: ignore[union-attr]
        self.total_usage = self.total_usage.add(res.usage)
        if self.cassette is not None:  # the run's record: every call, as the run saw it
            self.cassette.put(key, res)  # type: ignore[arg-type]
        return res

    def _response_format(self, schema: type[BaseModel] | dict | None) -> dict[str, Any] | None:
        """What this call sends as response_format (None: nothing), by `structured_output`."""
        mode = self.structured_output
        if schema is None or mode == "off":
            return None
        if mode == "json_object":
            return {"type": "json_object"}
        if mode == "auto" and self.supports_json_schema is False:
            return None
        sj = schema_json(schema) or {}
        if "name" in sj and "schema" in sj:
            name, js = sj["name"], sj["schema"]
        else:
            name, js = "response", sj
        return {"type": "json_schema", "json_schema": {"name": re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64],
                                                       "schema": js, "strict": self.json_schema_strict}}

    def _body(self, messages: list[dict], params: dict[str, Any], response_format: dict[str, Any] | None
              ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, **params}
        if response_format is not None:
            body["response_format"] = response_format
        return body

    async def _call(self, messages: list[dict], schema: type[BaseModel] | dict | None,
                    params: dict[str, Any], prov: Provenance, t0: float) -> ChatResult:
        pools, sem = self._ensure_loop_state()
        url = f"{self.base_url}/chat/completions"
        requests_sent = 0  # every attempt, one that could not connect included (a closed port is 5 tries, not 0)
        attempt = 0
        fallback_used = False
        deadline_at: float | None = None  # the clock starts when the first attempt gets a slot

        def usage(pt: int = 0, ct: int = 0) -> Usage:
            cost = pt * self.price_in_per_mtok / 1e6 + ct * self.price_out_per_mtok / 1e6
            return Usage(prompt_tokens=pt, completion_tokens=ct, cost=cost,
                         seconds=time.perf_counter() - t0, calls=requests_sent)

        def error(reason: str) -> ChatResult:
            return ChatResult(status="error", reason=reason, usage=usage(), provenance=prov)

        while True:
            response_format = self._response_format(schema)
            body = self._body(messages, params, response_format)
            try:
                async with sem:
                    now = time.perf_counter()
                    if deadline_at is None and self.deadline is not None:
                        deadline_at = now + self.deadline
                    left = None if deadline_at is None else deadline_at - now
                    if left is not None and left <= 0:
                        return error(f"deadline of {self.deadline:g}s passed before attempt {attempt + 1} "
                                     f"({requests_sent} requests sent)")
                    requests_sent += 1
                    shard = self._pick_pool()
                    self._pool_busy[shard] += 1
                    try:
                        if left is None:  # no deadline: no timer to arm and cancel per request
                            resp = await _post_capped(pools[shard], url, body, self.max_reply_bytes)
                        else:
                            async with asyncio.timeout(left):
                                resp = await _post_capped(pools[shard], url, body, self.max_reply_bytes)
                    except TimeoutError:  # asyncio.timeout: the call's deadline, not the read timeout
                        return error(f"deadline of {self.deadline:g}s passed during attempt {attempt + 1} "
                                     f"({requests_sent} requests sent)")
                    except httpx.TimeoutException as e:
                        which = "connect" if isinstance(e, httpx.ConnectTimeout) else "read"
                        limit = self.connect_timeout if which == "connect" else self.timeout
                        raise _Retryable(f"{which} timeout after {limit:g}s ({type(e).__name__})") from None
                    except httpx.TransportError as e:
                        raise _Retryable(f"connection error: {type(e).__name__}: {e}") from None
                    except BodyTooLarge as e:  # not retried: the server would send it again
                        return error(f"reply refused: {e} (max_reply_bytes = {self.max_reply_bytes})")
                    except BodyUnreadable as e:
                        raise _Retryable(f"unreadable reply: {e}") from None
                    finally:
                        self._pool_busy[shard] -= 1
                status = resp.status_code
                if status == 429:
                    raise _Retryable("HTTP 429 rate limited", _retry_after(resp))
                if status >= 500:
                    raise _Retryable(f"HTTP {status}: {excerpt(resp.text, 200)}", _retry_after(resp))
                if status >= 400:
                    text = excerpt(resp.text, 2000)
                    refused = response_format is not None and _SCHEMA_REFUSAL.search(text)
                    if refused and self.structured_output == "auto" and not fallback_used:
                        # The server cannot do structured output: remember, resend once prompt-only.
                        self.supports_json_schema = False
                        fallback_used = True
                        continue
                    hint = (f" (the server refuses structured_output={self.structured_output}; "
                            "set structured_output = \"auto\" or \"off\" for this role)") if refused else ""
                    return error(f"HTTP {status}: {text[:300]}{hint}")
                try:
                    payload = resp.json()
                    choice = payload["choices"][0]
                    msg = choice.get("message") or {}
                    content = msg.get("content")
                    if content is not None and not isinstance(content, str):
                        # some servers return content parts
                        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
                    raise _Retryable(f"malformed response body ({type(e).__name__}): "
                                     f"{excerpt(resp.text, 120)!r}") from None
            except _Retryable as r:
                if attempt >= self.max_retries:
                    return error(f"{r.reason} (after {requests_sent} attempts)")
                delay = r.delay if r.delay is not None else self._backoff(attempt)
                if deadline_at is not None and time.perf_counter() + delay >= deadline_at:
                    return error(f"{r.reason}; no retry: waiting {delay:.2g}s would pass the deadline of "
                                 f"{self.deadline:g}s (after {requests_sent} attempts)")
                attempt += 1
                await asyncio.sleep(delay)
                continue
            if response_format is not None and response_format["type"] == "json_schema":
                self.supports_json_schema = True
            u = payload.get("usage") or {}
            res_usage = usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
            asked = params.get("max_tokens")
            if asked is not None and res_usage.completion_tokens > int(asked):  # the server ignored the limit
                return ChatResult(status="invalid", usage=res_usage, provenance=prov,
                                  reason=f"the reply has {res_usage.completion_tokens} completion tokens, more than "
                                         f"the max_tokens={asked} asked for (not used: budgets must bind)")
            text = strip_think(content or "")
            status_, data, reason = interpret_reply(text, schema)
            finish = choice.get("finish_reason")
            if status_ == "invalid" and finish == "length":
                reason += " (reply truncated: finish_reason=length; raise max_tokens)"
            return ChatResult(status=status_, text=text, data=data, reason=reason, usage=res_usage,
                              provenance=prov, raw=payload)
