"""The judge's two rubrics and the paper's denominator, against a scripted judge on 127.0.0.1: a
NoteVQA-layout reference file (or a gold longer than PARAGRAPH_WORDS words) is graded with
`judge.paragraph`, an InfoSeek-style one with `judge.simpleqa`; the prompt used is named in every
journal line, the summary, the manifest and a compared summary; a prompt file replaces the paragraph
rubric; and accuracy is correct / all responses (seed 001) with correct / graded and the invalid and
error counts beside it, over a judge that fails some calls and answers some with prose."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.evaluate import judge as jd
from kbvqa.models.prompts.judge import PARAGRAPH, SIMPLEQA

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402

runner = CliRunner()

_REFERENCE = ("This is a golden chanterelle (Cantharellus cibarius), not the toxic jack-o'-lantern: its ridges "
              "are blunt and fork, they run down the stem, and the flesh is pale inside. It is edible once cooked; "
              "cut it lengthwise to check the inside, and if in doubt ask a local mycological society before eating "
              "any wild mushroom.")  # a NoteVQA-style short reference: a ~60-word paragraph


class Judge:
    """Records each request's text. Decides by the answer graded: 'boom' gets a 500 (no retries are
    asked for), 'prose' a reply that is not the JSON contract, 'jack' incorrect, the rest correct —
    whichever rubric was sent, so the rubric is seen only in the request text."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, req: dict) -> Reply:
        text = req["messages"][-1]["content"]
        with self.lock:
            self.texts.append(text)
        answer = text.split("Answer to grade:")[1].split("\n")[0].strip()
        if answer.startswith("boom"):
            return Reply(status=500, headers={"Retry-After": "0"}, error="upstream down")
        if answer.startswith("prose"):
            return ok("The answer looks mostly right to me.")
        label = "incorrect" if "jack" in answer else "correct"
        return ok(json.dumps({"label": label, "rationale": "scripted"}))


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _notevqa(tmp_path: Path) -> tuple[Path, Path]:
    """Five NoteVQA-layout references (category/intent), four predictions: one right with a detail
    missing, one contradicting the identification, one failed call, one prose reply; q4 missing."""
    refs = _write(tmp_path / "community.jsonl", [
        {"id": f"q{i}", "question": "What mushroom is this, and can I eat it?", "answer": _REFERENCE,
         "category": "Nature", "intent": "Identification"} for i in range(5)])
    preds = _write(tmp_path / "agent.jsonl", [
        {"data_id": "q0", "prediction": "A golden chanterelle; edible when cooked."},
        {"data_id": "q1", "prediction": "jack-o'-lantern, toxic, do not eat."},
        {"data_id": "q2", "prediction": "boom"},
        {"data_id": "q3", "prediction": "prose please"}])
    return refs, preds


def _infoseek(tmp_path: Path) -> tuple[Path, Path]:
    refs = _write(tmp_path / "infoseek.jsonl", [{"id": "s0", "question": "Which city is this?", "answers": ["Paris"]},
                                                 {"id": "s1", "question": "Which river?", "answers": ["Seine"]}])
    preds = _write(tmp_path / "infoseek.preds.jsonl", [{"data_id": "s0", "prediction": "Paris"},
                                                       {"data_id": "s1", "prediction": "the Seine"}])
    return refs, preds


def _judge(args: list, code: int = 0):
    res = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})
    assert res.exit_code == code, res.output
    return res


def test_gold_kind_rule():
    assert jd.gold_kind("Paris")[0] == "short"
    assert jd.gold_kind(" ".join(["word"] * jd.PARAGRAPH_WORDS))[0] == "short"
    assert jd.gold_kind(" ".join(["word"] * (jd.PARAGRAPH_WORDS + 1)))[0] == "paragraph"
    assert jd.gold_kind("Chanterelle; edible", "notevqa") == ("paragraph",
                                                              "NoteVQA layout: the short reference is a paragraph")
    cfg = jd.JudgeConfig(gold="short")
    assert cfg.rubric_for({"target": _REFERENCE, "gold_layout": "notevqa"})[:2] == (SIMPLEQA.id, "short")
    assert jd.JudgeConfig().rubric_for({"target": _REFERENCE})[:2] == (PARAGRAPH.id, "paragraph")  # ~60 words
    assert jd.scorer_name("full", "paragraph") == "simpleqa-judge[paragraph]"
    assert jd.scorer_name("short", "mixed") == "simpleqa-judge[short-answer,mixed-rubric]"
    assert jd.prompt_label({SIMPLEQA.id: 3, PARAGRAPH.id: 12}) == f"{SIMPLEQA.id} (3) + {PARAGRAPH.id} (12)"


def test_notevqa_gets_the_paragraph_rubric_infoseek_the_short_one(tmp_path):
    nv_refs, nv_preds = _notevqa(tmp_path)
    is_refs, is_preds = _infoseek(tmp_path)
    judge = Judge()
    with FakeLLMServer(handler=judge) as srv:
        common = ["--judge-base-url", srv.base_url, "--judge-model", "j", "--max-retries", "0", "--json"]
        nv = json.loads(_judge(["score", "judge", "-p", nv_preds, "-r", nv_refs, "--out", tmp_path / "nv.jsonl",
                                *common]).stdout)
        nv_texts, judge.texts = judge.texts, []
        inf = json.loads(_judge(["score", "judge", "-p", is_preds, "-r", is_refs, "--out", tmp_path / "is.jsonl",
                                 *common]).stdout)
    # what the scripted server received: the paragraph rubric for every NoteVQA item, the short one for InfoSeek
    assert len(nv_texts) == 4 and all("Compare the answer's conclusion with the reference's" in t for t in nv_texts)
    assert not any("all of it, if the gold answer has several parts" in t for t in nv_texts)
    assert len(judge.texts) == 2 and all("all of it, if the gold answer has several parts" in t for t in judge.texts)
    assert not any("central claim" in t for t in judge.texts)
    # the prompt is named in the scorer, the summary, each journal line and the manifest
    assert nv["scorer"] == "simpleqa-judge[paragraph]" and nv["prompt_version"] == PARAGRAPH.id
    assert nv["prompt_versions"] == {PARAGRAPH.id: 5}
    assert inf["scorer"] == "simpleqa-judge" and inf["prompt_version"] == SIMPLEQA.id
    line = json.loads((tmp_path / "nv.jsonl").read_text().splitlines()[0])
    assert line["rubric"]["prompt"] == PARAGRAPH.id and line["rubric"]["gold"] == "paragraph"
    assert line["verdict"]["judge"]["prompt_version"] == PARAGRAPH.id
    manifest = json.loads(Path(nv["manifest"]).read_text())
    assert manifest["run_config"]["prompts"] == {PARAGRAPH.id: 5} and manifest["run_config"]["scorer"] == nv["scorer"]
    assert PARAGRAPH.id in manifest["stages"][0]["prompt_hashes"]
    # a compared summary names the prompt in its scorer, and the two rubrics never share a column
    (tmp_path / "nv.summary.json").write_text(json.dumps(nv))
    (tmp_path / "is.summary.json").write_text(json.dumps(inf))
    doc = json.loads(_judge(["report", "compare", tmp_path / "nv.summary.json", tmp_path / "is.summary.json",
                             "--json"]).stdout)
    scorers = doc["metrics"]["judge"]["scorers"]
    assert f"prompt {PARAGRAPH.id}" in scorers["nv.summary"] and f"prompt {SIMPLEQA.id}" in scorers["is.summary"]
    assert doc["metrics"]["judge"]["consistent"] is False


def test_accuracy_over_all_responses_beside_the_graded_one(tmp_path):
    """5 references: 1 correct, 1 incorrect, 1 failed call, 1 prose reply, 1 missing prediction."""
    refs, preds = _notevqa(tmp_path)
    with FakeLLMServer(handler=Judge()) as srv:
        args = ["score", "judge", "-p", preds, "-r", refs, "--out", tmp_path / "j.jsonl", "--judge-base-url",
                srv.base_url, "--judge-model", "j", "--max-retries", "0"]
        s = json.loads(_judge([*args, "--json"]).stdout)
        table = _judge(args).stdout  # resumed: the ok verdicts reused, the failed and invalid asked again
    assert (s["n"], s["n_correct"], s["n_graded"], s["n_invalid"], s["n_error"], s["n_missing"]) == (5, 1, 3, 1, 1, 1)
    assert s["accuracy"] == pytest.approx(1 / 5)  # seed 001's: correct / all responses, the missing one included
    assert s["accuracy_graded"] == pytest.approx(1 / 3)  # kbvqa's: over graded verdicts
    assert "seed 001" in s["definitions"]["accuracy"] and "n_graded" in s["definitions"]["accuracy_graded"]
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in table.splitlines()
            if line.count("│") >= 3}
    assert rows["accuracy (correct / all responses, seed 001's) (%)"] == "20.00"
    assert rows["accuracy_graded (correct / graded) (%)"] == "33.33"
    assert (rows["n responses (missing predictions included, not correct)"], rows["n graded"], rows["n invalid"],
            rows["n error"]) == ("5", "3", "1", "1")


def test_a_prompt_file_replaces_the_paragraph_rubric(tmp_path):
    refs, preds = _notevqa(tmp_path)
    mine = tmp_path / "paragraph.txt"
    mine.write_text("MY RUBRIC. Question: {question_raw}\nReference: {target_raw}\nAnswer to grade: {predicted_raw}\n"
                    'Reply {"label": "correct" | "incorrect" | "not_attempted", "rationale": "..."}', encoding="utf-8")
    judge = Judge()
    with FakeLLMServer(handler=judge) as srv:
        s = json.loads(_judge(["--prompt-file", f"judge.paragraph={mine}", "score", "judge", "-p", preds, "-r", refs,
                               "--out", tmp_path / "j.jsonl", "--judge-base-url", srv.base_url, "--judge-model", "j",
                               "--max-retries", "0", "--json"]).stdout)
    assert judge.texts and all(t.startswith("MY RUBRIC.") for t in judge.texts)
    assert s["prompt_version"].startswith("judge.paragraph@file-")
