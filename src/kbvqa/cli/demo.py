"""`kbvqa demo`: the whole chain on a benchmark built at run time from real photographs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kbvqa.cli.common import fail


def demo(
    out: Path = typer.Option(Path("results/demo"), "--out", help="Results folder: new or empty, or an earlier demo's (what that run wrote is replaced; nothing else is touched)."),
    llm: Optional[str] = typer.Option(None, "--llm", help="Base URL of an OpenAI-compatible server, e.g. "
                                                          "http://127.0.0.1:8000/v1. Without it everything runs offline."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on that server."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Env var holding the API key, if any."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Records in flight per stage."),
) -> None:
    """Build the demo benchmark, audit it, answer it, score it and write a report."""
    from kbvqa.demo.run import counts_text, run_demo, summary_lines

    console = Console()
    try:
        res = run_demo(out, llm=llm, model=model, api_key_env=api_key_env, concurrency=concurrency,
                       progress=console.is_terminal)
    except (ValueError, OSError) as exc:  # a bad flag or server URL, a folder that cannot be written
        fail(exc)
    o, f = res.scores["original"], res.scores["fixed"]
    r1 = (res.scores["retrieval"].get("stages", {}).get("initial", {}).get("recall", {}) or {}).get("@1")
    console.print(f"[bold]kbvqa demo[/bold] finished in {res.seconds:.1f} s -> {res.out}")
    console.print(f"  audit: {counts_text(res.audit.get('answer_support'))}; actions {counts_text(res.audit.get('action'))}; "
                  f"planted flaws flagged {res.flaws_found}/{res.flaws_total}")
    console.print(f"  retrieval R@1 = {'n/a' if r1 is None else f'{100 * r1:.1f}%'}")
    aug = {row["variant"]: f"{100 * row['R@1']:.1f}%" for row in res.scores.get("augmentation_recall", [])
           if row.get("R@1") is not None}
    console.print(f"  augmentation R@1 by variant: {counts_text(aug)}")
    console.print(f"  accuracy original (strict) = {o['strict'].get('accuracy')}%, "
                  f"fixed (strict) = {f['strict'].get('accuracy')}%")
    for line in summary_lines(res):  # seed 001: the search agent, IVR-12, curation
        console.print(f"  {line}", markup=False, highlight=False)
    console.print(f"  report: {res.report}\n  manifest: {res.manifest}")
    console.print(f"  browse it: kbvqa view {res.out}")
