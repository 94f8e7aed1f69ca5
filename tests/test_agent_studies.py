"""Studies of agent runs: tool usage (Table 4 shape) and judge-assigned failure categories (Table 5
shape) through the CLI, against a scripted judge on 127.0.0.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples
from kbvqa.demo.bench import build_community
from kbvqa.kb.store import KBStore
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.pipelines.index import build_image_index
from kbvqa.runner import read_results
from kbvqa.stages.agent.tags import strip_tags

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def run(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("agentstudy")
    b = bench_copy(root / "bench")
    community = build_community(b)
    kb = KBStore(b.kb)
    enc = HistogramEncoder()
    index, _ = build_image_index(kb, b.root, enc)
    samples = [s.dump() for s in read_samples(community)][:6]
    job = build_answer_job("agent", kb=kb, index=index, encoder=enc, image_root=b.root, kb_images=b.root)
    job.run(samples, out=root / "agent.jsonl", progress=False)
    kb.close()
    preds = list(read_results(root / "agent.jsonl"))
    # a judge's output for these six: three correct, three incorrect (one of them an error line)
    labels = ["correct", "incorrect", "correct", "incorrect", "correct", "incorrect"]
    verdicts = root / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": p["id"], "status": "ok", "verdict": {"label": lab}}) + "\n"
                                for p, lab in zip(preds, labels)), encoding="utf-8")
    return root, community, preds, verdicts


def test_agent_tools_study(run, tmp_path):
    root, community, preds, verdicts = run
    res = runner.invoke(app, ["study", "agent-tools", "-p", str(root / "agent.jsonl"), "-r", str(community),
                              "--verdicts", str(verdicts), "--json", "--out", str(tmp_path / "study")])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["kind"] == "agent-tools" and obj["n"] == 6 and obj["terminations"] == {"answer": 6}
    assert obj["calls_per_episode"] == {"search": 1.0, "visit": 1.0, "image_search": 1.0, "text_to_image_search": 1.0}
    assert obj["calls_by_outcome"]["correct"]["n"] == 3 and obj["calls_by_outcome"]["not_correct"]["n"] == 3
    ev = obj["useful_evidence"]
    assert ev["measure"] == "rule" and ev["needs_model"] is False  # the demo's community answers are key answers
    for tool in ("search", "visit"):
        h = ev["tools"][tool]
        assert h["calls"] == 6 and 0 < h["hits"] <= h["checkable"] <= 6 and h["rate"] == round(h["hits"] / h["checkable"], 6)
    assert obj["calls"]["search"]["calls"] == 6 and obj["ending"]["by"]["answered"] == 6
    assert obj["tags"]["total"] == obj["tags"]["valid"] == 6
    assert (tmp_path / "study" / "agent-tools.study.json").is_file()
    assert (tmp_path / "study" / "index.html").is_file()  # report build accepts the study


def test_agent_failure_categories_with_invalid_and_resume(run, tmp_path):
    root, community, preds, verdicts = run
    incorrect = [p["id"] for p in preds][1::2]
    replies = {incorrect[0]: Reply(content='{"category": "T3", "rationale": "kept confirming a guess"}'),
               incorrect[1]: Reply(content="it is probably T1"),  # not the JSON contract: invalid
               incorrect[2]: Reply(status=500, error="down")}

    def handler(req):
        text = req["messages"][-1]["content"]
        question = next(p for p in preds if p["id"] in replies and p["meta"]["question"] in text)
        return replies[question["id"]]

    journal = tmp_path / "failures.jsonl"
    args = ["study", "agent-failures", "-p", str(root / "agent.jsonl"), "-r", str(community),
            "--verdicts", str(verdicts), "--journal", str(journal), "--judge-model", "judge-x", "--json",
            "--max-retries", "0"]  # the 500 fails at once (retries with backoff take seconds)
    with FakeLLMServer(handler=handler) as srv:  # one server: a resume against another URL is refused
        res = runner.invoke(app, args + ["--judge-base-url", srv.base_url])
        first = srv.count
        obj = json.loads(res.stdout)
        assert obj["n"] == 3 and obj["categorised"] == 1 and obj["invalid"] == 1 and obj["error"] == 1
        assert {r["category"]: r["n"] for r in obj["rows"]}["T3"] == 1 and obj["tool_related"] == 1
        assert obj["judge"] == "openai:judge-x"
        # resume: only the invalid and the errored episode are asked again
        replies[incorrect[1]] = Reply(content='{"category": "N1", "rationale": "wrong fact"}')
        replies[incorrect[2]] = Reply(content='{"category": "T1", "rationale": "never found"}')
        res = runner.invoke(app, args + ["--judge-base-url", srv.base_url])
        assert srv.count - first == 2 and first >= 3, res.output
    obj = json.loads(res.stdout)
    assert obj["categorised"] == 3 and obj["invalid"] == obj["error"] == 0
    assert len(list(read_results(journal))) == 3


def test_with_without_retrieval_2x2_from_judge_verdicts(run, tmp_path):
    root, community, preds, verdicts = run
    without = tmp_path / "without.jsonl"  # a no-retrieval run's verdicts: only the first item right, one error
    without.write_text("".join(json.dumps({"id": p["id"], "status": "error" if i == 5 else "ok",
                                           "verdict": {"label": "correct" if i == 0 else "incorrect"}}) + "\n"
                               for i, p in enumerate(preds)), encoding="utf-8")
    res = runner.invoke(app, ["study", "retrieval-2x2", "--with", str(verdicts), "--without", str(without),
                              "-r", str(community), "--scorer", "judge-verdicts", "--json"])
    assert res.exit_code == 0, res.output
    o = json.loads(res.stdout)["overall"]
    # 15 community items; the agent run judged 6 (3 correct), the other run 1 correct and one failed judge call,
    # which has no grade: 14 items are paired
    assert o["n_items"] == 15 and o["n"] == 14
    assert o["both_correct"] == 1 and o["only_with"] == 2 and o["only_without"] == 0


def test_agent_predictions_go_straight_into_the_judge(run, tmp_path):
    """`score judge` reads the agent's predictions (graded by their whole answer, image tags removed) and
    NoteVQA references."""
    root, community, preds, verdicts = run
    seen = []

    def handler(req):
        text = req["messages"][-1]["content"]
        seen.append(text.split("Answer to grade: ", 1)[1].split("\n\nReply with one JSON object", 1)[0])
        return Reply(content='{"label": "incorrect", "rationale": "r"}')

    with FakeLLMServer(handler=handler) as srv:
        res = runner.invoke(app, ["score", "judge", "-p", str(root / "agent.jsonl"), "-r", str(community),
                                  "--judge-base-url", srv.base_url, "--judge-model", "j", "--out",
                                  str(tmp_path / "j.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["n"] == 15 and obj["n_incorrect"] == 6 and obj["n_missing"] == 9
    assert sorted(seen) == sorted(strip_tags(p["answer"]) for p in preds)  # the whole answer, not its first line
    assert all("\n" in t and "<image>" not in t for t in seen)
