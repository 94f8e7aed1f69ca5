"""The offline demo end to end, and the same demo against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from fake_llm_server import FakeLLMServer, Reply
from kbvqa.cli.app import app


def test_demo_offline_chain(tmp_path, monkeypatch, demo_source):
    base, res = demo_source  # the session's demo, run with a relative --out as `make demo` passes (results/demo)
    monkeypatch.chdir(base)
    out = base / res.out
    for rel in ("bench/samples.jsonl", "bench/kb.sqlite", "audit/audited.jsonl", "audit/fixed.jsonl",
                "answers/predictions_original.jsonl", "answers/predictions_fixed.jsonl", "scores.json",
                "report.html", "manifest.json"):
        assert (out / rel).exists(), rel
    audited = [json.loads(l) for l in (out / "audit/audited.jsonl").read_text().splitlines()]
    assert len(audited) == 38 and all(r["status"] == "ok" for r in audited)
    by_id = {r["id"]: r for r in audited}
    # planted flaws: the unsupported husband is dropped, the contradicted tower height is repaired to the KB's 41
    assert by_id["demo_003"]["audit"]["action"] == "drop"
    assert by_id["demo_013"]["answers"] == ["41"] and by_id["demo_013"]["audit"]["answers_before"] == ["45"]
    assert res.flaws_found >= 7
    # every question got a prediction with a status; retrieval finds the right article for every query photo
    preds = [json.loads(l) for l in (out / "answers/predictions_original.jsonl").read_text().splitlines()]
    assert len(preds) == 38 and {p["status"] for p in preds} == {"ok"}
    assert res.scores["retrieval"]["stages"]["initial"]["recall"]["@1"] == 1.0
    assert all(p["producer"]["backend"] == "rules" for p in preds)
    # the extractive baseline answers most sound questions; the fixed split scores higher than the original
    assert res.scores["original"]["strict"]["accuracy"] > 40
    assert res.scores["fixed"]["strict"]["accuracy"] > res.scores["original"]["strict"]["accuracy"]
    # augmentation: a distractor beside the anchor hurts image retrieval, the layout controls do not
    aug = {row["variant"]: row for row in res.scores["augmentation_recall"]}
    assert set(aug) == {"anchor", "intra", "inter", "blank", "double"}
    assert aug["anchor"]["R@1"] == 1.0 and aug["intra"]["R@1"] < 1.0 and aug["inter"]["R@1"] < 1.0
    assert (out / "augment" / "manifest.csv").exists() and list((out / "augment" / "composites").glob("*/*.jpg"))
    # the same study as one command from the demo's augmented samples and image index
    result = CliRunner().invoke(app, ["study", "augmentation-recall", "--samples", str(out / "augment/samples.jsonl"),
                                      "--index", str(out / "bench/image_index"), "--ks", "1,3,5",
                                      "--out", str(tmp_path / "aug_recall.json")])
    assert result.exit_code == 0, result.output
    study = json.loads((tmp_path / "aug_recall.json").read_text())
    assert study["kind"] == "augmentation-recall" and study["rows"] == res.scores["augmentation_recall"]
    # what a study writes, `report build` renders; `score retrieval --json` too, as a Recall@K section
    ret = tmp_path / "ret.json"
    scored = CliRunner().invoke(app, ["score", "retrieval", "--records", str(out / "augment/retrieval.jsonl"),
                                      "-r", str(out / "augment/samples.jsonl"), "--json"])
    assert scored.exit_code == 0, scored.output
    ret.write_text(scored.stdout, encoding="utf-8")
    built = CliRunner().invoke(app, ["report", "build", "--input", str(tmp_path / "aug_recall.json"),
                                     "--scores", str(ret), "--out", str(tmp_path / "rep")])
    assert built.exit_code == 0, built.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "Augmentation: Recall@K per variant" in md and "Retrieval: ret" in md and "unknown" not in md
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_samples"] == 38 and manifest["llm"] is None and manifest["image_encoder"]
    html = (out / "report.html").read_text()
    assert "Planted flaws flagged" in html and "demo_013" in html
    # the manifest links every output it names (issue 25 item 6), and the report prints no Python dict
    for key, path in manifest["interleaved"].items():
        assert path and Path(path).exists(), (key, path)
    assert "{&#x27;" not in html and "{'" not in html
    for png in ("plots/agent-tools-calls.png", "plots/ivr12.png", "plots/curation-funnel.png"):  # seed 001 plotted
        assert (out / png).is_file() and f"<img src='{png}'>" in html, png
    # the terminal summary shows seed 001: the agent, IVR-12 in rules mode, the curation funnel
    from kbvqa.demo.run import summary_lines

    lines = summary_lines(res)
    agent = next(x for x in lines if x.startswith("agent: "))
    assert "15 of 15 questions answered" in agent and "forced answers" in agent and "image tags 15/15 valid" in agent
    assert "with --max-turns 2, 3 of 3 answers forced" in agent
    ivr = [x for x in lines if x.startswith("IVR-12 (")]
    assert len(ivr) == 2 and all("rules mode" in x and "Non-redundancy" in x and "no overall" in x for x in ivr)
    cur = next(x for x in lines if x.startswith("curation: "))
    assert "21 posts read (1 duplicate id dropped), 20 -> text" in cur and "stopped at candidate (needs model 12)" in cur


def test_demo_cli_with_llm_server(tmp_path):
    def handler(request: dict) -> Reply:
        text = json.dumps(request["messages"])
        year = re.search(r"\b(19|20)\d\d\b", text)
        return Reply(content=json.dumps({"answer": year.group(0) if year else "unknown"}))

    with FakeLLMServer(handler=handler) as srv:
        result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--llm", srv.base_url,
                                          "--model", "fake-vlm"])
        assert result.exit_code == 0, result.output
        said = " ".join(result.output.split())
        assert "agent: 15 of 15 questions answered" in said and "IVR-12 (agent, rules mode" in said
        assert "curation: 21 posts read" in said
        assert len(srv.requests) >= 38  # one answerer call per question (original) at least
        sent = srv.requests[0]["json"]
        assert sent["model"] == "fake-vlm"
        assert any(isinstance(m["content"], list) and any(p.get("type") == "image_url" for p in m["content"])
                   for m in sent["messages"])  # the query image travels as a data URL
    preds = [json.loads(l) for l in (tmp_path / "d/answers/predictions_original.jsonl").read_text().splitlines()]
    assert {p["producer"]["model"] for p in preds} == {"fake-vlm"}
    manifest = json.loads((tmp_path / "d/manifest.json").read_text())
    assert manifest["llm"]["model"] == "fake-vlm"


def test_demo_interleaved_outputs_render_in_report_build(tmp_path, demo_copy):
    """The demo's IVR-12 summaries and comparison (rules mode) are accepted by `kbvqa report build`."""
    _, res = demo_copy(tmp_path / "d")
    folder = tmp_path / "d" / "interleaved"
    assert json.loads((folder / "agent.ivr12.summary.json").read_text())["kind"] == "ivr12"
    for source in ("agent", "references"):  # every answer judged, its embedded images found
        lines = [json.loads(x) for x in (folder / f"{source}.ivr12.jsonl").read_text().splitlines()]
        assert len(lines) == 15 and {x["status"] for x in lines} == {"ok"}, source
        assert all(Path(e["image"]).is_file() for x in lines for e in x["embedded"])
    funnel = json.loads((folder / "reference_build" / "funnel.json").read_text())
    assert funnel["stages"][0]["in"] == 15  # every community item entered reference construction
    result = CliRunner().invoke(app, ["report", "build", str(folder)])
    assert result.exit_code == 0, result.output
    html = (folder / "index.html").read_text(encoding="utf-8")
    assert "IVR-12: references vs model outputs" in html and "Visual quality" in html
    assert "Interleaved answers: IVR-12" in res.report.read_text(encoding="utf-8")


def test_demo_out_never_deletes_what_the_demo_did_not_write(tmp_path):
    import json

    import pytest

    from kbvqa.demo.run import _MARKER, _clear_previous_demo

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(ValueError, match="did not write.*thesis.tex"):
        _clear_previous_demo(foreign)
    assert (foreign / "thesis.tex").read_text() == "precious"

    done = tmp_path / "done"  # a finished demo, plus a file the user added afterwards
    (done / "bench").mkdir(parents=True)
    (done / "report.html").write_text("r")
    (done / _MARKER).write_text(json.dumps({"complete": True, "wrote": ["bench", "report.html"]}))
    (done / "notes.md").write_text("mine")
    with pytest.raises(ValueError, match="notes.md"):
        _clear_previous_demo(done)
    assert sorted(p.name for p in done.iterdir()) == ["notes.md"]

    crashed = tmp_path / "crashed"  # a demo that died midway: it started in an empty folder
    (crashed / "bench").mkdir(parents=True)
    (crashed / _MARKER).write_text(json.dumps({"complete": False, "wrote": []}))
    _clear_previous_demo(crashed)
    assert list(crashed.iterdir()) == []
