"""`kbvqa audit` commands: audit and repair a benchmark against its KB (rules backend by default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True)


def _print_summary(summary: dict, console: Console) -> None:
    table = Table(title=f"audit: {summary['total']} samples")
    table.add_column("question type")
    table.add_column("n", justify="right")
    labels = ["supported", "mismatched", "unsupported", "invalid"]
    actions = ["keep", "repair", "drop"]
    for c in labels + actions:
        table.add_column(c, justify="right")
    rows = dict(summary["by_question_type"])
    rows["all"] = {"total": summary["total"], "answer_support": summary["answer_support"],
                   "action": summary["action"]}
    for qt, v in rows.items():
        table.add_row(qt, str(v["total"]), *[str(v["answer_support"].get(x, 0)) for x in labels],
                      *[str(v["action"].get(x, 0)) for x in actions])
    console.print(table)
    if summary.get("tags"):
        console.print("tags: " + ", ".join(f"{k} {v}" for k, v in summary["tags"].items()))


@app.command("run")
def run_cmd(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Benchmark file (InfoSeek, E-VQA, ARA CSV, kbvqa JSONL)."),
    kb: Path = typer.Option(..., "--kb", exists=True, dir_okay=False, help="KB: SQLite store or wiki JSON (imported on the fly)."),
    fmt: Optional[str] = typer.Option(None, "--from", help="Input format (default: detected)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Audited JSONL (default: INPUT.audit.jsonl)."),
    config: Optional[Path] = typer.Option(None, "--config", exists=True, dir_okay=False, help="audit.toml"),
    limit: Optional[int] = typer.Option(None, "--limit", min=0),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
    resume: bool = typer.Option(True, "--resume/--no-resume"),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip malformed input rows (counted) instead of stopping."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Audit INPUT against KB: verify, derive/correct answers, tag/repair questions, check leaks."""
    from kbvqa.kb.store import open_kb
    from kbvqa.pipelines.audit import AuditConfig, audit_file

    cfg = AuditConfig.from_toml(config) if config else AuditConfig()
    out = out or input.with_name(input.stem + ".audit.jsonl")
    summary = audit_file(input, open_kb(kb), out, cfg, fmt=fmt, concurrency=concurrency, resume=resume,
                         limit=limit, progress=not as_json, skip_invalid=skip_invalid)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    console = Console()
    _print_summary(summary, console)
    r = summary["run"]
    console.print(f"wrote {r['out']} (ok {r['ok']}, error {r['error']}, invalid {r['invalid']}, "
                  f"skipped {r['skipped']}) and {summary['summary_path']}")


@app.command("summary")
def summary_cmd(results: Path = typer.Argument(..., exists=True, dir_okay=False, help="Audited JSONL.")) -> None:
    """Recount an audited JSONL (labels and actions by question type)."""
    from kbvqa.pipelines.audit import audit_summary
    from kbvqa.runner import read_results

    _print_summary(audit_summary(read_results(results)), Console())
