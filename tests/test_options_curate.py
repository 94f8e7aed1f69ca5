"""`kbvqa curate run` runs on one CurateOptions: flags over `[curate]` over the class defaults,
validated once, each stage handed its own table from it, and the options recorded in every stage's
manifest and in funnel.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.pipelines.curate import STAGES, curate_context, curate_options, journal_path, stage_job
from kbvqa.runner.manifest import manifest_path, redact
from kbvqa.runner.options import OptionsError

runner = CliRunner()

#: every model stage off: the run goes to items offline
OFFLINE = "".join(f"[curate.{k}]\nenabled = false\n" for k in (
    "candidate", "text_only", "consistency", "aesthetic", "interleaved", "rubric", "plausibility", "standardize",
    "rewrite", "difficulty", "classify", "translate", "assign"))


def posts(folder: Path, n: int = 3) -> Path:
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.new("RGB", (256, 256), (40 * i, 90, 200 - 30 * i)).save(folder / "img" / f"{i}.png")
        rows.append({"id": f"p{i}", "text": f"What is this object number {i} on my desk, any idea?",
                     "answer": f"thing {i}", "images": [f"img/{i}.png"], "category": "Collectibles",
                     "intent": "Identification", "language": "en"})
    f = folder / "posts.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return f


def test_help_shows_the_class_defaults():
    res = runner.invoke(app, ["curate", "run", "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "Default 8." in text and "Default on." in text and "Default |." in text and "Default off." in text


def test_flag_over_file_over_default(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[curate.text]\nmin_words = 2\n[curate.classify]\ncategories = ["A", "B"]\n', encoding="utf-8")
    opts = curate_options(config=cfg, posts=tmp_path / "p.jsonl", out=tmp_path / "r", concurrency=3, sep=";")
    assert opts.run.concurrency == 3 and opts.sep == ";" and opts.run.resume is True and opts.skip_invalid is False
    assert opts.curate.text.min_words == 2 and opts.curate.assign.categories == ["A", "B"]  # assign shares the cells
    assert opts.given("curate.text.min_words") and not opts.given("curate.rubric")
    assert curate_options(posts=tmp_path / "p.jsonl", out=tmp_path / "r").run.concurrency == 8


def test_bad_values_name_their_source(tmp_path):
    base = {"posts": tmp_path / "p.jsonl", "out": tmp_path / "r"}
    with pytest.raises(OptionsError, match=r"--max-retries"):
        curate_options(max_retries=-1, **base)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[curate.text]\nmin_charz = 3\n", encoding="utf-8")
    with pytest.raises(OptionsError, match=r"c.toml: curate\.text\.min_charz"):
        curate_options(config=cfg, **base)
    with pytest.raises(OptionsError, match=r"--posts, --out must be given"):
        curate_options()


def test_each_stage_gets_its_table_from_the_options(tmp_path):
    opts = curate_options(posts=tmp_path / "p.jsonl", out=tmp_path / "r")
    ctx = curate_context({})
    for key, _, _ in STAGES:
        assert stage_job(key, opts.curate, ctx).stages[0].config is getattr(opts.curate, key)


def test_cli_run_records_the_options_as_used(tmp_path, monkeypatch):
    work = tmp_path / "work"
    data = work / "data"
    data.mkdir(parents=True)
    posts(data)
    (work / "c.toml").write_text(OFFLINE + "[curate.balance]\ntarget = 5\n", encoding="utf-8")
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(work)
    res = runner.invoke(app, ["curate", "run", "data/posts.jsonl", "--out", "run", "--config", "c.toml",
                              "--concurrency", "2", "--limit", "2", "--json"])
    assert res.exit_code == 0, res.output
    expected = curate_options(posts=Path("data/posts.jsonl"), out=Path("run"), config=Path("c.toml"), concurrency=2,
                              limit=2).used()
    assert expected["curate"]["balance"]["target"] == 5 and expected["run"]["concurrency"] == 2
    funnel = json.loads(Path("run/funnel.json").read_text(encoding="utf-8"))
    assert funnel["options"] == expected and funnel["intake"]["read"] == 2 and funnel["accounted"] is True
    ran = [journal_path(Path("run"), key) for key, _, _ in STAGES if journal_path(Path("run"), key).is_file()]
    assert len(ran) > 10, ran
    recorded = json.loads(json.dumps(redact(expected)))  # the manifest masks key-like names (block_keywords)
    for journal in ran:
        manifest = json.loads(manifest_path(journal).read_text(encoding="utf-8"))
        assert manifest["run_config"]["options"] == recorded, journal
