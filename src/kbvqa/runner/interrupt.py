"""SIGTERM is handled as SIGINT: the run stops taking records, journals what finished, writes its
manifest `interrupted` with counts, and the command exits 143 (128 + SIGTERM; SIGINT: 130).

`docker stop`, Slurm, systemd and `timeout` stop a process with SIGTERM; with Python's default
handling that is a SIGKILL in all but name (the manifest stays `running`, no counts). While a run is
in its event loop, SIGTERM cancels the run's task exactly as asyncio cancels it on Ctrl-C; the
cancellation then surfaces as `Terminated`, a KeyboardInterrupt, so every `except Exception` between
the runner and the CLI lets it through as it lets Ctrl-C through.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator

INTERRUPTED_HINT = "interrupted — rerun with --resume to finish"
EXIT_SIGINT = 128 + int(signal.SIGINT)  # 130
EXIT_SIGTERM = 128 + int(getattr(signal, "SIGTERM", 15))  # 143


class Terminated(KeyboardInterrupt):
    """The run was stopped by SIGTERM (what a Ctrl-C is to KeyboardInterrupt)."""

    exit_code = EXIT_SIGTERM


def exit_code(exc: BaseException) -> int:
    """The exit status for an interruption: 143 for SIGTERM, 130 for Ctrl-C."""
    return getattr(exc, "exit_code", EXIT_SIGINT)


@contextlib.contextmanager
def sigterm_cancels(task: asyncio.Task) -> Iterator[list[bool]]:
    """While inside, SIGTERM cancels `task` (once; the flag list becomes [True]) instead of killing
    the process. Only in the main thread of a Unix event loop (elsewhere: the default handling).
    The handler that was there before is put back afterwards (asyncio would leave SIG_DFL)."""
    fired: list[bool] = []
    loop = task.get_loop()
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        yield fired
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term() -> None:
        if not fired:
            fired.append(True)
            task.cancel("SIGTERM")  # the message reaches the manifest's `error`

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - no signals in this loop
        yield fired
        return
    try:
        yield fired
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        with contextlib.suppress(TypeError, ValueError, OSError):
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def keep_sigterm() -> Iterator[None]:
    """Put SIGTERM's handler back after code that replaces it: `ray.init` installs one that calls
    sys.exit(15), which would end a run mid-record instead of interrupting it."""
    main = hasattr(signal, "SIGTERM") and threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and previous is not None:
            with contextlib.suppress(TypeError, ValueError, OSError):
                signal.signal(signal.SIGTERM, previous)
