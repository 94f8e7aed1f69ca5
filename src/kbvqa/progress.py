"""The one progress bar: runner jobs, KB import, encoding and indexing all draw it the same way.

A rich bar on stderr when enabled and stderr is a terminal; otherwise a no-op object with the same
methods, so callers never branch on it. It shows done/total, elapsed and remaining time, and an
optional note (the runner's per-status counts, the importer's megabytes).
"""

from __future__ import annotations

from typing import Any


class ProgressBar:
    """`advance(n, note=...)`, `update(completed=..., total=..., note=...)`, `close()`; a context manager."""

    def __init__(self, total: int | float | None, description: str, enabled: bool = True):
        self._bar: Any = None
        if not enabled:
            return
        from rich.console import Console

        console = Console(stderr=True)
        if not console.is_terminal:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                             console=console)
        self._task = self._bar.add_task(description or "records", total=total, note="")
        self._bar.start()

    @property
    def active(self) -> bool:
        return self._bar is not None

    def advance(self, n: int = 1, note: str | None = None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=n, **({"note": note} if note is not None else {}))

    def update(self, *, completed: float | None = None, total: float | None = None, description: str | None = None,
               note: str | None = None) -> None:
        if self._bar is not None:
            kw = {k: v for k, v in (("completed", completed), ("total", total), ("description", description),
                                    ("note", note)) if v is not None}
            self._bar.update(self._task, **kw)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

