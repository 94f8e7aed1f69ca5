"""One input policy for every adapter: a clear error naming the file (and row), or a counted warning —
never silence, never a traceback, never a half-written output over a good one."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import read_samples

runner = CliRunner()
ROW = {"id": "a", "question": "q", "answers": ["x"]}


def _jsonl(path, rows, prefix=b""):
    path.write_bytes(prefix + "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
    return path


def test_a_jsonl_bom_is_accepted_like_a_csv_bom(tmp_path):
    src = _jsonl(tmp_path / "bom.jsonl", [ROW], prefix=b"\xef\xbb\xbf")
    assert [s.id for s in read_samples(src)] == ["a"]


@pytest.mark.parametrize("name, body", [
    ("latin1.jsonl", b'{"id": "a", "question": "caf\xe9", "answers": ["x"]}\n'),
    ("latin1.csv", b"question,answer,dataset_image_ids\ncaf\xe9,x,img\n"),
])
def test_non_utf8_files_are_named_errors(tmp_path, name, body):
    src = tmp_path / name
    src.write_bytes(body)
    with pytest.raises(DataError, match="not UTF-8") as err:
        list(read_samples(src))
    assert str(src) in str(err.value)
    res = runner.invoke(app, ["data", "stats", str(src)])
    assert res.exit_code != 0 and "not UTF-8" in res.output and "Traceback" not in res.output


def test_duplicate_ids_and_missing_answers_are_counted_warnings(tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", [ROW, {**ROW, "question": "q2"}, {**ROW, "id": "b", "answers": []}])
    report = SkipReport()
    assert len(list(read_samples(src, report=report))) == 3
    assert report.warnings == {"duplicate_id": 1, "no_answers": 1}
    res = runner.invoke(app, ["data", "stats", str(src), "--json"])
    assert json.loads(res.stdout)["warnings"] == {"duplicate_id": 1, "no_answers": 1}
    res = runner.invoke(app, ["data", "convert", str(src), str(tmp_path / "out.jsonl"), "--to", "kbvqa"])
    assert res.exit_code == 0 and "1 duplicate id" in res.output and "record 2: 'a'" in res.output


def test_empty_input_is_an_error_unless_allowed(tmp_path):
    src = tmp_path / "empty.jsonl"
    src.write_text("")
    res = runner.invoke(app, ["data", "convert", str(src), str(tmp_path / "o.jsonl"), "--to", "kbvqa"])
    assert res.exit_code == 1 and "no samples" in res.output and not (tmp_path / "o.jsonl").exists()
    res = runner.invoke(app, ["data", "convert", str(src), str(tmp_path / "o.jsonl"), "--to", "kbvqa", "--allow-empty"])
    assert res.exit_code == 0 and (tmp_path / "o.jsonl").read_text() == ""


def test_a_failed_conversion_leaves_the_previous_output_untouched(tmp_path):
    dst = tmp_path / "out.jsonl"
    dst.write_text("previous good output\n")
    src = _jsonl(tmp_path / "s.jsonl", [ROW, ROW])
    with open(src, "a", encoding="utf-8") as f:
        f.write("{broken\n")
    res = runner.invoke(app, ["data", "convert", str(src), str(dst), "--to", "kbvqa"])
    assert res.exit_code == 1 and "row 3" in res.output
    assert dst.read_text() == "previous good output\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_exit_codes_of_a_job_that_failed(bench_copy, tmp_path):
    """Every record failed → 3; some failed → 0, or 4 with --fail-on-error; counts on stderr."""

    b = bench_copy(tmp_path / "bench")
    res = runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root),
                              "--out", str(tmp_path / "idx")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in b.samples.read_text(encoding="utf-8").splitlines()][:3]
    broken = _jsonl(tmp_path / "broken.jsonl", [{**r, "images": ["images/none.jpg"]} for r in rows])
    partly = _jsonl(tmp_path / "partly.jsonl", [rows[0], {**rows[1], "images": ["images/none.jpg"]}])
    base = ["retrieve", "--index", str(tmp_path / "idx"), "--images", str(b.root)]
    res = runner.invoke(app, [*base, "--samples", str(broken), "--out", str(tmp_path / "r1.jsonl")])
    assert res.exit_code == 3 and "3 sample(s) did not end ok: error 3" in res.output
    res = runner.invoke(app, [*base, "--samples", str(partly), "--out", str(tmp_path / "r2.jsonl")])
    assert res.exit_code == 0 and "1 sample(s) did not end ok" in res.output
    res = runner.invoke(app, ["--fail-on-error", *base, "--samples", str(partly), "--out", str(tmp_path / "r3.jsonl")])
    assert res.exit_code == 4
