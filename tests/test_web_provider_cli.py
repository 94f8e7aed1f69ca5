"""`kbvqa answer --tools web` pointed at a search provider the way a user does it: `[tools.web]` in
kbvqa.toml, or the --web-* flags over it; SearXNG and a Serper-compatible endpoint, both local fakes.
Run as a user runs it: the response cache on, relative paths, from the folder holding the files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402
from fake_web_server import FakeWebServer, json_resp, loopback_only  # noqa: E402
from test_agent import answer, call, tag  # noqa: E402
from test_tools_web import searx  # noqa: E402

runner = CliRunner()
KEY_ENV, KEY = "KBVQA_TEST_WEB_KEY", "sk-web-e2e-5566778899"


@pytest.fixture
def user(bench_copy, tmp_path, monkeypatch):
    """A user's folder: the bench, the response cache on, no proxies, nothing but 127.0.0.1 reachable."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    b = bench_copy(tmp_path / "bench")
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    (b.root / "one.jsonl").write_text(json.dumps({**base, "id": "q1", "question": "Who is this?"}) + "\n",
                                      encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    yield from loopback_only(monkeypatch)


def _agent(script: list[str]):
    def handler(req: dict) -> Reply:
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        return Reply(content=script[min(turn, len(script) - 1)], prompt_tokens=20, completion_tokens=5)
    return handler


def _answer(llm: FakeLLMServer, out: str, *args: str):
    return runner.invoke(app, ["answer", "--pipeline", "agent", "--tools", "web", "--samples", "bench/one.jsonl",
                               "--kb", "bench/kb.sqlite", "--llm", llm.base_url, "--model", "fake-agent",
                               "--today", "2026-12-01", "--out", out, *args])


def test_searxng_from_the_config_file(user, tmp_path):
    script = [call("image_search", goal="who"), call("search", query=["Eileen Collins astronaut"]),
              call("text_to_image_search", query="Eileen Collins"),
              answer("Eileen Collins, the astronaut.\n" + tag("Eileen Collins", 2))]
    with FakeWebServer() as web, FakeLLMServer(handler=_agent(script)) as llm:
        web.route("/search", searx)
        Path("kbvqa.toml").write_text(f'[tools.web]\nprovider = "searxng"\nbase_url = "{web.base_url}"\n',
                                      encoding="utf-8")
        res = _answer(llm, "run/agent.jsonl", "--config", "kbvqa.toml")
        assert res.exit_code == 0, res.output
        assert [h["method"] for h in web.hits("/search")] == ["GET", "GET"]  # text, then images
        base = web.base_url
    (line,) = read_results(tmp_path / "run/agent.jsonl")
    steps = [(t.get("tool"), t.get("status")) for t in line["trajectory"]]
    assert steps[:3] == [("image_search", "unavailable"), ("search", "ok"), ("text_to_image_search", "ok")]
    assert "not offered by the searxng" in line["trajectory"][0]["reason"]
    assert line["meta"]["termination"] == "answer"  # `unavailable` is no failure streak
    t2i = line["trajectory"][2]
    assert t2i["provenance"]["dropped_images"] == {"scheme_data": 1}  # the data: image never became an index
    assert [it["image"] for it in t2i["items"]] == ["https://img.example.org/a.jpg", "https://img.example.org/c.jpg"]
    assert line["images"] == ["https://img.example.org/c.jpg"]  # idx 2 is the 2nd KEPT image
    manifest = json.loads((tmp_path / "run/agent.manifest.json").read_text())
    backend = manifest["run_config"]["tool_backend"]
    assert backend["provider"] == "searxng" and backend["base_url"] == base and backend["version"] == "2"
    cassette = json.loads((tmp_path / "run/agent.cassette/cassette.json").read_text())
    assert cassette["backend_options"] == {"provider": "searxng", "base_url": base}


def test_flags_override_the_file_and_an_echoed_key_is_never_written(user, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    script = [call("search", query=["Eileen Collins"]), answer("I could not search; Eileen Collins, I think.")]

    def echo(req):  # a gateway quoting the request headers in its 401
        return json_resp({"message": f"invalid key {req['headers']['x-api-key']}", "you_sent": req["headers"]}, 401)

    with FakeWebServer() as serper, FakeLLMServer(handler=_agent(script)) as llm:
        serper.route("/search", echo)
        Path("kbvqa.toml").write_text('[tools.web]\nprovider = "searxng"\nbase_url = "http://127.0.0.1:9"\n',
                                      encoding="utf-8")
        res = _answer(llm, "run2/agent.jsonl", "--config", "kbvqa.toml", "--web-provider", "serper",
                      "--web-base-url", serper.base_url, "--web-api-key-env", KEY_ENV)
        assert res.exit_code == 0, res.output
        assert serper.hits("/search")[0]["headers"]["x-api-key"] == KEY  # the flags won over the file
    (line,) = read_results(tmp_path / "run2/agent.jsonl")
    assert line["trajectory"][0]["status"] == "error" and "[redacted]" in line["trajectory"][0]["reason"]
    for f in (tmp_path / "run2").rglob("*"):
        if f.is_file():
            assert KEY[:10].encode() not in f.read_bytes(), f  # journal, manifest, cassette, artifacts
    manifest = json.loads((tmp_path / "run2/agent.manifest.json").read_text())
    assert manifest["run_config"]["tool_backend"]["provider"] == "serper"


def test_web_flags_need_tools_web_and_eval_takes_them_too(user):
    res = runner.invoke(app, ["answer", "--pipeline", "agent", "--samples", "bench/one.jsonl", "--kb",
                              "bench/kb.sqlite", "--kb-images", "bench", "--out", "x.jsonl",
                              "--web-base-url", "http://127.0.0.1:8888"])
    assert res.exit_code != 0 and "--web-base-url" in res.output and "--tools web" in res.output
    res = runner.invoke(app, ["answer", "--pipeline", "agent", "--tools", "web", "--samples", "bench/one.jsonl",
                              "--kb", "bench/kb.sqlite", "--out", "x.jsonl", "--web-provider", "searxng"])
    assert res.exit_code != 0 and "needs base_url" in res.output
    from kbvqa.cli.eval import answer_parameters

    names = {p.name for p in answer_parameters()}
    assert {"web_provider", "web_base_url", "web_api_key_env"} <= names


def test_tools_web_table_is_checked_and_never_holds_a_key(tmp_path):
    from kbvqa.models.config import ConfigError
    from kbvqa.tools.config import web_tool_options

    cfg = tmp_path / "k.toml"
    cfg.write_text('[tools.web]\nprovider = "searxng"\nbase_url = "http://127.0.0.1:8888"\ntop_k = 5\n')
    assert web_tool_options(cfg, api_key_env="X_TOKEN") == {"provider": "searxng", "base_url": "http://127.0.0.1:8888",
                                                            "api_key_env": "X_TOKEN", "top_k": 5}
    assert web_tool_options(None) == {}
    for body, msg in (('api_key = "sk-1"', "keys are never written"), ("colour = 1", "tools.web.colour"),
                      ('provider = "bing"', "unknown web provider")):
        cfg.write_text(f"[tools.web]\n{body}\n")
        with pytest.raises(ConfigError, match=msg):
            web_tool_options(cfg)
    with pytest.raises(ConfigError, match="--web-base-url"):
        web_tool_options(None, base_url="file:///etc")
