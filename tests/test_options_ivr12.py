"""`kbvqa score ivr12` takes one options object (IVR12Options): --help shows the class default, a flag wins
over `[score.ivr12]` of --config, which wins over the default; the repeats' temperature is derived from one
written value; a bad value names its flag or file key; the IVR-12 stage runs with `opts.stage` itself and
the manifest records `opts.used()`. Rules mode (no judge model), so no server is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.pipelines.score_options import IVR12Options, from_config
from kbvqa.runner.options import OptionsError

runner = CliRunner()


def _files(folder: Path) -> tuple[Path, Path]:
    samples = [{"id": f"q{i}", "question": f"[q{i}] What is it?", "answers": [f"thing {i}"]} for i in range(3)]
    preds = [{"id": f"q{i}", "answer": f"It is thing {i}. " + "word " * 20, "status": "ok",
              "meta": {"provenance": {"tags": 0, "valid": 0, "violations": [], "resolved": []}}} for i in range(3)]
    for name, rows in (("samples", samples), ("preds", preds)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder / "preds.jsonl", folder / "samples.jsonl"


def test_help_shows_the_class_defaults():
    out = " ".join(runner.invoke(app, ["score", "ivr12", "--help"], terminal_width=200).output.split())
    assert "Items and judge requests in flight. Default 16." in out
    assert "(agreement by Krippendorff's α). Default 1." in out
    assert "predictions or references. Default auto." in out


def test_flag_over_file_over_default_and_the_repeats_temperature(tmp_path):
    assert from_config(IVR12Options).stage.temperature == 0.0
    assert IVR12Options.build(repeats=3).stage.temperature == IVR12Options.REPEATS_TEMPERATURE
    assert IVR12Options.build(repeats=3, temperature=0.2).stage.temperature == 0.2
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text('[score.ivr12]\nconcurrency = 4\ninput_kind = "references"\n[score.ivr12.stage]\nrepeats = 2\n'
                   'image_max_side = 512\n[score.ivr12.judges]\nmodels = ["a", "b"]\n', encoding="utf-8")
    filed = from_config(IVR12Options, config=cfg)
    assert (filed.concurrency, filed.input_kind, filed.stage.repeats, filed.stage.image_max_side) == (4, "references", 2, 512)
    assert filed.stage.temperature == 0.7 and filed.judges.models == ("a", "b")
    flagged = from_config(IVR12Options, config=cfg, concurrency=9, judge_model=["c"], input_kind="auto", temperature=0.0)
    assert (flagged.concurrency, flagged.judges.models, flagged.input_kind) == (9, ("c",), "auto")
    assert flagged.stage.temperature == 0.0 and flagged.stage.repeats == 2


def test_a_bad_value_names_its_flag_or_file_key(tmp_path):
    with pytest.raises(OptionsError, match=r"^--repeats: .*greater than or equal to 1"):
        IVR12Options.build(repeats=0)
    with pytest.raises(OptionsError, match=r"^--source: "):
        IVR12Options.build(input_kind="both")
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[score.ivr12.stage]\nimage_max_side = 0\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"bad\.toml: stage\.image_max_side"):
        from_config(IVR12Options, config=cfg)
    preds, samples = _files(tmp_path)
    res = runner.invoke(app, ["score", "ivr12", "-p", str(preds), "-s", str(samples), "--config", str(cfg)])
    assert res.exit_code == 2 and "bad.toml: stage.image_max_side" in res.stderr


def test_the_stage_gets_the_options_object_and_the_manifest_records_it(tmp_path, monkeypatch):
    from kbvqa.evaluate import ivr12 as iv
    from kbvqa.pipelines.score import ivr12_files

    seen = []
    real = iv.ivr12_job

    def spy(judges, config=None):
        job = real(judges, config)
        seen.append(job.stages[0].config)
        return job

    monkeypatch.setattr(iv, "ivr12_job", spy)
    preds, samples = _files(tmp_path)
    opts = IVR12Options.build(concurrency=2, image_max_side=256)
    s = ivr12_files(preds, samples, [], opts, out=tmp_path / "r.jsonl")
    assert seen == [opts.stage] and seen[0] is opts.stage
    assert s["status"]["ok"] == 3 and s["mode"] == "rules"
    assert json.loads(Path(s["manifest"]).read_text(encoding="utf-8"))["run_config"]["options"] == opts.used()


def test_score_ivr12_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another folder, the cache on; rules mode (a --config names the judges, so it
    is not used here: the file's table is covered above)."""
    work = tmp_path / "work"
    work.mkdir()
    _files(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["score", "ivr12", "-p", "work/preds.jsonl", "-s", "work/samples.jsonl",
                              "--concurrency", "2", "--require-complete", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["complete"] and s["status"]["ok"] == 3 and s["out"] == "work/preds.ivr12.jsonl"
    used = json.loads(Path(s["manifest"]).read_text(encoding="utf-8"))["run_config"]["options"]
    assert used["concurrency"] == 2 and used["require_complete"] is True and used["stage"]["image_max_side"] == 768
    assert used["config"] is None and used["stage"]["rubric"] is None and used["judges"]["models"] == []
