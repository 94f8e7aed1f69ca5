"""`kbvqa audit run`'s one options object (AuditOptions): defaults written once and shown in --help,
flag > config file > default, errors that name the flag or the file and key, the stages handed
their own tables of it unchanged, the manifest recording it as used, and one run as a user runs it."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.cli.options import default_of
from kbvqa.data.schema import Article, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import (AuditConfig, AuditOptions, audit_options, audit_roles, audit_with,
                                   build_audit_stages)
from kbvqa.runner.options import OptionsError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, scripted_auditor  # noqa: E402

URL = "https://en.wikipedia.org/wiki/McLaren_F1"
SECTIONS = [("McLaren F1", "The McLaren F1 is a sports car designed by Gordon Murray."),
            ("Ownership", "The car is owned by the McLaren Group, based in Woking.")]
KB = InMemoryKB([Article(url=URL, title="McLaren F1",
                         sections=[Section(index=i, title=t, text=x) for i, (t, x) in enumerate(SECTIONS)])])


def _samples(path: Path) -> Path:
    rows = [Sample(id="a", question="Who designed this car?", answers=["Gordon Murray"], entity={"url": URL}),
            Sample(id="b", question="Who owns this car?", answers=["McLaren Group"], entity={"url": URL})]
    path.write_text("".join(json.dumps(s.dump()) + "\n" for s in rows), encoding="utf-8")
    return path


def _wiki(path: Path) -> Path:
    path.write_text(json.dumps({URL: {"title": "McLaren F1", "section_titles": [t for t, _ in SECTIONS],
                                      "section_texts": [x for _, x in SECTIONS], "image_urls": []}}), encoding="utf-8")
    return path


def test_help_shows_the_class_defaults():
    res = CliRunner().invoke(app, ["audit", "run", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    concurrency = default_of(AuditOptions, "run.concurrency")
    assert concurrency == 8  # the audit's own default, written once (AuditRun)
    line = next(x for x in res.output.splitlines() if "--concurrency" in x)
    assert f"Default {concurrency}." in line
    assert "Default on." in next(x for x in res.output.splitlines() if "--resume" in x)


def test_flag_over_file_over_default(tmp_path):
    toml = tmp_path / "audit.toml"
    toml.write_text('[audit]\nllm_concurrency = 2\n[audit.run]\nconcurrency = 3\nlimit = 5\n'
                    '[audit.verify]\nconsensus = "any"\n', encoding="utf-8")
    opts = audit_options(toml, concurrency=6, limit=None, resume=None)
    assert opts.run.concurrency == 6  # flag over the file
    assert opts.run.limit == 5 and opts.llm_concurrency == 2 and opts.verify.consensus == "any"  # the file
    assert opts.run.resume is True and opts.derive.on_unsupported == "drop"  # class defaults
    assert opts.config == toml and opts.given("run.limit") and not opts.given("run.resume")
    # the older top-level layout ([verify], [derive] ... beside [models.*]) is still read
    old = tmp_path / "old.toml"
    old.write_text('[verify]\nconsensus = "majority"\n[[models.verifier]]\nmodel = "a"\n'
                   'base_url = "http://127.0.0.1:9/v1"\n', encoding="utf-8")
    assert audit_options(old).verify.consensus == "majority"
    assert AuditConfig.from_toml(old).verify.consensus == "majority"


def test_one_llm_concurrency_home(tmp_path):
    """--llm-concurrency, when not given, is --concurrency: the shared client's limit has one home."""
    roles = audit_roles(audit_options(llm="http://127.0.0.1:9", model="m", concurrency=5), env={})
    own = audit_roles(audit_options(llm="http://127.0.0.1:9", model="m", concurrency=5, llm_concurrency=2), env={})
    assert roles["verifier"].concurrency == 5 and own["verifier"].concurrency == 2


def test_bad_values_name_their_source(tmp_path):
    with pytest.raises(OptionsError, match="--concurrency"):
        audit_options(concurrency=0)
    with pytest.raises(OptionsError, match="--structured-output"):
        audit_options(structured_output="yaml")
    toml = tmp_path / "audit.toml"
    toml.write_text('[audit.verify]\nconsensus = "most"\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"audit\.toml \[audit\]: verify\.consensus"):
        audit_options(toml)
    toml.write_text('[derive]\non_unsuported = "keep"\n', encoding="utf-8")  # misspelt, older layout
    with pytest.raises(OptionsError, match=r"audit\.toml: derive\.on_unsuported"):
        audit_options(toml)
    res = CliRunner().invoke(app, ["audit", "run", str(_samples(tmp_path / "in.jsonl")), "--kb",
                                   str(_wiki(tmp_path / "wiki.json")), "--config", str(toml)])
    assert res.exit_code == 2 and "derive.on_unsuported" in res.output and "Traceback" not in res.output


def test_stages_get_their_own_tables_unchanged_and_the_manifest_records_the_options(tmp_path):
    opts = audit_options(input=_samples(tmp_path / "in.jsonl"), out=tmp_path / "o.jsonl", concurrency=2,
                         consensus="majority")
    stages = build_audit_stages(opts)
    assert [s.config for s in stages] == [opts.verify, opts.derive, opts.posedness, opts.leakage]
    assert all(s.config is getattr(opts, s.name) for s in stages)
    summary = audit_with(opts, KB)
    assert summary["run"]["ok"] == 2
    manifest = json.loads(Path(summary["run"]["manifest"]).read_text())
    assert manifest["run_config"]["options"] == json.loads(json.dumps(opts.used()))
    assert manifest["run_config"]["options"]["verify"]["consensus"] == "majority"
    assert manifest["run_config"]["audit"]["verify"]["consensus"] == "majority"


def _handler(req):
    return scripted_auditor(req)


def test_cli_run_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another working directory, the response cache on, a config file whose
    settings the flags override; the manifest records the options as used."""
    data = tmp_path / "data"
    data.mkdir()
    _samples(data / "in.jsonl")
    _wiki(data / "wiki.json")
    (data / "audit.toml").write_text('[audit.run]\nconcurrency = 1\n[audit.models]\nmodel = "from-file"\n'
                                     '[audit.verify]\nrules_settle = false\n', encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    with FakeLLMServer(handler=_handler) as srv:
        argv = ["audit", "run", "../data/in.jsonl", "--kb", "../data/wiki.json", "--config", "../data/audit.toml",
                "--out", "audited.jsonl", "--json", "--llm", srv.base_url, "--model", "tiny", "--concurrency", "2"]
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, res.output
        calls = srv.count
        assert calls >= 2 and {r["json"]["model"] for r in srv.requests} == {"tiny"}  # the flag, not the file
        again = CliRunner().invoke(app, [*argv, "--no-resume"])
        assert again.exit_code == 0, again.output
        assert srv.count == calls  # every call answered from the cache
    rows = [json.loads(x) for x in (work / "audited.jsonl").read_text().splitlines()]
    assert {r["id"]: r["audit"]["answer_support"] for r in rows} == {"a": "supported", "b": "supported"}
    assert rows[0]["audit"]["stages"]["verify"]["verifiers"][1]["model"] == "tiny"  # asked: rules_settle off
    run_config = json.loads((work / "audited.manifest.json").read_text())["run_config"]
    options = run_config["options"]
    # the input file the manifest names is absolute (the viewer reads a relative one against the manifest's folder)
    assert run_config["input"] == str((work.parent / "data" / "in.jsonl").resolve())
    assert options["run"]["concurrency"] == 2 and options["models"]["model"] == "tiny"
    assert options["input"] == "../data/in.jsonl" and options["config"] == "../data/audit.toml"
    assert options["verify"]["rules_settle"] is False and options["llm_concurrency"] is None
