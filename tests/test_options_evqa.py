"""`kbvqa score evqa` takes one options object (EvqaOptions): --help shows the class defaults, a flag wins
over `[score.evqa]` of --config, which wins over the default; a bad value names its flag or file key; the
LLM judge stage runs with `opts.stage` itself and its manifest records `opts.used()`; the semantic
threshold has one home (kbvqa.evaluate.semantic.DEFAULT_THRESHOLD) that the options, `kbvqa eval`'s
evqa-semantic metric and the studies read, as the studies read DEFAULT_RESAMPLES."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.pipelines.score_options import EvqaOptions, from_config
from kbvqa.runner.options import OptionsError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()

CSV = ("data_id,question,answer,question_type\n"
       "a1,What bird?,Blue Jay,automatic\n"
       "a2,Which city?,Paris,automatic\n"
       "a3,What tree?,oak,templated\n")


def _files(folder: Path) -> tuple[Path, Path]:
    refs = folder / "evqa.csv"
    refs.write_text(CSV, encoding="utf-8")
    preds = folder / "preds.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in [
        {"data_id": "a1", "prediction": "blue jay"},  # exact match: no judge call
        {"data_id": "a2", "prediction": "the French capital"},  # EM fails: the judge says correct
        {"data_id": "a3", "prediction": "maple"}]), encoding="utf-8")  # EM fails: the judge says incorrect
    return refs, preds


def _grade(req: dict):
    answer = req["messages"][0]["content"].split("Answer to grade:")[1].split("\n")[0].strip()
    return ok(json.dumps({"label": "correct" if "French" in answer else "incorrect", "rationale": "r"}))


def _help(*argv: str) -> str:
    return " ".join(runner.invoke(app, [*argv, "--help"], terminal_width=200).output.split())


def test_help_shows_the_one_default_of_each_setting():
    from kbvqa.evaluate.semantic import DEFAULT_THRESHOLD
    from kbvqa.evaluate.studies import DEFAULT_RESAMPLES

    out = _help("score", "evqa")
    assert "Judge requests in flight. Default 16." in out
    assert f"Cosine threshold for --semantic. Default {DEFAULT_THRESHOLD:g}." in out
    assert "(--no-resume moves it aside). Default on." in out
    for command in ("by-type", "variants", "buckets"):
        study = _help("study", command)
        assert f"Bootstrap resamples. Default {DEFAULT_RESAMPLES}." in study
        assert f"evqa-semantic: similarity threshold. Default {DEFAULT_THRESHOLD:g}." in study
    assert f"Bootstrap resamples. Default {DEFAULT_RESAMPLES}." in _help("study", "grounded")


def test_the_semantic_threshold_and_resamples_have_one_home(tmp_path, monkeypatch):
    """Changing the constant changes every reader: the options' default, eval's evqa-semantic metric (which
    goes through score_evqa_files) and the studies' flags."""
    import kbvqa.evaluate.semantic as sem
    import kbvqa.evaluate.studies as st
    from kbvqa.pipelines.score import score_evqa_files

    monkeypatch.setattr(sem, "DEFAULT_THRESHOLD", 0.65)
    monkeypatch.setattr(st, "DEFAULT_RESAMPLES", 123)
    assert EvqaOptions.build(semantic=True).semantic_threshold == 0.65
    seen = []

    class Spy(sem.SemanticBackend):
        def __init__(self, model_dir=None, *, threshold):
            seen.append(threshold)
            super().__init__(model_dir, threshold=threshold, embedder=_LetterEmbedder())

    monkeypatch.setattr(sem, "SemanticBackend", Spy)
    refs, preds = _files(tmp_path)
    rep = score_evqa_files(preds, refs, semantic=True)  # as pipelines.evaluation's evqa-semantic calls it
    assert seen == [0.65] and "cos>=0.65" in rep.summary["scorer"]
    captured = {}

    def by_type_study(*args, **kw):
        captured.update(kw)
        return {}

    monkeypatch.setattr(st, "by_type_study", by_type_study)
    monkeypatch.setattr("kbvqa.cli.study._finish", lambda *a: None)
    res = runner.invoke(app, ["study", "by-type", "-p", str(preds), "-r", str(refs), "--scorer", "evqa"])
    assert res.exit_code == 0, res.output
    assert captured["n_resamples"] == 123 and captured["semantic_threshold"] == 0.65
    res = runner.invoke(app, ["study", "by-type", "-p", str(preds), "-r", str(refs), "--scorer", "evqa",
                              "--resamples", "7", "--semantic-threshold", "0.9"])
    assert res.exit_code == 0 and captured["n_resamples"] == 7 and captured["semantic_threshold"] == 0.9


class _LetterEmbedder:
    """Letter counts, L2-normalised: enough for a cosine without a model download."""

    def encode(self, texts):
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_flag_over_file_over_default(tmp_path):
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text('[score.evqa]\nconcurrency = 5\nsemantic = true\nsemantic_threshold = 0.9\n'
                   '[score.evqa.models]\ntimeout = 30\n[score.evqa.stage]\ntemperature = 0.2\n', encoding="utf-8")
    default = from_config(EvqaOptions)
    assert (default.concurrency, default.semantic, default.resume, default.stage.temperature) == (16, False, True, 0.0)
    filed = from_config(EvqaOptions, config=cfg)
    assert (filed.concurrency, filed.semantic, filed.semantic_threshold, filed.stage.temperature) == (5, True, 0.9, 0.2)
    assert filed.models.limits() == {"timeout": 30.0}
    flagged = from_config(EvqaOptions, config=cfg, judge_concurrency=7, semantic_threshold=0.85, resume=False,
                          judge_role="checker", timeout=9.0)
    assert (flagged.concurrency, flagged.semantic_threshold, flagged.resume) == (7, 0.85, False)
    assert flagged.models.role == "checker" and flagged.models.timeout == 9.0 and flagged.stage.temperature == 0.2


def test_a_bad_value_names_its_flag_or_file_key(tmp_path):
    with pytest.raises(OptionsError, match=r"^--judge-concurrency: .*greater than or equal to 1"):
        EvqaOptions.build(judge_concurrency=0)
    with pytest.raises(OptionsError, match=r"^--semantic-threshold: .*less than or equal to 1"):
        EvqaOptions.build(semantic_threshold=1.5)
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[score.evqa]\nsemantic_threshold = 0\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"bad\.toml: semantic_threshold: Input should be greater than 0"):
        from_config(EvqaOptions, config=cfg)
    refs, preds = _files(tmp_path)
    cfg.write_text('[score.evqa]\nconcurrency = 0\n', encoding="utf-8")
    res = runner.invoke(app, ["score", "evqa", "-p", str(preds), "-r", str(refs), "--config", str(cfg)])
    assert res.exit_code == 2 and "bad.toml: concurrency: Input should be greater than or equal to 1" in res.output
    res = runner.invoke(app, ["score", "evqa", "-p", str(preds), "-r", str(refs), "--semantic-threshold", "0.7"])
    assert res.exit_code == 2 and "--semantic-threshold: only for the --semantic fallback" in res.output
    res = runner.invoke(app, ["score", "evqa", "-p", str(preds), "-r", str(refs), "--semantic", "--bem-dir",
                              str(tmp_path)])
    assert res.exit_code == 2 and "choose one equivalence backend" in res.output


def test_the_stage_gets_the_options_object_and_the_manifest_records_it(tmp_path, monkeypatch):
    from kbvqa.evaluate import judge as jd
    from kbvqa.pipelines.score import judge_of, score_evqa_files

    seen = []
    real = jd.judge_job

    def spy(client, config=None):
        job = real(client, config)
        seen.append(job.stages[0].config)
        return job

    monkeypatch.setattr(jd, "judge_job", spy)
    refs, preds = _files(tmp_path)
    with FakeLLMServer(handler=_grade) as srv:
        opts = EvqaOptions.build(judge_base_url=srv.base_url, judge_model="fj", judge_concurrency=2)
        rep = score_evqa_files(preds, refs, opts, judge=judge_of(opts), out=tmp_path / "j.jsonl")
        assert srv.count == 2  # the two EM failures
    assert seen and seen[0] is opts.stage
    assert rep.summary["correct"] == 2 and rep.summary["n"] == 3
    manifest = json.loads(Path(rep.summary["judge"]["run"]["manifest"]).read_text(encoding="utf-8"))
    assert manifest["run_config"]["options"] == opts.used()
    assert manifest["run_config"]["task"] == "evqa-equivalence"
    with pytest.raises(TypeError, match="not both"):
        score_evqa_files(preds, refs, opts, semantic=True)


def test_score_evqa_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another folder, the cache on, the judge and the options from one kbvqa.toml; a
    flag wins over the file, the manifest shows what ran, and a second run resumes from the journal."""
    work = tmp_path / "work"
    work.mkdir()
    _files(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(handler=_grade) as srv:
        (work / "kbvqa.toml").write_text(
            f'[models.judge]\nbackend = "openai"\nmodel = "judge-x"\nbase_url = "{srv.base_url}"\n'
            '[score.evqa]\nconcurrency = 3\n', encoding="utf-8")
        args = ["score", "evqa", "-p", "work/preds.jsonl", "-r", "work/evqa.csv", "--config", "work/kbvqa.toml",
                "--out", "work/evqa-judge.jsonl", "--json"]
        res = runner.invoke(app, args + ["--judge-concurrency", "2"])
        assert res.exit_code == 0, res.output
        s = json.loads(res.stdout)
        assert s["accuracy"] == pytest.approx(200 / 3, abs=0.01) and "judge-x" in s["scorer"]
        options = json.loads(Path(s["judge"]["run"]["manifest"]).read_text(encoding="utf-8"))["run_config"]["options"]
        assert options["concurrency"] == 2 and options["config"] == "work/kbvqa.toml"
        assert options["semantic"] is False and options["stage"]["prompt_version"] == "judge.simpleqa@1"
        again = runner.invoke(app, args)  # resumed from the journal: nothing asked again
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["accuracy"] == s["accuracy"]
        assert srv.count == 2
