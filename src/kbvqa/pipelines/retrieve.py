"""Batch image retrieval as a runner job (`kbvqa retrieve`) and the retrieval records it writes.

The job is the one-record `ImageRetrieve` stage with a micro-batcher resource, so a neural encoder
still encodes (and the index searches) `batch_size` queries at a time while every sample gets its
own status line, resume and the run manifest, like any other job.

Two files: the runner's journal `<out stem>.run.jsonl` (full records with status and attempts; what
`--resume` reads, with its manifest `<out stem>.run.manifest.json`) and `out` itself, rewritten from
the journal after every run: one retrieval record per sample, in input order, in the shape `kbvqa
score retrieval` reads — {id, retrieved, stage, scores, encoder, status} plus `reason` when not ok.
A sample with no image, or a missing or undecodable one, is an `error` record with an empty
ranking (a miss, never a drop), and is run again by the next `--resume`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.manifest import manifest_path
from kbvqa.runner.stage import Context
from kbvqa.stages.answer.retrieve import ImageRetrieve, RetrieveConfig, retrieval_batcher

__all__ = ["RetrievalRun", "batch_retrieve", "build_retrieve_job", "journal_path", "retrieval_record",
           "retrieve_file", "run_retrieval"]


def journal_path(out: str | Path) -> Path:
    """The runner journal behind retrieval records `out` (R.jsonl -> R.run.jsonl)."""
    out = Path(out)
    return out.with_name(out.stem + ".run.jsonl")


def build_retrieve_job(index: Any, encoder: Any, *, image_root: str | Path | None = None, k: int = 20,
                       batch_size: int = 64, max_wait: float = 0.005) -> Job:
    """The retrieval Job: ImageRetrieve over the `image_index`, `image_encoder`, `image_root` and
    `image_batcher` resources (queries encoded and searched `batch_size` at a time)."""
    if index.encoder != encoder.name:
        raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
    resources = {"image_index": index, "image_encoder": encoder,
                 # absolute in the driver: a Ray worker never reads a path against its own folder
                 "image_root": Path(image_root).resolve() if image_root is not None else None,
                 "image_batcher": retrieval_batcher(index, encoder, batch_size=batch_size, max_wait=max_wait)}
    return Job([ImageRetrieve(RetrieveConfig(k=k))], Context(resources=resources), description="retrieve",
               run_config={"encoder": encoder.name, "k": k, "batch_size": batch_size})


def retrieval_record(line: dict[str, Any], encoder: str) -> dict[str, Any]:
    """One journal line as the retrieval record `kbvqa score retrieval` reads."""
    ok = line.get("status") == "ok"
    r = (line.get("retrieval") or {}) if ok else {}
    rec = {"id": line["id"], "retrieved": list(r.get("retrieved") or []), "stage": "initial",
           "scores": list(r.get("scores") or []), "encoder": r.get("encoder", encoder), "status": line.get("status")}
    if not ok:
        rec["reason"] = line.get("reason") or ""
    return rec


@dataclass
class RetrievalRun:
    """What a retrieval run wrote. `counts` are statuses over the whole output (this run and the
    ones it resumed); `skipped` are samples an earlier run had already retrieved."""

    out: Path
    journal: Path
    encoder: str
    k: int
    seconds: float
    skipped: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"out": str(self.out), "records": sum(self.counts.values()), **self.counts, "skipped": self.skipped,
                "encoder": self.encoder, "k": self.k, "seconds": round(self.seconds, 3),
                "manifest": str(manifest_path(self.journal))}


def write_records(journal: Path, out: Path, encoder: str) -> dict[str, int]:
    """Rewrite `out` from the journal (atomically); return the counts by status."""
    counts = {"ok": 0, "error": 0}

    def records() -> Iterator[dict[str, Any]]:
        for line in read_results(journal):
            rec = retrieval_record(line, encoder)
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
            yield rec

    write_jsonl(out, records())
    return counts


def run_retrieval(records: Iterable[dict] | AsyncIterable[dict], index: Any, encoder: Any, *, out: str | Path,
                  image_root: str | Path | None = None, k: int = 20, batch_size: int = 64,
                  concurrency: int | None = None, resume: bool = True, limit: int | None = None,
                  progress: bool = False, max_wait: float = 0.005) -> RetrievalRun:
    """Retrieve for every record through the runner and write the retrieval records to `out`.

    `concurrency` (records in flight) defaults to twice `batch_size`, so one batch fills while the
    previous one is encoded. `resume=False` moves an earlier journal aside and starts again."""
    out = Path(out)
    journal = journal_path(out)
    t0 = time.perf_counter()
    job = build_retrieve_job(index, encoder, image_root=image_root, k=k, batch_size=batch_size, max_wait=max_wait)
    summary = job.run(records, out=journal, concurrency=concurrency or 2 * batch_size, resume=resume, limit=limit,
                      progress=progress, run_config={"records": str(out)})
    counts = write_records(journal, out, encoder.name)
    return RetrievalRun(out, journal, encoder.name, k, time.perf_counter() - t0, summary.skipped, counts)


def retrieve_file(samples: str | Path, index: str | Path, *, out: str | Path, images: str | Path | None = None,
                  fmt: str | None = None, model_dir: str | Path | None = None, device: str | None = None,
                  allow_empty: bool = False, **options: Any) -> RetrievalRun:
    """`kbvqa retrieve`: load the index and its encoder, read the benchmark file (any supported
    format; image paths relative to `images`, default the samples file's folder) and run."""
    from kbvqa.data.formats import SampleRecords
    from kbvqa.pipelines.index import load_image_index

    records = SampleRecords(samples, fmt, allow_empty=allow_empty)  # an empty input is refused before loading
    idx, enc = load_image_index(index, model_dir, device=device)
    return run_retrieval(records, idx, enc, out=out, image_root=images or Path(samples).parent, **options)


def batch_retrieve(records: Iterable[dict[str, Any]], index: Any, encoder: Any, *, image_root: Path | None = None,
                   k: int = 20, batch_size: int = 64,
                   on_batch: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
    """Retrieval records for many samples, in input order, for callers that want records rather
    than a file (studies): the retrieval job run in a temporary directory, no resume.

    One record per input record ({id, retrieved, stage, scores, encoder, status[, reason]}); a
    sample without an image or with a missing / undecodable one is an error record with an empty
    ranking. A repeated id raises ValueError. `on_batch(n)` is called once with the number of
    records when the job is done (progress is the runner's)."""

    def unique(recs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        seen: set[str] = set()
        for rec in recs:
            rid = rec.get("id")
            if rid in seen:
                raise ValueError(f"duplicate sample id {rid!r} in the retrieval input")
            seen.add(rid)
            yield rec

    with tempfile.TemporaryDirectory(prefix="kbvqa-retrieve-") as tmp:
        out = Path(tmp) / "retrieval.jsonl"
        run_retrieval(unique(records), index, encoder, out=out, image_root=image_root, k=k, batch_size=batch_size,
                      resume=False)
        lines = [rec for _, rec in read_jsonl(out)]
    if on_batch:
        on_batch(len(lines))
    yield from lines
