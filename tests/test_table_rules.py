"""One unit rule and tables that fit (issue 25 items 3, 4): every table a command prints goes through
the one formatter (kbvqa.cli.common.print_table); each is checked against the unit rule
(kbvqa.report.tables.unit_problems: floats with two decimals, rates in percent with "(%)" in the
column or row label) and rendered at 80 columns without a header or a cell cut to "…"."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kbvqa.cli import common
from kbvqa.cli.app import app
from kbvqa.report.tables import unit_problems

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()


@pytest.fixture()
def printed(monkeypatch):
    """Every table the commands print: (title, header, rows as shown)."""
    seen: list[tuple[str, list[str], list[list[str]]]] = []
    real = common.print_table

    def spy(title, header, rows):
        rows = [list(r) for r in rows]
        seen.append((title, [str(h) for h in header], [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r]
                                                       for r in rows]))
        real(title, header, rows)

    monkeypatch.setattr(common, "print_table", spy)
    return seen


def _at_80(title: str, header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(common.table_renderable(title, header, rows, 80))
    return buf.getvalue()


def _ok(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res.stdout


def _eval_results(folder: Path, label: str, judge_model: str, strict: float, judge_acc: float) -> Path:
    folder.mkdir(parents=True)
    doc = {"kind": "kbvqa-eval", "schema": 1, "answer": {"pipeline": "agent", "counts": {"ok": 3}},
           "references": {"path": "refs.jsonl", "sha256": "x"}, "samples": {"path": "s.jsonl"},
           "metrics": {
               "infoseek-strict": {"status": "ok", "scorer": {"name": "infoseek-strict", "options": {}},
                                   "values": {"final_score": strict}, "headline": ["final_score"],
                                   "counts": {"n": 3, "missing": 0}},
               "judge": {"status": "ok", "scorer": {"name": "simpleqa-judge", "options": {"graded_text": "full"},
                                                    "judge": {"backend": "openai", "model": judge_model}},
                         "values": {"accuracy": judge_acc, "correct": judge_acc, "accuracy_given_attempted": 1.0},
                         "headline": ["accuracy", "correct", "accuracy_given_attempted"],
                         "counts": {"n": 3, "graded": 3, "missing": 0, "judge_error": 0, "judge_invalid": 0}},
               "retrieval": {"status": "ok", "scorer": {"name": "retrieval", "options": {}},
                             "values": {"initial R@1": 0.9474, "initial MRR": 0.9474}, "headline": ["initial R@1"],
                             "counts": {"n": 3, "missing": 0}}}}
    (folder / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def test_every_table_follows_the_unit_rule_and_fits_80_columns(tmp_path, monkeypatch, printed):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    # score judge: accuracy over graded verdicts and SimpleQA's rates, in percent
    Path("p.jsonl").write_text("".join(json.dumps({"id": i, "sample_id": i, "answer": a, "status": "ok"}) + "\n"
                                       for i, a in (("q1", "Paris."), ("q2", "Rome."), ("q3", "Paris, France."))))
    Path("r.jsonl").write_text("".join(json.dumps({"id": i, "question": "Where?", "answers": ["Paris"]}) + "\n"
                                       for i in ("q1", "q2", "q3")))
    grade = lambda req: ok(json.dumps({"label": "correct" if "Paris" in req["messages"][-1]["content"]  # noqa: E731
                                       .split("Answer to grade:")[1] else "incorrect", "rationale": "r"}))
    with FakeLLMServer(handler=grade) as srv:
        out = _ok(["score", "judge", "-p", "p.jsonl", "-r", "r.jsonl", "--judge-base-url", srv.base_url,
                   "--judge-model", "j"])
    assert "66.67" in out and "0.6667" not in out and "1.0000" not in out
    # score retrieval: R@K in percent, MRR in [0, 1]
    Path("rec.jsonl").write_text("".join(json.dumps({"id": i, "stage": "initial", "retrieved": [u]}) + "\n"
                                         for i, u in (("q1", "https://w/A"), ("q2", "https://w/X"))))
    Path("gold.jsonl").write_text("".join(json.dumps({"id": i, "question": "q", "answers": ["a"],
                                                      "entity": {"url": "https://w/A"}}) + "\n" for i in ("q1", "q2")))
    _ok(["score", "retrieval", "--records", "rec.jsonl", "-r", "gold.jsonl"])
    # eval's results table and report compare: percent and fractions never share a column
    a = _eval_results(tmp_path / "run-a", "a", "jA", 55.98, 0.6667)
    b = _eval_results(tmp_path / "run-b", "b", "jB", 57.89, 1.0)
    out = _ok(["report", "compare", str(a), str(b)])
    assert "0.9474" not in out and "94.74" in out
    # data compare: two benchmarks side by side
    Path("one.jsonl").write_text(json.dumps({"id": "x", "question": "What is this tower called?",
                                             "answers": ["Eiffel Tower"]}) + "\n")
    _ok(["data", "compare", "one.jsonl", "r.jsonl"])
    assert len(printed) >= 4
    for title, header, rows in printed:
        assert unit_problems(header, rows) == [], (title, unit_problems(header, rows))
        shown = _at_80(title, header, rows)
        assert "…" not in shown, shown
        for h in header:  # every header word is there whole (folded lines aside)
            assert all(w[:10] in shown for w in h.split()), (h, shown)


def test_unit_problems_catches_what_the_issue_saw():
    assert unit_problems(["figure", "value"], [["accuracy (correct / graded)", "0.6667"]])
    assert unit_problems(["metric", "value", "score"], [["infoseek", "final_score", "55.9800"],
                                                        ["judge", "accuracy", "0.9474"]])
    assert unit_problems(["stage", "R@1"], [["initial", "52.17"]])
    assert not unit_problems(["stage", "R@1 (%)", "MRR"], [["initial", "52.17", "0.61"]])
