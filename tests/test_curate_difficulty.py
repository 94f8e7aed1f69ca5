"""The difficulty probe of curation (seed 001 §3.1 step 3) and the standardiser's expert-style short
reference, against a scripted server: which of the 10 answers agree is the judge model's decision
(never a substring test), the paper's consistency rule is the default, the accuracy rule an option,
and without a judge the stage says it cannot decide."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.curate.common import ITEM
from kbvqa.pipelines.curate.refine import Difficulty, DifficultyConfig, Standardize, StandardizeConfig
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

REFERENCE = "It is not a plane tree: the bark and the leaves show a sycamore maple, whose seeds have two wings."


def record(rid: str = "d1") -> dict:
    return {"id": rid, ITEM: {"question": "What tree is this?", "answer": REFERENCE, "key_answer": "sycamore maple"}}


def run(stage, recs, tmp: Path, roles: dict, name: str = "out.jsonl") -> list[dict]:
    Job([stage], Context(roles=roles)).run(recs, out=tmp / name, progress=False)
    return list(read_results(tmp / name))


def scripted(answers: list[str], groups: list[list[int]], agree: list[int], seen: list[str]):
    runs = iter(answers)

    def handler(req):
        text = req["messages"][-1]["content"]
        text = text if isinstance(text, str) else " ".join(p.get("text", "") for p in text if p.get("type") == "text")
        seen.append(text)
        if "answered the same visual question" in text:
            return Reply(content=json.dumps({"groups": groups, "agree_with_reference": agree}))
        return Reply(content=json.dumps({"answer": next(runs)}))
    return handler


def test_consistency_is_decided_by_the_judge_not_by_substrings(tmp_path):
    # every answer contains "plane tree", which the reference also contains; a substring test would call
    # all ten correct. The judge groups them: seven say plane tree, three say sycamore maple.
    answers = ["a London plane tree"] * 7 + ["sycamore maple", "a sycamore maple", "maple (sycamore)"]
    seen: list[str] = []
    with FakeLLMServer(handler=scripted(answers, [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10]], [8, 9, 10], seen)) as srv:
        c = OpenAIChatClient(srv.base_url, "m", max_retries=0, concurrency=1)
        (line,) = run(Difficulty(DifficultyConfig(runs=10)), [record()], tmp_path, {"answerer": c, "judge": c})
    assert line["status"] == "ok", line["reason"]
    d = line["curate"]["difficulty"]
    assert (d["consistency"], d["accuracy"], d["rule"]) == (0.7, 0.3, "consistency")
    assert d["groups"] == [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10]] and "drop" not in line  # 70% <= 90%: kept
    judge_prompt = seen[-1]
    assert "1. a London plane tree" in judge_prompt and "10. maple (sycamore)" in judge_prompt


def test_all_runs_alike_is_too_easy_and_the_accuracy_rule_is_an_option(tmp_path):
    answers = ["sycamore maple"] * 10
    seen: list[str] = []
    with FakeLLMServer(handler=scripted(answers * 2, [list(range(1, 11))], list(range(1, 11)), seen)) as srv:
        c = OpenAIChatClient(srv.base_url, "m", max_retries=0, concurrency=1)
        (line,) = run(Difficulty(DifficultyConfig(runs=10)), [record()], tmp_path, {"answerer": c, "judge": c})
        (acc,) = run(Difficulty(DifficultyConfig(runs=10, rule="accuracy", max_accuracy=1.0)), [record()], tmp_path,
                     {"answerer": c, "judge": c}, name="acc.jsonl")
    assert line["drop"] == {"stage": "difficulty", "reason": "too_easy",
                            "detail": "10 of 10 runs gave the same answer (over 90%, consistency rule)"}
    assert acc["curate"]["difficulty"]["rule"] == "accuracy" and "drop" not in acc  # 100% is not over 100%


def test_a_bad_grouping_is_invalid_and_no_judge_cannot_decide(tmp_path):
    answers = ["x"] * 20
    seen: list[str] = []
    with FakeLLMServer(handler=scripted(answers, [[1, 2], [2, 3]], [], seen)) as srv:
        c = OpenAIChatClient(srv.base_url, "m", max_retries=0, concurrency=1)
        (bad,) = run(Difficulty(DifficultyConfig(runs=3)), [record()], tmp_path, {"answerer": c, "judge": c})
        before = srv.count
        (off,) = run(Difficulty(DifficultyConfig(runs=3)), [record("d2")], tmp_path, {"answerer": c}, name="off.jsonl")
        assert srv.count == before  # no run is spent when the agreement cannot be decided
    assert bad["status"] == "invalid" and "exactly once" in bad["reason"]
    assert off["status"] == "needs_model" and off["reason"].startswith("NeedsModel:") and "'judge'" in off["reason"]


def test_standardiser_writes_an_expert_paragraph(tmp_path):
    para = ("Sycamore maple. " + "The five-lobed leaves with coarse teeth and the flaking grey bark mark it; "
            "plane trees have mottled bark and hairy seed balls instead. " * 3).strip()
    post = {"id": "s1", "title": "Tree in my street", "text": "What tree is this?",
            "comments": [{"text": "sycamore maple, look at the seeds", "likes": 3}]}
    replies = [Reply(content=json.dumps({"question": "What tree is this?", "answer": "sycamore maple",
                                         "reference": para})),
               Reply(content=json.dumps({"question": "What tree is this?", "answer": "maple", "reference": "Maple."}))]
    with FakeLLMServer() as srv:
        srv.push(*replies)
        c = OpenAIChatClient(srv.base_url, "m", max_retries=0, concurrency=1)
        (ok,) = run(Standardize(StandardizeConfig()), [post], tmp_path, {"repairer": c})
        (short,) = run(Standardize(StandardizeConfig()), [{**post, "id": "s2"}], tmp_path, {"repairer": c},
                       name="short.jsonl")
        sent = srv.requests[0]["json"]["messages"][-1]["content"]
    assert "about 100 words" in (sent if isinstance(sent, str) else json.dumps(sent))
    assert ok[ITEM]["answer"] == para and ok[ITEM]["key_answer"] == "sycamore maple"
    assert ok["curate"]["standardize"]["reference_words"] == len(para.split())
    assert short["status"] == "invalid" and "fewer than 30" in short["reason"]
