"""Budgets that bind: --max-seconds bounds tool calls too (a slow search cannot run past it), and
--max-tokens stops the tool phase before a turn that could pass it; a reply longer than the max_tokens
it was asked for is unusable, counted, never used."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from kbvqa.data.formats import read_samples
from kbvqa.kb.store import KBStore
from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.runner import read_results
from kbvqa.tools.local import LocalTools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402
from test_agent import answer, call  # noqa: E402


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("budgets")
    b = bench_copy(root / "bench")
    kb = KBStore(b.kb)
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    yield b, kb, base, root
    kb.close()


def _run(bench, handler, name, **opts):
    b, kb, base, root = bench
    with FakeLLMServer(handler=handler) as srv:
        roles = {"agent": OpenAIChatClient(srv.base_url, "fake-agent", max_retries=0)}
        job = build_answer_job("agent", kb=kb, roles=roles, image_root=b.root, kb_images=b.root, **opts)
        t0 = time.monotonic()
        s = job.run([{**base, "id": name, "images": []}], out=root / f"{name}.jsonl", progress=False)
        took = time.monotonic() - t0
        requests = [r["json"] for r in srv.requests]
    return s, next(iter(read_results(root / f"{name}.jsonl"))), took, requests


def test_a_slow_tool_call_cannot_outlast_max_seconds(bench, monkeypatch):
    async def slow_search(self, args, episode, ctx):
        await asyncio.sleep(30)  # a page that drips for half a minute

    monkeypatch.setattr(LocalTools, "search", slow_search)

    def handler(req):
        if "tools are now closed" in json.dumps(req["messages"]):
            return Reply(content=answer("Elmira, from what I know."))
        return Reply(content=call("search", query=["Eileen Collins"]))

    s, line, took, _ = _run(bench, handler, "slow", max_seconds=2.0)
    assert took < 6  # the 30 s search was cut at the tool phase's end (85% of 2 s)
    assert s.ok == 1 and line["meta"]["termination"] == "wall_time" and line["meta"]["forced_answer"]
    assert line["trajectory"][0]["status"] == "error" and "time budget" in line["trajectory"][0]["reason"]
    assert line["answer"] == "Elmira, from what I know."


def test_an_oversized_reply_is_unusable_and_the_token_budget_binds(bench):
    def handler(req):
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        assert req["max_tokens"] == 2048
        if turn == 0:  # a server that ignores max_tokens
            return Reply(content=call("search", query=["x " * 50]), prompt_tokens=100, completion_tokens=500_000)
        if "tools are now closed" in json.dumps(req["messages"]):
            return Reply(content=answer("Elmira."), prompt_tokens=300, completion_tokens=20)
        return Reply(content=call("search", query=["Eileen Collins"]), prompt_tokens=200, completion_tokens=20)

    s, line, _, requests = _run(bench, handler, "oversized", max_tokens=6000)
    first = line["trajectory"][0]
    assert "more than the max_tokens=2048" in first["problem"] and "tool" not in first  # never used
    assert line["meta"]["termination"] == "token_budget" and line["meta"]["forced_answer"]
    assert line["answer"] == "Elmira." and len(requests) == 2  # no tool-phase turn after the budget was passed


def test_the_tool_phase_stops_before_a_turn_that_could_pass_max_tokens(bench):
    def handler(req):
        if "tools are now closed" in json.dumps(req["messages"]):
            return Reply(content=answer("Elmira."), prompt_tokens=900, completion_tokens=10)
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        return Reply(content=call("search", query=[f"query number {turn}"]), prompt_tokens=400 * (turn + 1),
                     completion_tokens=10)

    s, line, _, requests = _run(bench, handler, "projected", max_tokens=4000)
    spent_in_tools = sum(t["usage"]["prompt_tokens"] + t["usage"]["completion_tokens"]
                         for t in line["trajectory"] if not t.get("forced"))
    assert spent_in_tools <= 4000 and line["meta"]["termination"] == "token_budget"
    assert line["answer"] == "Elmira." and line["trajectory"][-1]["forced"]


def test_time_stops_replay_exactly(bench, monkeypatch):
    """Time is the one thing a replay cannot re-measure: the cassette keeps where --max-seconds stopped each
    episode (a slow model reply, a slow tool call) and the replay, much faster, stops at the same points."""
    b, kb, base, root = bench

    async def slow_search(self, args, episode, ctx):
        await asyncio.sleep(30)

    monkeypatch.setattr(LocalTools, "search", slow_search)

    def handler(req):
        text = json.dumps(req["messages"])
        if "tools are now closed" in text:
            return Reply(content=answer("Elmira, from what I know."))
        if "slow model" in text:
            return Reply(content=call("search", query=["x"]), delay=5)
        return Reply(content=call("search", query=["Eileen Collins"]))

    samples = [{**base, "id": q.replace(" ", "_"), "question": q, "images": []} for q in ("slow model", "slow tool")]
    with FakeLLMServer(handler=handler) as srv:
        roles = {"agent": OpenAIChatClient(srv.base_url, "fake-agent", max_retries=0)}
        job = build_answer_job("agent", kb=kb, roles=roles, image_root=b.root, kb_images=b.root, max_seconds=2.0)
        assert job.run(samples, out=root / "timed.jsonl", progress=False, concurrency=2).ok == 2
    live = {r["id"]: r for r in read_results(root / "timed.jsonl")}
    assert [t.get("tool") for t in live["slow_model"]["trajectory"]] == [None]  # stopped while waiting, then forced
    assert live["slow_tool"]["trajectory"][0]["status"] == "error"
    assert all(r["meta"]["termination"] == "wall_time" and r["answer"] for r in live.values())

    replay = build_answer_job("agent", kb=kb, image_root=b.root, kb_images=b.root, max_seconds=2.0, tools="replay",
                              cassette=root / "timed.cassette")
    t0 = time.monotonic()
    assert replay.run(samples, out=root / "timed.replay.jsonl", progress=False).ok == 2
    assert time.monotonic() - t0 < 2  # nothing waited for
    replayed = {r["id"]: r for r in read_results(root / "timed.replay.jsonl")}
    from test_agent import _stable
    assert {k: _stable(v) for k, v in replayed.items()} == {k: _stable(v) for k, v in live.items()}


def test_the_default_turn_cap_is_a_safety_limit(bench):
    """An episode of 14 distinct searches before its answer (the old default of 12 turns would have
    forced it) ends on its own answer: the default cap does not shape ordinary episodes."""
    from kbvqa.evaluate.agent import termination_counts
    from kbvqa.stages.agent.react import DEFAULT_MAX_TURNS, AgentConfig

    assert AgentConfig().max_turns == DEFAULT_MAX_TURNS >= 2 * 12

    def handler(req):
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if turn >= 14:
            return Reply(content=answer("Elmira."))
        return Reply(content=call("search", query=[f"subject{turn} detail{turn}"]))

    s, line, _, requests = _run(bench, handler, "long")
    assert line["meta"]["termination"] == "answer" and not line["meta"]["forced_answer"]
    assert line["meta"]["tool_calls"] == {"search": 14} and len(requests) == 15
    assert termination_counts([line])["by"] == {"answered": 1, "budget": 0, "guard": 0, "error": 0}
