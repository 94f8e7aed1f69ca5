"""`kbvqa data` commands (placeholder; filled in by the data layer's work)."""

import typer

app = typer.Typer(no_args_is_help=True)
