"""A run's cassette is the run: recorded with the response cache on (as a user has it), replayed into an
empty cache with the model server stopped and no API key, episode by episode identical — error tool
results included. And the tool cache cannot hand one sample's reverse-image-search results to another."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples
from kbvqa.kb.store import KBStore
from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402
from fake_web_server import FakeWebServer, json_resp, loopback_only  # noqa: E402
from test_agent import _stable, answer, call, tag  # noqa: E402

runner = CliRunner()

SCRIPTS = {
    "good": [call("image_search", goal="who is this"), call("search", query=["Eileen Collins birthplace"]),
             call("text_to_image_search", query="Eileen Collins"),
             answer("She was born in Elmira.\n" + tag("Eileen Collins", 1))],
    # a visit the KB cannot serve is an `error` tool result: it must replay too
    "tool error": [call("visit", url=["https://example.org/nowhere"], goal="birthplace"),
                   answer("I could not read the page; Elmira, I believe.")],
    "loops": [call("search", query=["Elmira"]), call("search", query=["Elmira"]), call("search", query=["Elmira"]),
              answer("Elmira.")],
}


def _question(req: dict) -> str:
    m = next(m for m in req["messages"] if m["role"] == "user")
    return m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]


def _handler(req: dict) -> Reply:
    script = SCRIPTS[_question(req)]
    turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
    return Reply(content=script[min(turn, len(script) - 1)], prompt_tokens=50, completion_tokens=10)


def _answer_cli(*args: str) -> dict:
    res = runner.invoke(app, ["answer", "--pipeline", "agent", "--samples", "bench/episodes.jsonl",
                              "--kb", "bench/kb.sqlite", "--index", "idx/images", "--kb-images", "bench",
                              "--today", "2026-12-01", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_replay_recorded_with_the_default_cache_on(bench_copy, tmp_path, monkeypatch):
    b = bench_copy(tmp_path / "bench")
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    (b.root / "episodes.jsonl").write_text("".join(json.dumps({**base, "id": f"e{i}", "question": q}) + "\n"
                                                   for i, q in enumerate(SCRIPTS)), encoding="utf-8")
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them
    res = runner.invoke(app, ["index", "images", "--kb", "bench/kb.sqlite", "--images", "bench",
                              "--out", "idx/images"])
    assert res.exit_code == 0, res.output
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "user-cache.sqlite"))  # the response cache is on
    with FakeLLMServer(handler=_handler) as srv:
        first = _answer_cli("--llm", srv.base_url, "--model", "fake-agent", "--out", "run1/agent.jsonl")
        sent = srv.count
        # a second run answered entirely by the response cache must still record every call
        second = _answer_cli("--llm", srv.base_url, "--model", "fake-agent", "--out", "run2/agent.jsonl")
        assert srv.count == sent and first["ok"] == second["ok"] == 3
    recorded = {r["id"]: r for r in read_results(tmp_path / "run2/agent.jsonl")}
    assert recorded["e1"]["trajectory"][0]["status"] == "error"  # the visit failed, and the model read why
    assert recorded["e2"]["meta"]["forced_answer"] and recorded["e2"]["answer"] == "Elmira."

    # another machine: an empty response cache, no server, no key; run from another folder
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "fresh-cache.sqlite"))
    for var in ("KBVQA_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    replay = _answer_cli("--tools", "replay", "--cassette", "run2/agent.cassette", "--out", "replay/agent.jsonl")
    assert replay["ok"] == 3 and replay["error"] == 0
    replayed = {r["id"]: r for r in read_results(tmp_path / "replay/agent.jsonl")}
    for rid, line in recorded.items():
        assert _stable(replayed[rid]) == _stable(line), rid
        assert [(t.get("tool"), t.get("status")) for t in replayed[rid]["trajectory"]] == \
            [(t.get("tool"), t.get("status")) for t in line["trajectory"]]
    assert replayed["e0"]["meta"]["provenance"]["valid"] == 1

    # the cassette of the first run (answered live) replays the same way, from another working directory
    monkeypatch.chdir(elsewhere)
    res = runner.invoke(app, ["answer", "--pipeline", "agent", "--samples", "../bench/episodes.jsonl",
                              "--kb", "../bench/kb.sqlite", "--index", "../idx/images", "--kb-images", "../bench",
                              "--tools", "replay", "--cassette", "../run1/agent.cassette", "--out", "r1.jsonl"])
    assert res.exit_code == 0, res.output
    again = {r["id"]: r for r in read_results(elsewhere / "r1.jsonl")}
    live = {r["id"]: r for r in read_results(tmp_path / "run1/agent.jsonl")}
    assert {k: _stable(v) for k, v in again.items()} == {k: _stable(v) for k, v in live.items()}


@pytest.fixture
def only_loopback(monkeypatch):
    yield from loopback_only(monkeypatch)


def test_url_only_samples_get_their_own_reverse_search_results(bench_copy, tmp_path, monkeypatch, only_loopback):
    """No local image file: the reverse-search cache key is the image URL, so two samples with different
    URLs get different results — live and in the replay of their cassette, which needs no API key."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KBVQA_TEST_SERPER_KEY", "sk-test-123")
    b = bench_copy(tmp_path / "bench")
    kb = KBStore(b.kb)
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    samples = [{**base, "id": name, "question": "what is pictured", "images": [],
                "meta": {"image_urls": [f"https://cdn.example.org/{name}.jpg"]}} for name in ("tower", "dahlia")]

    def lens(req: dict):
        name = req["json"]["url"].rsplit("/", 1)[-1].split(".")[0]
        return json_resp({"organic": [{"title": f"the {name}", "link": f"https://example.org/{name}",
                                       "source": "example.org", "imageUrl": f"https://img.example.org/{name}.jpg"}]})

    def agent(req: dict) -> Reply:
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if turn == 0:
            return Reply(content=call("image_search", goal="identify"))
        seen = req["messages"][-1]["content"]
        return Reply(content=answer("It is " + ("the tower" if "the tower" in seen else "the dahlia") + "."))

    def job(**kw):
        return build_answer_job("agent", kb=kb, image_root=b.root, today="2026-12-01", **kw)

    web = FakeWebServer().route("/lens", lens)
    with web, FakeLLMServer(handler=agent) as srv:
        opts = {"base_url": web.base_url, "api_key_env": "KBVQA_TEST_SERPER_KEY", "allow_hosts": ("127.0.0.1",)}
        roles = {"agent": OpenAIChatClient(srv.base_url, "fake-agent", max_retries=0)}
        s = job(roles=roles, tools="web", web=opts).run(samples, out=tmp_path / "web.jsonl", progress=False,
                                                        concurrency=1)
        assert s.ok == 2 and len(web.hits("/lens")) == 2  # one lens call per URL, none served from the other
    live = {r["id"]: r for r in read_results(tmp_path / "web.jsonl")}
    assert live["tower"]["trajectory"][0]["items"][0]["title"] == "the tower"
    assert live["dahlia"]["trajectory"][0]["items"][0]["title"] == "the dahlia"
    assert live["dahlia"]["answer"] == "It is the dahlia."

    monkeypatch.delenv("KBVQA_TEST_SERPER_KEY")  # replaying a web run needs no key (and no web)
    s = job(tools="replay", cassette=tmp_path / "web.cassette").run(samples, out=tmp_path / "web.replay.jsonl",
                                                                   progress=False)
    replayed = {r["id"]: r for r in read_results(tmp_path / "web.replay.jsonl")}
    assert s.ok == 2 and {k: _stable(v) for k, v in replayed.items()} == {k: _stable(v) for k, v in live.items()}
    kb.close()
