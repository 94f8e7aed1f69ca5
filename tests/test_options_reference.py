"""`kbvqa reference build` runs on one ReferenceOptions: flags over `[reference]` over the class
defaults, validated once, each stage handed its own table from it, and the options recorded in every
stage's manifest and in funnel.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.pipelines.reference import STAGES, reference_context, reference_options, stage_job
from kbvqa.runner.manifest import manifest_path
from kbvqa.runner.options import OptionsError

runner = CliRunner()


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    from kbvqa.demo.bench import build_community

    root = tmp_path_factory.mktemp("refopts")
    b = bench_copy(root / "bench")
    return {"bench": b, "community": build_community(b)}


def trajectories(path: Path, ids: list[str], tools: str | None) -> Path:
    meta = {"tools": tools} if tools else {}
    path.write_text("".join(json.dumps({"id": i, "status": "ok", "trajectory": [], "meta": meta}) + "\n"
                            for i in ids), encoding="utf-8")
    return path


def inputs(tmp_path: Path, tools: str | None = "local") -> dict:
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"id": "a", "question": "q?", "answers": ["x"]}) + "\n", encoding="utf-8")
    return {"samples": samples, "trajectories": trajectories(tmp_path / "t.jsonl", ["a"], tools), "out": tmp_path / "b"}


def test_help_shows_the_class_defaults():
    res = runner.invoke(app, ["reference", "build", "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "Default 8." in text and "Default on." in text and "Default local." in text


def test_flag_over_file_over_default(tmp_path):
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text('[reference]\nfilter_placement = "before_synthesis"\n[reference.candidates]\ntop_k = 3\n'
                   '[reference.fetch]\nconcurrency = 4\n[reference.harvest]\nbackend = "web"\n', encoding="utf-8")
    opts = reference_options(config=cfg, concurrency=2, **inputs(tmp_path))
    assert opts.run.concurrency == 2 and opts.reference.fetch.concurrency == 4  # --concurrency is the run's
    assert opts.reference.candidates.top_k == 3 and opts.reference.urls.top_k == 5 and opts.run.resume is True
    # one home: the placement and the harvest backend reach the stages that read them
    ref = opts.reference
    assert ref.filter.placement == ref.dedup.placement == ref.synthesis.placement == "before_synthesis"
    assert ref.harvest.backend == "web" and ref.entities.backend == "web" and ref.entities.harvest == ref.harvest
    assert reference_options(config=cfg, tools="local", **inputs(tmp_path)).reference.entities.backend == "local"


def test_backend_follows_the_trajectories_unless_set(tmp_path):
    assert reference_options(**inputs(tmp_path, "web")).reference.harvest.backend == "web"
    assert reference_options(**inputs(tmp_path, None)).reference.harvest.backend == "local"
    assert reference_options(tools="local", **inputs(tmp_path, "web")).reference.entities.backend == "local"


def test_bad_values_name_their_source(tmp_path):
    with pytest.raises(OptionsError, match=r"--tools"):
        reference_options(tools="ftp", **inputs(tmp_path))
    with pytest.raises(OptionsError, match=r"--structured-output"):
        reference_options(structured_output="maybe", **inputs(tmp_path))
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text("[reference.candidates]\ntop_k = 0\n", encoding="utf-8")
    with pytest.raises(OptionsError, match=r"kbvqa.toml: reference\.candidates\.top_k"):
        reference_options(config=cfg, **inputs(tmp_path))
    cfg.write_text('[reference.filter]\nplacement = "before_synthesis"\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"reference\.filter: .*filter_placement"):
        reference_options(config=cfg, **inputs(tmp_path))
    with pytest.raises(OptionsError, match=r"--samples, --trajectories, --out must be given"):
        reference_options()


def test_each_stage_gets_its_table_from_the_options(tmp_path):
    opts = reference_options(tools="web", **inputs(tmp_path))
    ctx = reference_context(tmp_path, opts.reference, web_tools={})
    for key, _, _, field in STAGES:
        assert stage_job(key, opts.reference, ctx).stages[0].config is getattr(opts.reference, field)


def test_cli_build_records_the_options_as_used(bench, tmp_path, monkeypatch):
    b = bench["bench"]
    work = tmp_path / "work"
    work.mkdir()
    ids = [json.loads(x)["id"] for x in Path(bench["community"]).read_text(encoding="utf-8").splitlines() if x.strip()]
    trajectories(work / "agent.jsonl", ids, "local")
    (work / "kbvqa.toml").write_text("[reference.candidates]\ntop_k = 4\n", encoding="utf-8")
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(work)
    flags = {"samples": Path(bench["community"]), "trajectories": Path("agent.jsonl"), "out": Path("build"),
             "kb": Path(b.kb), "kb_images": Path(b.root), "config": Path("kbvqa.toml"), "limit": 2,
             "concurrency": 2, "resume": False}
    res = runner.invoke(app, ["reference", "build", "--samples", str(flags["samples"]), "--trajectories", "agent.jsonl",
                              "--out", "build", "--kb", str(b.kb), "--kb-images", str(b.root), "--config", "kbvqa.toml",
                              "--limit", "2", "--concurrency", "2", "--no-resume"])
    assert res.exit_code == 3, res.output  # offline: no item reaches a draft
    expected = reference_options(**flags).used()
    assert expected["reference"]["candidates"]["top_k"] == 4 and expected["run"]["limit"] == 2
    funnel = json.loads(Path("build/funnel.json").read_text(encoding="utf-8"))
    assert funnel["options"] == expected and funnel["intake"]["limited_to"] == 2
    ran = [journal for _, journal, _, _ in STAGES if Path("build", journal).is_file()]
    assert "urls.jsonl" in ran
    for journal in ran:
        manifest = json.loads(manifest_path(Path("build", journal)).read_text(encoding="utf-8"))
        assert manifest["run_config"]["options"] == expected, journal
