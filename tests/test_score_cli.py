"""`kbvqa score ...` through typer's CliRunner: --json output shapes, per-item files, loud errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402

runner = CliRunner()


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture()
def infoseek_files(tmp_path):
    refs = _jsonl(tmp_path / "ref.jsonl", [
        {"data_id": "q1", "data_split": "val_unseen_question", "answer_eval": ["Paris"]},
        {"data_id": "q2", "data_split": "val_unseen_entity",
         "answer_eval": [{"wikidata": 10, "range": [9, 11]}], "answer": ["10"]},
        {"data_id": "q3", "data_split": "val_unseen_entity", "answer_eval": ["1989"]},
    ])
    qt = _jsonl(tmp_path / "qt.jsonl", [{"data_id": "q1", "question_type": "String"},
                                        {"data_id": "q2", "question_type": "Numerical"},
                                        {"data_id": "q3", "question_type": "Time"}])
    preds = _jsonl(tmp_path / "pred.jsonl", [{"data_id": "q1", "prediction": "paris"},
                                             {"data_id": "q2", "prediction": "10.5"},
                                             {"data_id": "zz", "prediction": "?"}])
    return refs, qt, preds


def _invoke(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res


def test_infoseek_official_json_shape(infoseek_files, tmp_path):
    refs, qt, preds = infoseek_files
    out = tmp_path / "items.jsonl"
    res = _invoke(["score", "infoseek", "--predictions", preds, "--references", refs, "--qtypes", qt,
                   "--mode", "official", "--json", "--per-item", str(out)])
    obj = json.loads(res.stdout)
    assert set(obj) == {"final_score", "unseen_question_score", "unseen_entity_score"}
    for k in ("unseen_question_score", "unseen_entity_score"):
        assert set(obj[k]) == {"score", "score_time", "score_num", "score_string"}
    assert obj["final_score"] == 100.0
    items = [json.loads(x) for x in out.read_text().splitlines()]
    assert [i["data_id"] for i in items] == ["q1", "q2"]
    assert set(items[0]) == {"data_id", "question_type", "data_split", "prediction", "correct"}


def test_infoseek_strict_and_reward_json(infoseek_files):
    refs, qt, preds = infoseek_files
    s = json.loads(_invoke(["score", "infoseek", "-p", preds, "-r", refs, "--qtypes", qt, "--mode", "strict",
                            "--json"]).stdout)
    assert s["mode"] == "strict" and s["coverage"] == round(2 / 3, 4) and s["n_missing"] == 1
    assert s["unseen_entity_score"]["score"] == 50.0 and "time_leniency" in s["extensions"]
    r = json.loads(_invoke(["score", "infoseek", "-p", preds, "-r", refs, "--qtypes", qt, "--mode", "reward",
                            "--json"]).stdout)
    assert r["mode"] == "reward" and r["n"] == 3 and r["correct"] == 2 and r["n_unknown_ids"] == 1
    assert set(r["by_question_type"]) == {"String", "Numerical", "Time"}


def test_infoseek_table_output(infoseek_files):
    refs, qt, preds = infoseek_files
    res = _invoke(["score", "infoseek", "-p", preds, "-r", refs, "--qtypes", qt])
    assert "unseen_question" in res.stdout and "final" in res.stdout


def test_infoseek_bad_input_exit_code(tmp_path, infoseek_files):
    refs, _, preds = infoseek_files
    res = runner.invoke(app, ["score", "infoseek", "-p", preds, "-r", refs, "--json"])  # no qtypes
    assert res.exit_code == 2
    assert "ref.jsonl:1" in res.output and "question_type" in res.output


def test_evqa_json(tmp_path):
    csv = tmp_path / "evqa.csv"
    csv.write_text("data_id,question,answer,question_type\na,q,Blue Jay,automatic\nb,q,red&&green,multi_answer\n",
                   encoding="utf-8")
    preds = _jsonl(tmp_path / "p.jsonl", [{"data_id": "a", "prediction": "the blue jay"}])
    obj = json.loads(_invoke(["score", "evqa", "-p", preds, "-r", str(csv), "--json"]).stdout)
    assert obj["scorer"] == "evqa-em" and obj["accuracy"] == 50.0 and obj["coverage"] == 0.5
    assert set(obj["by_question_type"]) == {"automatic", "multi_answer"}
    res = runner.invoke(app, ["score", "evqa", "-p", preds, "-r", str(csv), "--bem-dir", str(tmp_path)])
    assert res.exit_code == 2 and "BEM backend not available" in res.output


def test_retrieval_json(tmp_path):
    w = "https://en.wikipedia.org/wiki/"
    refs = _jsonl(tmp_path / "r.jsonl", [{"id": "q1", "question": "?", "answers": ["x"], "entity": {"url": w + "A"}},
                                         {"id": "q2", "question": "?", "answers": ["y"], "entity": {"url": w + "B"}}])
    recs = _jsonl(tmp_path / "rec.jsonl", [{"id": "q1", "stage": "initial", "retrieved": ["http://en.wikipedia.org/wiki/A"]},
                                           {"id": "q2", "stage": "initial", "retrieved": [w + "C", w + "C/", w + "B"]}])
    texts = _jsonl(tmp_path / "t.jsonl", [{"url": w + "A", "text": "has x in it"}])
    obj = json.loads(_invoke(["score", "retrieval", "--records", recs, "--references", refs, "--k", "1,2",
                              "--texts", texts, "--json"]).stdout)
    ini = obj["stages"]["initial"]
    assert ini["recall"] == {"@1": 0.5, "@2": 1.0} and ini["mrr"] == pytest.approx(0.75)
    assert obj["answer_in_text"]["initial"]["recall"]["@1"] == 0.5
    bad = runner.invoke(app, ["score", "retrieval", "--records", recs, "--references", refs, "--k", "0,x"])
    assert bad.exit_code != 0


def _grade(req):
    """A judge server: Paris is correct, other answers incorrect; 'boom' fails, 'garbage' is prose."""
    ans = req["messages"][0]["content"].split("Answer to grade:")[1].split("\n")[0].strip()
    if ans == "boom":
        return Reply(status=500, headers={"Retry-After": "0"}, error="upstream failure")
    if ans == "garbage":
        return ok("I think it is probably right")
    return ok(json.dumps({"label": "correct" if ans == "Paris" else "incorrect", "rationale": "r"}))


def test_judge_command_with_fake_client(tmp_path):
    refs = _jsonl(tmp_path / "r.jsonl", [{"id": f"q{i}", "question": "?", "answers": ["Paris"]} for i in range(6)])
    preds = _jsonl(tmp_path / "p.jsonl", [{"data_id": "q0", "prediction": "Paris"},
                                          {"data_id": "q1", "prediction": "Lyon"},
                                          {"data_id": "q2", "prediction": "boom"},
                                          {"data_id": "q3", "prediction": "garbage"},
                                          {"data_id": "q4", "prediction": ""}])
    with FakeLLMServer(handler=_grade) as srv:
        obj = json.loads(_invoke(["score", "judge", "-p", preds, "-r", refs, "--judge-base-url", srv.base_url,
                                  "--judge-model", "fj", "--json"]).stdout)
    assert obj["n"] == 6 and obj["n_missing"] == 1 and obj["n_empty"] == 1
    assert obj["n_correct"] == 1 and obj["n_incorrect"] == 1 and obj["n_error"] == 1 and obj["n_invalid"] == 1
    assert obj["n_not_attempted"] == 2
    assert obj["accuracy_given_attempted"] == 0.5


def test_every_line_kbvqa_writes_is_scored_and_counted(tmp_path):
    """ok, abstained (answer null), error and invalid runner lines are all readable; the summary counts
    them, and predictions that name no reference id are refused, not scored 0."""
    refs = _jsonl(tmp_path / "r.jsonl", [{"id": f"q{i}", "question": "?", "answers": ["Paris"],
                                          "question_type": "templated"} for i in range(4)])
    preds = _jsonl(tmp_path / "p.jsonl", [
        {"id": "q0", "sample_id": "q0", "answer": "Paris", "status": "ok"},
        {"id": "q1", "sample_id": "q1", "answer": None, "status": "ok"},
        {"id": "q2", "question": "?", "status": "error", "reason": "RuntimeError: boom"},
        {"id": "q3", "question": "?", "status": "invalid", "reason": "reply unusable"}])
    obj = json.loads(_invoke(["score", "evqa", "-p", preds, "-r", refs, "--json"]).stdout)
    assert obj["n_error_lines"] == 1 and obj["n_invalid_lines"] == 1 and obj["n_abstained"] == 1
    assert obj["correct"] == 1 and obj["n"] == 4
    other = _jsonl(tmp_path / "o.jsonl", [{"data_id": "zz", "prediction": "x"}])
    res = runner.invoke(app, ["score", "evqa", "-p", other, "-r", refs])
    assert res.exit_code == 2 and "none of its 1 prediction ids" in res.output
