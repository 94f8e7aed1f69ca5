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
    """The table as an 80-column terminal shows it; asserts no cell is cut to "…" and every header's
    words stand whole (a header may wrap between words, never inside one)."""
    buf = io.StringIO()
    table = common.table_renderable(title, header, rows, 80)
    Console(file=buf, width=80, color_system=None).print(table)
    shown = buf.getvalue()
    assert "…" not in shown, shown
    lines = shown.splitlines()
    top = next(i for i, line in enumerate(lines) if line.lstrip().startswith("┏"))
    end = next(i for i, line in enumerate(lines) if line.lstrip().startswith("┡"))
    columns: list[list[str]] = [[] for _ in table.columns]
    for line in lines[top + 1:end]:
        for i, part in enumerate(line.strip().strip("┃").split("┃")):
            columns[i].append(part.strip())
    for col, parts in zip(table.columns, columns):
        assert " ".join(p for p in parts if p).split() == str(col.header).split(), (col.header, parts, shown)
    return shown


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
    _check_printed(printed)


def _check_printed(printed: list) -> None:
    for title, header, rows in printed:
        assert unit_problems(header, rows) == [], (title, unit_problems(header, rows))
        _at_80(title, header, rows)


def test_unit_problems_catches_what_the_issue_saw():
    assert unit_problems(["figure", "value"], [["accuracy (correct / graded)", "0.6667"]])
    assert unit_problems(["metric", "value", "score"], [["infoseek", "final_score", "55.9800"],
                                                        ["judge", "accuracy", "0.9474"]])
    assert unit_problems(["stage", "R@1"], [["initial", "52.17"]])
    assert not unit_problems(["stage", "R@1 (%)", "MRR"], [["initial", "52.17", "0.61"]])


# ------------------------------------------------- every table command on the demo's outputs, and the HTML


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_copy) -> Path:
    return demo_copy(tmp_path_factory.mktemp("rules") / "demo")[0]


def _verdicts(path: Path, preds: Path, correct_every: int) -> Path:
    """Judge verdict lines (as `score judge` writes them) for a run: every `correct_every`-th correct."""
    ids = [json.loads(x)["id"] for x in preds.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({"id": i, "status": "ok", "verdict": {
        "label": "correct" if k % correct_every == 0 else "incorrect"}}) + "\n" for k, i in enumerate(ids)),
        encoding="utf-8")
    return path


def test_every_table_command_and_html_page_follows_the_rule_at_80_columns(demo, tmp_path, monkeypatch, printed):
    """eval, study (by-type, compare, retrieval-2x2, variants, agent-tools), score ivr12 / ivr12-compare,
    data stats / compare and report build, run as a user runs them (relative paths, cache on), then the
    HTML pages they and the demo wrote and the viewer's pages: one unit rule everywhere, 80 columns."""
    import shutil

    from kbvqa.report.html import page_unit_problems

    work = tmp_path / "work"
    shutil.copytree(demo, work / "demo")
    monkeypatch.chdir(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    d = Path("demo")
    _ok(["eval", "--samples", "demo/bench/samples.jsonl", "--kb", "demo/bench/kb.sqlite", "--index",
         "demo/bench/image_index", "--pipeline", "extractive", "--out", "ev", "-m", "infoseek-strict", "-m",
         "retrieval"])
    strict = ["--scorer", "infoseek-strict"]
    _ok(["study", "by-type", "-p", "demo/answers/predictions_original.jsonl", "-r", "demo/bench/samples.jsonl",
         *strict, "--resamples", "50"])
    _ok(["study", "compare", "--references-a", "demo/bench/samples.jsonl", "--references-b", "demo/audit/fixed.jsonl",
         "--method", "extractive=demo/answers/predictions_original.jsonl,demo/answers/predictions_fixed.jsonl",
         "--allow-partial", *strict, "--resamples", "50", "--split-names", "original,fixed"])
    _ok(["study", "retrieval-2x2", "--with", "demo/answers/predictions_original.jsonl", "--without",
         "demo/answers/predictions_fixed.jsonl", "-r", "demo/audit/fixed.jsonl", *strict, "--resamples", "50"])
    _ok(["study", "variants", "-p", "demo/answers/predictions_augmented.jsonl", "-r", "demo/augment/samples.jsonl",
         *strict, "--stage", "initial", "--resamples", "50"])
    agent = d / "agent" / "predictions.jsonl"
    ver, base = _verdicts(Path("agent.judge.jsonl"), agent, 2), _verdicts(Path("direct.judge.jsonl"), agent, 3)
    _ok(["study", "agent-tools", "-p", str(agent), "-r", "demo/bench/community.jsonl", "--verdicts", str(ver),
         "--baseline-verdicts", str(base), "--out", "st"])
    _ok(["score", "ivr12", "-p", str(agent), "-s", "demo/bench/community.jsonl", "--image-root", "demo/bench",
         "--out", "agent.ivr12.jsonl"])
    _ok(["score", "ivr12-compare", "demo/interleaved/references.ivr12.summary.json",
         "demo/interleaved/agent.ivr12.summary.json", "--names", "references,agent"])
    _ok(["data", "stats", "demo/bench/samples.jsonl"])
    _ok(["data", "compare", "demo/bench/samples.jsonl", "demo/bench/community.jsonl"])
    shown = {title.split(" (scorer")[0] for title, _, _ in printed}
    for what in ("IVR-12: references (A) vs agent (B)", "IVR-12 (predictions, rules mode)", "answer outcomes with and"):
        assert any(t.startswith(what) for t in shown), (what, shown)
    assert len(printed) >= 12, shown
    _check_printed(printed)
    # report build's tables (every file it writes) and the HTML pages
    _ok(["report", "build", "demo/studies", "-i", "demo/interleaved/ivr12.compare.json", "-i",
         "demo/interleaved/agent.ivr12.summary.json", "-i", "st/agent-tools.study.json", "-i",
         "demo/curate/funnel.json", "--out", "rep"])
    # seed 001 plotted (issue 25 item 7): tool calls by judged outcome and by 2x2 group, IVR-12 per
    # dimension (references vs agent, and one summary), the curation funnel
    index = Path("rep/index.html").read_text(encoding="utf-8")
    for png in ("agent-tools-calls", "agent-tools-calls-2x2", "ivr12-compare", "agent-ivr12-summary", "funnel"):
        assert Path(f"rep/plots/{png}.png").stat().st_size > 5000 and f"plots/{png}.png" in index, png
    assert "Curation funnel" in index and Path("rep/tables/funnel.md").is_file()
    for md in Path("rep/tables").glob("*.csv"):
        import csv

        rows = list(csv.reader(md.open(encoding="utf-8")))
        # the CSV keeps full precision; what the unit rule checks is the shown (markdown) table
        assert rows and rows[0][-1] == "scorer"
    for md in Path("rep/tables").glob("*.md"):
        lines = [x for x in md.read_text(encoding="utf-8").splitlines() if x.startswith("| ")]
        header = [c.strip().replace("\\", "") for c in lines[0].strip("| ").split(" | ")]
        rows = [[c.strip().replace("\\", "") for c in x.strip("| ").split(" | ")] for x in lines[1:]]
        assert unit_problems(header, rows) == [], (md.name, unit_problems(header, rows))
    for page in (Path("rep/index.html"), d / "report.html", d / "studies" / "index.html"):
        assert page_unit_problems(page.read_text(encoding="utf-8")) == [], page
    # the viewer's pages go through the same check
    from starlette.testclient import TestClient

    from kbvqa.cli.view import build_site
    from kbvqa.report.viewer.app import create_app

    site = build_site([d])
    client = TestClient(create_app(site, warm=False))
    import re

    checked = 0
    for url in ["/", *(f"/o/{o.oid}/" for o in site.catalog.outputs)]:
        res = client.get(url)
        assert res.status_code == 200, url
        first = re.search(r'href="(/o/[^"/]+/r/[^"]+)"', res.text)  # and the listing's first record
        for page in [res] + ([client.get(first.group(1))] if first else []):
            assert page_unit_problems(page.text) == [], (url, page_unit_problems(page.text))
            checked += 1
    assert checked > 2 * len(site.catalog.outputs) - 5


# ------------------------------------------------------------------------- legends and prose (issue 34)

def test_legends_wrap_at_80_columns_between_words_and_values_read_as_prose():
    from kbvqa.report.tables import prose, wrap_text

    long_path = "/runs/" + "x" * 90 + "/agent.jsonl"
    note = ("[2] paired 32 ids of 38 unfixed / 32 fixed items; only in the unfixed run (dropped by the audit or "
            f"absent from the fixed split): 6; only in the fixed run: 0; see {long_path} for the ids")
    shown = wrap_text(note)
    lines = shown.splitlines()
    assert len(lines) > 1 and shown.split() == note.split()  # every word whole, in order
    assert all(len(line) <= 80 for line in lines if long_path not in line)
    assert any(line.strip() == long_path for line in lines)  # a word longer than a line stands alone, uncut
    assert all(line.startswith("    ") for line in lines[1:])  # hanging under the footnote's text
    assert wrap_text("short\nkept as is") == "short\nkept as is"
    assert prose({"query_mismatch": 1, "no_prior_call": 2}) == "query mismatch 1, no prior call 2"
    assert prose(None) == "n/a" and prose([3, 3, 6]) == "3, 3, 6" and prose({}) == "none" and prose(0.456) == "0.46"


def test_no_python_repr_in_the_demo_study_and_ivr12_notes(demo):
    """Every table the demo's saved studies and IVR-12 summaries render (captions, cells, notes): no
    dict, list or None repr (`{'query_mismatch': 1}`, `Pearson None`)."""
    from kbvqa.report import summaries as S

    tables = [t for p in sorted((demo / "studies").glob("*.study.json"))
              for t in S.study_tables(json.loads(p.read_text(encoding="utf-8")))]
    for p in sorted((demo / "interleaved").glob("*.summary.json")):
        s = json.loads(p.read_text(encoding="utf-8"))
        tables += [*S.ivr12_terminal_tables(s), *S.ivr12_tables(s)]
    compare = json.loads((demo / "interleaved" / "ivr12.compare.json").read_text(encoding="utf-8"))
    tables += [S.ivr12_compare_terminal_table(compare), S.ivr12_compare_table(compare)]
    assert len(tables) >= 8
    text = [*(t.caption for t in tables), *(str(c) for t in tables for c in t.columns),
            *(t.fmt(v) for t in tables for r in t.rows for v in r), *(n for t in tables for n in t.notes)]
    bad = [line for line in text if "{'" in line or "['" in line or "None" in line]
    assert not bad, bad
    assert any("length-score: Pearson n/a" in n for t in tables for n in t.notes)
