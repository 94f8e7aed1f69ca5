"""`kbvqa report build RESULTS_DIR`: tables (md/csv/tex), PNG plots and index.html from study JSONs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import fail

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Render study / score JSON files into tables, plots and an HTML page.")


@app.callback()
def _group() -> None:
    """Keeps `report` a command group (`kbvqa report build ...`) whether used alone or under `kbvqa`."""


@app.command("build")
def build(
    results_dir: Optional[Path] = typer.Argument(None, exists=True, file_okay=False,
                                                 help="Folder with *.study.json / *.retrieval.json files."),
    inputs: list[Path] = typer.Option([], "--input", "-i", exists=True, dir_okay=False,
                                      help="Extra study or retrieval JSON files (repeatable)."),
    scores: list[Path] = typer.Option([], "--scores", exists=True, dir_okay=False,
                                      help="`kbvqa score ... --json` summaries, one row each (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", file_okay=False,
                                       help="Output folder (default: RESULTS_DIR)."),
    title: str = typer.Option("kbvqa results", "--title"),
) -> None:
    """Write tables/ (md, csv, tex), plots/ (png), report.md and index.html."""
    from kbvqa.report.results import build_report, collect_inputs

    if results_dir is None and not inputs and not scores:
        fail("give RESULTS_DIR, --input or --scores")
    target = out or results_dir
    if target is None:
        fail("--out is required without RESULTS_DIR")
    try:
        files = (collect_inputs(results_dir) if results_dir is not None else []) + list(inputs)
        res = build_report(files, target, title=title, scores=list(scores))
    except (ValueError, FileNotFoundError, KeyError) as exc:
        fail(exc)
    for s in res.skipped:
        typer.echo(f"skipped: {s}", err=True)
    typer.echo(f"{res.html}: {len(res.tables)} table files, {len(res.plots)} plots")
