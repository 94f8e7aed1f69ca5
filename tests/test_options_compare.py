"""`kbvqa data compare` takes one options object (CompareOptions): --help shows the class defaults, a flag
wins over `[data.compare]` of --config, which wins over the default; a bad value names its flag or file key;
the hops judge stage runs with `opts.hops` itself; each journal's manifest and compare.json record
`opts.used()`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.pipelines.curate import hops as hp
from kbvqa.pipelines.curate.hops import CompareOptions
from kbvqa.runner.options import OptionsError, read_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

runner = CliRunner()


def _bench(folder: Path) -> Path:
    path = folder / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "k1", "question": "Who is this?", "answers": [{"text": "Grace Hopper"}], "images": ["h.jpg"]},
        {"id": "k2", "question": "Which river flows past the city where this was built?",
         "answers": [{"text": "Seine"}], "images": ["e.jpg"]}]), encoding="utf-8")
    return path


def _hops(req: dict):
    return ok(json.dumps({"hops": 3 if "river" in req["messages"][-1]["content"] else 1}))


def _build(config: Path | None = None, **flags) -> CompareOptions:
    return CompareOptions.build(read_table(config, CompareOptions.SECTION),
                                source=None if config is None else str(config), **flags)


def test_help_shows_the_class_defaults():
    out = " ".join(runner.invoke(app, ["data", "compare", "--help"], terminal_width=200).output.split())
    assert "Judge requests in flight. Default 8." in out
    assert "The role that estimates reasoning hops. Default judge." in out
    assert "ask again only failed and invalid ones. Default on." in out


def test_flag_over_file_over_default(tmp_path):
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text('[data.compare]\nconcurrency = 3\nhops_sample = 50\n[data.compare.hops]\nrole = "verifier"\n'
                   '[data.compare.models]\ntimeout = 20\n', encoding="utf-8")
    default = _build()
    assert (default.concurrency, default.hops.role, default.hops_sample, default.resume) == (8, "judge", None, True)
    filed = _build(cfg)
    assert (filed.concurrency, filed.hops.role, filed.hops_sample) == (3, "verifier", 50)
    assert filed.models.limits() == {"timeout": 20.0}
    flagged = _build(cfg, concurrency=2, judge_role="checker", resume=False, timeout=5.0, llm="http://x/v1",
                     model="m")
    assert (flagged.concurrency, flagged.hops.role, flagged.resume, flagged.hops_sample) == (2, "checker", False, 50)
    assert flagged.models.timeout == 5.0 and flagged.models.llm == "http://x/v1"


def test_a_bad_value_names_its_flag_or_file_key(tmp_path):
    with pytest.raises(OptionsError, match=r"^--concurrency: .*greater than or equal to 1"):
        _build(concurrency=0)
    with pytest.raises(OptionsError, match=r"^--hops-sample: "):
        _build(hops_sample=0)
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[data.compare.hops]\nrol = "judge"\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"bad\.toml: hops\.rol: Extra inputs are not permitted"):
        _build(cfg)
    cfg.write_text('[data.compare]\nconcurrency = 0\n', encoding="utf-8")
    res = runner.invoke(app, ["data", "compare", str(_bench(tmp_path)), "--config", str(cfg)])
    assert res.exit_code == 2 and "bad.toml: concurrency: Input should be greater than or equal to 1" in res.output


def test_the_stage_gets_the_options_object_and_the_manifest_records_it(tmp_path, monkeypatch):
    from kbvqa.data.formats import read_samples
    from kbvqa.models.client import OpenAIChatClient

    seen = []

    class Spy(hp.HopsJudge):
        def __init__(self, config=None):
            seen.append(config)
            super().__init__(config)

    monkeypatch.setattr(hp, "HopsJudge", Spy)
    with FakeLLMServer(handler=_hops) as srv:
        opts = _build(judge_role="checker", concurrency=2)
        roles = {"checker": OpenAIChatClient(srv.base_url, "hx", max_retries=0)}
        res = hp.estimate_hops(hp.hop_records(read_samples(_bench(tmp_path))), tmp_path / "b.hops.jsonl", roles,
                               opts)
    assert seen == [opts.hops] and seen[0] is opts.hops
    assert (res["mean"], res["judged"], res["judge"]["role"]) == (2.0, 2, "checker")
    manifest = json.loads((tmp_path / "b.hops.manifest.json").read_text(encoding="utf-8"))
    assert manifest["run_config"]["options"] == opts.used()
    with pytest.raises(TypeError, match="not both"):
        hp.estimate_hops([], tmp_path / "x.jsonl", roles, opts, concurrency=3)


def test_data_compare_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another folder, the cache on, the judge and the options from one kbvqa.toml;
    a flag wins over the file, compare.json and the journal's manifest show the options as used, and a
    second run resumes from the journal."""
    work = tmp_path / "work"
    work.mkdir()
    _bench(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(handler=_hops) as srv:
        (work / "kbvqa.toml").write_text(
            f'[models.checker]\nbackend = "openai"\nmodel = "hop-x"\nbase_url = "{srv.base_url}"\n'
            '[data.compare]\nconcurrency = 3\n[data.compare.hops]\nrole = "checker"\n', encoding="utf-8")
        args = ["data", "compare", "work/bench.jsonl", "--config", "work/kbvqa.toml", "--out", "work/cmp", "--json"]
        res = runner.invoke(app, args + ["--concurrency", "2"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        hops = doc["benchmarks"][0]["hops"]
        assert (hops["mean"], hops["judged"], hops["judge"]["model"]) == (2.0, 2, "hop-x")
        assert doc["options"]["concurrency"] == 2 and doc["options"]["hops"]["role"] == "checker"
        assert doc["options"]["config"] == "work/kbvqa.toml"
        saved = json.loads((work / "cmp" / "compare.json").read_text(encoding="utf-8"))
        assert saved == doc
        manifest = json.loads((work / "cmp" / "bench.hops.manifest.json").read_text(encoding="utf-8"))
        assert manifest["run_config"]["options"] == doc["options"]
        again = runner.invoke(app, args)  # resumed: nothing asked again
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["benchmarks"][0]["hops"]["mean"] == 2.0
        assert srv.count == 2
