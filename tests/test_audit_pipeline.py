"""audit_file end to end through the runner, the summary, the CLI, and a slice of the real ARA data."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.data.schema import Article, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import AuditConfig, audit_file, audit_summary, build_audit_stages

ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara"
URL = "https://en.wikipedia.org/wiki/McLaren_F1"
ARTICLE = Article(url=URL, title="McLaren F1", sections=[
    Section(index=0, title="McLaren F1", text="The McLaren F1 was designed by Gordon Murray."),
    Section(index=1, title="Specs", text="It weighs 1,301 kg."),
])


def _samples():
    return [
        Sample(id="a", question="Who designed this car?", answers=["Gordon Murray"], entity={"url": URL},
               answer_type="String"),
        Sample(id="b", question="How many kilogram does this vehicle weigh?", answers=["1302"],
               entity={"url": URL}, answer_type="Numerical"),
        Sample(id="c", question="Who owns this car?", answers=["Ron Dennis"], entity={"url": URL},
               answer_type="String"),
        Sample(id="d", question="Who built it?", answers=["X"], entity={"url": "https://en.wikipedia.org/wiki/Gone"}),
    ]


def _write_jsonl(path: Path) -> Path:
    path.write_text("".join(json.dumps(s.dump()) + "\n" for s in _samples()), encoding="utf-8")
    return path


def test_build_stages_and_toml_config(tmp_path):
    assert [s.name for s in build_audit_stages()] == ["verify", "derive", "posedness", "leakage"]
    toml = tmp_path / "audit.toml"
    toml.write_text('[verify]\nconsensus = "majority"\n[derive]\non_unsupported = "keep"\n', encoding="utf-8")
    cfg = AuditConfig.from_toml(toml)
    assert cfg.verify.consensus == "majority" and cfg.derive.on_unsupported == "keep"
    with pytest.raises(ValueError):
        build_audit_stages(AuditConfig(stages=["verify", "bogus"]))


def test_audit_file_end_to_end(tmp_path):
    inp = _write_jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "out.jsonl"
    summary = audit_file(inp, InMemoryKB([ARTICLE]), out, fmt="kbvqa", concurrency=2)
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"a", "b", "c", "d"}  # none dropped from the output
    assert rows["a"]["audit"]["answer_support"] == "supported"
    assert rows["b"]["answers"] == ["1,301"] and rows["b"]["audit"]["action"] == "repair"
    assert rows["c"]["audit"]["action"] == "drop"
    assert rows["d"]["audit"]["stages"]["derive"]["reason"] == "missing_kb"
    assert summary["answer_support"] == {"supported": 1, "mismatched": 1, "unsupported": 2}
    assert summary["by_question_type"]["Numerical"]["answer_support"] == {"mismatched": 1}
    written = json.loads((tmp_path / "out.summary.json").read_text())
    assert written["total"] == 4 and written["run"]["ok"] == 4
    again = audit_file(inp, InMemoryKB([ARTICLE]), out, fmt="kbvqa")  # resume: nothing re-run
    assert again["run"]["skipped"] == 4 and again["answer_support"] == summary["answer_support"]


def test_summary_counts_failed_records_as_invalid():
    s = audit_summary([{"id": "x", "status": "error", "reason": "boom"},
                       {"id": "y", "question_type": "String", "audit": {"answer_support": "supported",
                                                                       "action": "keep", "tags": ["t"]}}])
    assert s["answer_support"] == {"invalid": 1, "supported": 1} and s["tags"] == {"t": 1}


def test_cli_audit_run(tmp_path):
    from kbvqa.cli.app import app
    from kbvqa.kb.store import KBStore  # noqa: F401  (the CLI opens KBs through kb.store)

    wiki = tmp_path / "wiki.json"
    wiki.write_text(json.dumps({URL: {"title": "McLaren F1", "section_titles": ["McLaren F1", "Specs"],
                                      "section_texts": [s.text for s in ARTICLE.sections], "image_urls": []}}),
                    encoding="utf-8")
    inp = _write_jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{"):])
    assert data["total"] == 4 and data["answer_support"]["mismatched"] == 1


@pytest.mark.skipif(not (ARA / "ground_truth" / "infoseek_fixed.csv").exists(), reason="ARA data not present")
def test_ara_slice_precision():
    """On 200 real InfoSeek rows, flags are mostly rows whose answer the authors changed."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from audit_ara import build_kb, measure

    gt = ARA / "ground_truth"
    kb = build_kb([gt / "infoseek_fixed.csv"])
    m = measure("InfoSeek", gt / "infoseek_unfixed_subset.csv", gt / "infoseek_fixed.csv", kb, 200)
    assert m["n"] == 200 and m["flagged"] > 10
    assert m["precision"] >= 0.7
