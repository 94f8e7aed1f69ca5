"""`kbvqa eval` (answer + score, one results.json) and `kbvqa report compare`, offline on the demo benchmark;
the judge is a scripted server on 127.0.0.1."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli import answer as answer_cmd
from kbvqa.cli import eval as eval_cmd
from kbvqa.cli.app import app
from kbvqa.pipelines.answer import AnswerOptions
from kbvqa.report.compare import FLAG, compare_runs, summary_metric

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()
METRICS = ["infoseek-official", "infoseek-strict", "infoseek-reward", "retrieval"]


def _run(args, code=0):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == code, (res.exit_code, res.output)
    return res


def _json(args, code=0):
    return json.loads(_run(args, code).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    b = bench_copy(root / "bench")
    idx = root / "idx" / "images"
    _run(["index", "images", "--kb", b.kb, "--images", b.root, "--out", idx])
    return b, root, idx


def _answer_flags(b, idx):
    return ["--samples", b.samples, "--kb", b.kb, "--index", idx, "--pipeline", "extractive"]


def _judge(req):
    """A judge whose verdict depends on its model name only: jA says correct, jB incorrect."""
    return ok(json.dumps({"label": "correct" if req["model"] == "jA" else "incorrect", "rationale": "scripted"}))


def test_eval_equals_answer_then_score(bench, tmp_path):
    """One command, the same predictions and the same numbers as `kbvqa answer` + `kbvqa score ... --json`."""
    b, _root, idx = bench
    pred = tmp_path / "P.jsonl"
    _json(["answer", *_answer_flags(b, idx), "--out", pred, "--json"])
    by_hand = {m: _json(["score", "infoseek", "-p", pred, "-r", b.samples, "--mode", m.split("-")[1], "--json"])
               for m in METRICS[:3]}
    by_hand["retrieval"] = _json(["score", "retrieval", "--records", pred.with_suffix(".retrieval.jsonl"),
                                  "-r", b.samples, "--json"])

    out = tmp_path / "run"
    doc = _json(["eval", *_answer_flags(b, idx), "--out", out, *[x for m in METRICS for x in ("-m", m)], "--json"])
    assert doc == json.loads((out / "results.json").read_text())
    assert doc["kind"] == "kbvqa-eval" and doc["kbvqa_version"] and {"commit", "dirty", "source"} <= set(doc["git"])
    assert doc["config"]["answer"]["pipeline"] == "extractive" and doc["config"]["metrics"] == METRICS

    # the predictions are `kbvqa answer`'s, line for line
    def lines(p):
        return [{k: x.get(k) for k in ("id", "status", "answer", "retrieved", "evidence_used")}
                for x in map(json.loads, Path(p).read_text().splitlines())]

    assert lines(out / "predictions.jsonl") == lines(pred)
    a = doc["answer"]
    assert a["counts"] == {"ok": b.n_samples, "error": 0, "invalid": 0} and Path(a["manifest"]).is_file()
    assert a["stages"] == ["retrieve-image", "rerank-sections", "answer-extractive"]
    assert json.loads(Path(a["manifest"]).read_text())["counts"]["ok"] == b.n_samples

    for m in METRICS:
        e = doc["metrics"][m]
        assert e["status"] == "ok" and e["scorer"]["name"] == m and e["scorer"]["detail"]
        assert e["summary"] == by_hand[m], m  # the very document `kbvqa score ... --json` prints
    strict = doc["metrics"]["infoseek-strict"]
    assert strict["counts"] == {"n": by_hand["infoseek-strict"]["n"], "missing": by_hand["infoseek-strict"]["n_missing"],
                                "error": 0, "invalid": 0, "abstained": 0}
    assert strict["values"]["final_score"] == by_hand["infoseek-strict"]["final_score"]
    assert strict["scorer"]["options"] == {"time_leniency": True}
    assert doc["metrics"]["infoseek-official"]["counts"]["n"] == b.n_samples  # official: predictions scored
    assert doc["metrics"]["infoseek-reward"]["values"]["accuracy"] == by_hand["infoseek-reward"]["accuracy"]
    r = doc["metrics"]["retrieval"]
    assert r["values"]["initial R@1"] == by_hand["retrieval"]["stages"]["initial"]["recall"]["@1"]
    assert r["counts"]["n"] == b.n_samples and r["scorer"]["options"] == {"two_hop": "any"}
    # per-item verdicts beside the predictions, where `kbvqa view` finds them
    assert len((out / "predictions.infoseek-strict.jsonl").read_text().splitlines()) == b.n_samples

    # the terminal table names every scorer
    text = _run(["eval", *_answer_flags(b, idx), "--out", out, "-m", "infoseek-strict"]).stdout
    assert "scorer infoseek-strict, time_leniency=True" in text and "results.json" in text


def test_resume_and_judge(bench, tmp_path):
    """--limit then --resume: only the rest is answered; the judge's verdicts of changed predictions are
    not reused (the journal is judged again), and the counts follow."""
    b, _root, idx = bench
    out = tmp_path / "run"
    with FakeLLMServer(handler=_judge) as srv:
        judge = ["--judge-base-url", srv.base_url, "--judge-model", "jA"]
        first = _json(["eval", *_answer_flags(b, idx), "--out", out, "-m", "infoseek-strict", "-m", "judge",
                       "-m", "judge-verdicts", *judge, "--limit", "5", "--json"])
        assert first["answer"]["counts"]["ok"] == 5
        assert first["metrics"]["infoseek-strict"]["counts"]["missing"] == b.n_samples - 5
        assert any("--limit 5" in w for w in first["warnings"])
        j = first["metrics"]["judge"]
        assert j["scorer"]["judge"]["model"] == "jA" and j["scorer"]["prompt_version"]
        assert j["counts"]["n"] == b.n_samples and j["counts"]["missing"] == b.n_samples - 5
        assert j["values"]["correct"] == pytest.approx(5 / b.n_samples)
        assert first["metrics"]["judge-verdicts"]["values"]["accuracy"] == round(100 * 5 / b.n_samples, 2)
        assert len(srv.requests) == 5  # missing predictions are not_attempted without a call

        res = _run(["eval", *_answer_flags(b, idx), "--out", out, "-m", "infoseek-strict", "-m", "judge",
                    "-m", "judge-verdicts", *judge, "--json"])
        second = json.loads(res.stdout)
        assert "judged again" in res.stderr
        assert second["answer"]["this_run"]["skipped"] == 5 and second["answer"]["this_run"]["ok"] == b.n_samples - 5
        assert second["answer"]["counts"]["ok"] == b.n_samples
        assert second["metrics"]["infoseek-strict"]["counts"]["missing"] == 0
        assert second["metrics"]["judge"]["values"]["correct"] == 1.0
        assert second["metrics"]["judge-verdicts"]["values"]["accuracy"] == 100.0

        # nothing changed: nothing answered, no judge call
        calls = len(srv.requests)
        third = _json(["eval", *_answer_flags(b, idx), "--out", out, "-m", "judge", *judge, "--json"])
        assert third["answer"]["this_run"]["skipped"] == b.n_samples and len(srv.requests) == calls
        assert third["metrics"]["judge"]["summary"]["run"]["skipped"] == b.n_samples


def test_refused_before_anything_runs(bench, tmp_path):
    b, _root, idx = bench
    out = tmp_path / "run"
    res = _run(["eval", *_answer_flags(b, idx), "--out", out, "-m", "infoseek-strict", "-m", "judge"], code=2)
    assert res.output.strip().count("\n") == 0 and "needs a judge model" in res.output
    assert not out.exists()
    res = _run(["eval", *_answer_flags(b, idx), "--out", out, "-m", "bleu"], code=2)
    assert "unknown metric 'bleu'" in res.output and "infoseek-strict" in res.output and not out.exists()
    res = _run(["eval", *_answer_flags(b, idx), "--out", out, "-m", "evqa"], code=2)  # InfoSeek types, not E-VQA's
    assert "E-VQA question type" in res.output and not out.exists()
    res = _run(["eval", *_answer_flags(b, idx), "--out", out, "-m", "judge", "--config", tmp_path / "none.toml"],
               code=2)
    assert not out.exists()


def test_exit_codes_follow_the_convention(bench, tmp_path):
    """A record that ends error is counted and scored as no answer: exit 0 with the counts on stderr,
    4 under --fail-on-error."""
    b, _root, idx = bench
    lines = b.samples.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["id"], bad["images"] = "broken_image", ["images/missing.jpg"]
    samples = b.root / "with_broken.jsonl"
    samples.write_text("\n".join(lines[:4] + [json.dumps(bad)]) + "\n")
    args = ["eval", "--samples", samples, "--kb", b.kb, "--index", idx, "--out", tmp_path / "run",
            "-m", "infoseek-strict", "--json"]
    res = _run(args)
    doc = json.loads(res.stdout)
    assert doc["answer"]["counts"] == {"ok": 4, "error": 1, "invalid": 0}
    assert doc["metrics"]["infoseek-strict"]["counts"]["error"] == 1 and "answer error 1" in res.stderr
    _run(["--fail-on-error", *args], code=4)


def test_eval_takes_every_answer_flag():
    """The answer flags are `kbvqa answer`'s own (shared, not copied) and each is a setting of AnswerOptions."""
    answer = {n for n in inspect.signature(answer_cmd.answer).parameters if n not in eval_cmd._NOT_SHARED}
    mine = set(inspect.signature(eval_cmd.evaluate).parameters)
    assert answer <= mine
    assert answer <= set(AnswerOptions.flag_paths())


def test_report_compare(bench, tmp_path):
    """Two eval runs and a `kbvqa score --json` summary in one table; the judge metric, scored by two
    different judge models, is flagged and named per run."""
    b, _root, idx = bench
    with FakeLLMServer(handler=_judge) as srv:
        for name, model in (("a", "jA"), ("b", "jB")):
            _run(["eval", *_answer_flags(b, idx), "--out", tmp_path / name, "-m", "infoseek-strict", "-m", "judge",
                  "--judge-base-url", srv.base_url, "--judge-model", model, "--json"])
    strict = tmp_path / "strict.json"
    strict.write_text(_run(["score", "infoseek", "-p", tmp_path / "a" / "predictions.jsonl", "-r", b.samples,
                            "--mode", "strict", "--json"]).stdout)
    md = tmp_path / "cmp.md"
    res = _run(["report", "compare", tmp_path / "a", tmp_path / "b" / "results.json", strict, "--out", md, "--json"])
    doc = json.loads(res.stdout)
    assert [r["label"] for r in doc["runs"]] == ["a", "b", "strict"]
    assert [r["source"] for r in doc["runs"]] == ["eval", "eval", "score-summary"]
    s, j = doc["metrics"]["infoseek-strict"], doc["metrics"]["judge"]
    assert s["consistent"] and set(s["scorers"]) == {"a", "b", "strict"} and set(s["n"].values()) == {b.n_samples}
    assert not j["consistent"] and "jA" in j["scorers"]["a"] and "jB" in j["scorers"]["b"] and j["absent"] == ["strict"]
    assert "judge" in res.stderr and "not comparable" in res.stderr
    rows = {r["run"]: r for r in doc["rows"]}
    assert rows["a"]["infoseek-strict final_score"] == rows["strict"]["infoseek-strict final_score"]
    assert rows["a"]["judge accuracy"] == 1.0 and rows["b"]["judge accuracy"] == 0.0 and rows["strict"]["judge n"] is None
    assert rows["a"]["judge accuracy_graded"] == 1.0  # seed 001's over all responses, kbvqa's over graded beside it
    text = md.read_text()
    assert f"judge accuracy (%) {FLAG}".replace("(", "\\(").replace(")", "\\)").replace("!", "\\!") in text
    assert "accuracy = correct / all responses \\(seed 001's definition" in text  # markdown-escaped
    assert "NOT comparable" in text and "scorer infoseek-strict, time\\_leniency=True \\(every run\\)" in text
    assert "jA" in text and "jB" in text

    # a summary read alone gives what eval wrote for the same metric
    name, entry = summary_metric(json.loads(strict.read_text()))
    a = json.loads((tmp_path / "a" / "results.json").read_text())["metrics"]["infoseek-strict"]
    assert name == "infoseek-strict" and entry["values"] == a["values"] and entry["counts"] == a["counts"]
    assert compare_runs([tmp_path / "a"])["metrics"]["judge"]["consistent"]

    # untrusted labels are escaped in markdown; unknown files are refused by name
    _run(["report", "compare", tmp_path / "a", "--names", "<script>x</script>", "--out", md])
    assert "<script>" not in md.read_text() and "\\<script\\>" in md.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    res = _run(["report", "compare", bad], code=2)
    assert "bad.json" in res.output and "neither" in res.output
    res = _run(["report", "compare", tmp_path], code=2)
    assert "without results.json" in res.output


def test_eval_whose_judge_is_unreachable_exits_3(bench, tmp_path):
    """Every answer ok but not one verdict: the run produced no score, so it exits 3 with the judge's
    reasons (issue 34 item 2), not 0."""
    import socket

    b, _root, idx = bench
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = _run(["eval", *_answer_flags(b, idx), "--out", tmp_path / "run", "-m", "judge", "--judge-base-url",
                f"http://127.0.0.1:{port}/v1", "--judge-model", "j", "--max-retries", "0", "--json"], code=3)
    assert "judge error" in res.stderr and "connection error" in res.stderr, res.stderr
