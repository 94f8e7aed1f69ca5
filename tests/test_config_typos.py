"""Every misspelt table or key of a kbvqa.toml is refused, naming it and the closest known name (issue 34
item 3): a table no job reads would otherwise be a setting silently not applied (`[anwser.agent.episode]
max_turns = 2` ran with 12 turns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app

runner = CliRunner()


@pytest.fixture()
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", "off")
    Path("refs.jsonl").write_text(json.dumps({"id": "q0", "question": "Which city?", "answers": [{"text": "Rome"}]})
                                  + "\n", encoding="utf-8")
    Path("preds.jsonl").write_text(json.dumps({"data_id": "q0", "prediction": "Rome"}) + "\n", encoding="utf-8")
    return tmp_path


JUDGE = ["score", "judge", "-p", "preds.jsonl", "-r", "refs.jsonl", "--config", "kbvqa.toml"]


@pytest.mark.parametrize("toml,named,suggested", [
    ('[score.jugde]\nconcurrency = 2\n[models.judge]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n',
     "[score.jugde]", "[score.judge]"),
    ('[scoer.judge]\nconcurrency = 2\n', "[scoer]", "[score]"),
    ('judge_model = "m"\n', "unknown key judge_model", "[score.judge]"),
    ('[modles.judge]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n', "[modles]", "[models]"),
])
def test_score_judge_refuses_a_misspelt_table(work, toml, named, suggested):
    Path("kbvqa.toml").write_text(toml, encoding="utf-8")
    res = runner.invoke(app, JUDGE)
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert named in line and suggested in line and "kbvqa.toml" in line, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_answer_refuses_a_misspelt_job_table(work):
    Path("kbvqa.toml").write_text("[anwser.agent.episode]\nmax_turns = 2\n", encoding="utf-8")
    Path("img").mkdir()
    res = runner.invoke(app, ["answer", "--samples", "refs.jsonl", "--kb", "none.db", "--pipeline", "agent",
                              "--kb-images", "img", "--out", "p.jsonl", "--config", "kbvqa.toml"])
    assert res.exit_code == 2, res.output
    assert "unknown table [anwser] in kbvqa.toml; did you mean [answer]?" in " ".join(res.output.split())


def test_the_model_roles_loader_names_the_typo(work):
    from kbvqa.models.config import ConfigError, load_model_config

    def check(text: str) -> str:
        p = Path("t.toml")
        p.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as exc:
            load_model_config(p, env={})
        return str(exc.value)

    assert "unknown table [modles] in t.toml; did you mean [models]?" in check('[modles.judge]\nmodel = "m"\n')
    assert "did you mean [cache]?" in check('[cahce]\npath = "c.sqlite"\n')


def test_shared_namespaces_and_the_audit_layout():
    from kbvqa.runner.config import check_tables

    def msg(doc: dict) -> str | None:
        try:
            check_tables(doc, "k.toml")
        except ValueError as exc:
            return str(exc)
        return None

    assert msg({"study": {"agent_failures": {}}}) == ("unknown table [study.agent_failures] in k.toml; did you mean "
                                                      "[study.agent-failures]?")
    assert "did you mean [index.images]?" in msg({"index": {"image": {}}})
    assert msg({"concurency": 3}) == "unknown key concurency in k.toml; did you mean concurrency?"
    # the audit's older layout: its stage tables and settings at the top — only without [audit]
    assert msg({"verify": {}, "derive": {}, "stages": ["verify"], "concurrency": 2, "models": {}}) is None
    assert "unknown table [verify]" in msg({"audit": {}, "verify": {}})


def test_audit_top_level_names_follow_audit_options():
    """The audit's older layout accepts every setting AuditOptions has (and the run keys it lifts)."""
    from kbvqa.data.config_tables import AUDIT_TOP_LEVEL
    from kbvqa.pipelines.audit import AuditOptions
    from kbvqa.runner.options import RunOptions

    missing = ((set(AuditOptions.model_fields) - {"models"}) | set(RunOptions.model_fields)) - set(AUDIT_TOP_LEVEL)
    assert not missing, f"add {sorted(missing)} to kbvqa.data.config_tables.AUDIT_TOP_LEVEL"


def test_a_misspelt_key_inside_a_table_names_the_closest_one(work):
    """Inside a job's own table (its options class), a stage table (load_table) and a model role."""
    from kbvqa.models.config import ConfigError, load_model_config
    from kbvqa.pipelines.answer import answer_options
    from kbvqa.pipelines.reference import load_reference_config
    from kbvqa.runner.options import OptionsError

    p = Path("kbvqa.toml")
    p.write_text("[answer]\nconcurency = 3\n[answer.agent.episode]\nmax_turn = 2\n", encoding="utf-8")
    with pytest.raises(OptionsError) as exc:
        answer_options(p, pipeline="agent")
    assert "agent.episode.max_turn: Extra inputs are not permitted (did you mean max_turns?)" in str(exc.value)
    assert "concurency: Extra inputs are not permitted (did you mean concurrency?)" in str(exc.value)  # a run key
    p.write_text("[reference.candidates]\ntopk = 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"reference\.candidates\.topk: .* \(did you mean top_k\?\)"):
        load_reference_config(p)
    p.write_text('[models.jduge]\nmodel = "m"\n[models.judge]\nmodle = "m"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"models\.jduge: unknown role \(did you mean \[models\.judge\]\?"):
        load_model_config(p, env={})
    p.write_text('[models.judge]\nmodle = "m"\nbase_url = "http://127.0.0.1:9/v1"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"models\.judge\.modle: .* \(did you mean model\?\)"):
        load_model_config(p, env={})


def test_every_table_a_job_reads_is_known_and_documented():
    """A job's table that check_tables did not know would be refused in every file: each section the
    sources read (read_table/load_table/SECTION) passes, and docs/reference.md names each top-level one."""
    import re

    from kbvqa.runner.config import CONFIG_TABLES, check_tables

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"""(?:read_table\([^,]+,\s*|load_table\([^,]+,\s*|_options\([^,]+,\s*|SECTION(?::\s*ClassVar\[str\])?\s*=\s*)"([a-z][\w.-]*)\"""")
    sections = {m.group(1) for f in (root / "src" / "kbvqa").rglob("*.py") for m in pattern.finditer(f.read_text())}
    assert {"answer", "score.judge", "study.agent-failures", "kb.import", "tools.web", "index.text"} <= sections
    for section in sections:
        doc: dict = {}
        node = doc
        for part in section.split("."):
            node = node.setdefault(part, {})
        check_tables(doc, "k.toml")  # raises if unknown
    text = (root / "docs" / "reference.md").read_text(encoding="utf-8")
    assert all(f"[{t}" in text for t in CONFIG_TABLES)
