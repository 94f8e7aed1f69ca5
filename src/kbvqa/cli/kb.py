"""`kbvqa kb` commands (placeholder; filled in by the kb layer's work)."""

import typer

app = typer.Typer(no_args_is_help=True)
