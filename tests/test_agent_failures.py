"""Seed 001 Table 5 over every non-correct agent episode: incorrect, not attempted and no answer go to
the failure judge; invalid and failed verdicts, episodes without a verdict and failed agent records are
counted apart — never categorised, never dropped. The same outcomes split `study agent-tools`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import write_samples
from kbvqa.data.schema import Answer, Sample
from kbvqa.evaluate.agent import THOUGHT_CHARS, episode_outcome, tool_usage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()


def _step(turn: int, query: str, notices: list | None = None) -> dict:
    return {"turn": turn, "thought": f"My guess is {query}; searching to confirm it. " + "padding " * 200,
            "tool": "search", "arguments": {"query": [query]}, "status": "ok",
            "observation": f"results for {query}", **({"notices": notices} if notices else {})}


def _episode(rid: str, answer: str | None, searches: int, **meta) -> dict:
    return {"id": rid, "sample_id": rid, "status": "ok", "answer": answer,
            "trajectory": [_step(i + 1, f"{rid} query {i}") for i in range(searches)],
            "meta": {"termination": "answer", "question": f"question {rid}", **meta}}


# episode id -> (prediction, verdict line or None for no verdict)
NO_ANSWER_STEPS = [_step(1, "a"), _step(2, "b"), _step(3, "c", notices=[
    {"kind": "forced_answer", "text": "The tools are now closed: the turn budget is spent."}])]
EPISODES = {
    "correct": (_episode("correct", "Elmira.", 1), {"status": "ok", "verdict": {"label": "correct"}}),
    "wrong": (_episode("wrong", "Boston.", 2), {"status": "ok", "verdict": {"label": "incorrect"}}),
    "declined": (_episode("declined", "I cannot tell from this.", 1),
                 {"status": "ok", "verdict": {"label": "not_attempted"}}),
    "silent": ({**_episode("silent", None, 0, termination="turn_budget", forced_answer=True),
                "trajectory": NO_ANSWER_STEPS},
               {"status": "ok", "verdict": {"label": "not_attempted", "rationale": "no answer"}}),
    "bad_verdict": (_episode("bad_verdict", "Ithaca.", 1), {"status": "invalid", "reason": "unparseable"}),
    "judge_down": (_episode("judge_down", "Rome.", 1), {"status": "error", "reason": "HTTP 500"}),
    "unjudged": (_episode("unjudged", "Paris.", 1), None),
    "crashed": ({"id": "crashed", "question": "question crashed", "status": "error",
                 "reason": "ModelCallError: agent model call failed"}, {"status": "ok", "verdict": {"label":
                                                                                                 "not_attempted"}}),
}
CATEGORY = {"wrong": "T3", "declined": "T1", "silent": "T4"}


def _files(tmp_path: Path, verdicts: dict | None = None) -> tuple[Path, Path, Path]:
    refs = tmp_path / "refs.jsonl"
    write_samples([Sample(id=rid, question=f"question {rid}", answers=[Answer(text="Elmira")]) for rid in EPISODES],
                  refs, "kbvqa")
    preds = tmp_path / "agent.jsonl"
    # a resumed run: the first try of "wrong" failed, the second (last line wins) answered
    lines = [{"id": "wrong", "status": "error", "reason": "first try failed"}] + [p for p, _ in EPISODES.values()]
    preds.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    ver = tmp_path / "agent.judge.jsonl"
    rows = verdicts or {rid: v for rid, (_, v) in EPISODES.items() if v is not None}
    ver.write_text("".join(json.dumps({"id": rid, **v}) + "\n" for rid, v in rows.items()), encoding="utf-8")
    return refs, preds, ver


def test_outcome_of_each_episode():
    verdicts = {rid: (None if v["status"] == "error" else "invalid" if v["status"] == "invalid"
                      else v["verdict"]["label"]) for rid, (_, v) in EPISODES.items() if v is not None}
    got = {rid: episode_outcome(p, verdicts) for rid, (p, _) in EPISODES.items()}
    assert got == {"correct": "correct", "wrong": "incorrect", "declined": "not_attempted", "silent": "no_answer",
                   "bad_verdict": "judge_invalid", "judge_down": "judge_error", "unjudged": "unjudged",
                   "crashed": "episode_error"}


def test_failure_categories_cover_every_non_correct_episode(tmp_path, monkeypatch):
    refs, preds, ver = _files(tmp_path)
    asked: dict[str, str] = {}

    def judge(req: dict):
        text = req["messages"][-1]["content"]
        rid = next(r for r in CATEGORY if f'"question {r}"' in text)
        asked[rid] = text
        return ok(json.dumps({"category": CATEGORY[rid], "rationale": "scripted"}))

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    args = ["study", "agent-failures", "-p", "agent.jsonl", "-r", "refs.jsonl", "--verdicts", "agent.judge.jsonl",
            "--judge-model", "judge-x"]
    with FakeLLMServer(handler=judge) as srv:
        res = runner.invoke(app, args + ["--judge-base-url", srv.base_url, "--json"])
        assert res.exit_code == 0, res.output
        assert srv.count == 3
        table = runner.invoke(app, args + ["--judge-base-url", srv.base_url])  # resumed: nothing asked again
        assert table.exit_code == 0, table.output and srv.count == 3
    obj = json.loads(res.stdout)
    assert set(asked) == {"wrong", "declined", "silent"}
    assert obj["n"] == obj["categorised"] == 3 and obj["invalid"] == obj["error"] == 0 and obj["tool_related"] == 3
    assert obj["episodes"] == 8
    assert obj["outcomes"] == {"correct": 1, "incorrect": 1, "not_attempted": 1, "no_answer": 1}
    assert obj["apart"] == {"judge_invalid": 1, "judge_error": 1, "unjudged": 1, "episode_error": 1,
                            "episode_invalid": 0}
    rows = {r["category"]: r for r in obj["rows"]}
    assert rows["T4"]["by_outcome"] == {"incorrect": 0, "not_attempted": 0, "no_answer": 1}
    assert rows["T3"]["by_outcome"]["incorrect"] == 1 and rows["T1"]["by_outcome"]["not_attempted"] == 1
    # the judge is told what happened to an episode without an answer, and how to treat it
    silent = asked["silent"]
    assert "Outcome: the agent gave no answer" in silent and "Agent's answer: null" in silent
    assert "(turn_budget)" in silent and "with the tools closed" in silent
    assert "harness notice (forced_answer): The tools are now closed" in silent
    assert "An episode without an answer (null)" in silent
    # the judge reads the agent's reasoning, each thought within THOUGHT_CHARS, and what each category means
    wrong = asked["wrong"]
    assert "1. thought: My guess is wrong query 0; searching to confirm it." in wrong
    assert "2. thought: My guess is wrong query 1" in wrong and "[...]" in wrong
    thought_line = next(line for line in wrong.splitlines() if line.startswith("1. thought: "))
    assert len(thought_line) <= len("1. thought: ") + THOUGHT_CHARS + len(" [...]")
    assert "T3 (tool-related; seed 001's definition): a confirmation or anchoring loop" in wrong
    assert "N2 (non-tool; kbvqa's definition)" in wrong and "T1 (tool-related; kbvqa's definition)" in wrong
    # which definitions are the paper's
    cats = obj["definitions"]["categories"]
    assert cats["T3"]["source"].startswith("seed 001") and all("kbvqa" in cats[c]["source"] for c in
                                                                ("T1", "T2", "T4", "N1", "N2"))
    out = " ".join(table.output.split())
    assert "T1, T2, T4, N1, N2 wordings are kbvqa's reconstruction" in out and "T3 is named by seed 001" in out
    assert "went in, of 8 episodes: incorrect 1, not attempted 1, no answer 1" in out
    assert "judge invalid 1, judge error 1, unjudged 1, episode error 1" in out


def test_table5_shares_are_over_every_non_correct_episode(tmp_path, monkeypatch):
    """Seed 001's shares are of all 157 non-correct runs: an episode the failure judge could not
    categorise (here an off-list reply) is the row "not categorised", and stays in the denominator."""
    refs, preds, ver = _files(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))

    def judge(req: dict):
        text = req["messages"][-1]["content"]
        if '"question silent"' in text:
            return ok('{"category": "T9", "rationale": "not a category"}')  # off the list: invalid
        return ok('{"category": "T3", "rationale": "kept confirming"}')

    args = ["study", "agent-failures", "-p", str(preds), "-r", str(refs), "--verdicts", str(ver), "--judge-model",
            "judge-x", "--max-retries", "0"]
    with FakeLLMServer(handler=judge) as srv:
        res = runner.invoke(app, args + ["--judge-base-url", srv.base_url, "--json"])
        table = runner.invoke(app, args + ["--judge-base-url", srv.base_url], env={"COLUMNS": "200"})
    obj = json.loads(res.stdout)
    rows = {r["category"]: r for r in obj["rows"]}
    assert obj["n"] == 3 and obj["categorised"] == 2 and obj["not_categorised"] == 1 and obj["invalid"] == 1
    assert rows["T3"]["n"] == 2 and rows["T3"]["share"] == round(2 / 3, 6) and rows["T3"]["share_of_categorised"] == 1.0
    assert rows["not categorised"]["n"] == 1 and rows["not categorised"]["share"] == round(1 / 3, 6)
    assert rows["not categorised"]["by_outcome"]["no_answer"] == 1
    assert obj["tool_related_share"] == round(2 / 3, 6)
    assert sum(r["n"] for r in obj["rows"]) == obj["n"]
    out = " ".join(table.output.split())
    assert "% of non-correct" in out and "not categorised" in out and "66.67" in out and "33.33" in out


def test_a_new_verdict_takes_an_episode_out_of_the_table(tmp_path):
    """Journal lines of episodes that are no longer non-correct are not counted on resume."""
    refs, preds, ver = _files(tmp_path)
    judge_out = tmp_path / "failures.jsonl"
    args = ["study", "agent-failures", "-p", str(preds), "-r", str(refs), "--verdicts", str(ver), "--journal",
            str(judge_out), "--judge-model", "judge-x", "--json"]
    with FakeLLMServer(default=ok('{"category": "T2", "rationale": "r"}')) as srv:
        assert runner.invoke(app, args + ["--judge-base-url", srv.base_url]).exit_code == 0
        regraded = {rid: v for rid, (_, v) in EPISODES.items() if v is not None}
        regraded["wrong"] = {"status": "ok", "verdict": {"label": "correct"}}
        _files(tmp_path, regraded)
        res = runner.invoke(app, args + ["--judge-base-url", srv.base_url])
        assert srv.count == 3
    obj = json.loads(res.stdout)
    assert obj["n"] == 2 and obj["outcomes"]["correct"] == 2 and obj["outcomes"]["incorrect"] == 0


def test_tool_usage_by_outcome_and_2x2_groups(tmp_path):
    refs, preds, ver = _files(tmp_path)
    baseline = tmp_path / "direct.judge.jsonl"  # the single-pass run of the same model
    base = {"correct": "incorrect", "wrong": "correct", "declined": "incorrect", "silent": "correct",
            "bad_verdict": "correct", "judge_down": "correct", "unjudged": "correct", "crashed": "correct"}
    lines = [{"id": rid, "status": "ok", "verdict": {"label": lab}} for rid, lab in base.items()]
    lines[2] = {"id": "declined", "status": "ok", "missing": True, "verdict": {"label": "not_attempted"}}
    baseline.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    res = runner.invoke(app, ["study", "agent-tools", "-p", str(preds), "-r", str(refs), "--verdicts", str(ver),
                              "--baseline-verdicts", str(baseline), "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["n"] == 8 and obj["outcomes"]["no_answer"] == 1 and obj["outcomes"]["episode_error"] == 1
    by = obj["calls_by_outcome"]
    assert by["correct"]["n"] == 1 and by["not_correct"]["n"] == 3 and by["not_correct"]["search"] == 2.0
    paired = obj["paired"]
    groups = {g["group"]: g["n"] for g in paired["groups"]}
    # correct->search_helps; wrong, silent->search_hurts; declined has no single-pass prediction: apart
    assert groups == {"both_correct": 0, "search_helps": 1, "search_hurts": 2, "both_wrong": 0}
    assert paired["n"] == 3 and paired["net_gain"] == -1
    assert paired["apart"] == {"agent_episode_error": 1, "agent_judge_error": 1, "agent_judge_invalid": 1,
                               "agent_unjudged": 1, "baseline_no_prediction": 1}
    assert "Search helps" in obj["definitions"]["paired_groups"]
    # a 2x2 needs the agent's own verdicts
    res = runner.invoke(app, ["study", "agent-tools", "-p", str(preds), "-r", str(refs),
                              "--baseline-verdicts", str(baseline)])
    assert res.exit_code == 2 and "needs --verdicts" in res.output


def test_tool_usage_without_verdicts_has_no_groups():
    res = tool_usage([_episode("a", "x", 2)], {"a": ["x"]})
    assert res["calls_per_episode"]["search"] == 2.0 and "calls_by_outcome" not in res and "paired" not in res
