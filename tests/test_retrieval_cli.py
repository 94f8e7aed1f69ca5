"""CLI: `index images|text`, `retrieve`, `answer`, `study` on the demo benchmark."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from kbvqa.cli import answer as answer_cmd
from kbvqa.cli import index as index_cmd
from kbvqa.cli import retrieve as retrieve_cmd
from kbvqa.cli import study as study_cmd
from kbvqa.evaluate.retrieval import load_retrieval_records, load_retrieval_references, retrieval_metrics

app = typer.Typer()
app.add_typer(index_cmd.app, name="index")
app.command("retrieve")(retrieve_cmd.retrieve)
app.command("answer")(answer_cmd.answer)
app.add_typer(study_cmd.app, name="study")
runner = CliRunner()


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    b = bench_copy(root / "bench")
    lines = b.samples.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["id"], bad["images"] = "broken_image", ["images/missing.jpg"]
    samples = root / "samples.jsonl"
    samples.write_text("\n".join(lines + [json.dumps(bad)]) + "\n")
    return b, root, samples


def _ok(res):
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_index_retrieve_answer_round_trip(bench):
    b, root, samples = bench
    idx = root / "idx" / "images"
    info = _ok(runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root), "--out", str(idx)]))
    assert info["vectors"] == len(b.kb_images) and info["images_missing"] == 0 and info["kind"] == "flat"
    out = root / "R.jsonl"
    info = _ok(runner.invoke(app, ["retrieve", "--index", str(idx), "--samples", str(samples), "--images", str(b.root),
                                   "--k", "5", "--out", str(out)]))
    assert info["ok"] == b.n_samples and info["error"] == 1
    recs, _ = load_retrieval_records(out)
    refs = load_retrieval_references(samples)
    m = retrieval_metrics(recs, refs, ks=(1, 5))["stages"]["initial"]
    assert m["n_with_record"] == b.n_samples + 1  # the broken sample is a record (a miss), not a drop
    assert m["recall"]["@1"] == pytest.approx(b.n_samples / (b.n_samples + 1))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    broken = next(x for x in lines if x["id"] == "broken_image")
    assert broken["status"] == "error" and "missing.jpg" in broken["reason"] and broken["retrieved"] == []
    assert all(len(x["retrieved"]) == 5 for x in lines if x["status"] == "ok")

    pred = root / "P.jsonl"
    # --images defaults to the samples file's folder (where the demo's relative image paths start)
    info = _ok(runner.invoke(app, ["answer", "--samples", str(b.samples), "--kb", str(b.kb), "--index", str(idx),
                                   "--pipeline", "extractive", "--out", str(pred), "--json"]))
    assert info["ok"] == b.n_samples and info["stages"][-1] == "answer-extractive"
    rr, _ = load_retrieval_records(pred.with_suffix(".retrieval.jsonl"))
    assert set(rr) == {"initial", "post"} and len(rr["post"]) == b.n_samples

    # a hnsw index answers the same on this tiny KB
    hn = root / "idx" / "hnsw"
    _ok(runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root), "--out", str(hn),
                            "--kind", "hnsw"]))
    assert (hn.with_suffix(".faiss")).exists()


def test_cli_errors_are_clean(bench, tmp_path):
    b, root, samples = bench
    res = runner.invoke(app, ["index", "images", "--kb", str(tmp_path / "none.sqlite"), "--images", str(b.root),
                              "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "error:" in res.output
    res = runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root), "--out",
                              str(tmp_path / "x"), "--encoder", "clip"])
    assert res.exit_code == 2 and "model directory" in res.output
    res = runner.invoke(app, ["answer", "--samples", str(b.samples), "--kb", str(b.kb), "--pipeline", "echosight",
                              "--out", str(tmp_path / "p.jsonl")])
    assert res.exit_code == 2 and "image index" in res.output


def test_index_text_and_study(bench, tmp_path):
    b, root, samples = bench
    info = _ok(runner.invoke(app, ["index", "text", "--kb", str(b.kb), "--out", str(tmp_path / "text")]))
    assert info["sections"] > 0 and info["embedder"].startswith("st:")
    recs = tmp_path / "aug.jsonl"
    gold = json.loads(b.samples.read_text().splitlines()[0])
    rows = [{"id": f"{gold['id']}__anchor", "retrieved": [gold["entity"]["url"]]},
            {"id": f"{gold['id']}__intra", "retrieved": ["https://en.wikipedia.org/wiki/Other"]}]
    recs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = runner.invoke(app, ["study", "augmentation-recall", "--records", str(recs), "--references", str(b.samples), "--ks", "1",
                              "--out", str(tmp_path / "study.json")])
    assert res.exit_code == 0, res.output
    assert "| anchor | 1 | 100.00 |" in res.output and "| intra | 1 | 0.00 |" in res.output  # tables: %
    assert json.loads((tmp_path / "study.json").read_text())["rows"][1]["dR@1"] == -1.0


def test_batch_retrieve_keeps_order_and_reports_bad_images(bench, tmp_path):
    from kbvqa.kb.image_index import ImageIndex
    from kbvqa.kb.store import KBStore
    from kbvqa.models.image_encoders import HistogramEncoder
    from kbvqa.pipelines.index import build_image_index
    from kbvqa.pipelines.retrieve import batch_retrieve

    b, root, samples = bench
    enc = HistogramEncoder()
    with KBStore(b.kb) as kb:
        index, _ = build_image_index(kb, b.root, enc)
    (tmp_path / "corrupt.jpg").write_bytes(b"\xff\xd8\xff garbage")
    recs = [json.loads(x) for x in b.samples.read_text().splitlines()[:5]]
    recs[2]["images"] = [str(tmp_path / "corrupt.jpg")]  # absolute paths bypass the root
    recs[4]["images"] = []
    lines = list(batch_retrieve(recs, index, enc, image_root=b.root, k=3, batch_size=2))
    assert [x["id"] for x in lines] == [r["id"] for r in recs]
    assert [x["status"] for x in lines] == ["ok", "ok", "error", "ok", "error"]
    assert "corrupt.jpg" in lines[2]["reason"] and "no image" in lines[4]["reason"]
    assert lines[0]["retrieved"][0] == recs[0]["entity"]["url"] and len(lines[0]["scores"]) == 3
    with pytest.raises(ValueError, match="duplicate sample id"):
        list(batch_retrieve([recs[0], recs[0]], index, enc, image_root=b.root))
    with pytest.raises(ValueError, match="index was built with"):
        list(batch_retrieve(recs, ImageIndex("other", enc.dim), enc))
