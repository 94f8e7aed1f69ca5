"""`kbvqa score` commands (placeholder; filled in by the score layer's work)."""

import typer

app = typer.Typer(no_args_is_help=True)
