"""`kbvqa demo` (placeholder)."""

from pathlib import Path

import typer


def demo(out: Path = typer.Option(Path("results/demo"), "--out", help="Results folder.")) -> None:
    typer.echo(f"demo -> {out}")
