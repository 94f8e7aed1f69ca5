"""Method output adapters: each published format, CoMEM extraction rules, strict id alignment."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbvqa.cli.score import app as score_app
from kbvqa.evaluate import methods as mt
from kbvqa.evaluate.io import ScoreInputError, load_predictions

runner = CliRunner()


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def refs(tmp_path):
    p = tmp_path / "refs.csv"
    p.write_text("data_id,answer,question_type\nq1,Paris,String\nq2,10,Numerical\nq3,1989,Time\n", encoding="utf-8")
    return p


def test_iba_infoseek_and_evqa_keys(tmp_path, refs):
    f = _jsonl(tmp_path / "iba.jsonl", [{"data_id": "q1", "prediction": "Paris"},
                                        {"data_id": "q2", "prediction": 10}])
    r = mt.convert("iba", f, references=refs)
    assert [(p.data_id, p.prediction, p.parse_rule) for p in r.predictions] == [
        ("q1", "Paris", "key:prediction"), ("q2", "10", "key:prediction")]
    assert r.alignment.n_missing == 1 and r.alignment.missing_ids == ["q3"]
    # E-VQA: the answer may sit under other keys; a list takes its first element
    g = _jsonl(tmp_path / "iba_evqa.jsonl", [{"data_id": "q1", "final_answer": "Paris"},
                                             {"data_id": "q2", "answers": ["10", "11"]},
                                             {"data_id": "q3", "raw_response": "1989"}])
    r = mt.convert("iba", g, references=refs, dataset="evqa")
    assert {p.data_id: (p.prediction, p.parse_rule) for p in r.predictions} == {
        "q1": ("Paris", "key:final_answer"), "q2": ("10", "key:answers[0]"), "q3": ("1989", "key:raw_response")}
    assert r.parse_rules == {"key:final_answer": 1, "key:answers[0]": 1, "key:raw_response": 1}
    # for InfoSeek the extra keys are not accepted: loud error naming the keys
    with pytest.raises(ScoreInputError, match="no answer key"):
        mt.convert("iba", g, dataset="infoseek")


def test_echosight_unknown_ids_dropped_and_counted(tmp_path, refs):
    f = _jsonl(tmp_path / "e.jsonl", [{"data_id": "q1", "prediction": "paris"},
                                      {"data_id": "zz", "prediction": "x"},
                                      {"data_id": "q3", "prediction": None}])
    r = mt.convert("echosight", f, references=refs)
    a = r.alignment
    assert [p.data_id for p in r.predictions] == ["q1", "q3"]
    assert (a.n_input, a.n_output, a.n_unknown, a.unknown_ids, a.n_missing, a.n_null_predictions) == \
        (3, 2, 1, ["zz"], 1, 1)
    assert not a.clean


def test_duplicates_need_an_explicit_policy(tmp_path, refs):
    f = _jsonl(tmp_path / "d.jsonl", [{"data_id": "q1", "prediction": "a"}, {"data_id": "q1", "prediction": "b"},
                                      {"data_id": "q2", "prediction": "10"}])
    with pytest.raises(mt.DuplicateIdError, match="q1"):
        mt.convert("echosight", f, references=refs)
    last = mt.convert("echosight", f, references=refs, duplicates="last")
    first = mt.convert("echosight", f, references=refs, duplicates="first")
    assert {p.data_id: p.prediction for p in last.predictions} == {"q1": "b", "q2": "10"}
    assert {p.data_id: p.prediction for p in first.predictions} == {"q1": "a", "q2": "10"}
    assert last.alignment.duplicates == {"q1": 2} and last.alignment.n_duplicate_lines == 1
    assert any("explicit policy 'last'" in w for w in last.warnings)


def test_reflectiva_directory_and_single_list(tmp_path, refs):
    d = tmp_path / "rv"
    d.mkdir()
    (d / "part_0.json").write_text(json.dumps([{"data_id": "q1", "answer": "Paris"}]), encoding="utf-8")
    (d / "part_1.json").write_text(json.dumps([{"question_id": "q2", "output": "ten"},
                                               {"id": "q3", "prediction": "1989"}]), encoding="utf-8")
    r = mt.convert("reflectiva", d, references=refs)
    assert [(p.data_id, p.prediction, p.parse_rule) for p in r.predictions] == [
        ("q1", "Paris", "key:answer"), ("q2", "ten", "key:output"), ("q3", "1989", "key:prediction")]
    assert r.alignment.clean
    one = tmp_path / "evqa.json"
    one.write_text(json.dumps({"q1": "Paris", "q2": {"answer": "10"}}), encoding="utf-8")
    r = mt.convert("reflectiva", one)
    assert [(p.data_id, p.prediction, p.parse_rule) for p in r.predictions] == [
        ("q1", "Paris", "mapping"), ("q2", "10", "key:answer")]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"data_id": "q1", "text": "x"}]), encoding="utf-8")
    with pytest.raises(ScoreInputError, match=r"bad.json\[0\].*no answer key"):
        mt.convert("reflectiva", bad)


def test_wikiprf_details_and_legacy(tmp_path, refs):
    d = tmp_path / "wp"
    d.mkdir()
    _jsonl(d / "run_generation_details.jsonl", [{"data_id": "q1", "final_answer": "Paris"}])
    r = mt.convert("wikiprf", d)
    assert [(p.data_id, p.prediction) for p in r.predictions] == [("q1", "Paris")]
    # legacy with ids: zipped
    leg = tmp_path / "legacy.json"
    leg.write_text(json.dumps({"data_id": ["q2", "q1"], "results": ["10", {"answer": "Paris"}]}), encoding="utf-8")
    r = mt.convert("wikiprf", leg, references=refs)
    assert {p.data_id: (p.prediction, p.parse_rule) for p in r.predictions} == {
        "q2": ("10", "id:data_id[];results"), "q1": ("Paris", "id:data_id[];key:answer")}


def test_wikiprf_gt_row_order_only_when_allowed(tmp_path, refs):
    d = tmp_path / "legacy"
    d.mkdir()
    leg = d / "out.json"
    leg.write_text(json.dumps({"results": ["Paris", "10", "1989"]}), encoding="utf-8")
    with pytest.raises(ScoreInputError, match="allow_gt_order"):
        mt.convert("wikiprf", leg, references=refs)
    r = mt.convert("wikiprf", leg, references=refs, allow_gt_order=True)
    assert [(p.data_id, p.prediction) for p in r.predictions] == [("q1", "Paris"), ("q2", "10"), ("q3", "1989")]
    assert all(p.parse_rule.startswith("id:gt-row-order") for p in r.predictions)
    assert any("ROW ORDER" in w for w in r.warnings)
    # a *_raw_outputs.jsonl next to the file supplies the ids before that fallback
    _jsonl(d / "x_raw_outputs.jsonl", [{"data_id": "q3"}, {"data_id": "q2"}, {"data_id": "q1"}])
    r = mt.convert("wikiprf", leg, references=refs)
    assert [(p.data_id, p.prediction) for p in r.predictions] == [("q3", "Paris"), ("q2", "10"), ("q1", "1989")]
    assert all(p.parse_rule.startswith("id:raw-outputs") for p in r.predictions)


@pytest.mark.parametrize("text,answer,rule", [
    ("thinking... \\boxed{Paris} then \\boxed{\\text{Lyon}}", "\\text{Lyon}", "boxed"),
    ("<answer> wrong </answer> <answer>Paris</answer> \\boxed{x", "Paris", "answer-tag"),
    ("Reasoning.\nFinal Answer: Paris\nmore text", "Paris", "final-answer"),
    ("the final answer is: 1989", "1989", "final-answer"),
    ("  just Paris  ", "just Paris", "raw"),
    (None, None, "null"),
])
def test_comem_extraction_rules(text, answer, rule):
    assert mt.extract_comem(text) == (answer, rule)


def test_comem_reports_rule_per_item(tmp_path):
    f = _jsonl(tmp_path / "c.jsonl", [{"data_id": "a", "output": "x \\boxed{Paris}"},
                                      {"data_id": "b", "output": "<answer>10</answer>"},
                                      {"data_id": "c", "output": "1989"}])
    r = mt.convert("comem", f)
    assert [p.parse_rule for p in r.predictions] == ["boxed", "answer-tag", "raw"]
    assert r.parse_rules == {"boxed": 1, "answer-tag": 1, "raw": 1}


def test_generic_dotted_keys_and_extract(tmp_path):
    f = _jsonl(tmp_path / "g.jsonl", [{"qid": 7, "out": {"text": "so \\boxed{42}"}}])
    r = mt.convert("generic", f, id_key="qid", answer_key="out.text", extract="comem")
    assert [(p.data_id, p.prediction, p.parse_rule) for p in r.predictions] == [("7", "42", "key:out.text;boxed")]
    with pytest.raises(ScoreInputError, match="answer key missing"):
        mt.convert("generic", f, id_key="qid", answer_key="out.nope")


def test_reference_ids_reject_duplicates(tmp_path):
    p = tmp_path / "r.jsonl"
    _jsonl(p, [{"id": "a"}, {"id": "a"}])
    with pytest.raises(ScoreInputError, match="duplicate reference id"):
        mt.reference_ids(p)


def test_cli_convert_predictions_roundtrip(tmp_path, refs):
    f = _jsonl(tmp_path / "c.jsonl", [{"data_id": "q1", "output": "\\boxed{Paris}"},
                                      {"data_id": "q1", "output": "\\boxed{Lyon}"},
                                      {"data_id": "zz", "output": "x"}])
    out = tmp_path / "p.jsonl"
    res = runner.invoke(score_app, ["convert-predictions", str(f), "--method", "comem", "--out", str(out),
                                    "--references", str(refs)])
    assert res.exit_code == 2 and "duplicates last" in res.output
    res = runner.invoke(score_app, ["convert-predictions", str(f), "--method", "comem", "--out", str(out),
                                    "--references", str(refs), "--duplicates", "last", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["alignment"]["n_unknown"] == 1 and summary["alignment"]["n_missing"] == 2
    assert summary["alignment"]["duplicate_ids"] == ["q1"] and summary["n_written"] == 1
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines == [{"data_id": "q1", "prediction": "Lyon", "method": "comem", "parse_rule": "boxed"}]
    # the scorers read converted files directly
    assert [(p.data_id, p.prediction) for p in load_predictions(out)] == [("q1", "Lyon")]
