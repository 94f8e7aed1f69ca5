"""`kbvqa score judge` and the E-VQA LLM fallback as runner jobs, against a local fake server:
journal, manifest, resume that re-sends only failed/unusable calls, --concurrency reaching the server,
a stale journal refused, choices from the registries."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from kbvqa.cli.score import app as score_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402

runner = CliRunner()


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


class Grader:
    """Fake judge: 'Paris' (or anything with 'jay') is correct, the rest incorrect. Until `heal()`,
    'boom' answers HTTP 500 (Retry-After 0, so the client's retries are instant) and 'garbage' gets
    prose instead of JSON. Counts the requests per graded answer."""

    def __init__(self) -> None:
        self.healed = False
        self.asked: Counter[str] = Counter()
        self.lock = threading.Lock()

    def heal(self) -> None:
        self.healed = True
        self.asked.clear()

    def __call__(self, req: dict) -> Reply:
        ans = req["messages"][0]["content"].split("Answer to grade:")[1].split("\n")[0].strip()
        with self.lock:
            self.asked[ans] += 1
        if not self.healed and ans.startswith("boom"):
            return Reply(status=500, headers={"Retry-After": "0"}, error="upstream failure")
        if not self.healed and ans.startswith("garbage"):
            return ok("Looks right to me.")
        good = ans in ("Paris", "boom-ok", "garbage-ok") or "jay" in ans.lower()
        return ok(json.dumps({"label": "correct" if good else "incorrect", "rationale": "fake"}))


def _judge_files(tmp_path: Path) -> tuple[str, str]:
    refs = _jsonl(tmp_path / "refs.jsonl", [{"id": f"q{i}", "question": "Capital?", "answers": ["Paris"]}
                                            for i in range(7)])
    preds = _jsonl(tmp_path / "preds.jsonl", [{"data_id": "q0", "prediction": "Paris"},
                                              {"data_id": "q1", "prediction": "Lyon"},
                                              {"data_id": "q2", "prediction": "boom-ok"},
                                              {"data_id": "q3", "prediction": "garbage-ok"},
                                              {"data_id": "q4", "prediction": ""},
                                              {"data_id": "q5", "prediction": "boom-ok"},
                                              {"data_id": "zz", "prediction": "Paris"}])
    return refs, preds


def test_judge_resume_resends_only_failed_calls(tmp_path):
    refs, preds = _judge_files(tmp_path)
    grader = Grader()
    with FakeLLMServer(handler=grader) as srv:
        args = ["judge", "-p", preds, "-r", refs, "--judge-base-url", srv.base_url, "--judge-model", "fj", "--json"]
        first = runner.invoke(score_app, args)
        assert first.exit_code == 0, first.output
        s1 = json.loads(first.stdout)
        journal = tmp_path / "preds.judge.jsonl"  # the default: beside the predictions
        assert s1["out"] == str(journal) and Path(s1["manifest"]).is_file()
        assert s1["n_error"] == 2 and s1["n_invalid"] == 1 and s1["n_correct"] == 1 and s1["n_incorrect"] == 1
        assert s1["n_not_attempted"] == 2 and s1["n_missing"] == 1 and s1["n_empty"] == 1 and s1["n_unknown_ids"] == 1
        assert s1["judge"] == "fj" and s1["judge_provenance"] == {"backend": "openai", "model": "fj",
                                                                  "base_url": srv.base_url}
        status = {x["id"]: x["status"] for x in _lines(journal)}
        assert status == {"q0": "ok", "q1": "ok", "q2": "error", "q3": "invalid", "q4": "ok", "q5": "error",
                          "q6": "ok"}
        err = next(x for x in _lines(journal) if x["id"] == "q2")
        assert "verdict" not in err and "500" in err["reason"]  # an API failure is never a label
        assert grader.asked["Paris"] == 1 and grader.asked[""] == 0  # empty / missing answers: no call

        grader.heal()
        second = runner.invoke(score_app, args)  # --resume is the default
        assert second.exit_code == 0, second.output
        s2 = json.loads(second.stdout)
    # only the error and invalid items were sent again, once each
    assert dict(grader.asked) == {"boom-ok": 2, "garbage-ok": 1}
    assert s2["run"]["skipped"] == 4 and s2["run"]["ok"] == 3 and s2["run"]["error"] == 0
    assert s2["n_correct"] == 4 and s2["n_error"] == 0 and s2["n_invalid"] == 0 and s2["n"] == 7
    lines = _lines(journal)
    assert [x["id"] for x in lines] == [f"q{i}" for i in range(7)]  # exactly one line per reference id
    assert all(x["status"] == "ok" for x in lines)
    assert {x["id"]: x["attempts"] for x in lines}["q3"] == 2
    manifest = json.loads(Path(s2["manifest"]).read_text())
    assert manifest["state"] == "finished" and manifest["roles"]["judge"]["model"] == "fj"
    assert manifest["counts"] == {"ok": 3, "error": 0, "invalid": 0, "needs_model": 0} and manifest["skipped"] == 4


def test_judge_per_item_no_resume_and_stale_journal(tmp_path):
    refs, preds = _judge_files(tmp_path)
    grader = Grader()
    grader.heal()
    out = tmp_path / "j.jsonl"
    items = tmp_path / "items.jsonl"
    with FakeLLMServer(handler=grader) as srv:
        base = ["judge", "-p", preds, "-r", refs, "--judge-base-url", srv.base_url, "--judge-model", "fj",
                "--out", str(out)]
        r = runner.invoke(score_app, [*base, "--per-item", str(items)])
        assert r.exit_code == 0, r.output
        assert "simpleqa-judge (7 items)" in r.stdout and str(out) in r.stdout
        rows = {x["data_id"]: x for x in _lines(items)}
        assert rows["q6"] == {"data_id": "q6", "prediction": None, "missing": True, "label": "not_attempted",
                              "rationale": "no answer"}
        assert rows["q0"]["label"] == "correct"
        # the predictions change: the old verdict must not be reused for the new answer
        _jsonl(Path(preds), [{"data_id": "q0", "prediction": "Marseille"}])
        stale = runner.invoke(score_app, [*base, "--json"])
        assert stale.exit_code == 2
        assert f"{out}:1: field 'prediction'" in stale.output and "--no-resume" in stale.output
        fresh = runner.invoke(score_app, [*base, "--no-resume", "--json"])
        assert fresh.exit_code == 0, fresh.output
    assert json.loads(fresh.stdout)["n_incorrect"] == 1
    assert len(list(tmp_path.glob("j.jsonl.*.bak"))) == 1  # the old journal was moved aside, not lost


def test_judge_concurrency_reaches_the_server(tmp_path):
    refs = _jsonl(tmp_path / "r.jsonl", [{"id": f"q{i}", "question": "?", "answers": ["Paris"]} for i in range(24)])
    preds = _jsonl(tmp_path / "p.jsonl", [{"data_id": f"q{i}", "prediction": f"answer {i}"} for i in range(24)])
    with FakeLLMServer(latency=0.2, default=ok('{"label": "incorrect", "rationale": "r"}')) as srv:
        r = runner.invoke(score_app, ["judge", "-p", preds, "-r", refs, "--judge-base-url", srv.base_url,
                                      "--judge-model", "fj", "--concurrency", "12", "--json"])
        assert r.exit_code == 0, r.output
        assert 8 < srv.max_in_flight <= 12  # not capped at the client's default of 8, never above the flag


def test_judge_replay_miss_is_an_error_line(tmp_path):
    refs, preds = _judge_files(tmp_path)
    cassette = tmp_path / "empty.cassette.jsonl"
    cassette.write_text("", encoding="utf-8")
    r = runner.invoke(score_app, ["judge", "-p", preds, "-r", refs, "--judge-replay", str(cassette), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["n_error"] == 5 and s["n_not_attempted"] == 2 and s["judge_provenance"]["backend"] == "replay"
    mixed = runner.invoke(score_app, ["judge", "-p", preds, "-r", refs, "--judge-replay", str(cassette),
                                      "--judge-model", "m"])
    assert mixed.exit_code == 2 and "choose either" in mixed.output
    none = runner.invoke(score_app, ["judge", "-p", preds, "-r", refs])
    assert none.exit_code == 2 and "no judge configured" in none.output


EVQA_CSV = ("data_id,question,answer,question_type\n"
            "a1,What bird?,Blue Jay,automatic\n"
            "a2,What bird?,Blue Jay,automatic\n"
            "a3,What bird?,Blue Jay,automatic\n"
            "a4,What bird?,Blue Jay,automatic\n"
            "a5,What bird?,Blue Jay,automatic\n")


def test_evqa_llm_fallback_resumes(tmp_path):
    refs = tmp_path / "evqa.csv"
    refs.write_text(EVQA_CSV, encoding="utf-8")
    preds = _jsonl(tmp_path / "p.jsonl", [{"data_id": "a1", "prediction": "blue jay"},  # EM: never judged
                                          {"data_id": "a2", "prediction": "a jay, surely"},
                                          {"data_id": "a3", "prediction": "boom jay"},
                                          {"data_id": "a4", "prediction": "garbage jay"},
                                          {"data_id": "a5", "prediction": "a crow"}])
    grader = Grader()
    out = tmp_path / "fallback.jsonl"
    with FakeLLMServer(handler=grader) as srv:
        args = ["evqa", "-p", preds, "-r", str(refs), "--judge-base-url", srv.base_url, "--judge-model", "fj",
                "--out", str(out), "--json"]
        first = runner.invoke(score_app, args)
        assert first.exit_code == 0, first.output
        s1 = json.loads(first.stdout)
        assert s1["n_em_correct"] == 1 and s1["correct"] == 2
        j = s1["judge"]
        assert j["n_calls"] == 4 and j["n_error"] == 1 and j["n_invalid"] == 1 and j["n_rescued"] == 1
        assert j["run"]["out"] == str(out) and Path(j["run"]["manifest"]).is_file()
        assert {x["id"]: x["status"] for x in _lines(out)} == {"a2": "ok", "a3": "error", "a4": "invalid", "a5": "ok"}
        assert "blue jay" not in grader.asked
        grader.heal()
        second = runner.invoke(score_app, args)
        assert second.exit_code == 0, second.output
        s2 = json.loads(second.stdout)
    assert dict(grader.asked) == {"boom jay": 1, "garbage jay": 1}  # only the failed calls again
    assert s2["correct"] == 4 and s2["accuracy"] == 80.0 and s2["judge"]["n_error"] == 0
    assert s2["judge"]["run"]["skipped"] == 2 and s2["scorer"] == "evqa-em+llm-judge(fj)"
    assert [x["id"] for x in _lines(out)] == ["a2", "a3", "a4", "a5"]


def test_evqa_out_needs_a_judge(tmp_path):
    refs = tmp_path / "evqa.csv"
    refs.write_text(EVQA_CSV, encoding="utf-8")
    preds = _jsonl(tmp_path / "p.jsonl", [{"data_id": "a1", "prediction": "blue jay"}])
    r = runner.invoke(score_app, ["evqa", "-p", preds, "-r", str(refs), "--out", str(tmp_path / "j.jsonl")])
    assert r.exit_code == 2 and "needs a judge" in r.output


def test_help_lists_registered_choices():
    from kbvqa.evaluate import METRICS, infoseek_modes
    from kbvqa.evaluate.methods import METHODS

    assert infoseek_modes() == ["official", "strict", "reward"]
    assert {"infoseek-official", "evqa", "simpleqa-judge", "retrieval"} <= set(METRICS.names())
    wide = {"COLUMNS": "220"}
    assert "<official|strict|reward>" in runner.invoke(score_app, ["infoseek", "--help"], env=wide).output
    h = runner.invoke(score_app, ["convert-predictions", "--help"], env=wide).output
    assert "<" + "|".join(METHODS.names()) + ">" in h and "<error|last|first>" in h
    assert "<any|all>" in runner.invoke(score_app, ["retrieval", "--help"], env=wide).output
    bad = runner.invoke(score_app, ["convert-predictions", "x", "--method", "nope", "--out", "o.jsonl"])
    assert bad.exit_code != 0
