"""One progress bar for long loops outside the runner (encoding, indexing, retrieval).

A rich bar when enabled, else a no-op with the same two methods, so callers never branch on it.
"""

from __future__ import annotations


def progress_bar(total: int | None, description: str, enabled: bool):
    """A rich progress bar, or a no-op object with the same methods."""
    if not enabled:
        class _Null:
            def advance(self, n: int = 1) -> None: ...
            def close(self) -> None: ...
        return _Null()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    transient=False)
    prog.start()
    task = prog.add_task(description, total=total)

    class _Bar:
        def advance(self, n: int = 1) -> None:
            prog.advance(task, n)

        def close(self) -> None:
            prog.stop()
    return _Bar()
