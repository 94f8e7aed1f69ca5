"""OpenAIChatClient against the local fake server: retries, errors, schema, concurrency."""

import asyncio
import time
from typing import Literal

import pytest
from pydantic import BaseModel

from fake_llm_server import (FakeLLMServer, Reply, bad_request, malformed, ok, rate_limited, server_error,
                             slow)
from kbvqa.models.client import OpenAIChatClient, normalize_base_url

MSG = [{"role": "user", "content": "Is the answer in the evidence?"}]
FAST = dict(backoff_base=0.001, backoff_max=0.01)


class Verdict(BaseModel):
    label: Literal["yes", "no"]
    reason: str = ""


def run(coro):
    return asyncio.run(coro)


async def _one(srv, call=None, **kw):
    async with OpenAIChatClient(srv.base_url, "fake-model", **{**FAST, **kw}) as c:
        res = await c.chat(MSG, **(call or {}))
        return c, res


def test_base_url_rule():
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalize_base_url("https://api.x.com/v1/openai") == "https://api.x.com/v1/openai"
    assert normalize_base_url("http://h/proxy") == "http://h/proxy/v1"
    with pytest.raises(ValueError):
        normalize_base_url("h:8000")


def test_success_usage_cost_and_auth(monkeypatch):
    monkeypatch.delenv("KBVQA_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeLLMServer() as srv:
        srv.push(ok("Paris", prompt_tokens=1000, completion_tokens=500))

        async def go():
            async with OpenAIChatClient(srv.base_url.removesuffix("/v1"), "m1", price_in_per_mtok=2.0,
                                        price_out_per_mtok=8.0, max_tokens=512) as c:
                r = await c.chat(MSG, prompt_version="judge@1")
                return c, r
        c, r = run(go())
    assert r.status == "ok" and r.text == "Paris" and r.data is None
    assert r.usage.prompt_tokens == 1000 and r.usage.completion_tokens == 500 and r.usage.calls == 1
    assert r.usage.cost == pytest.approx(1000 * 2 / 1e6 + 500 * 8 / 1e6)
    assert r.provenance.model == "m1" and r.provenance.prompt_version == "judge@1"
    assert c.total_usage.cost == pytest.approx(r.usage.cost)
    req = srv.last()
    assert req["path"] == "/v1/chat/completions"
    assert "Authorization" not in req["headers"] and "authorization" not in {k.lower() for k in req["headers"]}
    assert req["json"]["temperature"] == 0.0 and req["json"]["max_tokens"] == 512
    assert "response_format" not in req["json"]


def test_a_reply_longer_than_its_max_tokens_is_invalid():
    """A server that ignores max_tokens: the reply is not handed on (budgets must bind), its cost counts."""
    with FakeLLMServer() as srv:
        srv.push(ok("a very long essay", prompt_tokens=10, completion_tokens=5000))

        async def go():
            async with OpenAIChatClient(srv.base_url, "m1", max_tokens=64) as c:
                return await c.chat(MSG)
        r = run(go())
    assert r.status == "invalid" and "5000 completion tokens, more than the max_tokens=64" in r.reason
    assert r.text is None and r.usage.completion_tokens == 5000 and r.usage.calls == 1


def test_api_key_header_and_never_in_provenance(monkeypatch):
    monkeypatch.setenv("KBVQA_API_KEY", "sk-secret-123")
    with FakeLLMServer() as srv:
        c, r = run(_one(srv))
    assert srv.last()["headers"]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in r.model_dump_json() and "sk-secret" not in repr(c)


def test_429_then_ok_honours_retry_after():
    with FakeLLMServer() as srv:
        srv.push(rate_limited(0.2), ok("fine"))
        t0 = time.perf_counter()
        _, r = run(_one(srv))
        dt = time.perf_counter() - t0
    assert r.status == "ok" and r.text == "fine"
    assert srv.count == 2 and r.usage.calls == 2
    assert dt >= 0.2  # waited what the server asked, not the 1 ms backoff


def test_5xx_exhausts_retries_and_is_an_error_not_an_answer():
    with FakeLLMServer() as srv:
        srv.push(*[server_error(500)] * 10)
        _, r = run(_one(srv, max_retries=3))
    assert r.status == "error" and r.text is None and r.data is None
    assert "HTTP 500" in r.reason and "after 4 attempts" in r.reason
    assert srv.count == 4


def test_4xx_is_not_retried():
    with FakeLLMServer() as srv:
        srv.push(bad_request("model not found"), ok("never"))
        _, r = run(_one(srv))
    assert r.status == "error" and "HTTP 400" in r.reason and "model not found" in r.reason
    assert srv.count == 1


def test_timeout_is_retried():
    with FakeLLMServer() as srv:
        srv.push(slow(1.0), ok("second try"))
        _, r = run(_one(srv, timeout=0.2))
    assert r.status == "ok" and r.text == "second try"
    assert srv.count == 2


def test_connection_refused_is_an_error():
    srv = FakeLLMServer().start()
    url = srv.base_url
    srv.stop()

    async def go():
        async with OpenAIChatClient(url, "m", max_retries=1, **FAST) as c:
            return await c.chat(MSG)
    r = run(go())
    assert r.status == "error" and "connection error" in r.reason and "after 2 attempts" in r.reason
    assert r.usage.calls == 2  # both attempts are counted, though no request ever reached a server


def test_malformed_body_is_retried_then_error():
    with FakeLLMServer() as srv:
        srv.push(malformed(), ok("ok now"))
        _, r = run(_one(srv))
        assert r.status == "ok" and srv.count == 2
        srv.push(*[malformed()] * 3)
        _, r = run(_one(srv, max_retries=2))
    assert r.status == "error" and "malformed response body" in r.reason


def test_schema_ok_with_think_and_fences():
    with FakeLLMServer() as srv:
        srv.push(ok('<think>the label might be no</think>\n```json\n{"label": "yes", "reason": "found"}\n```'))
        _, r = run(_one(srv, call={"schema": Verdict}))
    assert r.status == "ok" and r.data == {"label": "yes", "reason": "found"}
    assert r.as_model(Verdict).label == "yes"
    assert r.text.startswith("```json")  # think removed from text
    rf = srv.last()["json"]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "Verdict"
    assert rf["json_schema"]["schema"]["properties"]["label"]["enum"] == ["yes", "no"]


def test_unparseable_reply_is_invalid_never_a_default():
    with FakeLLMServer() as srv:
        srv.push(ok("I believe the answer is yes."))
        _, r = run(_one(srv, call={"schema": Verdict}))
    assert r.status == "invalid" and r.data is None
    assert r.reason.startswith("unparseable JSON") and r.text == "I believe the answer is yes."
    with pytest.raises(ValueError):
        r.as_model(Verdict)


def test_schema_violation_is_invalid():
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "maybe"}'))
        _, r = run(_one(srv, call={"schema": Verdict}))
    assert r.status == "invalid" and "Verdict validation failed" in r.reason and "label" in r.reason


def test_dict_schema_checks_required_and_enum():
    schema = {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["a", "b"]}}}
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "a"}'), ok('{"other": 1}'), ok('{"label": "c"}'))

        async def go():
            async with OpenAIChatClient(srv.base_url, "m", **FAST) as c:
                return [await c.chat(MSG, schema=schema) for _ in range(3)]
        a, b, cc = run(go())
    assert a.status == "ok" and a.data == {"label": "a"}
    assert b.status == "invalid" and "missing required" in b.reason
    assert cc.status == "invalid" and "not one of" in cc.reason
    assert srv.requests[0]["json"]["response_format"]["json_schema"]["name"] == "response"


def test_truncated_reply_reason_mentions_length():
    with FakeLLMServer() as srv:
        srv.push(ok('<think>long thinking that never ends', finish_reason="length"))
        _, r = run(_one(srv, call={"schema": Verdict}))
    assert r.status == "invalid" and "finish_reason=length" in r.reason


def test_json_schema_400_falls_back_once_and_is_remembered():
    with FakeLLMServer(reject_json_schema=True, default=Reply(content='{"label": "no"}')) as srv:
        async def go():
            async with OpenAIChatClient(srv.base_url, "m", **FAST) as c:
                r1 = await c.chat(MSG, schema=Verdict)
                r2 = await c.chat(MSG, schema=Verdict)
                return c, r1, r2
        c, r1, r2 = run(go())
    assert r1.status == "ok" and r1.data["label"] == "no" and r2.status == "ok"
    assert c.supports_json_schema is False
    sent = ["response_format" in q["json"] for q in srv.requests]
    assert sent == [True, False, False]  # one rejected attempt, then prompt-only JSON


def test_empty_reply_without_schema_is_invalid():
    with FakeLLMServer() as srv:
        srv.push(Reply(content=None))
        _, r = run(_one(srv))
    assert r.status == "invalid" and r.reason == "empty reply"


def test_concurrency_limit_respected_and_pooling():
    with FakeLLMServer(latency=0.05) as srv:
        async def go():
            async with OpenAIChatClient(srv.base_url, "m", concurrency=4, **FAST) as c:
                return await asyncio.gather(*(c.chat([{"role": "user", "content": str(i)}]) for i in range(24)))
        t0 = time.perf_counter()
        results = run(go())
        dt = time.perf_counter() - t0
    assert all(r.status == "ok" for r in results)
    assert srv.max_in_flight <= 4
    assert srv.max_in_flight == 4  # the limit is actually used
    assert dt < 24 * 0.05 / 2  # far faster than sequential
    ports = {q["client_port"] for q in srv.requests}
    assert len(ports) <= 4  # 24 requests over at most 4 kept-alive connections


def test_client_reusable_across_event_loops():
    with FakeLLMServer() as srv:
        c = OpenAIChatClient(srv.base_url, "m", **FAST)
        assert run(c.chat(MSG)).status == "ok"
        assert run(c.chat(MSG)).status == "ok"  # a second asyncio.run gets a fresh pool
        run(c.aclose())
