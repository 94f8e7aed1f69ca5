"""`kbvqa data convert` / `kbvqa data stats` through typer's CliRunner."""

import json

from typer.testing import CliRunner

from kbvqa.cli.app import app

runner = CliRunner()
ROWS = [
    {"data_id": "d1", "image_id": "i1", "question": "Q1?", "answer": ["A"], "answer_eval": ["A", "a"],
     "data_split": "val_unseen_question"},
    {"data_id": "d2", "image_id": "i2", "question": "Q2?", "answer": ["5"],
     "answer_eval": [{"wikidata": 5.0, "range": [4.0, 6.0]}], "data_split": "val_unseen_entity"},
]


def _files(tmp_path, rows=ROWS):
    data = tmp_path / "val.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    qt = tmp_path / "qt.jsonl"
    qt.write_text(json.dumps({"data_id": "d1", "question_type": "String"}) + "\n"
                  + json.dumps({"data_id": "d2", "question_type": "Numerical"}) + "\n")
    return data, qt


def test_convert_round_trip(tmp_path):
    data, qt = _files(tmp_path)
    mid, back, qback = tmp_path / "mid.jsonl", tmp_path / "back.jsonl", tmp_path / "qback.jsonl"
    r = runner.invoke(app, ["data", "convert", str(data), str(mid), "--to", "kbvqa", "--qtypes", str(qt)])
    assert r.exit_code == 0, r.output
    assert "wrote 2 sample(s) infoseek -> kbvqa" in r.output
    r = runner.invoke(app, ["data", "convert", str(mid), str(back), "--to", "infoseek", "--qtypes-out", str(qback)])
    assert r.exit_code == 0, r.output
    assert [json.loads(x) for x in back.read_text().splitlines()] == ROWS
    assert qback.read_text() == qt.read_text()


def test_convert_limit_and_mapping(tmp_path):
    data, _ = _files(tmp_path)
    out = tmp_path / "o.csv"
    r = runner.invoke(app, ["data", "convert", str(data), str(out), "--to", "csv", "--limit", "1",
                            "--mapping", "id=qid,question=q,answers=gold"])
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert lines[0].startswith("qid,q,gold") and lines[1].startswith("d1,Q1?,A|a") and len(lines) == 2


def test_invalid_input_exits_nonzero_without_traceback(tmp_path):
    data = tmp_path / "val.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n{broken\n" + json.dumps(ROWS[1]) + "\n")
    out = tmp_path / "o.jsonl"
    r = runner.invoke(app, ["data", "convert", str(data), str(out), "--from", "infoseek", "--to", "kbvqa"])
    assert r.exit_code == 1
    assert f"{data}, row 2" in r.output and "invalid JSON" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["data", "convert", str(data), str(out), "--from", "infoseek", "--to", "kbvqa",
                            "--skip-invalid"])
    assert r.exit_code == 0, r.output
    assert "wrote 2 sample(s)" in r.output and "skipped 1 invalid row(s)" in r.output and "row 2:" in r.output


def test_stats_json_and_table(tmp_path):
    data, qt = _files(tmp_path)
    r = runner.invoke(app, ["data", "stats", str(data), "--qtypes", str(qt), "--json"])
    assert r.exit_code == 0, r.output
    st = json.loads(r.output)
    assert st["total"] == 2 and st["by_answer_type"] == {"Numerical": 1, "String": 1}
    assert st["numeric_with_range"] == 1 and st["skipped"] == 0
    r = runner.invoke(app, ["data", "stats", str(data)])
    assert r.exit_code == 0 and "2 samples" in r.output


def test_unknown_format(tmp_path):
    data, _ = _files(tmp_path)
    r = runner.invoke(app, ["data", "convert", str(data), str(tmp_path / "o"), "--to", "xml"])
    assert r.exit_code == 1 and "unknown format 'xml'" in r.output
