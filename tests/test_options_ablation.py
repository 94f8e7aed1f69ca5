"""`kbvqa study image-ablation`'s options (issue 29 part 3): one AblationOptions built from the
defaults, the [study.image-ablation] table of --config and the flags; the generator, the reader and
the judge get the very stage configs in it, the model roles come from those configs, and every step's
manifest and the study result record the options as used."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.evaluate import judge as jd
from kbvqa.pipelines import ablation as abl
from kbvqa.pipelines.ablation import AblationOptions
from kbvqa.runner import manifest_path
from kbvqa.runner.options import OptionsError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()


def _references(folder: Path, n: int = 2) -> Path:
    (folder / "images").mkdir(parents=True)
    rows = []
    for i in range(n):
        Image.new("RGB", (24, 16), (80 * i, 120, 200)).save(folder / "images" / f"{i}.png")
        rows.append({"id": f"r{i}", "images": [], "question": f"q{i}", "answer": "a", "intent": "Advice",
                     "category": "C", "reference": {"text": f"Passage r{i}.\n<image>{{\"candidate_images\": 1}}</image>",
                                                    "images": [{"path": f"images/{i}.png"}]}})
    path = folder / "refs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _text(msg: dict) -> str:
    c = msg["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)


def _server(per_kind: int):
    """Generator, reader and judge on one scripted server: every probe answered and graded correct."""
    def handler(req: dict) -> Reply:
        system, user = _text(req["messages"][0]), _text(req["messages"][-1])
        if system.startswith("You write probe questions"):
            rid = re.search(r"Passage (r\d)", user).group(1)
            return Reply(content=json.dumps({"probes": [
                {"kind": kind, "question": f"Q {rid} {kind} {i}?", "answer": f"A {rid} {kind} {i}"}
                for kind in ("image_critical", "text_answerable") for i in range(per_kind)]}))
        if system.startswith("You answer one question about a passage"):
            q = re.search(r'Question: "Q (r\d) (\w+) (\d)\?"', user)
            return Reply(content=f"A {q.group(1)} {q.group(2)} {q.group(3)}")
        return Reply(content=json.dumps({"label": "correct", "rationale": "scripted"}))
    return FakeLLMServer(handler=handler)


def test_help_shows_the_class_defaults():
    res = runner.invoke(app, ["study", "image-ablation", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "Default vision." in text and "Default answerer." in text and "Default judge." in text
    assert "Default 2." in text and "Default 16." in text and f"Default {AblationOptions().resamples}." in text
    assert "the control. Default 0.7." in text and "different ones. Default 1." in text


def test_flag_over_file_over_default():
    file = {"seed": 3, "concurrency": 4, "generate": {"role": "painter", "per_kind": 3}, "read": {"role": "eye"}}
    opts = AblationOptions.build(file, source="kbvqa.toml", seed=5, generator_role="vision2", llm="http://h")
    assert opts.seed == 5 and opts.concurrency == 4  # flag, file
    assert opts.roles() == {"generator": "vision2", "reader": "eye", "judge": "judge"}
    assert opts.generate.per_kind == 3 and opts.models.llm == "http://h"
    assert opts.resume is True and opts.judge.temperature == 0.0  # class defaults
    # the reader samples by default (the full condition is a reading of its own); the flags set it
    assert (opts.read.temperature, opts.read.sampling_seed) == (0.7, 1)
    opts = AblationOptions.build({"read": {"temperature": 0.3}}, source="kbvqa.toml", reader_seed=7)
    assert (opts.read.temperature, opts.read.sampling_seed) == (0.3, 7)
    assert AblationOptions.build(reader_temperature=0).read.temperature == 0.0
    assert AblationOptions().roles() == {"generator": "vision", "reader": "answerer", "judge": "judge"}


def test_a_bad_flag_and_a_bad_file_value_name_their_source():
    with pytest.raises(OptionsError, match=r"^--probes-per-kind: "):
        AblationOptions.build(probes_per_kind=0)
    with pytest.raises(OptionsError, match=r"^--structured-output: .*got 'sometimes'"):
        AblationOptions.build(structured_output="sometimes")
    with pytest.raises(OptionsError, match=r"^kbvqa\.toml: generate\.per_kind: "):
        AblationOptions.build({"generate": {"per_kind": 0}}, source="kbvqa.toml")
    with pytest.raises(OptionsError, match=r"^--reader-temperature: "):
        AblationOptions.build(reader_temperature=-1)
    with pytest.raises(OptionsError, match=r"^kbvqa\.toml: resample: "):  # misspelt: refused, not ignored
        AblationOptions.build({"resample": 10}, source="kbvqa.toml")


def test_stages_get_the_identical_configs_and_manifests_record_the_options(tmp_path, monkeypatch):
    refs = _references(tmp_path)
    seen: dict[str, list] = {"stages": [], "judge": []}
    real_step, real_judge = abl._run_step, jd.run_judge

    def run_step(stage, role, client, *a, **kw):
        seen["stages"].append((stage.config, role))
        return real_step(stage, role, client, *a, **kw)

    def run_judge(*a, config=None, **kw):
        seen["judge"].append(config)
        return real_judge(*a, config=config, **kw)

    monkeypatch.setattr(abl, "_run_step", run_step)
    monkeypatch.setattr(jd, "run_judge", run_judge)
    with _server(per_kind=1) as srv:
        opts = AblationOptions.build(llm=srv.base_url, model="m", probes_per_kind=1, resamples=50,
                                     reader_role="agent")
        res = abl.image_ablation_study(refs, tmp_path / "out", abl.ablation_models(opts), opts)
    configs = [c for c, _ in seen["stages"]]
    assert configs[0] is opts.generate and configs[1] is opts.read and configs[2] is opts.read
    assert [r for _, r in seen["stages"]] == ["vision", "agent", "agent"]
    assert len(seen["judge"]) == 2 and all(c is opts.judge for c in seen["judge"])
    assert res["options"] == opts.used() and res["bootstrap"]["n_resamples"] == 50
    assert res["counts"]["probes"]["image_critical"]["complete"] == 2
    for journal in abl.JOURNALS.values():
        manifest = json.loads(manifest_path(tmp_path / "out" / journal).read_text(encoding="utf-8"))
        assert manifest["run_config"]["options"] == opts.used(), journal
    other = AblationOptions.build(judge_role="verifier")  # models built for other roles are refused
    with pytest.raises(ValueError, match="build both from the same options"):
        abl.image_ablation_study(refs, tmp_path / "o2", abl.AblationModels(None, None, None, opts.roles()), other)


def test_a_missing_role_is_still_refused_with_its_message(tmp_path):
    with pytest.raises(ValueError, match="needs a generator, a reader and a judge model"):
        abl.ablation_models(AblationOptions.build(config=None))


def test_cli_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another working directory, the cache on, a config file under the flags."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    work = tmp_path / "work"
    _references(work)
    (work / "kbvqa.toml").write_text('[study.image-ablation]\nseed = 3\nresamples = 40\nconcurrency = 2\n'
                                     '[study.image-ablation.generate]\nper_kind = 1\n', encoding="utf-8")
    monkeypatch.chdir(work)
    with _server(per_kind=1) as srv:
        res = runner.invoke(app, ["study", "image-ablation", "-r", "refs.jsonl", "--out", "abl", "--config",
                                  "kbvqa.toml", "--llm", srv.base_url, "--model", "m", "--seed", "9", "--json",
                                  "--no-report"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    used = out["options"]
    assert used["seed"] == 9 and used["resamples"] == 40 and used["concurrency"] == 2  # flag, file, file
    assert used["generate"] == {"role": "vision", "per_kind": 1} and used["config"] == "kbvqa.toml"
    assert out["bootstrap"]["seed"] == 9 and out["probes_per_kind"] == 1
    manifest = json.loads(manifest_path(work / "abl" / "read.jsonl").read_text(encoding="utf-8"))
    assert manifest["run_config"]["options"] == used
    bad = runner.invoke(app, ["study", "image-ablation", "-r", "refs.jsonl", "--out", "abl", "--config",
                              "kbvqa.toml", "--llm", "http://127.0.0.1:9", "--model", "m", "--structured-output", "maybe"])
    assert bad.exit_code == 2 and "--structured-output" in bad.output
