"""`kbvqa audit` commands (placeholder; filled in by the audit work)."""

import typer

app = typer.Typer(no_args_is_help=True)
