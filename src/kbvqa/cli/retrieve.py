"""`kbvqa retrieve`: image-to-image retrieval records for Recall@K (`kbvqa score retrieval` reads them).

The job is `kbvqa.pipelines.retrieve`: one status line per sample through the runner (resume,
manifest), query images encoded in batches; a missing or unreadable image is an error record. The
flags are RetrieveOptions' settings, so each default shown in --help is the options class's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kbvqa.cli.common import end_job, job_errors, journal_reasons, run_or_fail
from kbvqa.cli.options import flags, option
from kbvqa.pipelines.retrieve import RetrieveOptions as O


def retrieve(
    index: Path = typer.Option(..., "--index", help="Image index built by `kbvqa index images`."),
    samples: Path = typer.Option(..., "--samples", exists=True, dir_okay=False, help="Benchmark file (kbvqa JSONL, InfoSeek, E-VQA CSV ...)."),
    images: Optional[Path] = option(O, "images", help="Folder the samples' image paths/ids are relative to "
                                                      "(default: the samples file's folder)."),
    out: Path = typer.Option(..., "--out", help="Retrieval records JSONL (R.jsonl); the run's journal and manifest "
                                                "go beside it (R.run.jsonl, R.run.manifest.json)."),
    config: Optional[Path] = option(O, "config", exists=True, dir_okay=False,
                                    help="kbvqa.toml whose [retrieve] table holds these settings (flags win)."),
    k: Optional[int] = option(O, "k", min=1, help="Articles kept per query (entity-deduplicated)."),
    model_dir: Optional[Path] = option(O, "model_dir", help="The encoder's local model dir (neural indexes)."),
    fmt: Optional[str] = option(O, "fmt", "--format", help="Samples format (default: detected)."),
    batch_size: Optional[int] = option(O, "batch_size", min=1, help="Query images encoded per batch."),
    device: Optional[str] = option(O, "device", help="The encoder's device (default: its own choice)."),
    concurrency: Optional[int] = option(O, "concurrency", min=1,
                                        help="Samples in flight (default: twice --batch-size)."),
    limit: Optional[int] = option(O, "limit", min=1),
    resume: Optional[bool] = option(O, "resume", "--resume/--no-resume",
                                    help="Skip samples already retrieved ok; re-run errored ones."),
    allow_empty: Optional[bool] = option(O, "allow_empty", "--allow-empty",
                                         help="Run on an input with no samples (otherwise an error)."),
) -> None:
    """Image-to-image retrieval: rank KB articles for each sample's image; missing images become error records.
    Every setting is one RetrieveOptions (the defaults, under [retrieve] of --config, under the flags);
    the run's manifest records it as used."""
    from kbvqa.pipelines.retrieve import retrieve_options, retrieve_with

    given, console = flags(O, locals()), Console(stderr=True)
    run = run_or_fail(lambda: retrieve_with(retrieve_options(**given), progress=console.is_terminal), job_errors())
    typer.echo(json.dumps(run.summary()))
    end_job(run.counts.get("ok", 0), {"error": run.counts.get("error", 0)}, skipped=run.skipped, what="sample(s)",
            reasons=journal_reasons(run.journal) if run.counts.get("error") else None)
