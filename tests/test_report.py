"""Tables (markdown, CSV, LaTeX), PNG plots, and the assembled results folder + HTML page."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from kbvqa.cli.report import app as report_app
from kbvqa.evaluate import studies as st
from kbvqa.report import plots
from kbvqa.report.results import build_report, collect_inputs
from kbvqa.report.tables import ResultTable, latex_escape, to_csv, to_latex, to_markdown, write_table

runner = CliRunner()


@pytest.fixture()
def table():
    return ResultTable("acc_by-type", "Accuracy by question_type", "infoseek_reward 100% & more",
                       ["question_type", "n", "accuracy (%)"],
                       [["String", 10, 55.5], ["Time_2", 3, float("nan")], ["a|b", 1, None]],
                       notes=["50% of items & more_notes"])


def test_latex_escape_specials():
    assert latex_escape("a_b 50% & $x# {y} ~^\\") == \
        r"a\_b 50\% \& \$x\# \{y\} \textasciitilde{}\textasciicircum{}\textbackslash{}"


def test_markdown_csv_latex(table, tmp_path):
    md = to_markdown(table)
    # markdown specials are backslash-escaped (they render as the plain characters)
    assert r"\(scorer: infoseek\_reward 100% & more\)" in md
    assert "| String | 10 | 55.50 |" in md and r"| Time\_2 | 3 | n/a |" in md and "a\\|b" in md
    assert "|---|---:|---:|" in md
    rows = list(csv.reader(io.StringIO(to_csv(table))))
    assert rows[0] == ["question_type", "n", "accuracy (%)", "scorer"]
    assert rows[1] == ["String", "10", "55.5", "infoseek_reward 100% & more"] and rows[3][2] == ""
    tex = to_latex(table)
    assert r"\caption{Accuracy by question\_type (scorer: infoseek\_reward 100\% \& more)}" in tex
    assert r"question\_type & n & accuracy (\%) \\" in tex and r"Time\_2 & 3 & n/a \\" in tex
    assert r"\label{tab:acc-by-type}" in tex and r"\begin{tabular}{lrr}" in tex
    assert r"50\% of items \& more\_notes" in tex
    # no unescaped specials in the body lines
    body = [ln for ln in tex.splitlines() if ln.endswith("\\\\")]
    for ln in body:
        for ch in "_%&":
            assert ln.replace("\\" + ch, "").replace(" & ", "").count(ch) == 0, ln
    paths = write_table(table, tmp_path / "t")
    assert sorted(p.suffix for p in paths.values()) == [".csv", ".md", ".tex"]
    assert all(p.stat().st_size > 50 for p in paths.values())


def _png_ok(p):
    data = p.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, (p, len(data))


def test_plots_written(tmp_path):
    _png_ok(plots.plot_group_bars(["String", "Numerical", "Time"],
                                  {"m1": [(50, 40, 60), (30, 20, 41), (70, 55, 80)],
                                   "m2": [(55, 45, 66), (35, 25, 45), (60, 50, 70)]},
                                  tmp_path / "bars.png", title="t", scorer="infoseek-strict"))
    _png_ok(plots.plot_recall_at_k({"initial": {1: 30, 5: 55, 20: 70}, "post": {1: 45, 5: 60, 20: 72}},
                                   tmp_path / "rk.png"))
    _png_ok(plots.plot_rank_changes({"a": 1, "b": 2, "c": 3}, {"a": 2, "b": 1, "c": 3}, tmp_path / "r.png",
                                    labels=("unfixed", "fixed"), scorer="x", reversed_methods={"a", "b"}))


def _study_inputs(tmp_path):
    """Real study dicts from synthetic per-item scores, written as a results folder."""
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(120)]
    qt = ["String"] * 60 + ["Numerical"] * 40 + ["Time"] * 20

    def scores(p, label):
        c = rng.random(120) < p
        return st.ItemScores("infoseek-strict", ids, c, np.zeros(120, bool), qt, label=label)

    d = tmp_path / "results"
    d.mkdir()
    a1, b1 = scores(0.6, "m1"), scores(0.4, "m1")
    a2, b2 = scores(0.4, "m2"), scores(0.7, "m2")
    cmp_ = st.compare_splits({"m1": (a1, b1), "m2": (a2, b2)}, split_names=("unfixed", "fixed"), n_resamples=200)
    (d / "compare.study.json").write_text(json.dumps(cmp_))
    (d / "by-type.study.json").write_text(json.dumps(st.by_group(a1, n_resamples=200)))
    (d / "retrieval-2x2.study.json").write_text(json.dumps(st.retrieval_2x2(a1, a2, n_resamples=200)))
    (d / "echosight.retrieval.json").write_text(json.dumps({
        "two_hop": "any", "ks": [1, 5, 20], "n_references": 120,
        "stages": {"initial": {"recall": {"@1": 0.3, "@5": 0.5, "@20": 0.7}, "mrr": 0.4, "n_missing": 2},
                   "post": {"recall": {"@1": 0.45, "@5": 0.6, "@20": 0.7}, "mrr": 0.5, "n_missing": 2}}}))
    (d / "notes.json").write_text("{}")  # not collected: neither *.study.json nor *.retrieval.json
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"scorer": "evqa-em", "accuracy": 41.5, "n": 100, "coverage": 0.98}))
    return d, score, cmp_


def test_build_report_folder_and_html(tmp_path):
    d, score, cmp_ = _study_inputs(tmp_path)
    assert cmp_["n_reversals"] == 1
    inputs = collect_inputs(d)
    assert [p.name for p in inputs] == ["by-type.study.json", "compare.study.json", "echosight.retrieval.json",
                                        "retrieval-2x2.study.json"]
    res = build_report(inputs, d / "out", title="Study & results", scores=[score])
    names = {p.name for p in res.tables}
    for stem in ("compare-methods", "compare-reversals", "by-type", "retrieval-2x2", "echosight", "scores"):
        assert {f"{stem}.md", f"{stem}.csv", f"{stem}.tex"} <= names
    assert len(res.plots) == 5
    for p in res.plots:
        _png_ok(p)
    page = res.html.read_text()
    assert page.count("<table>") == 6
    for p in res.plots:
        assert f"<img src='plots/{p.name}'>" in page
    assert "scorer: infoseek-strict" in page and "reversed" in page and "Study &amp; results" in page
    assert "R@20" in page and "evqa-em" in page
    md = res.markdown.read_text()
    assert "![" in md and "plots/compare-ranks.png" in md
    # each CI cell shows its own split's interval (regression: duplicate column names collapsed them)
    m1 = cmp_["methods"][0]
    assert f"[{m1['ci_a']['low']:.2f}, {m1['ci_a']['high']:.2f}]" in page
    assert f"[{m1['ci_b']['low']:.2f}, {m1['ci_b']['high']:.2f}]" in page
    tex = (d / "out" / "tables" / "compare-methods.tex").read_text()
    assert r"\toprule" in tex and "infoseek-strict" in tex


def test_report_cli(tmp_path):
    d, score, _ = _study_inputs(tmp_path)
    r = runner.invoke(report_app, ["build", str(d), "--scores", str(score)])
    assert r.exit_code == 0, r.output
    assert (d / "index.html").is_file() and (d / "tables" / "scores.csv").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = runner.invoke(report_app, ["build", str(empty)])
    assert r.exit_code == 2 and "nothing to report" in r.output


def test_ivr12_and_funnel_plots_mark_absent_figures_and_rule_measures(tmp_path):
    """IVR-12 per dimension: a side without a mean gets no bar, a CI only where given, rule measures
    hatched; the funnel draws one bar per stage reached."""
    from kbvqa.report.plots import plot_funnel, plot_ivr12_dimensions

    dims = [("Accuracy", False), ("Conciseness", True), ("Clarity", False)]
    png = plot_ivr12_dimensions(dims, {"references": [(4.2, 3.9, 4.5), (5.0, None, None), (None, None, None)],
                                       "answers": [(3.1, 2.7, 3.4), (4.0, None, None), (None, None, None)]},
                                tmp_path / "ivr12.png", title="IVR-12", scorer="ivr12 (test)")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    png = plot_funnel([("text", 17, 3, 0), ("candidate", 0, 0, 12)], tmp_path / "funnel.png", start=("posts in", 20),
                      title="funnel")
    assert png.stat().st_size > 3000


def _judge_summary(**over):
    """A `score judge --json` summary: 2 correct of 5 responses, 4 graded (1 invalid), as written now."""
    return {"scorer": "simpleqa-judge", "prompt_version": "judge.simpleqa@1", "n": 5, "n_correct": 2, "n_graded": 4,
            "n_invalid": 1, "n_error": 0, "n_missing": 0, "correct": 0.4, "accuracy": 0.4, "accuracy_graded": 0.5,
            "judge_provenance": {"backend": "openai", "model": "j"}, **over}


def test_judge_summaries_give_both_accuracies_and_older_files_are_renamed(tmp_path):
    """The HTML report's score table and `report compare` show correct / all responses as `accuracy`
    and correct / graded as `accuracy_graded`; a summary or results file written when `accuracy` was
    correct / graded is read with that figure moved to `accuracy_graded`, never mixed into `accuracy`."""
    from kbvqa.report.compare import summary_metric, upgrade_judge_values

    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_text(json.dumps(_judge_summary()))
    legacy = _judge_summary(accuracy=0.5)
    del legacy["accuracy_graded"]
    old.write_text(json.dumps(legacy))
    res = build_report([], tmp_path / "rep", scores=[new, old])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| accuracy / final score \\(%\\) | accuracy \\(graded\\) \\(%\\) |" in md and "correct / all responses" in md
    rows = [line for line in md.splitlines() if line.startswith("| new") or line.startswith("| old")]
    assert len(rows) == 2 and all("| 40.00 | 50.00 |" in r for r in rows), rows  # both files, the same figures
    assert "seed 001" in res.html.read_text()
    for s in (_judge_summary(), legacy):
        _, entry = summary_metric(s)
        assert entry["values"]["accuracy"] == 0.4 and entry["values"]["accuracy_graded"] == 0.5
        assert entry["headline"][:2] == ["accuracy", "accuracy_graded"]
    # an eval results entry of an older kbvqa: judge-verdicts' percent over graded, recomputed over all n
    old_entry = {"values": {"accuracy": 50.0}, "headline": ["accuracy"], "summary": {"correct": 2, "n": 5},
                 "counts": {"n": 5, "graded": 4, "judge_invalid": 1, "judge_error": 0}}
    up = upgrade_judge_values("judge-verdicts", old_entry)
    assert up["values"] == {"accuracy": 40.0, "accuracy_graded": 50.0} and up["headline"] == ["accuracy",
                                                                                            "accuracy_graded"]
    assert upgrade_judge_values("infoseek-strict", {"values": {"accuracy": 50.0}, "counts": {"n": 5}})["values"] == {
        "accuracy": 50.0}
