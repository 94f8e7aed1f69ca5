"""Invalid is visible everywhere: every judge-based figure is given as seed 001's accuracy (correct /
all responses) and kbvqa's over graded verdicts, with n graded, n invalid and n error beside them, and
an invalid or failed verdict is never a wrong answer in the graded figure —
in `kbvqa eval` (results.json and its table), `kbvqa report compare`, `kbvqa study by-type` /
`study compare` with `--scorer judge-verdicts`, the HTML report and the viewer's judge pages. The
judge is a scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.evaluate.judge import simpleqa_metrics
from kbvqa.report.results import build_report

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok, server_error  # noqa: E402

runner = CliRunner()


def _run(args, code=0):
    res = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})  # tables not wrapped
    assert res.exit_code == code, (res.exit_code, res.output)
    return res


class Judge:
    """The first two answers it is shown get prose (invalid), the third a 500 (error), the rest
    `correct`; decided per grading prompt, so a retry gets the same reply."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, req: dict) -> object:
        prompt = next(m["content"] for m in req["messages"] if "Answer to grade:" in str(m.get("content")))
        with self.lock:
            kind = self.kinds.setdefault(prompt, ("invalid", "invalid", "error")[len(self.kinds)]
                                         if len(self.kinds) < 3 else "correct")
        if kind == "invalid":
            return ok("I would say this is probably right.")
        if kind == "error":
            return server_error(500)
        return ok(json.dumps({"label": "correct", "rationale": "scripted"}))


@pytest.fixture(scope="module")
def evaluated(bench_copy, tmp_path_factory):
    """One `kbvqa eval` with the judge and judge-verdicts metrics; 2 invalid verdicts, 1 error."""
    root = tmp_path_factory.mktemp("invalid")
    b = bench_copy(root / "bench")
    idx = root / "idx" / "images"
    _run(["index", "images", "--kb", b.kb, "--images", b.root, "--out", idx])
    with FakeLLMServer(handler=Judge()) as srv:
        res = _run(["eval", "--samples", b.samples, "--kb", b.kb, "--index", idx, "--pipeline", "extractive",
                    "--out", root / "run", "-m", "judge", "-m", "judge-verdicts", "--judge-base-url", srv.base_url,
                    "--judge-model", "j", "--max-retries", "0"])
    return root, b, res


def test_simpleqa_rates_and_the_graded_accuracy_are_distinct():
    m = simpleqa_metrics(["correct", "correct", "incorrect", "not_attempted", "invalid", None])
    assert m["n"] == 6 and m["n_graded"] == 4 and m["n_invalid"] == 1 and m["n_error"] == 1
    assert m["accuracy_graded"] == 0.5  # 2 correct of 4 graded (kbvqa's)
    assert m["accuracy"] == pytest.approx(2 / 6)  # seed 001's: correct over all responses, invalid and error included
    assert m["correct"] == m["accuracy"]  # SimpleQA's rate over all n is the same quantity
    none = simpleqa_metrics(["invalid", None])
    assert none["accuracy_graded"] is None and none["accuracy"] == 0.0  # nothing graded: no graded accuracy
    assert simpleqa_metrics([])["accuracy"] is None


def test_eval_results_and_table_count_invalid_verdicts_apart(evaluated):
    root, b, res = evaluated
    doc = json.loads((root / "run" / "results.json").read_text())
    j = doc["metrics"]["judge"]
    c, v = j["counts"], j["values"]
    n = b.n_samples
    assert c["n"] == n and c["judge_invalid"] == 2 and c["judge_error"] == 1 and c["graded"] == n - 3
    s = j["summary"]
    assert v["accuracy_graded"] == pytest.approx(s["n_correct"] / (n - 3))  # invalid and error are not wrong answers
    assert v["accuracy"] == pytest.approx(s["n_correct"] / n)  # seed 001's: over all responses
    assert j["headline"][:2] == ["accuracy", "accuracy_graded"]
    defs = j["scorer"]["definitions"]
    assert "SimpleQA" in defs["simpleqa"] and "n_graded" in defs["accuracy_graded"] and "seed 001" in defs["accuracy"]
    assert j["scorer"]["name"] == "simpleqa-judge" and j["scorer"]["options"] == {"graded_text": "full"}
    # the prompt used is named in results.json: short golds, SimpleQA's rubric for every item
    assert j["scorer"]["prompt_version"] == "judge.simpleqa@1" and j["scorer"]["prompt_versions"] == {
        "judge.simpleqa@1": n}
    jv = doc["metrics"]["judge-verdicts"]
    assert jv["counts"]["graded"] == n - 3 and jv["counts"]["judge_invalid"] == 2 and jv["counts"]["judge_error"] == 1
    assert jv["values"]["accuracy_graded"] == pytest.approx(round(100 * s["n_correct"] / (n - 3), 2))
    assert jv["values"]["accuracy"] == pytest.approx(round(100 * s["n_correct"] / n, 2))
    # the table printed on stdout: the judge's invalid and error verdicts in their own columns
    out = res.stdout
    assert "judge invalid" in out and "judge error" in out and "graded" in out
    row = next(line for line in out.splitlines() if "│ judge " in line and "│ accuracy " in line)
    cells = [x.strip() for x in row.split("│")[1:-1]]
    assert cells[0] == "judge" and cells[3:5] == [str(n), str(n - 3)] and cells[-2:] == ["1", "2"]
    assert cells[2] == f"{100 * s['n_correct'] / n:.2f}"  # seed 001's accuracy, over all responses
    graded = next(line for line in out.splitlines() if "│ judge " in line and "│ accuracy_graded " in line)
    assert [x.strip() for x in graded.split("│")[1:-1]][2] == f"{100 * s['n_correct'] / (n - 3):.2f}"
    assert "accuracy = correct / all" in out and "accuracy_graded = correct /" in out


def test_report_compare_shows_graded_invalid_and_error_beside_n(evaluated):
    root, b, _ = evaluated
    res = _run(["report", "compare", root / "run", "--json"])
    doc = json.loads(res.stdout)
    row = doc["rows"][0]
    assert row["judge n"] == b.n_samples and row["judge graded"] == b.n_samples - 3
    assert row["judge invalid"] == 2 and row["judge error"] == 1
    assert row["judge-verdicts invalid"] == 2 and row["judge-verdicts graded"] == b.n_samples - 3
    table = _run(["report", "compare", root / "run"]).stdout
    assert "judge invalid" in table and "correct / graded" in table


# ------------------------------------------------------------------------------------ studies


def _study_files(folder: Path) -> tuple[Path, Path]:
    """Six references of two types and a judge journal: 2 correct, 1 incorrect, 1 not_attempted, 1
    invalid, 1 error."""
    refs = folder / "refs.jsonl"
    refs.write_text("".join(json.dumps({"id": f"q{i}", "question": "q?", "answers": ["a"],
                                        "answer_type": "String" if i < 3 else "Numerical"}) + "\n"
                            for i in range(6)), encoding="utf-8")
    lines = [("ok", "correct"), ("ok", "correct"), ("invalid", None), ("ok", "incorrect"), ("error", None),
             ("ok", "not_attempted")]
    verdicts = folder / "run.judge.jsonl"
    verdicts.write_text("".join(json.dumps({"id": f"q{i}", "status": st, **({"verdict": {"label": lab}} if lab else
                                                                           {"reason": "unusable reply"})}) + "\n"
                                for i, (st, lab) in enumerate(lines)), encoding="utf-8")
    return refs, verdicts


def test_study_by_type_leaves_invalid_and_error_out_of_the_accuracy(tmp_path):
    refs, verdicts = _study_files(tmp_path)
    res = _run(["study", "by-type", "--scorer", "judge-verdicts", "-p", verdicts, "-r", refs, "--json", "--no-report",
                "--resamples", "200"])
    obj = json.loads(res.stdout)
    o = obj["overall"]
    assert (o["n"], o["n_graded"], o["n_invalid"], o["n_error"], o["correct"]) == (6, 4, 1, 1, 2)
    assert o["estimate"] == 50.0  # 2 of 4 graded; counting invalid and error as wrong would give 33.3
    assert o["accuracy_all"] == pytest.approx(100 * 2 / 6, abs=0.01)  # seed 001's, beside it
    assert obj["accounting"]["accuracy_all"] == pytest.approx(100 * 2 / 6, abs=0.01)
    g = {x["group"]: x for x in obj["groups"]}
    assert g["String"]["accuracy"] == 100.0 and (g["String"]["n_graded"], g["String"]["n_invalid"]) == (2, 1)
    assert g["Numerical"]["accuracy"] == 0.0 and (g["Numerical"]["n_graded"], g["Numerical"]["n_error"]) == (2, 1)
    table = _run(["study", "by-type", "--scorer", "judge-verdicts", "-p", verdicts, "-r", refs, "--no-report",
                  "--resamples", "200"]).stdout
    assert "graded" in table and "invalid" in table and "accuracy over graded verdicts" in table
    assert "accuracy (all) %" in table and "33.33" in table

    # the HTML report of the same study: the columns and the rule travel with it
    (tmp_path / "by.study.json").write_text(res.stdout)
    rep = build_report([tmp_path / "by.study.json"], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| graded | invalid | error |" in md and "excluded and counted apart" in md
    assert "invalid" in rep.html.read_text()


def test_study_compare_pairs_only_graded_items(tmp_path):
    refs, verdicts = _study_files(tmp_path)
    other = tmp_path / "other.judge.jsonl"  # every item graded, all correct
    other.write_text("".join(json.dumps({"id": f"q{i}", "status": "ok", "verdict": {"label": "correct"}}) + "\n"
                             for i in range(6)), encoding="utf-8")
    res = _run(["study", "compare", "--references-a", refs, "--references-b", refs, "--scorer", "judge-verdicts",
                "--method", f"m={verdicts},{other}", "--json", "--no-report", "--resamples", "200"])
    m = json.loads(res.stdout)["methods"][0]
    assert m["accuracy_a"] == 50.0 and m["accuracy_b"] == 100.0
    assert m["n_paired"] == 4 and m["n_unpaired_ungraded"] == 2 and m["gained"] == 2 and m["lost"] == 0
    assert (m["accounting_a"]["n_invalid"], m["accounting_a"]["n_error"]) == (1, 1)
    assert m["accounting_a"]["accuracy_all"] == pytest.approx(100 * 2 / 6, abs=0.01)  # seed 001's, beside
    table = _run(["study", "compare", "--references-a", refs, "--references-b", refs, "--scorer", "judge-verdicts",
                  "--method", f"m={verdicts},{other}", "--no-report", "--resamples", "200"]).stdout
    assert "accuracy (all responses)" in table and "33.33%" in table


def test_viewer_judge_listing_gives_the_accuracy_over_graded_with_the_counts(tmp_path):
    pytest.importorskip("starlette", reason="the viewer needs the `view` extra")
    from starlette.testclient import TestClient

    from kbvqa.cli.view import build_site
    from kbvqa.report.viewer.app import create_app

    _, verdicts = _study_files(tmp_path)
    lines = [json.loads(x) for x in verdicts.read_text().splitlines()]
    for x in lines:
        x.update(question="q?", target="a", prediction="p", graded_text="full")
    verdicts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "run.judge.manifest.json").write_text(json.dumps({"description": "judge", "state": "finished",
                                                                  "stages": [{"name": "simpleqa-judge"}]}))
    client = TestClient(create_app(build_site([tmp_path]), warm=False), follow_redirects=False)
    page = client.get("/o/run-judge/").text
    assert "accuracy (%) 33.33</b> = 2 correct / 6 responses" in page  # seed 001's: over all responses
    assert "accuracy over graded (%) 50.00 = 2 / 4 graded" in page and "invalid 1" in page and "error 1" in page
    record = client.get("/o/run-judge/r/q2").text
    assert "no grade" in record and "the whole answer, image tags removed" in record


def test_retrieval_2x2_pairs_only_items_graded_in_both_runs(tmp_path):
    refs, verdicts = _study_files(tmp_path)
    other = tmp_path / "other.judge.jsonl"
    other.write_text("".join(json.dumps({"id": f"q{i}", "status": "ok", "verdict": {"label": "correct"}}) + "\n"
                             for i in range(6)), encoding="utf-8")
    res = _run(["study", "retrieval-2x2", "--with", other, "--without", verdicts, "-r", refs, "--scorer",
                "judge-verdicts", "--json", "--no-report", "--resamples", "200"])
    obj = json.loads(res.stdout)
    o = obj["overall"]
    assert (o["n"], o["n_items"], o["both_correct"], o["only_with"], o["neither"]) == (4, 6, 2, 2, 0)
    assert obj["ungraded"]["without"] == {"n_invalid": 1, "n_error": 1} and obj["ungraded"]["n_unpaired"] == 2
    assert obj["accuracy_without"] == 50.0
    table = _run(["study", "retrieval-2x2", "--with", other, "--without", verdicts, "-r", refs, "--scorer",
                  "judge-verdicts", "--no-report", "--resamples", "200"]).stdout
    assert "2 of 6 items not paired" in table


def test_a_group_without_a_graded_item_has_no_accuracy():
    import numpy as np

    from kbvqa.evaluate.studies import ItemScores, by_group
    from kbvqa.report.summaries import study_table

    sc = ItemScores("judge", ["a", "b", "c"], np.array([True, False, False]), np.zeros(3, bool), ["x", "y", "y"],
                    invalid=np.array([False, True, False]), error=np.array([False, False, True]), judged=True)
    res = by_group(sc, n_resamples=50)
    y = next(g for g in res["groups"] if g["group"] == "y")
    assert y["accuracy"] is None and (y["n"], y["n_graded"], y["n_invalid"], y["n_error"]) == (2, 0, 1, 1)
    assert res["overall"]["estimate"] == 100.0 and res["overall"]["n_graded"] == 1
    json.dumps(res, allow_nan=False)  # no NaN in the study JSON
    row = next(r for r in study_table(res).rows if r[0] == "y")
    assert row[-2] is None and row[-1] == "n/a"
