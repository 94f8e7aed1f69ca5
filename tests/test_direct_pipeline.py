"""`--pipeline direct`: single-pass answering (no retrieval, no tools) by the answerer role, and seed
001's with/without-retrieval comparison built from it: direct and agent runs of one scripted model,
both judged, then `study retrieval-2x2` and `study agent-tools --baseline-verdicts` (Table 2 / 4)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples, write_samples
from kbvqa.demo.bench import build_community
from kbvqa.kb.store import KBStore
from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402
from test_agent import answer, call  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("direct")
    b = bench_copy(root / "bench")
    items = list(read_samples(build_community(b)))[:4]
    write_samples(items, b.root / "items.jsonl", "kbvqa")
    return root, b, items


def _user_text(req: dict) -> str:
    m = next(m for m in req["messages"] if m["role"] == "user")
    return m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]


def _system(req: dict) -> str:
    return next((m["content"] for m in req["messages"] if m["role"] == "system"), "")


def test_direct_vs_agent_2x2_end_to_end(bench, tmp_path, monkeypatch):
    """As a user runs it: response cache on, relative paths, from the project folder."""
    root, b, items = bench
    q = [s.question for s in items]
    # the single-pass answers: items 0 and 1 right; the agent: items 0 and 2 right -> one item per 2x2 cell
    direct = {q[0]: "RIGHT, it is so.", q[1]: "RIGHT again.", q[2]: "WRONG guess.", q[3]: "WRONG too."}
    agent = {q[0]: [answer("RIGHT at once.")],
             q[1]: [call("search", query=["Eileen Collins birthplace"]), answer("WRONG after searching.")],
             q[2]: [call("search", query=["Falcon 9 rocket launch"]),
                    call("search", query=["Grace Hopper computer scientist"]), answer("RIGHT after two searches.")],
             q[3]: [call("search", query=["Hubble deep field galaxies"]), answer("WRONG still.")]}
    seen_direct: list[dict] = []

    def model(req: dict) -> Reply:
        if _system(req).startswith("A person asks a question about the photo"):
            seen_direct.append(req)
            return ok(direct[_user_text(req)])
        script = agent[_user_text(req)]
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        return ok(script[min(turn, len(script) - 1)])

    def judge(req: dict) -> Reply:
        label = "correct" if "RIGHT" in req["messages"][-1]["content"] else "incorrect"
        return ok(json.dumps({"label": label, "rationale": "scripted"}))

    monkeypatch.chdir(b.root.parent)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    common = ["--samples", "bench/items.jsonl", "--kb", "bench/kb.sqlite"]
    with FakeLLMServer(handler=model) as srv, FakeLLMServer(handler=judge) as jsrv:
        llm = ["--llm", srv.base_url, "--model", "vlm-x"]
        res = runner.invoke(app, ["answer", "--pipeline", "direct", "--samples", "bench/items.jsonl", *llm,
                                  "--out", "runs/direct.jsonl", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["ok"] == 4 and out["stages"] == ["answer-direct"]
        res = runner.invoke(app, ["answer", "--pipeline", "agent", *common, *llm, "--kb-images", "bench",
                                  "--today", "2026-12-01", "--out", "runs/agent.jsonl", "--json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout.strip().splitlines()[-1])["ok"] == 4
        for run in ("direct", "agent"):
            res = runner.invoke(app, ["score", "judge", "-p", f"runs/{run}.jsonl", "-r", "bench/items.jsonl",
                                      "--judge-base-url", jsrv.base_url, "--judge-model", "judge-x",
                                      "--out", f"runs/{run}.judge.jsonl", "--json"])
            assert res.exit_code == 0, res.output
        # `kbvqa eval` takes the pipeline too; its answers come from the response cache this time
        sent = srv.count
        res = runner.invoke(app, ["eval", "--pipeline", "direct", "--samples", "bench/items.jsonl", *llm, "--metric", "judge",
                                  "--judge-base-url", jsrv.base_url, "--judge-model", "judge-x", "--out", "runs/eval"])
        assert res.exit_code == 0, res.output
        assert srv.count == sent

    assert len(seen_direct) == 4
    for req in seen_direct:  # no tools offered, the query image sent inline as a data URL
        assert "tools" not in req
        parts = req["messages"][-1]["content"]
        assert [p["type"] for p in parts] == ["text", "image_url"]
        assert parts[1]["image_url"]["url"].startswith("data:image/")
    preds = {p["id"]: p for p in read_results(Path("runs/direct.jsonl"))}
    first = preds[items[0].id]
    assert first["status"] == "ok" and first["answer"] == "RIGHT, it is so." and first["short_answer"]
    assert first["producer"]["model"] == "vlm-x" and first["usage"]["calls"] == 1
    assert first["meta"] == {"setting": "direct", "question": q[0], "images_sent": 1}
    assert first.get("trajectory", []) == [] and first.get("retrieved", []) == []  # no tools, no retrieval

    res = runner.invoke(app, ["study", "retrieval-2x2", "--with", "runs/agent.judge.jsonl",
                              "--without", "runs/direct.judge.jsonl", "-r", "bench/items.jsonl",
                              "--scorer", "judge-verdicts", "--json"])
    assert res.exit_code == 0, res.output
    cells = json.loads(res.stdout)["overall"]
    assert (cells["n"], cells["both_correct"], cells["only_with"], cells["only_without"], cells["neither"]) == \
        (4, 1, 1, 1, 1)

    res = runner.invoke(app, ["study", "agent-tools", "-p", "runs/agent.jsonl", "-r", "bench/items.jsonl",
                              "--verdicts", "runs/agent.judge.jsonl", "--baseline-verdicts", "runs/direct.judge.jsonl",
                              "--json", "--out", "study"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    groups = {g["group"]: g for g in obj["paired"]["groups"]}
    assert obj["paired"]["n"] == 4 and obj["paired"]["apart"] == {} and obj["paired"]["net_gain"] == 0
    assert {g: v["n"] for g, v in groups.items()} == {"both_correct": 1, "search_helps": 1, "search_hurts": 1,
                                                      "both_wrong": 1}
    assert {g: v["calls_per_episode"]["search"] for g, v in groups.items()} == {
        "both_correct": 0.0, "search_helps": 2.0, "search_hurts": 1.0, "both_wrong": 1.0}
    for g in groups.values():  # each group is the retrieval-2x2 cell it names
        assert g["n"] == cells[g["retrieval_2x2"]]
    assert any(Path("study").rglob("agent-tools-2x2*")) and (Path("study") / "index.html").is_file()  # report built
    assert groups["search_helps"]["label"] == "Search helps" and "Both correct is kbvqa's" in \
        obj["definitions"]["paired_groups"]
    # the terminal table: the 2x2 groups come first, the source of their names under it
    res = runner.invoke(app, ["study", "agent-tools", "-p", "runs/agent.jsonl", "-r", "bench/items.jsonl",
                              "--verdicts", "runs/agent.judge.jsonl", "--baseline-verdicts", "runs/direct.judge.jsonl"])
    assert res.exit_code == 0, res.output
    assert "seed 001 Table 4 shape" in res.output and "Search hurts" in res.output
    assert "Both correct is kbvqa's" in " ".join(res.output.split())  # (a legend wraps at 80 columns)


def test_direct_without_a_model_or_with_an_index_refuses(bench, monkeypatch):
    root, b, items = bench
    for var in ("KBVQA_ANSWERER_BASE_URL", "KBVQA_ANSWERER_MODEL"):
        monkeypatch.delenv(var, raising=False)
    args = ["answer", "--pipeline", "direct", "--samples", str(b.root / "items.jsonl"), "--out", str(root / "never.jsonl")]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "--pipeline direct needs an answerer model: --llm URL --model NAME" in res.output
    with pytest.raises(ValueError, match="drop --index"):  # an image index is refused, not ignored
        build_answer_job("direct", roles={"answerer": object()}, index=object(), image_root=b.root)
    res = runner.invoke(app, args + ["--llm", "http://127.0.0.1:9", "--model", "m", "--max-turns", "3"])
    assert res.exit_code == 2 and "does not take --max-turns" in res.output
    assert not (root / "never.jsonl").exists()


def test_direct_failed_empty_and_cut_off_replies_are_never_answers(bench):
    root, b, items = bench
    base = items[0].dump()
    two_images = {**base, "id": "two", "question": "two images",
                  "images": [items[0].images[0], items[1].images[0]]}
    samples = [two_images, {**base, "id": "empty", "question": "empty"}, {**base, "id": "down", "question": "down"},
               {**base, "id": "cut", "question": "cut"}]
    replies = {"two images": ok("<think>hmm</think>Both show a rocket. The left one is a Falcon 9."),
               "empty": ok("<think>only thinking</think>  "), "down": Reply(status=500, error="boom"),
               "cut": ok("It is the Falcon", finish_reason="length")}
    seen = {}

    def handler(req):
        seen[_user_text(req)] = req
        return replies[_user_text(req)]

    kb = KBStore(b.kb)
    with FakeLLMServer(handler=handler) as srv:
        client = OpenAIChatClient(srv.base_url, "vlm-y", max_retries=0)
        job = build_answer_job("direct", kb=kb, roles={"answerer": client}, image_root=b.root)
        summary = job.run(samples, out=root / "fail.jsonl", progress=False, resume=False)
    kb.close()
    lines = {r["id"]: r for r in read_results(root / "fail.jsonl")}
    assert (summary.ok, summary.invalid, summary.error) == (1, 2, 1)
    good = lines["two"]
    assert good["answer"] == "Both show a rocket. The left one is a Falcon 9."  # reasoning removed, all the rest kept
    assert good["short_answer"] == "Both show a rocket." and good["meta"]["images_sent"] == 2
    assert [p["type"] for p in seen["two images"]["messages"][-1]["content"]] == ["text", "image_url", "image_url"]
    assert lines["empty"]["status"] == "invalid" and "empty reply" in lines["empty"]["reason"]
    assert lines["cut"]["status"] == "invalid" and "max_tokens" in lines["cut"]["reason"]
    assert lines["down"]["status"] == "error" and "answerer call failed" in lines["down"]["reason"]
    for rid in ("empty", "cut", "down"):
        assert "answer" not in lines[rid] or lines[rid]["answer"] is None
