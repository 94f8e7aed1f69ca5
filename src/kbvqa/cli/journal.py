"""`kbvqa journal`: look at and repair a job's output journal (what `--resume` reads)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

from kbvqa.cli.common import emit_json, fail, print_table

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Inspect or repair a job's output journal.")


@app.command("status")
def status(journal: Path = typer.Argument(..., exists=True, dir_okay=False, help="A job's output JSONL."),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Records by status and reason kind, and what the manifest says about the runs that wrote them."""
    from kbvqa.runner import read_results
    from kbvqa.runner.lock import run_state
    from kbvqa.runner.manifest import read_manifest

    try:
        rows = list(read_results(journal))
    except ValueError as exc:
        fail(exc)
    by_status = Counter(str(r.get("status")) for r in rows)
    reasons = Counter(str(r.get("reason", "")).split(":", 1)[0] for r in rows if r.get("status") != "ok")
    _, manifest = read_manifest(journal)
    state = run_state(manifest, journal)  # a "running" manifest whose process is gone: interrupted
    res = {"journal": str(journal), "records": len(rows), "by_status": dict(by_status),
           "failure_kinds": dict(reasons.most_common()), "state": state,
           "attempts": [*(manifest.get("attempts") or []), *([{"started": manifest.get("started"),
                                                               "state": state}] if manifest else [])]}
    if as_json:
        emit_json(res)
        return
    print_table(f"{journal}: {len(rows)} records, last run {res['state'] or 'unknown'}", ("status", "records"),
                sorted(by_status.items()))
    if reasons:
        print_table("why records did not end ok", ("kind", "records"), reasons.most_common())
    if state == "interrupted":
        typer.echo("the last run was interrupted — rerun it with --resume to finish")


@app.command("repair")
def repair(journal: Path = typer.Argument(..., exists=True, dir_okay=False, help="A job's output JSONL.")) -> None:
    """Move corrupt lines aside (to JOURNAL.corrupt-<time>.jsonl, never deleted) so `--resume` can
    go on; their records run again on the next resume."""
    from kbvqa.runner.sinks import repair_journal

    moved, aside = repair_journal(journal)
    typer.echo(f"moved {moved} corrupt line(s) to {aside}" if moved else f"{journal}: no corrupt lines")
