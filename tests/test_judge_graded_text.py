"""What the SimpleQA-style judge grades: the whole answer with image tags removed by default, only the
short answer with `--graded-text short` (scorer `simpleqa-judge[short-answer]`), recorded in the
summary, the journal's manifest and lines, and flagged by `report compare`; and the sentence splitter
behind the short answer, which does not cut at abbreviations. The judge is a scripted server on
127.0.0.1."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.evaluate.io import load_predictions
from kbvqa.stages.agent.tags import short_answer, strip_tags

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()

TAG = '<image>{"query": "Eiffel Tower", "idx": 1}</image>'
#: an agent answer whose claim is in its second sentence (the first is a preamble)
ANSWER = f"I checked the knowledge base first. The tower stands in Paris, France. {TAG} It opened in 1889."
PREAMBLE = "I checked the knowledge base first."


# ------------------------------------------------------------------------------------ the splitter


@pytest.mark.parametrize("text, first", [
    ("This looks like St. Paul's Cathedral in London. It was finished in 1710.",
     "This looks like St. Paul's Cathedral in London."),
    ("Mt. Fuji is 3,776 m tall. It is in Japan.", "Mt. Fuji is 3,776 m tall."),
    ("Dr. Smith met Mr. Jones in the U.S. Army in 1944. They parted later.",
     "Dr. Smith met Mr. Jones in the U.S. Army in 1944."),
    ("It is J. R. R. Tolkien's novel. Another sentence.", "It is J. R. R. Tolkien's novel."),
    ("The mast adds 3.5 m, e.g. for antennas. Second.", "The mast adds 3.5 m, e.g. for antennas."),
    ("No. 5 was the locomotive. Second.", "No. 5 was the locomotive."),
    ("No. The bridge is in Prague.", "No."),  # "No." is an answer, not "No. 5"
    ('He said "yes." Then he left.', 'He said "yes."'),
    ("Built approx. ten years ago. Second.", "Built approx. ten years ago."),
    ("这是东京塔。它高333米。", "这是东京塔。"),
    (f"The tower is 330 m tall. {TAG} It opened in 1889.", "The tower is 330 m tall."),
    ("\n\nFirst line\nsecond line", "First line"),
])
def test_short_answer_does_not_cut_at_abbreviations(text, first):
    assert short_answer(text) == first


def test_short_answer_keeps_openers_and_its_limits():
    # a preamble is not skipped (telling it from "Yes." would be a hidden judgement): that is why the
    # judge grades the whole answer by default
    assert short_answer(ANSWER) == PREAMBLE
    assert short_answer("x" * 400) == "x" * 300 and short_answer(None) is None and short_answer(TAG) is None


# ------------------------------------------------------------------------------------ the loader


def _files(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    preds = folder / "agent.jsonl"
    preds.write_text("".join(json.dumps(x) + "\n" for x in [
        {"id": "q1", "sample_id": "q1", "answer": ANSWER, "short_answer": short_answer(ANSWER), "status": "ok"},
        {"id": "q2", "sample_id": "q2", "answer": "Paris.", "status": "ok"},  # a non-agent answer: one text
        {"id": "q3", "sample_id": "q3", "answer": None, "status": "ok"},  # an abstention: no call
    ]), encoding="utf-8")
    refs = folder / "refs.jsonl"
    refs.write_text("".join(json.dumps({"id": i, "question": "Where is this tower?", "answers": ["Paris"]}) + "\n"
                            for i in ("q1", "q2", "q3")), encoding="utf-8")
    return preds, refs


def test_load_predictions_reads_the_text_it_is_told_to(tmp_path):
    preds, _ = _files(tmp_path)
    full = {p.data_id: p.prediction for p in load_predictions(preds, "full")}
    short = {p.data_id: p.prediction for p in load_predictions(preds, "short")}
    assert full["q1"] == strip_tags(ANSWER) and "<image>" not in full["q1"] and "Paris, France" in full["q1"]
    assert short["q1"] == PREAMBLE and load_predictions(preds)[0].prediction == PREAMBLE  # exact match: short
    assert full["q2"] == short["q2"] == "Paris." and full["q3"] is None is short["q3"]
    with pytest.raises(ValueError, match="graded_text"):
        load_predictions(preds, "first-sentence")


# ------------------------------------------------------------------------------------ the judge


class Grader:
    """A judge that says correct only when it is shown "Paris" and records every answer it grades."""

    def __init__(self) -> None:
        self.graded: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, req: dict) -> object:
        text = req["messages"][-1]["content"]
        answer = text.split("Answer to grade:")[1].split("\n")[0].strip()
        with self.lock:
            self.graded.append(answer)
        return ok(json.dumps({"label": "correct" if "Paris" in answer else "incorrect", "rationale": "scripted"}))


def _judge(args: list[str], code: int = 0) -> dict:
    res = runner.invoke(app, ["score", "judge", *args, "--json"])
    assert res.exit_code == code, res.output
    return json.loads(res.stdout)


def test_the_judge_grades_the_whole_answer_unless_told_short(tmp_path, monkeypatch):
    """As a user runs it: the response cache on, relative paths, another working directory."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    _files(tmp_path / "data")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    grader = Grader()
    with FakeLLMServer(handler=grader) as srv:
        base = ["-p", "../data/agent.jsonl", "-r", "../data/refs.jsonl", "--judge-base-url", srv.base_url,
                "--judge-model", "j"]
        full = _judge([*base, "--out", "full.jsonl"])
        assert any("The tower stands in Paris, France." in a for a in grader.graded)  # the second sentence
        assert not any("<image>" in a for a in grader.graded)  # tags removed
        sent_full = list(grader.graded)
        grader.graded.clear()
        short = _judge([*base, "--out", "short.jsonl", "--graded-text", "short"])
        assert PREAMBLE in grader.graded and not any("Paris, France" in a for a in grader.graded)
        # the same grading again into a new journal: answered by the response cache, same verdicts
        calls = srv.count
        again = _judge([*base, "--out", "again.jsonl"])
        assert srv.count == calls and again["n_correct"] == full["n_correct"]
    assert len(sent_full) == 2  # q3 gave no answer: not_attempted without a call
    assert full["scorer"] == "simpleqa-judge" and full["graded_text"] == "full"
    assert short["scorer"] == "simpleqa-judge[short-answer]" and short["graded_text"] == "short"
    assert (full["n_correct"], full["n_graded"], full["accuracy"]) == (2, 3, pytest.approx(2 / 3))
    assert short["n_correct"] == 1  # graded on its preamble, q1 is wrong
    for name, mode, scorer in (("full", "full", "simpleqa-judge"), ("short", "short", "simpleqa-judge[short-answer]")):
        manifest = json.loads((work / f"{name}.manifest.json").read_text())
        assert manifest["run_config"]["graded_text"] == mode and manifest["run_config"]["scorer"] == scorer
        lines = [json.loads(x) for x in (work / f"{name}.jsonl").read_text().splitlines()]
        assert {x["graded_text"] for x in lines} == {mode}

    # report compare: the two runs graded different text, so the judge metric is not comparable
    (work / "full.json").write_text(json.dumps(full))
    (work / "short.json").write_text(json.dumps(short))
    res = runner.invoke(app, ["report", "compare", "full.json", "short.json", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    j = doc["metrics"]["judge"]
    assert not j["consistent"] and "short-answer" in j["scorers"]["short"] and "graded_text=full" in j["scorers"]["full"]
    assert "not comparable" in res.stderr


def test_a_resumed_journal_graded_on_the_short_answer_is_not_reused_for_the_full_one(tmp_path):
    preds, refs = _files(tmp_path)
    with FakeLLMServer(handler=Grader()) as srv:
        base = ["-p", str(preds), "-r", str(refs), "--judge-base-url", srv.base_url, "--judge-model", "j",
                "--out", str(tmp_path / "j.jsonl")]
        _judge([*base, "--graded-text", "short"])
        res = runner.invoke(app, ["score", "judge", *base, "--json"])
    assert res.exit_code == 2 and "--no-resume" in res.output  # refused by name, never silently mixed


def test_score_judge_table_labels_both_kinds_of_figure(tmp_path):
    preds, refs = _files(tmp_path)
    with FakeLLMServer(handler=Grader()) as srv:
        res = runner.invoke(app, ["score", "judge", "-p", str(preds), "-r", str(refs), "--judge-base-url",
                                  srv.base_url, "--judge-model", "j"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "accuracy (correct / all responses, seed 001's)" in out and "accuracy_graded (correct / graded)" in out
    assert "n graded" in out and "n invalid" in out and "n responses" in out
    assert "SimpleQA correct (over all n)" in out and "simpleqa-judge (3 items)" in out
