"""What a newcomer following the README on the demo's outputs runs into (issue 34 item 11): a misspelt
`--kb-images` or a `--kb` the direct pipeline never reads is refused in one line; `--index` takes the
index's stem or its folder; `study retrieval-2x2` given the wrong kind of file says what to run; and
`reference build` ends with a short summary, its whole funnel behind `--json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_copy) -> Path:
    return demo_copy(tmp_path_factory.mktemp("newcomer") / "demo")[0]


def _answer(demo: Path, *extra: str) -> object:
    return runner.invoke(app, ["answer", "--samples", str(demo / "bench" / "community.jsonl"), *extra])


def test_a_misspelt_kb_images_folder_and_kb_with_direct_are_refused_in_one_line(demo, tmp_path):
    out = tmp_path / "agent.jsonl"
    res = _answer(demo, "--pipeline", "agent", "--kb", str(demo / "bench" / "kb.sqlite"), "--index",
                  str(demo / "bench" / "image_index"), "--kb-images", str(demo / "bench" / "imagez"), "--out", str(out))
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: --kb-images: {demo / 'bench' / 'imagez'}: no such folder (the folder the KB's image paths start from)"]
    res = _answer(demo, "--pipeline", "direct", "--kb", str(demo / "bench" / "kb.sqlite"), "--llm",
                  "http://127.0.0.1:9/v1", "--model", "m", "--out", str(out))
    assert res.exit_code == 2 and "--pipeline direct answers without retrieval and never reads a KB: drop --kb" \
        in res.output
    assert not out.exists()
    res = runner.invoke(app, ["reference", "build", "--samples", str(demo / "bench" / "community.jsonl"),
                              "--trajectories", str(demo / "agent" / "predictions.jsonl"), "--out", str(tmp_path / "b"),
                              "--kb", str(demo / "bench" / "kb.sqlite"), "--kb-images", str(demo / "benchh")])
    assert res.exit_code == 2 and "--kb-images" in res.output and not (tmp_path / "b").exists()


def test_index_takes_the_stem_or_the_folder_holding_one_index(demo, tmp_path):
    common = ["--pipeline", "extractive", "--kb", str(demo / "bench" / "kb.sqlite"), "--limit", "2"]
    by_folder = _answer(demo, *common, "--index", str(demo / "bench"), "--out", str(tmp_path / "a.jsonl"), "--json")
    by_stem = _answer(demo, *common, "--index", str(demo / "bench" / "image_index"), "--out", str(tmp_path / "b.jsonl"),
                      "--json")
    assert by_folder.exit_code == 0 and by_stem.exit_code == 0, by_folder.output + by_stem.output
    assert json.loads(by_folder.stdout)["ok"] == json.loads(by_stem.stdout)["ok"] == 2
    res = _answer(demo, *common, "--index", str(demo / "bench" / "images"), "--out", str(tmp_path / "c.jsonl"))
    assert res.exit_code == 2 and "is a folder: name the index by its stem" in res.output
    assert "image indexes in this folder: none" in res.output


def test_retrieval_2x2_on_predictions_says_to_run_score_judge_first(demo):
    preds, refs = demo / "agent" / "predictions.jsonl", demo / "bench" / "community.jsonl"
    res = runner.invoke(app, ["study", "retrieval-2x2", "--with", str(preds), "--without", str(demo / "agent" /
                              "budget2.jsonl"), "-r", str(refs), "--scorer", "judge-verdicts"])
    assert res.exit_code == 2
    assert "these are predictions, not judge verdicts; run `kbvqa score judge" in res.output
    assert "every verdict of one run invalid or error" not in res.output
    verdicts = demo / "agent.judge.jsonl"
    verdicts.write_text(json.dumps({"id": "community_000", "status": "ok", "verdict": {"label": "correct"}}) + "\n",
                        encoding="utf-8")
    res = runner.invoke(app, ["study", "retrieval-2x2", "--with", str(verdicts), "--without", str(preds), "-r",
                              str(refs), "--scorer", "infoseek-strict"])
    assert res.exit_code == 2 and "these are judge verdicts; score them with --scorer judge-verdicts" in res.output


def test_reference_build_ends_with_a_short_summary_and_json_on_request(demo, tmp_path):
    args = ["reference", "build", "--samples", str(demo / "bench" / "community.jsonl"), "--trajectories",
            str(demo / "agent" / "predictions.jsonl"), "--kb", str(demo / "bench" / "kb.sqlite"), "--kb-images",
            str(demo / "bench"), "--limit", "2"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "b1")])
    assert res.exit_code == 3, res.output  # offline: no item reaches a draft
    text = res.stdout
    assert "candidates" in text and "needs model 2" in text and "drafts: 0" in text
    assert "{" not in text and len(text) < 2000  # no JSON dump (the whole funnel is 5 kB)
    notes = [line for line in text.splitlines() if line.startswith("note: ")]
    assert len(notes) == len(set(notes)) >= 1 and all(len(line) <= 80 for line in text.splitlines())
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "b2"), "--json"])
    funnel = json.loads(res.stdout)
    assert [s["stage"] for s in funnel["stages"]][:3] == ["urls", "harvest", "candidates"]
    assert funnel == json.loads((tmp_path / "b2" / "funnel.json").read_text(encoding="utf-8"))
