"""Secrets never leave the process: a model server that quotes the key back in a 401 or lists the request
headers in a 500 gets it into no journal, manifest, artifact, cassette, viewer export or terminal line —
for the judge, the agent and the single-pass answerer roles (all through the one model client), run as a
user runs them (response cache on, relative paths)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

KEY = "sk-live-ThisIsTheUsersRealKey0123456789"
runner = CliRunner()


def _echo_401(req: dict) -> Reply:
    return Reply(status=401, error=f"invalid api key: you sent Authorization: Bearer {KEY}")


def _echo_500(req: dict) -> Reply:
    return Reply(status=500, error=json.dumps({"request_headers": {"authorization": f"Bearer {KEY}",
                                                                   "x-api-key": KEY}}))


def _leaks(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]


@pytest.fixture
def bench(bench_copy, tmp_path, monkeypatch):
    b = bench_copy(tmp_path / "bench")
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    (b.root / "two.jsonl").write_text("".join(json.dumps({**base, "id": f"s{i}"}) + "\n" for i in range(2)),
                                      encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_MODEL_KEY", KEY)
    monkeypatch.setenv("KBVQA_API_KEY", KEY)  # the client's fall-back variable, as many users set it
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    return tmp_path


@pytest.mark.parametrize("echo", [_echo_401, _echo_500])
def test_the_judge_never_writes_an_echoed_key(bench, echo):
    preds = bench / "preds.jsonl"
    preds.write_text('{"sample_id": "s0", "answer": "Elmira"}\n{"sample_id": "s1", "answer": "Paris"}\n',
                     encoding="utf-8")
    with FakeLLMServer(handler=echo) as srv:
        res = runner.invoke(app, ["score", "judge", "-p", "preds.jsonl", "-r", "bench/two.jsonl",
                                  "--judge-base-url", srv.base_url, "--judge-model", "j", "--out", "out/judge.jsonl",
                                  "--max-retries", "0"])  # a 500 is retried with backoff otherwise: seconds
        sent = srv.requests[0]["headers"].get("Authorization")
    assert sent == f"Bearer {KEY}"  # the key did go to the server it belongs to
    assert KEY not in res.output
    lines = [json.loads(x) for x in (bench / "out/judge.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {x["status"] for x in lines} == {"error"} and all("[redacted]" in x["reason"] for x in lines)
    assert _leaks(bench / "out") == []


@pytest.mark.parametrize("pipeline", ["agent", "direct"])
def test_answer_pipelines_never_write_an_echoed_key(bench, pipeline):
    extra = ["--kb-images", "bench"] if pipeline == "agent" else []
    kb = [] if pipeline == "direct" else ["--kb", "bench/kb.sqlite"]  # direct reads no KB (--kb is refused)
    with FakeLLMServer(handler=_echo_500) as srv:
        res = runner.invoke(app, ["answer", "--pipeline", pipeline, "--samples", "bench/two.jsonl",
                                  *kb, "--llm", srv.base_url, "--model", "m",
                                  "--api-key-env", "MY_MODEL_KEY", "--max-retries", "0", "--out", "run/p.jsonl",
                                  *extra])
    assert KEY not in res.output
    lines = [json.loads(x) for x in (bench / "run/p.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2 and all(x["status"] == "error" and "[redacted]" in x["reason"] for x in lines)
    exported = runner.invoke(app, ["view", "run", "--export", "site"])
    assert exported.exit_code == 0, exported.output
    assert _leaks(bench / "run") == [] and _leaks(bench / "site") == []
