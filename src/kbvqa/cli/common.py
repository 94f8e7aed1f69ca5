"""Output helpers every command shares, so errors, JSON and tables look the same across jobs."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Iterable, NoReturn, Sequence

import typer

if TYPE_CHECKING:
    from kbvqa.report.tables import ResultTable


def fail(exc: BaseException | str, code: int = 2) -> NoReturn:
    """One line on stderr, no traceback, non-zero exit."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code=code)


def emit_json(obj: Any) -> None:
    """Exactly one JSON document on stdout (machine-readable output never mixes with tables)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table; floats shown with 2 decimals, every cell escaped (values may contain [brackets])."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title))
    for h in header:
        t.add_column(escape(str(h)))
    for r in rows:
        t.add_row(*[escape(f"{v:.2f}" if isinstance(v, float) else str(v)) for v in r])
    Console().print(t)


def print_result(table: "ResultTable") -> None:
    """A report table (kbvqa.report.tables.ResultTable) by `print_table`, its cells formatted the
    table's way, then its notes one per line."""
    print_table(table.caption, table.columns, [[table.fmt(v) for v in r] for r in table.rows])
    for note in table.notes:
        typer.echo(note)
