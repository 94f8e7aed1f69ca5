"""Retrieval as a runner job: the micro-batcher that gathers in-flight records into encoder batches,
and `kbvqa retrieve --resume` re-running only what failed."""

from __future__ import annotations

import asyncio
import json
import pickle
import shutil

import numpy as np
import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli import retrieve as retrieve_cmd
from kbvqa.kb.image_index import ImageIndex
from kbvqa.pipelines.retrieve import build_retrieve_job, journal_path
from kbvqa.runner import read_results
from kbvqa.stages.batcher import MicroBatcher

POISON = (13, 13)  # an image of this size makes the fake encoder raise for its whole batch


class FakeEncoder:
    """Records the size of every batch it is asked to encode; colour -> one-hot-ish vector."""

    name = "fake-enc"
    dim = 3

    def __init__(self) -> None:
        self.batches: list[int] = []

    def encode(self, images):
        images = list(images)
        self.batches.append(len(images))
        if any(im.size == POISON for im in images):
            raise RuntimeError("fake encoder: CUDA out of memory")
        vecs = np.array([np.asarray(im, dtype=np.float32).reshape(-1, 3).mean(0) + 1e-3 for im in images])
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


@pytest.fixture()
def fake_kb(tmp_path):
    """Three colours as KB 'articles', and 16 query images (one of them poison)."""
    colours = {"Red": (250, 5, 5), "Green": (5, 250, 5), "Blue": (5, 5, 250)}
    index = ImageIndex(FakeEncoder.name, FakeEncoder.dim)
    vecs = np.array([c for c in colours.values()], dtype=np.float32)
    index.add(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), [f"https://en.wikipedia.org/wiki/{c}" for c in colours])
    records = []
    for i in range(16):
        name = list(colours)[i % 3]
        size = POISON if i == 5 else (8, 8)
        Image.new("RGB", size, colours[name]).save(tmp_path / f"q{i}.png")
        records.append({"id": f"q{i}", "images": [f"q{i}.png"], "entity": name})
    return index, records


def test_micro_batcher_gathers_concurrent_records_into_batches(tmp_path, fake_kb):
    index, records = fake_kb
    records = [r for r in records if r["id"] != "q5"]
    enc = FakeEncoder()
    job = build_retrieve_job(index, enc, image_root=tmp_path, k=2, batch_size=8, max_wait=0.05)
    summary = job.run(records, out=tmp_path / "r.run.jsonl", concurrency=16, progress=False)
    assert summary.ok == len(records) == 15 and summary.error == 0
    assert sum(enc.batches) == 15 and len(enc.batches) < 15 and max(enc.batches) == 8  # fewer, larger batches
    batcher = job.ctx.resources["image_batcher"]
    assert batcher.items == 15 and batcher.batches == len(enc.batches)
    out = {r["id"]: r for r in read_results(tmp_path / "r.run.jsonl")}
    assert all(out[r["id"]]["retrieved"][0].endswith(r["entity"]) for r in records)


def test_encoder_error_fails_only_the_records_of_its_batch(tmp_path, fake_kb):
    index, records = fake_kb
    enc = FakeEncoder()
    job = build_retrieve_job(index, enc, image_root=tmp_path, k=2, batch_size=4, max_wait=0.05)
    records.append({"id": "no_image", "images": []})
    summary = job.run(records, out=tmp_path / "r.run.jsonl", concurrency=16, progress=False)
    lines = {r["id"]: r for r in read_results(tmp_path / "r.run.jsonl")}
    assert len(lines) == 17  # nothing dropped
    failed_by_encoder = [r for r in lines.values() if "CUDA out of memory" in r.get("reason", "")]
    assert lines["q5"] in failed_by_encoder and lines["q5"]["status"] == "error"
    assert 1 < len(failed_by_encoder) <= 4  # the poison's batch, and nothing more
    assert lines["no_image"]["status"] == "error" and "no image" in lines["no_image"]["reason"]
    assert summary.error == len(failed_by_encoder) + 1 and summary.ok == 17 - summary.error
    assert max(enc.batches) == 4


def test_micro_batcher_per_item_errors_pickling_and_a_new_event_loop():
    seen: list[list[int]] = []

    def fn(items: list[int]) -> list[object]:
        seen.append(items)
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]

    b = MicroBatcher(fn, max_batch=3, max_wait=0.05)

    async def main() -> list[object]:
        return await asyncio.gather(*(b.submit(i) for i in range(7)), return_exceptions=True)

    res = asyncio.run(main())
    assert res[0::2] == [0, 20, 40, 60] and all(isinstance(r, ValueError) for r in res[1::2])
    assert [len(x) for x in seen] == [3, 3, 1] and b.sizes == [3, 3, 1]
    assert asyncio.run(main())[2] == 20  # the queue belongs to the running loop: a second run works
    copy = pickle.loads(pickle.dumps(MicroBatcher(_double, max_batch=5)))
    assert copy.max_batch == 5 and copy.batches == 0 and asyncio.run(copy.submit(4)) == 8


def _double(items: list[int]) -> list[int]:
    return [2 * i for i in items]


def test_retrieve_resume_reruns_only_the_error_line(bench_copy, tmp_path):
    from kbvqa.cli import index as index_cmd

    app = typer.Typer()
    app.add_typer(index_cmd.app, name="index")
    app.command("retrieve")(retrieve_cmd.retrieve)
    runner = CliRunner()
    b = bench_copy(tmp_path / "bench")
    idx = tmp_path / "idx" / "images"
    res = runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root), "--out", str(idx)])
    assert res.exit_code == 0, res.output
    lines = b.samples.read_text().splitlines()
    late = json.loads(lines[0])
    late["id"], late["images"] = "late_image", ["images/late.jpg"]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("\n".join(lines + [json.dumps(late)]) + "\n")
    out = tmp_path / "R.jsonl"
    args = ["retrieve", "--index", str(idx), "--samples", str(samples), "--images", str(b.root), "--k", "3",
            "--out", str(out), "--batch-size", "4"]

    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    info = json.loads(first.stdout.strip().splitlines()[-1])
    assert (info["ok"], info["error"], info["records"]) == (b.n_samples, 1, b.n_samples + 1)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert recs[-1]["id"] == "late_image" and recs[-1]["status"] == "error" and "late.jpg" in recs[-1]["reason"]
    assert set(recs[0]) == {"id", "retrieved", "stage", "scores", "encoder", "status"}

    first_image = json.loads(lines[0])["images"][0]
    shutil.copy(b.root / first_image, b.root / "images" / "late.jpg")  # the missing image is provided
    second = runner.invoke(app, [*args, "--resume"])
    assert second.exit_code == 0, second.output
    info = json.loads(second.stdout.strip().splitlines()[-1])
    assert (info["ok"], info["error"], info["skipped"]) == (b.n_samples + 1, 0, b.n_samples)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == [json.loads(x)["id"] for x in lines] + ["late_image"]  # one line each
    assert recs[-1]["status"] == "ok" and recs[-1]["retrieved"][0] == recs[0]["retrieved"][0]
    attempts = {r["id"]: r["attempts"] for r in read_results(journal_path(out))}
    assert attempts.pop("late_image") == 2 and set(attempts.values()) == {1}  # only the error line re-ran
    manifest = json.loads((tmp_path / "R.run.manifest.json").read_text())
    assert manifest["counts"] == {"ok": 1, "error": 0, "invalid": 0, "needs_model": 0} and manifest["skipped"] == b.n_samples


def test_cli_choices_come_from_the_registries():
    from kbvqa.cli import answer as answer_cmd
    from kbvqa.cli import index as index_cmd
    from kbvqa.models.image_encoders import encoder_choices
    from kbvqa.models.rerank import RERANKERS
    from kbvqa.pipelines.answer import answer_pipelines

    app = typer.Typer()
    app.add_typer(index_cmd.app, name="index")
    app.command("answer")(answer_cmd.answer)
    runner = CliRunner(env={"COLUMNS": "250"})
    text = runner.invoke(app, ["answer", "--help"]).output
    assert "<" + "|".join(answer_pipelines()) + ">" in text and "<" + "|".join(RERANKERS.names()) + ">" in text
    assert "<" + "|".join(encoder_choices()) + ">" in runner.invoke(app, ["index", "images", "--help"]).output
    res = runner.invoke(app, ["index", "images", "--kb", "k", "--images", "i", "--out", "o", "--encoder", "resnet"])
    assert res.exit_code == 2 and "unknown image encoder" in res.output


def test_micro_batcher_serves_records_that_arrive_as_a_batch_finishes():
    """Records that submit right after their previous item's batch resolved (the runner's workers
    do exactly that) must start a new batch, not wait on a worker that is just returning."""
    b = MicroBatcher(_double, max_batch=64, max_wait=0.001)

    async def worker(w: int) -> list[int]:
        return [await b.submit(w * 100 + i) for i in range(10)]

    async def main() -> list[list[int]]:
        return await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(4))), timeout=20)

    assert asyncio.run(main())[3] == [2 * (300 + i) for i in range(10)]
    assert b.items == 40
