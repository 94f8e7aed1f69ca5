"""`kbvqa retrieve`: image-to-image retrieval records for Recall@K (`kbvqa score retrieval` reads them).

The job is `kbvqa.pipelines.retrieve`: one status line per sample through the runner (resume,
manifest), query images encoded in batches; a missing or unreadable image is an error record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kbvqa.cli.common import end_job, fail, journal_reasons


def job_errors() -> tuple[type[BaseException], ...]:
    """What a retrieval or answer job reports as one `error:` line (bad input, files, config)."""
    from kbvqa.data.errors import DataError
    from kbvqa.kb.store import KBError

    return (FileNotFoundError, ValueError, ImportError, OSError, KeyError, DataError, KBError)


def retrieve(
    index: Path = typer.Option(..., "--index", help="Image index built by `kbvqa index images`."),
    samples: Path = typer.Option(..., "--samples", exists=True, dir_okay=False, help="Benchmark file (kbvqa JSONL, InfoSeek, E-VQA CSV ...)."),
    images: Optional[Path] = typer.Option(None, "--images", help="Folder the samples' image paths/ids are relative "
                                                                 "to (default: the samples file's folder)."),
    out: Path = typer.Option(..., "--out", help="Retrieval records JSONL (R.jsonl); the run's journal and manifest "
                                                "go beside it (R.run.jsonl, R.run.manifest.json)."),
    k: int = typer.Option(20, "--k", min=1, help="Articles kept per query (entity-deduplicated)."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The encoder's local model dir (neural indexes)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Samples format (default: detected)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Query images encoded per batch."),
    device: Optional[str] = typer.Option(None, "--device"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1,
                                              help="Samples in flight (default: twice --batch-size)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip samples already retrieved ok; re-run "
                                                                     "errored ones."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Run on an input with no samples (otherwise an error)."),
) -> None:
    """Image-to-image retrieval: rank KB articles for each sample's image; missing images become error records."""
    from kbvqa.pipelines.retrieve import retrieve_file

    console = Console(stderr=True)
    try:
        run = retrieve_file(samples, index, out=out, images=images, fmt=fmt, model_dir=model_dir, device=device,
                            k=k, batch_size=batch_size, concurrency=concurrency, limit=limit, resume=resume,
                            progress=console.is_terminal, allow_empty=allow_empty)
    except job_errors() as e:
        fail(e)
    typer.echo(json.dumps(run.summary()))
    end_job(run.counts.get("ok", 0), {"error": run.counts.get("error", 0)}, skipped=run.skipped, what="sample(s)",
            reasons=journal_reasons(run.journal) if run.counts.get("error") else None)
