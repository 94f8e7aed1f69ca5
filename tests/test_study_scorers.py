"""The studies' scorers: seed 000's metrics by default (InfoSeek's official VQA accuracy, E-VQA's BEM
in tests/test_bem.py), the other readings by name, and every table naming the one it used."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.study import app as study_app
from kbvqa.evaluate import studies as st
from kbvqa.evaluate.scorers import paper_scorer

runner = CliRunner()
ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara"

# Items on which the three InfoSeek readings part: a year off by one (strict's leniency), a number
# within 10% (reward's band), an answer containing the reference (reward's containment), and one
# answer every reading accepts.
_REFS = [("t1", "When was it built?", "Time", "1989"), ("n1", "How tall is it?", "Numerical", "100"),
         ("s1", "Which city?", "String", "Paris"), ("s2", "Which river?", "String", "Seine")]
_PREDS = {"t1": "1990", "n1": "105", "s1": "Paris, France", "s2": "the Seine"}


def _files(tmp_path):
    refs = tmp_path / "refs.csv"
    with open(refs, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["data_id", "question", "question_type", "answer"])
        w.writerows(_REFS)
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"data_id": k, "prediction": v}) + "\n" for k, v in _PREDS.items()),
                     encoding="utf-8")
    return refs, preds


def _study(args):
    r = runner.invoke(study_app, ["by-type", *args, "--resamples", "50"])
    assert r.exit_code == 0, r.output
    return r


def test_infoseek_default_is_the_official_metric_and_is_named(tmp_path):
    refs, preds = _files(tmp_path)
    r = _study(["-p", str(preds), "-r", str(refs)])
    assert "scorer: infoseek-official" in " ".join(r.stdout.split())  # the table's caption
    assert "scorer: infoseek-official (seed 000's metric" in r.stderr
    res = json.loads(_study(["-p", str(preds), "-r", str(refs), "--json"]).stdout)
    assert res["scorer"] == "infoseek-official" and res["overall"]["correct"] == 1  # only "the Seine"
    assert "the paper's metric" in res["scorer_detail"]


def test_three_infoseek_readings_named_and_different(tmp_path):
    refs, preds = _files(tmp_path)
    got = {}
    for scorer in ("infoseek-official", "infoseek-strict", "infoseek-reward"):
        r = _study(["-p", str(preds), "-r", str(refs), "--scorer", scorer, "--json"])
        res = json.loads(r.stdout)
        got[scorer] = {g["group"]: g["correct"] for g in res["groups"]}, res["scorer"]
        table = " ".join(_study(["-p", str(preds), "-r", str(refs), "--scorer", scorer]).stdout.split())
        assert f"scorer: {res['scorer']}" in table
    assert got["infoseek-official"] == ({"Numerical": 0, "String": 1, "Time": 0}, "infoseek-official")
    assert got["infoseek-strict"] == ({"Numerical": 0, "String": 1, "Time": 1}, "infoseek-strict (kbvqa's reading)")
    assert got["infoseek-reward"] == ({"Numerical": 1, "String": 2, "Time": 0}, "infoseek-reward (ARA authors' scorer)")


def test_unknown_benchmark_needs_an_explicit_scorer(tmp_path):
    refs = tmp_path / "notes.jsonl"
    refs.write_text(json.dumps({"id": "a", "question": "q?", "answers": ["x"]}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="pass --scorer"):
        paper_scorer(refs)
    r = runner.invoke(study_app, ["by-type", "-p", str(refs), "-r", str(refs)])
    assert r.exit_code == 2 and "cannot tell whether these are InfoSeek or E-VQA" in r.output


@pytest.mark.skipif(not (ARA / "ground_truth" / "infoseek_fixed.csv").is_file(), reason="ARA data absent")
def test_official_study_scorer_equals_the_official_scorer_item_by_item(tmp_path):
    """On the released rows (no data_split, every id predicted), infoseek-official's per-item verdicts
    are the official scorer's and the study accuracy is its final score."""
    from kbvqa.evaluate.infoseek import score_official
    from kbvqa.evaluate.io import load_infoseek_references, load_predictions

    fixed = ARA / "ground_truth" / "infoseek_fixed.csv"
    with open(ARA / "ground_truth" / "infoseek_unfixed_subset.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    preds = tmp_path / "unfixed_answers.jsonl"
    preds.write_text("".join(json.dumps({"data_id": r["data_id"], "prediction": r["answer"].split("|")[0]}) + "\n"
                             for r in rows), encoding="utf-8")
    sc = st.score_items(preds, st.load_references(fixed, "infoseek-official"), "infoseek-official")
    off = score_official(load_predictions(preds), load_infoseek_references(fixed, keep_raw=False), per_item=True)
    assert dict(zip(sc.ids, sc.correct.tolist())) == {i["data_id"]: i["correct"] for i in off.items}
    assert round(sc.accuracy, 2) == off.summary["final_score"] and sc.n == len(rows)
    assert paper_scorer(fixed) == "infoseek-official"
    assert paper_scorer(ARA / "ground_truth" / "evqa_fixed.csv") == "evqa-bem"


def test_every_study_table_names_the_default_scorer(tmp_path):
    """Each answer-scoring study, run without --scorer, prints tables whose caption names the scorer."""
    refs, preds = _files(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"data_id": k, "prediction": "1989" if k == "t1" else v}) + "\n"
                             for k, v in _PREDS.items()), encoding="utf-8")
    runs = {"compare": ["--references-a", str(refs), "--references-b", str(refs), "--method", f"m={preds}",
                        "--method", f"o={other}"],
            "retrieval-2x2": ["--with", str(other), "--without", str(preds), "-r", str(refs)],
            "fix-kinds": ["--unfixed", str(preds), "--fixed", str(other), "--references-a", str(refs),
                          "--references-b", str(refs)],
            "buckets": ["-r", str(refs), "--method", f"m={preds}", "--method", f"o={other}"]}
    for cmd, args in runs.items():
        r = runner.invoke(study_app, [cmd, *args, "--resamples", "50"])
        assert r.exit_code == 0, (cmd, r.output)
        assert "scorer: infoseek-official" in " ".join(r.stdout.split()), (cmd, r.stdout)
        assert "infoseek-official (seed 000's metric" in r.stderr


def test_benchmark_read_from_question_types(tmp_path):
    from kbvqa.evaluate.scorers import benchmark_of

    rows = [{"id": "a", "question": "q?", "answers": ["x"], "answer_type": "String"},
            {"id": "b", "question": "q?", "answers": ["y"], "question_type": "templated", "answer_type": "String"}]
    mixed = tmp_path / "evqa.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert benchmark_of(mixed) == "evqa"  # E-VQA's own type decides over an InfoSeek-like answer_type
    only = tmp_path / "infoseek.jsonl"
    only.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    assert benchmark_of(only) == "infoseek" and paper_scorer(only) == "infoseek-official"
