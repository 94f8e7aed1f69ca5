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
                                                 help="Folder with *.study.json / *.retrieval.json / IVR-12 "
                                                      "*.summary.json and *.compare.json files."),
    inputs: list[Path] = typer.Option([], "--input", "-i", exists=True, dir_okay=False,
                                      help="Extra study, retrieval, IVR-12 (summary or comparison) or curation "
                                           "funnel (kbvqa curate OUT/funnel.json) JSON files (repeatable)."),
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


@app.command("compare")
def compare(
    runs: list[Path] = typer.Argument(..., exists=True,
                                      help="`kbvqa eval` results.json files or their folders, or `kbvqa score ... "
                                           "--json` summaries."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", dir_okay=False, help="Also write the table as markdown."),
    names: Optional[str] = typer.Option(None, "--names", help="Run labels, comma-separated, one per RUN "
                                                              "(default: the folder or file name)."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object."),
) -> None:
    """One table across runs: rows = runs, columns = each metric's headline values and n, every scorer named;
    a metric scored with different scorers (another judge model, other options) is flagged, not compared."""
    from kbvqa.cli.common import emit_json, print_result
    from kbvqa.report.compare import compare_markdown, compare_runs, compare_table

    labels = [x.strip() for x in names.split(",")] if names else None
    if labels is not None and (len(labels) != len(runs) or not all(labels)):
        fail(f"--names takes {len(runs)} non-empty labels separated by commas, got {names!r}")
    try:
        doc = compare_runs(runs, names=labels)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(compare_markdown(doc), encoding="utf-8")
    except (ValueError, OSError) as exc:
        fail(exc)
    for w in doc["warnings"]:
        typer.echo(f"warning: {w}", err=True)
    if as_json:
        emit_json(doc)
    else:
        print_result(compare_table(doc))
        if out is not None:
            typer.echo(f"markdown {out}")
