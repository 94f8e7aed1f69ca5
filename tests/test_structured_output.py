"""Per-role call settings against the local fake server: structured output (auto falls back once on a
400 or a FastAPI-style 422 and remembers; each explicit mode sends what it says and never falls back)
and the time limits (connect / read timeouts, a whole-call deadline) from RoleConfig and flags."""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import pytest
from fake_llm_server import (
    FakeLLMServer,
    Reply,
    bad_request,
    ok,
    rate_limited,
    server_error,
    slow,
)

from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.config import (
    ConfigError,
    RoleConfig,
    build_roles,
    load_model_config,
    roles_from_flags,
)
from kbvqa.models.replies import Reply as StrictReply

MSG = [{"role": "user", "content": "Is the answer in the evidence?"}]
FAST = {"backoff_base": 0.001, "backoff_max": 0.01}


class Verdict(StrictReply):
    label: Literal["yes", "no"]
    reason: str = ""


def _calls(srv: FakeLLMServer, client_kw: dict, n: int = 2, schema=Verdict):
    async def go():
        async with OpenAIChatClient(srv.base_url, "m", **{**FAST, **client_kw}) as c:
            return c, [await c.chat(MSG, schema=schema) for _ in range(n)]
    return asyncio.run(go())


def _formats(srv: FakeLLMServer) -> list:
    return [q["json"].get("response_format") for q in srv.requests]


# ------------------------------------------------------------------------------ structured output

@pytest.mark.parametrize("status", [400, 422])
def test_auto_falls_back_once_on_a_refusal_and_remembers(status):
    with FakeLLMServer(reject_json_schema=True, reject_status=status, default=ok('{"label": "no"}')) as srv:
        c, (r1, r2) = _calls(srv, {})
    assert r1.status == r2.status == "ok" and r1.data["label"] == r2.data["label"] == "no"
    assert c.supports_json_schema is False
    assert [(f or {}).get("type") for f in _formats(srv)] == ["json_schema", None, None]
    assert r1.usage.calls == 2 and r2.usage.calls == 1  # the refused request is counted, once
    assert [q["json"].get("response_format") is None for q in srv.requests] == [False, True, True]


def test_a_4xx_that_does_not_name_structured_output_is_an_error_not_a_fallback():
    with FakeLLMServer(default=bad_request("messages: unknown role 'robot'")) as srv:
        c, (r,) = _calls(srv, {}, n=1)
    assert r.status == "error" and "HTTP 400" in r.reason and srv.count == 1
    assert c.supports_json_schema is None  # nothing learnt about structured output


def test_auto_learns_support_and_keeps_sending_the_schema():
    with FakeLLMServer(default=ok('{"label": "yes"}')) as srv:
        c, rs = _calls(srv, {}, n=2)
    assert all(r.status == "ok" for r in rs) and c.supports_json_schema is True
    sent = _formats(srv)
    assert [f["type"] for f in sent] == ["json_schema", "json_schema"]
    assert sent[0]["json_schema"]["name"] == "Verdict" and sent[0]["json_schema"]["schema"]["required"] == ["label"]


@pytest.mark.parametrize("mode,expected", [("auto", "json_schema"), ("json_schema", "json_schema"),
                                           ("json_object", "json_object"), ("off", None)])
def test_each_mode_sends_what_it_says(mode, expected):
    with FakeLLMServer(default=ok('{"label": "yes"}')) as srv:
        _, (r,) = _calls(srv, {"structured_output": mode}, n=1)
        _, (plain,) = _calls(srv, {"structured_output": mode}, n=1, schema=None)  # no schema: never a format
    assert r.status == "ok" and r.data == {"label": "yes", "reason": ""} and plain.status == "ok"
    first, second = _formats(srv)
    assert (first or {}).get("type") == expected and second is None
    if expected == "json_object":
        assert first == {"type": "json_object"}


@pytest.mark.parametrize("mode", ["json_object", "off"])
def test_replies_are_validated_strictly_in_every_mode(mode):
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "maybe"}'), ok('{"label": "yes", "reason": "<one sentence>"}'), ok("{}"))
        _, rs = _calls(srv, {"structured_output": mode}, n=3)
    assert [r.status for r in rs] == ["invalid"] * 3 and all(r.data is None for r in rs)
    assert "template slot" in rs[1].reason


@pytest.mark.parametrize("mode,status", [("json_schema", 400), ("json_schema", 422), ("json_object", 400)])
def test_an_explicit_mode_never_falls_back(mode, status):
    def refuse(req):
        fmt = req.get("response_format")
        if fmt is None:
            return ok('{"label": "yes"}')
        if status == 422:
            return Reply(status=422, raw_body=b'{"detail": [{"loc": ["body", "response_format"], "msg": "bad"}]}')
        return bad_request(f"response_format type {fmt['type']} is not supported")

    with FakeLLMServer(handler=refuse) as srv:
        c, (r,) = _calls(srv, {"structured_output": mode}, n=1)
    assert r.status == "error" and f"HTTP {status}" in r.reason and "structured_output" in r.reason
    assert srv.count == 1 and r.usage.calls == 1 and c.supports_json_schema is not False


def test_role_config_and_flags_carry_the_mode(tmp_path):
    assert RoleConfig(backend="openai", model="m", base_url="http://h:1").structured_output == "auto"
    with pytest.raises(ValueError):
        RoleConfig(backend="openai", model="m", base_url="http://h:1", structured_output="grammar")
    toml = tmp_path / "k.toml"
    toml.write_text('[models.judge]\nbackend = "openai"\nmodel = "j"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'structured_output = "json_object"\n', encoding="utf-8")
    assert build_roles(load_model_config(toml), env={})["judge"].structured_output == "json_object"
    roles = roles_from_flags(toml, llm="http://127.0.0.1:9", model="a", fill=("answerer",), env={},
                             structured_output="off")
    assert roles["answerer"].structured_output == "off" and roles["judge"].structured_output == "off"
    assert roles_from_flags(toml, env={})["judge"].structured_output == "json_object"  # no flag: the file's
    with pytest.raises(ConfigError, match="structured_output"):
        roles_from_flags(None, llm="http://127.0.0.1:9", model="a", fill=("answerer",), structured_output="xml")


# ----------------------------------------------------------------------------------- time limits

def test_timeouts_from_config_old_name_and_flags(tmp_path):
    rc = RoleConfig(backend="openai", model="m", base_url="http://h:1", timeout=30)  # a config from before
    assert rc.read_timeout == 30 and rc.timeout == 30 and rc.connect_timeout == 10 and rc.deadline is None
    assert "timeout" not in rc.model_dump() and rc.model_dump()["read_timeout"] == 30
    with pytest.raises(ValueError, match="old name"):
        RoleConfig(backend="openai", model="m", base_url="http://h:1", timeout=30, read_timeout=40)
    toml = tmp_path / "k.toml"
    toml.write_text('[models.verifier]\nbackend = "openai"\nmodel = "v"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'timeout = 45\nconnect_timeout = 2.5\ndeadline = 90\n', encoding="utf-8")
    v = build_roles(load_model_config(toml), env={})["verifier"]
    assert (v.timeout, v.connect_timeout, v.deadline) == (45, 2.5, 90)
    # flags override the file's either-named read timeout and reach the --llm client
    roles = roles_from_flags(toml, llm="http://127.0.0.1:9", model="a", fill=("repairer",), env={},
                             timeout=20, connect_timeout=1, deadline=30, max_retries=2)
    for c in (roles["verifier"], roles["repairer"]):
        assert (c.timeout, c.connect_timeout, c.deadline, c.max_retries) == (20, 1, 30, 2)
    plain = roles_from_flags(None, llm="http://127.0.0.1:9", model="a", fill=("repairer",), env={})["repairer"]
    assert (plain.timeout, plain.connect_timeout, plain.deadline) == (60, 10, None)  # RoleConfig's defaults
    with pytest.raises(ConfigError):
        roles_from_flags(None, llm="http://127.0.0.1:9", model="a", fill=("repairer",), deadline=0)


def test_read_timeout_is_retried_and_named():
    with FakeLLMServer() as srv:
        srv.push(slow(0.6), slow(0.6))
        _, (r,) = _calls(srv, {"timeout": 0.15, "max_retries": 1}, n=1, schema=None)
    assert r.status == "error" and "read timeout after 0.15s" in r.reason and r.usage.calls == 2


def test_deadline_bounds_a_call_with_retries_and_backoff():
    with FakeLLMServer(default=server_error(500)) as srv:
        t0 = time.perf_counter()
        _, (r,) = _calls(srv, {"max_retries": 50, "backoff_base": 0.05, "backoff_max": 0.05, "deadline": 0.4}, n=1)
        took = time.perf_counter() - t0
    assert r.status == "error" and "deadline of 0.4s" in r.reason
    assert took < 1.0 and 2 <= srv.count < 20 and r.usage.calls == srv.count


def test_deadline_cuts_a_slow_attempt_and_a_long_retry_after():
    with FakeLLMServer() as srv:
        srv.push(slow(1.0))
        t0 = time.perf_counter()
        _, (r,) = _calls(srv, {"timeout": 5, "deadline": 0.3}, n=1, schema=None)
        assert time.perf_counter() - t0 < 0.9
        assert r.status == "error" and "during attempt 1" in r.reason and r.usage.calls == 1
        srv.push(rate_limited(30))  # Retry-After 30 s: waiting would pass the deadline, so no retry
        t0 = time.perf_counter()
        _, (r,) = _calls(srv, {"deadline": 5}, n=1, schema=None)
        assert time.perf_counter() - t0 < 1.0
    assert r.status == "error" and "would pass the deadline" in r.reason and r.usage.calls == 1


def test_model_limit_flags_reach_the_client():
    """--timeout / --connect-timeout / --deadline / --structured-output / --max-retries on a command
    build the judge with those settings (one builder, roles_from_flags)."""
    from kbvqa.pipelines.score import judge_client
    from kbvqa.runner.options import CallLimits

    limits = CallLimits(timeout=12.0, connect_timeout=3.0, deadline=40.0, structured_output="off",
                        max_retries=1).limits()
    client = judge_client(base_url="http://127.0.0.1:9/v1", model="m", limits=limits)
    assert (client.timeout, client.max_retries) == (12.0, 1)
    assert client.structured_output == "off" and client.deadline == 40.0 and client.connect_timeout == 3.0
