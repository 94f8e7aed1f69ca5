"""`kbvqa answer`'s settings are one AnswerOptions: defaults written once (in the options classes), the
`[answer]` table of --config under the flags, validated once, handed to the stages as they are and
recorded in the manifest as used (issue 29, part 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.kb.store import open_kb
from kbvqa.pipelines.answer import AnswerOptions, answer_options, build_answer_job
from kbvqa.runner.options import OptionsError
from kbvqa.stages.agent.react import AgentConfig
from kbvqa.stages.answer.rerank import RerankConfig

runner = CliRunner()


def _toml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_help_shows_the_class_defaults():
    out = runner.invoke(app, ["answer", "--help"], terminal_width=200).stdout
    assert f"Default {AgentConfig.model_fields['max_turns'].default}." in " ".join(out.split())
    assert "Default 4." in out and "Default extractive." in out  # the answer run's concurrency, the preset


def test_flag_over_file_over_default(tmp_path):
    cfg = _toml(tmp_path / "kbvqa.toml", "[answer]\nconcurrency = 2\n[answer.agent.episode]\nmax_turns = 8\n"
                                          "max_reply_tokens = 512\n")
    from_file = answer_options(cfg, pipeline="agent")
    assert from_file.agent.episode.max_turns == 8 and from_file.agent.episode.max_reply_tokens == 512
    assert from_file.run.concurrency == 2 and from_file.config == cfg
    flagged = answer_options(cfg, pipeline="agent", max_turns=5, concurrency=None)  # None: a flag not given
    assert flagged.agent.episode.max_turns == 5 and flagged.run.concurrency == 2
    plain = answer_options(None, pipeline="agent")
    assert plain.agent.episode.max_turns == AgentConfig.model_fields["max_turns"].default
    assert not plain.given("agent.episode.max_turns") and flagged.given("agent.episode.max_turns")


def test_a_bad_value_names_its_flag_or_its_file_key(tmp_path):
    with pytest.raises(OptionsError, match=r"--max-turns: .*greater than or equal to 1"):
        answer_options(None, pipeline="agent", max_turns=0)
    cfg = _toml(tmp_path / "bad.toml", "[answer.rerank]\nsections = 0\n")
    with pytest.raises(OptionsError, match=r"bad.toml \[answer\]: rerank.sections"):
        answer_options(cfg)
    cfg = _toml(tmp_path / "typo.toml", "[answer.agent.episode]\nmax_turn = 3\n")
    with pytest.raises(OptionsError, match=r"agent.episode.max_turn: Extra inputs"):
        answer_options(cfg)
    with pytest.raises(OptionsError, match="--structured-output"):
        answer_options(None, structured_output="xml")


def test_a_flag_the_preset_does_not_take_is_refused():
    with pytest.raises(OptionsError, match=r"--pipeline direct does not take --k"):
        answer_options(None, pipeline="direct", k=5)
    with pytest.raises(OptionsError, match=r"--pipeline extractive does not take --max-turns"):
        answer_options(None, max_turns=3)
    with pytest.raises(OptionsError, match=r"--web-base-url configure the agent's web backend"):
        answer_options(None, pipeline="agent", web_base_url="http://127.0.0.1:9")
    # a config file may hold every preset's settings: only flags are refused
    assert answer_options(None, pipeline="agent").retrieve.k == 20


def test_derived_defaults_have_one_written_value():
    iba = answer_options(None, pipeline="iba")
    assert iba.rerank.alpha == 0.3  # IBA's own default, written in its PIPELINES entry
    assert answer_options(None, pipeline="iba", alpha=0.7).rerank.alpha == 0.7
    assert answer_options(None, pipeline="echosight").rerank.alpha == RerankConfig.model_fields["alpha"].default
    # the LLM answerer reads what the reranker keeps
    assert answer_options(None, sections=3).generate.sections == 3
    assert answer_options(None).generate.sections == RerankConfig.model_fields["sections"].default


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("opts")
    b = bench_copy(root / "bench")
    res = runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root),
                              "--out", str(root / "idx" / "images")])
    assert res.exit_code == 0, res.output
    return b, root


def test_stages_get_the_options_objects_themselves(bench):
    b, root = bench
    from kbvqa.pipelines.index import load_image_index

    idx, enc = load_image_index(root / "idx" / "images", None)
    opts = answer_options(None, pipeline="extractive", k=7, sections=2)
    job = build_answer_job(kb=open_kb(b.kb), index=idx, encoder=enc, image_root=b.root, options=opts)
    by_name = {s.name: s.config for s in job.stages}
    assert by_name["retrieve-image"] is opts.retrieve and by_name["rerank-sections"] is opts.rerank
    assert by_name["answer-extractive"] is opts.extractive
    assert job.run_config["options"] == opts.used()

    agent = answer_options(None, pipeline="agent", kb_images=b.root, today="2026-12-02", max_turns=3)
    job = build_answer_job(kb=open_kb(b.kb), image_root=b.root, options=agent)
    assert job.stages[0].config is agent.agent.episode
    assert job.run_config["options"]["agent"]["episode"]["max_turns"] == 3


def test_cli_run_records_its_options_as_used(bench, tmp_path, monkeypatch):
    """As a user runs it: relative paths from another folder, the response cache on, a config file."""
    b, root = bench
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _toml(work / "kbvqa.toml", "[answer]\nconcurrency = 2\n[answer.retrieve]\nk = 3\n[answer.rerank]\narticles = 2\n")
    base = Path(tmp_path.parent)  # work is two levels below it
    samples, kb, idx = (Path("..", "..", Path(p).relative_to(base)) for p in (b.samples, b.kb, root / "idx" / "images"))
    res = runner.invoke(app, ["answer", "--samples", str(samples), "--kb", str(kb), "--index", str(idx),
                              "--out", "P.jsonl", "--config", "kbvqa.toml", "--articles", "4", "--limit", "3"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((work / "P.manifest.json").read_text())
    used = manifest["run_config"]["options"]
    assert used["retrieve"]["k"] == 3 and used["rerank"]["articles"] == 4  # the file's, the flag over the file
    assert used["run"] == {"concurrency": 2, "limit": 3, "resume": True, "allow_empty": False}
    assert used["config"] == "kbvqa.toml" and used["pipeline"] == "extractive"
    lines = [json.loads(x) for x in (work / "P.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(len(x.get("retrieved") or []) <= 3 for x in lines)
    assert AnswerOptions.model_validate(used).rerank.articles == 4  # what the manifest says rebuilds the run


def test_only_the_direct_pipeline_runs_without_a_kb(bench):
    from kbvqa.pipelines.answer.direct import NEEDS_ANSWERER
    from kbvqa.pipelines.answer.run import prepare_answer

    b, _root = bench
    with pytest.raises(ValueError, match=r"--pipeline extractive reads a KB: give --kb"):
        prepare_answer(answer_options(None, samples=b.samples))
    with pytest.raises(ValueError, match=NEEDS_ANSWERER.split(":")[0]):  # past the KB check: it wants its model
        prepare_answer(answer_options(None, pipeline="direct", samples=b.samples))


def test_eval_nests_the_answer_and_judge_options_as_built(tmp_path):
    """`kbvqa eval`'s judge half is `kbvqa score judge`'s JudgeOptions, from [score.judge] of the same
    --config under the judge flags; the answer run's call limits apply to the judge too."""
    from kbvqa.pipelines.evaluation import EvalOptions, eval_judge_options

    cfg = _toml(tmp_path / "kbvqa.toml", "[score.judge]\nconcurrency = 3\ngraded_text = \"short\"\n")
    answer = answer_options(cfg, timeout=5.0)
    judge = eval_judge_options(answer)
    assert (judge.concurrency, judge.graded_text, judge.config, judge.models.timeout) == (3, "short", cfg, 5.0)
    direct = eval_judge_options(answer, judge_base_url="http://127.0.0.1:9/v1", judge_model="j", concurrency=7)
    assert direct.config is None and direct.concurrency == 7 and direct.models.model == "j"  # the file names no judge
    opts = EvalOptions(answer=answer, judge=judge, out=tmp_path / "run", metrics=("judge",))
    assert opts.answer is answer and opts.judge is judge
    assert opts.used()["judge"]["concurrency"] == 3 and opts.two_hop == "any"
    with pytest.raises(OptionsError, match="--judge-concurrency"):
        eval_judge_options(answer, concurrency=0)


def test_the_viewer_shows_a_runs_options_as_used(bench, tmp_path):
    from starlette.testclient import TestClient

    from kbvqa.report.viewer.app import create_app
    from kbvqa.cli.view import build_site

    b, root = bench
    res = runner.invoke(app, ["answer", "--samples", str(b.samples), "--kb", str(b.kb), "--index",
                              str(root / "idx" / "images"), "--out", str(tmp_path / "P.jsonl"), "--k", "6",
                              "--limit", "2"])
    assert res.exit_code == 0, res.output
    client = TestClient(create_app(build_site([tmp_path]), warm=False))
    page = client.get("/").text
    links = [x.split('"')[0] for x in page.split('href="/o/')[1:]]
    pages = [client.get("/o/" + link).text.replace("&quot;", "&#34;") for link in links]
    assert any("<th>options</th>" in html and "&#34;k&#34;: 6" in html for html in pages)
