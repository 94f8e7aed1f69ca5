"""`kbvqa score judge` and `kbvqa study agent-failures` take one options object each (JudgeOptions,
AgentFailureOptions): --help shows the class default, a flag wins over `[score.judge]` of --config, which
wins over the default; a bad value names its flag or file key; the judge stage runs with `opts.stage`
itself; the manifest records `opts.used()`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.pipelines.score_options import AgentFailureOptions, JudgeOptions, from_config
from kbvqa.runner.options import OptionsError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _grade(req: dict):
    answer = req["messages"][0]["content"].split("Answer to grade:")[1].split("\n")[0].strip()
    return ok(json.dumps({"label": "correct" if answer.startswith("Paris") else "incorrect", "rationale": "r"}))


def _files(folder: Path) -> tuple[Path, Path]:
    refs = _jsonl(folder / "refs.jsonl", [{"id": f"q{i}", "question": "Capital?", "answers": ["Paris"]}
                                          for i in range(3)])
    preds = _jsonl(folder / "preds.jsonl", [{"data_id": "q0", "prediction": "Paris. It is on the Seine."},
                                            {"data_id": "q1", "prediction": "Lyon."},
                                            {"data_id": "q2", "prediction": ""}])
    return refs, preds


def test_help_shows_the_class_defaults():
    out = " ".join(runner.invoke(app, ["score", "judge", "--help"], terminal_width=200).output.split())
    assert "Judge requests in flight. Default 16." in out
    assert "not comparable with full). Default full." in out
    assert "(--no-resume moves it aside). Default on." in out
    failures = " ".join(runner.invoke(app, ["study", "agent-failures", "--help"], terminal_width=200).output.split())
    assert "Judge requests in flight. Default 16." in failures


def test_flag_over_file_over_default(tmp_path):
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text('[score.judge]\nconcurrency = 5\ngraded_text = "short"\n[score.judge.models]\ntimeout = 30\n'
                   '[score.judge.stage]\ntemperature = 0.2\n', encoding="utf-8")
    default = from_config(JudgeOptions)
    assert (default.concurrency, default.graded_text, default.resume, default.stage.temperature) == (16, "full", True, 0.0)
    filed = from_config(JudgeOptions, config=cfg)
    assert (filed.concurrency, filed.graded_text, filed.stage.temperature) == (5, "short", 0.2)
    assert filed.models.limits() == {"timeout": 30.0}
    flagged = from_config(JudgeOptions, config=cfg, concurrency=7, graded_text="full", judge_role="checker",
                          timeout=9.0, resume=False)
    assert (flagged.concurrency, flagged.graded_text, flagged.resume) == (7, "full", False)
    assert flagged.models.role == "checker" and flagged.models.timeout == 9.0 and flagged.stage.temperature == 0.2
    # the failure job reads its own table only
    assert from_config(AgentFailureOptions, config=cfg).concurrency == 16


def test_a_bad_value_names_its_flag_or_file_key(tmp_path):
    with pytest.raises(OptionsError, match=r"^--concurrency: .*greater than or equal to 1"):
        JudgeOptions.build(concurrency=0)
    with pytest.raises(OptionsError, match=r"^--graded-text: .*'full' or 'short'"):
        JudgeOptions.build(graded_text="both")
    with pytest.raises(OptionsError, match=r"^--judge-model: "):
        JudgeOptions.build(judge_model=3)
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[score.judge.stage]\ntemprature = 0.5\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"bad\.toml: stage\.temprature: Extra inputs are not permitted"):
        from_config(JudgeOptions, config=cfg)
    cfg.write_text('[study.agent-failures.stage]\nobservation_chars = "many"\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"bad\.toml: stage\.observation_chars"):
        from_config(AgentFailureOptions, config=cfg)
    refs, preds = _files(tmp_path)
    cfg.write_text('[score.judge]\nconcurrency = 0\n', encoding="utf-8")
    res = runner.invoke(app, ["score", "judge", "-p", str(preds), "-r", str(refs), "--config", str(cfg)])
    assert res.exit_code == 2 and "bad.toml: concurrency: Input should be greater than or equal to 1" in res.output


def test_the_stage_gets_the_options_object_and_the_manifest_records_it(tmp_path, monkeypatch):
    from kbvqa.evaluate import judge as jd
    from kbvqa.pipelines.score import judge_files, judge_of

    seen = []
    real = jd.judge_job

    def spy(client, config=None):
        job = real(client, config)
        seen.append((config, job.stages[0].config))
        return job

    monkeypatch.setattr(jd, "judge_job", spy)
    refs, preds = _files(tmp_path)
    with FakeLLMServer(handler=_grade) as srv:
        opts = JudgeOptions.build(judge_base_url=srv.base_url, judge_model="fj", concurrency=2)
        rep = judge_files(preds, refs, judge_of(opts), opts, out=tmp_path / "j.jsonl")
    assert seen and seen[0][0] is opts.stage and seen[0][1] is opts.stage
    manifest = json.loads(Path(rep.summary["manifest"]).read_text(encoding="utf-8"))
    assert manifest["run_config"]["options"] == opts.used()
    assert rep.summary["n_correct"] == 1 and rep.summary["n_not_attempted"] == 1
    with pytest.raises(TypeError, match="not both"):
        judge_files(preds, refs, None, opts, concurrency=3)


def test_score_judge_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another folder, the cache on, the judge and the options from one kbvqa.toml;
    a flag wins over the file and the manifest shows what ran."""
    work = tmp_path / "work"
    work.mkdir()
    _files(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(handler=_grade) as srv:
        (work / "kbvqa.toml").write_text(
            f'[models.judge]\nbackend = "openai"\nmodel = "judge-x"\nbase_url = "{srv.base_url}"\n'
            '[score.judge]\ngraded_text = "short"\nconcurrency = 3\n', encoding="utf-8")
        args = ["score", "judge", "-p", "work/preds.jsonl", "-r", "work/refs.jsonl", "--config", "work/kbvqa.toml",
                "--out", "work/j.jsonl", "--json"]
        res = runner.invoke(app, args + ["--concurrency", "2"])
        assert res.exit_code == 0, res.output
        s = json.loads(res.stdout)
        assert s["graded_text"] == "short" and s["scorer"] == "simpleqa-judge[short-answer]"
        assert s["n_correct"] == 1 and s["n_incorrect"] == 1 and s["judge"] == "judge-x"
        run_config = json.loads(Path(s["manifest"]).read_text(encoding="utf-8"))["run_config"]
        options = run_config["options"]
        assert run_config["predictions"] == str((work / "preds.jsonl").resolve())  # absolute, for the viewer
        assert options["concurrency"] == 2 and options["graded_text"] == "short"
        assert options["config"] == "work/kbvqa.toml" and options["stage"]["temperature"] == 0.0
        again = runner.invoke(app, args)  # resumed from the journal: nothing asked again
        assert again.exit_code == 0, again.output
        assert srv.count == 2


def test_agent_failures_options_reach_the_stage_and_the_manifest(tmp_path, monkeypatch):
    _jsonl(tmp_path / "refs.jsonl", [{"id": "a", "question": "Where?", "answers": ["Elmira"]}])
    _jsonl(tmp_path / "agent.jsonl", [{"id": "a", "sample_id": "a", "status": "ok", "answer": "Boston.",
                                               "trajectory": [{"turn": 1, "tool": "search", "arguments": {"q": "x"},
                                                               "status": "ok", "observation": "y" * 50}],
                                               "meta": {"termination": "answer", "question": "Where?"}}])
    _jsonl(tmp_path / "agent.judge.jsonl", [{"id": "a", "status": "ok", "verdict": {"label": "incorrect"}}])
    (tmp_path / "kbvqa.toml").write_text('[study.agent-failures.stage]\nobservation_chars = 7\n', encoding="utf-8")
    asked = []

    def judge(req: dict):
        asked.append(req["messages"][-1]["content"])
        return ok(json.dumps({"category": "T3", "rationale": "r"}))

    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(handler=judge) as srv:
        res = runner.invoke(app, ["study", "agent-failures", "-p", "agent.jsonl", "-r", "refs.jsonl", "--verdicts",
                                  "agent.judge.jsonl", "--config", "kbvqa.toml", "--judge-base-url", srv.base_url,
                                  "--judge-model", "fj", "--json"])
    assert res.exit_code == 2 and "choose either" in res.output  # --config names the judge: never mixed
    with FakeLLMServer(handler=judge) as srv:
        (tmp_path / "kbvqa.toml").write_text(
            f'[models.judge]\nbackend = "openai"\nmodel = "fj"\nbase_url = "{srv.base_url}"\n'
            '[study.agent-failures]\nconcurrency = 2\n[study.agent-failures.stage]\nobservation_chars = 7\n',
            encoding="utf-8")
        res = runner.invoke(app, ["study", "agent-failures", "-p", "agent.jsonl", "-r", "refs.jsonl", "--verdicts",
                                  "agent.judge.jsonl", "--config", "kbvqa.toml", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["categorised"] == 1 and "-> ok: yyyyyyy\n" in asked[-1] + "\n"
    manifest = json.loads(Path(obj["manifest"]).read_text(encoding="utf-8"))
    used = manifest["run_config"]["options"]
    assert used["stage"]["observation_chars"] == 7 and used["concurrency"] == 2
    assert used == from_config(AgentFailureOptions, config=Path("kbvqa.toml")).used()
