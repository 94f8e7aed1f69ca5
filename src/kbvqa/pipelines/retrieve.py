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

Every setting of one run is a `RetrieveOptions` (the stage's `RetrieveConfig` as it is, the batch
size, the runner's settings, the input paths), built once by `retrieve_options` from `[retrieve]` of
`--config` and the flags (flags win), handed down unchanged and recorded in the run's manifest as
`run_config.options`:

    [retrieve]
    batch_size = 32
    [retrieve.retrieve]
    k = 50
    [retrieve.run]
    concurrency = 64
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

from pydantic import Field

from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.models.image_encoders import ENCODE_BATCH
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.manifest import manifest_path
from kbvqa.runner.options import JobOptions, RunOptions, read_table
from kbvqa.runner.stage import Context
from kbvqa.stages.answer.retrieve import ImageRetrieve, RetrieveConfig, retrieval_batcher

__all__ = ["RetrievalRun", "RetrieveOptions", "batch_retrieve", "build_retrieve_job", "journal_path",
           "retrieval_record", "retrieve_file", "retrieve_options", "retrieve_with", "run_retrieval"]


class RetrieveRun(RunOptions):
    """The retrieval's runner settings. Concurrency None: twice the batch size, so one batch fills
    while the previous one is encoded."""

    concurrency: int | None = Field(None, ge=1)  # type: ignore[assignment]
    limit: int | None = Field(None, ge=1)


class RetrieveOptions(JobOptions):
    """Every setting of one retrieval run. Paths are as given; None for a library caller that hands
    records, the index and the encoder itself (`run_retrieval`)."""

    samples: Path | None = None  # the benchmark file
    index: Path | None = None  # image index (`kbvqa index images`)
    out: Path | None = None  # retrieval records JSONL; its journal and manifest go beside it
    images: Path | None = None  # folder the samples' image paths are relative to (None: the samples' folder)
    fmt: str | None = None  # the samples' format (None: detected)
    model_dir: Path | None = None  # the encoder's local model folder (neural indexes)
    device: str | None = None  # the encoder's device (None: its own choice)
    config: Path | None = None  # the kbvqa.toml whose [retrieve] table these settings come from
    batch_size: int = Field(ENCODE_BATCH, ge=1)  # query images encoded (and searched) per batch (index's default too)
    max_wait: float = Field(0.005, gt=0)  # seconds a batch waits to fill before it runs part-full
    retrieve: RetrieveConfig = Field(default_factory=RetrieveConfig)  # the stage's own settings (k)
    run: RetrieveRun = Field(default_factory=RetrieveRun)

    FLAGS: ClassVar[Mapping[str, str]] = {"fmt": "--format"}

    def concurrency(self) -> int:
        """Samples in flight: `run.concurrency`, else twice the batch size."""
        return self.run.concurrency or 2 * self.batch_size


def retrieve_options(config: str | Path | None = None, **flags: Any) -> RetrieveOptions:
    """The retrieval run's options, built once: the class defaults, under `[retrieve]` of `config`,
    under `flags` (RetrieveOptions settings; None is a flag not given). A bad value is an OptionsError
    naming the flag, or the file and key."""
    if config is None:
        return RetrieveOptions.build(**flags)
    return RetrieveOptions.build(read_table(config, "retrieve"), source=f"{config} [retrieve]",
                                 config=Path(config), **flags)


def journal_path(out: str | Path) -> Path:
    """The runner journal behind retrieval records `out` (R.jsonl -> R.run.jsonl)."""
    out = Path(out)
    return out.with_name(out.stem + ".run.jsonl")


def build_retrieve_job(index: Any, encoder: Any, opts: RetrieveOptions | None = None, *,
                       image_root: str | Path | None = None, **settings: Any) -> Job:
    """The retrieval Job: ImageRetrieve (given `opts.retrieve` as it is) over the `image_index`,
    `image_encoder`, `image_root` and `image_batcher` resources (queries encoded and searched
    `opts.batch_size` at a time). Without `opts`, `settings` (k, batch_size, max_wait ...) build one."""
    opts = opts or RetrieveOptions.build(**settings)
    if index.encoder != encoder.name:
        raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
    resources = {"image_index": index, "image_encoder": encoder,
                 # absolute in the driver: a Ray worker never reads a path against its own folder
                 "image_root": Path(image_root).resolve() if image_root is not None else None,
                 "image_batcher": retrieval_batcher(index, encoder, batch_size=opts.batch_size,
                                                    max_wait=opts.max_wait)}
    return Job([ImageRetrieve(opts.retrieve)], Context(resources=resources), description="retrieve",
               run_config={"encoder": encoder.name, "k": opts.retrieve.k, "batch_size": opts.batch_size})


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


def run_retrieval(records: Iterable[dict] | AsyncIterable[dict], index: Any, encoder: Any,
                  opts: RetrieveOptions | None = None, *, out: str | Path, image_root: str | Path | None = None,
                  progress: bool = False, **settings: Any) -> RetrievalRun:
    """Retrieve for every record through the runner and write the retrieval records to `out`.

    `opts` (or, for a library caller, `settings` such as k, batch_size, resume, built into one)
    are handed to the job unchanged; `resume=False` moves an earlier journal aside and starts again.
    The manifest records `opts.used()` as `run_config.options`."""
    opts = opts or RetrieveOptions.build(**settings)
    out = Path(out)
    journal = journal_path(out)
    t0 = time.perf_counter()
    job = build_retrieve_job(index, encoder, opts, image_root=image_root)
    summary = job.run(records, out=journal, concurrency=opts.concurrency(), resume=opts.run.resume,
                      limit=opts.run.limit, progress=progress, run_config={"records": str(Path(out).resolve()), "options": opts.used()})
    counts = write_records(journal, out, encoder.name)
    return RetrievalRun(out, journal, encoder.name, opts.retrieve.k, time.perf_counter() - t0, summary.skipped,
                        counts)


def retrieve_with(opts: RetrieveOptions, *, progress: bool = False) -> RetrievalRun:
    """`kbvqa retrieve`: load `opts.index` and its encoder, read `opts.samples` (any supported format;
    image paths relative to `opts.images`, default the samples file's folder) and run."""
    from kbvqa.data.formats import SampleRecords
    from kbvqa.pipelines.index import load_image_index

    samples, index, out = opts.samples, opts.index, opts.out
    if samples is None or index is None or out is None:
        raise ValueError("a retrieval run needs --samples, --index and --out")
    records = SampleRecords(samples, opts.fmt, allow_empty=opts.run.allow_empty)  # an empty input: refused here
    idx, enc = load_image_index(index, opts.model_dir, device=opts.device)
    return run_retrieval(records, idx, enc, opts, out=out, image_root=opts.images or samples.parent, progress=progress)


def retrieve_file(samples: str | Path, index: str | Path, *, out: str | Path, progress: bool = False,
                  **settings: Any) -> RetrievalRun:
    """`retrieve_with` for a library caller: `settings` are RetrieveOptions settings by flag name
    (k, images, model_dir, fmt, resume ...), built into one."""
    return retrieve_with(RetrieveOptions.build(samples=Path(samples), index=Path(index), out=Path(out), **settings),
                         progress=progress)


def batch_retrieve(records: Iterable[dict[str, Any]], index: Any, encoder: Any, *, image_root: Path | None = None,
                   on_batch: Callable[[int], None] | None = None, **settings: Any) -> Iterator[dict[str, Any]]:
    """Retrieval records for many samples, in input order, for callers that want records rather
    than a file (studies): the retrieval job run in a temporary directory, no resume.

    One record per input record ({id, retrieved, stage, scores, encoder, status[, reason]}); a
    sample without an image or with a missing / undecodable one is an error record with an empty
    ranking. A repeated id raises ValueError. `on_batch(n)` is called once with the number of
    records when the job is done (progress is the runner's). `settings`: RetrieveOptions settings
    (k, batch_size ...)."""

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
        run_retrieval(unique(records), index, encoder, out=out, image_root=image_root, **{**settings, "resume": False})
        lines = [rec for _, rec in read_jsonl(out)]
    if on_batch:
        on_batch(len(lines))
    yield from lines
