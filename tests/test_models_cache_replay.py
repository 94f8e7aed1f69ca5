"""Response cache, cassettes and the rules backend."""

import asyncio
import json
from typing import Literal

import pytest
from pydantic import BaseModel

from fake_llm_server import FakeLLMServer, Reply, ok, server_error
from kbvqa.models.cache import ResponseCache, is_deterministic, make_key
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.replay import ReplayClient
from kbvqa.models.result import ChatResult, ModelClient
from kbvqa.models.rules import RulesClient, get_rule, list_rules, register_rule
from kbvqa.runner.stage import Invalid

MSG = [{"role": "user", "content": "Q?"}]
FAST = dict(backoff_base=0.001, backoff_max=0.01)


class Label(BaseModel):
    label: Literal["yes", "no"]


def run(coro):
    return asyncio.run(coro)


def test_make_key_is_canonical_and_sensitive():
    k = make_key("openai", "http://h/v1", "m", MSG, {"temperature": 0, "max_tokens": None}, "p@1", Label)
    assert k == make_key("openai", "http://h/v1", "m", [{"content": "Q?", "role": "user"}], {"temperature": 0},
                         "p@1", Label)
    for other in [make_key("openai", "http://h/v1", "m2", MSG, {"temperature": 0}, "p@1", Label),
                  make_key("openai", "http://h2/v1", "m", MSG, {"temperature": 0}, "p@1", Label),
                  make_key("openai", "http://h/v1", "m", MSG, {"temperature": 0}, "p@2", Label),
                  make_key("openai", "http://h/v1", "m", MSG, {"temperature": 0}, "p@1", None),
                  make_key("openai", "http://h/v1", "m", MSG, {"temperature": 0, "seed": 1}, "p@1", Label)]:
        assert other != k
    assert is_deterministic({"temperature": 0.0}) and is_deterministic({"temperature": 0.7, "seed": 3})
    assert not is_deterministic({"temperature": 0.7})


def test_cache_hit_on_second_deterministic_call(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeLLMServer(default=Reply(content='{"label": "yes"}', prompt_tokens=7)) as srv:
        async def go():
            async with OpenAIChatClient(srv.base_url, "m", cache=cache, **FAST) as c:
                a = await c.chat(MSG, schema=Label, prompt_version="v1")
                b = await c.chat(MSG, schema=Label, prompt_version="v1")
                d = await c.chat(MSG, schema=Label, prompt_version="v2")  # new prompt → new key
                return c, a, b, d
        c, a, b, d = run(go())
    assert srv.count == 2
    assert not a.cached and b.cached and not d.cached
    assert b.data == a.data == {"label": "yes"} and b.status == "ok"
    assert b.usage.calls == 0 and b.usage.prompt_tokens == 0 and a.usage.prompt_tokens == 7
    assert c.total_usage.calls == 2
    st = cache.stats()
    assert st["entries"] == 2 and st["hits"] == 1 and st["by_model"] == {"openai:m": 2}
    # the cache survives a reopen (resume across processes)
    cache.close()
    again = ResponseCache(tmp_path / "c.sqlite")
    assert len(again) == 2


def test_no_cache_for_sampling_invalid_or_errors(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeLLMServer() as srv:
        srv.push(ok("a"), ok("b"), ok("not json"), ok('{"label": "no"}'), server_error(), server_error(),
                 ok("recovered"))

        async def go():
            async with OpenAIChatClient(srv.base_url, "m", cache=cache, max_retries=1, **FAST) as c:
                hot1 = await c.chat(MSG, temperature=0.7)
                hot2 = await c.chat(MSG, temperature=0.7)
                bad = await c.chat(MSG, schema=Label)
                good = await c.chat(MSG, schema=Label)  # invalid was not stored: asked again
                err = await c.chat([{"role": "user", "content": "x"}])
                rec = await c.chat([{"role": "user", "content": "x"}])  # error not stored: retried
                return hot1, hot2, bad, good, err, rec
        hot1, hot2, bad, good, err, rec = run(go())
    assert (hot1.text, hot2.text) == ("a", "b") and not hot2.cached
    assert bad.status == "invalid" and good.status == "ok" and not good.cached
    assert err.status == "error" and rec.status == "ok" and rec.text == "recovered" and not rec.cached
    assert len(cache) == 2  # the good schema reply and the recovered one
    assert cache.put("k", bad) is False


def test_cache_seed_makes_sampling_cacheable(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeLLMServer() as srv:
        async def go():
            async with OpenAIChatClient(srv.base_url, "m", cache=cache, temperature=0.8, **FAST) as c:
                return [await c.chat(MSG, seed=1) for _ in range(2)]
        a, b = run(go())
    assert srv.count == 1 and b.cached


def test_cache_concurrent_use(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeLLMServer(latency=0.01, handler=lambda req: Reply(content=req["messages"][0]["content"])) as srv:
        async def go():
            async with OpenAIChatClient(srv.base_url, "m", cache=cache, concurrency=8, **FAST) as c:
                msgs = [[{"role": "user", "content": f"q{i % 10}"}] for i in range(40)]
                first = await asyncio.gather(*(c.chat(m) for m in msgs[:10]))
                rest = await asyncio.gather(*(c.chat(m) for m in msgs[10:]))
                return first, rest
        first, rest = run(go())
    assert srv.count == 10 and all(r.cached for r in rest)
    assert [r.text for r in rest] == [f"q{i % 10}" for i in range(10, 40)]


# -- replay -----------------------------------------------------------------------------------

def test_record_then_replay(tmp_path):
    cas = tmp_path / "judge.jsonl"
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "yes"}'), ok("nope"), server_error(), server_error())

        async def record():
            inner = OpenAIChatClient(srv.base_url, "rec-model", max_retries=1, **FAST)
            rc = ReplayClient(cas, mode="record", inner=inner)
            a = await rc.chat(MSG, schema=Label, prompt_version="j1")
            b = await rc.chat([{"role": "user", "content": "free text?"}], schema=Label, prompt_version="j1")
            e = await rc.chat([{"role": "user", "content": "down"}], prompt_version="j1")
            again = await rc.chat(MSG, schema=Label, prompt_version="j1")  # already recorded: no call
            await rc.aclose()
            return a, b, e, again
        a, b, e, again = run(record())
    assert a.status == "ok" and b.status == "invalid" and e.status == "error" and again.cached
    assert srv.count == 4
    lines = [json.loads(x) for x in cas.read_text().splitlines()]
    assert len(lines) == 2  # ok and invalid recorded; the error was not
    assert lines[0]["request"]["prompt_version"] == "j1" and lines[0]["response"]["status"] == "ok"

    rp = ReplayClient(cas)
    assert isinstance(rp, ModelClient)
    hit = run(rp.chat(MSG, schema=Label, prompt_version="j1"))
    assert hit.status == "ok" and hit.data == {"label": "yes"} and hit.cached
    assert hit.provenance.backend == "replay" and hit.provenance.model == "rec-model"
    inv = run(rp.chat([{"role": "user", "content": "free text?"}], schema=Label, prompt_version="j1"))
    assert inv.status == "invalid"
    miss = run(rp.chat(MSG, schema=Label, prompt_version="j2"))
    assert miss.status == "error" and miss.reason.startswith("not in cassette: ")


def test_replay_missing_or_bad_cassette(tmp_path):
    with pytest.raises(FileNotFoundError):
        ReplayClient(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "k"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        ReplayClient(bad)
    with pytest.raises(ValueError, match="inner"):
        ReplayClient(bad, mode="record")


# -- rules -------------------------------------------------------------------------------------

@register_rule("verifier", "test_contains")
def _contains(payload):
    if not payload.get("evidence"):
        raise Invalid("no evidence given")
    return {"label": "yes" if payload["answer"].lower() in payload["evidence"].lower() else "no"}


@register_rule("verifier", "test_broken")
def _broken(payload):
    return 1 / 0


def test_rules_client_contract():
    rc = RulesClient("test_contains", get_rule("verifier", "test_contains"))
    assert isinstance(rc, ModelClient)
    r = run(rc.chat([], payload={"answer": "Paris", "evidence": "The capital is paris."}, schema=Label,
                    prompt_version="rules@1"))
    assert r.status == "ok" and r.data == {"label": "yes"} and json.loads(r.text) == {"label": "yes"}
    assert r.provenance.backend == "rules" and r.provenance.model == "test_contains"
    assert r.provenance.prompt_version == "rules@1"
    inv = run(rc.chat([], payload={"answer": "x", "evidence": ""}))
    assert inv.status == "invalid" and "no evidence" in inv.reason
    err = run(RulesClient("test_broken", get_rule("verifier", "test_broken")).chat([], payload={}))
    assert err.status == "error" and "ZeroDivisionError" in err.reason and err.data is None
    assert ("verifier", "test_contains") in list_rules("verifier")
    with pytest.raises(KeyError, match="test_contains"):
        get_rule("verifier", "missing")
    with pytest.raises(ValueError, match="already registered"):
        register_rule("verifier", "test_contains")(lambda p: p)


def test_chatresult_roundtrip():
    r = ChatResult(status="ok", text="t", data={"a": [1]}, provenance={"backend": "openai", "model": "m"})
    assert ChatResult.model_validate_json(r.model_dump_json()) == r


# -- a reply a stage refuses after parsing is not remembered -------------------------------------

def test_a_rejected_reply_is_forgotten_by_the_cache_and_asked_again(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "no"}'), ok('{"label": "yes"}'), ok('{"label": "never asked"}'))

        async def go():
            async with OpenAIChatClient(srv.base_url, "m", cache=cache, **FAST) as c:
                first = await c.chat(MSG, schema=Label)  # parses: the stage refuses it
                exc = first.reject("the stage wanted yes")
                again = await c.chat(MSG, schema=Label)  # not served from the cache: asked anew
                third = await c.chat(MSG, schema=Label)  # the accepted reply is cached as usual
                return first, exc, again, third
        first, exc, again, third = run(go())
    assert isinstance(exc, Invalid) and str(exc) == "the stage wanted yes"
    assert first.data == {"label": "no"} and again.data == {"label": "yes"} and not again.cached
    assert third.cached and third.data == {"label": "yes"} and srv.count == 2
    assert cache.stats()["forgotten"] == 1 and len(cache) == 1
    first.reject("twice")  # the hooks ran once: nothing more happens
    assert cache.stats()["forgotten"] == 1
    from kbvqa.models.result import rejected

    assert isinstance(rejected(object(), "a test double"), Invalid)  # what a stage raises for any reply


def test_reply_that_does_not_fit_the_stage_model_is_rejected(tmp_path):
    class Strict(BaseModel):
        label: Literal["yes"]

    cache = ResponseCache(tmp_path / "c.sqlite")
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "no"}'), ok('{"label": "yes"}'))

        async def go():
            async with OpenAIChatClient(srv.base_url, "m", cache=cache, **FAST) as c:
                res = await c.chat(MSG, schema=Label)
                with pytest.raises(Invalid, match="does not fit Strict"):
                    res.reply(Strict)
                return await c.chat(MSG, schema=Label)
        assert run(go()).data == {"label": "yes"} and srv.count == 2


def test_record_mode_asks_again_after_a_rejection_and_replay_stays_exact(tmp_path):
    cas, before = tmp_path / "run.jsonl", tmp_path / "before-resume.jsonl"
    with FakeLLMServer() as srv:
        srv.push(ok('{"label": "no"}'), ok("not json"), ok('{"label": "yes"}'), ok('{"label": "yes"}'))

        async def record(path):
            rc = ReplayClient(path, mode="record", inner=OpenAIChatClient(srv.base_url, "m", max_retries=0, **FAST))
            res = await rc.chat(MSG, schema=Label)
            other = await rc.chat([{"role": "user", "content": "free"}], schema=Label)
            await rc.aclose()
            return res, other
        res, other = run(record(cas))
        assert res.data == {"label": "no"} and other.status == "invalid"
        res.reject("wanted yes")
        before.write_bytes(cas.read_bytes())  # the cassette of the run that saw the refused reply
        lines = [json.loads(x) for x in cas.read_text().splitlines()]
        assert [("response" in ln, ln.get("rejected")) for ln in lines] == [(True, None), (True, None),
                                                                            (False, "wanted yes")]
        again, other2 = run(record(cas))  # a resumed run (a new process reads the file): both asked anew
        assert again.data == {"label": "yes"} and not again.cached and other2.data == {"label": "yes"}
        assert srv.count == 4
    old = run(ReplayClient(before).chat(MSG, schema=Label))
    new = run(ReplayClient(cas).chat(MSG, schema=Label))
    assert old.data == {"label": "no"} and new.data == {"label": "yes"}  # each replays what its run saw
    assert run(ReplayClient(before).chat([{"role": "user", "content": "free"}], schema=Label)).status == "invalid"
