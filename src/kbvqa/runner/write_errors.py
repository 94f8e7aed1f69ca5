"""Write failures (a full disk, a read-only or unwritable folder) told in one line naming the path.

Every job writes through a few places (the journal, the manifest, side files, SQLite caches, exports);
when the disk fills up each of them raises something different — an OSError without a file name from
`write()`, a `sqlite3.OperationalError("database or disk is full")` — and a traceback used to reach the
terminal. `write_failure` recognises them all; the CLI turns one into `error: cannot write PATH: ...`
and exit 1 (kbvqa.cli.common.fail), and the runner names the file when the error does not.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

#: errnos that mean "this path cannot be written here", not "the input is wrong"
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})
EXIT_WRITE_FAILED = 1

_SQLITE_WRITE = {"database or disk is full": errno.ENOSPC, "attempt to write a readonly database": errno.EROFS,
                 "unable to open database file": errno.EACCES, "disk i/o error": errno.EIO}


class WriteFailed(OSError):
    """A write that failed at `filename`, whatever raised it first (kept as __cause__)."""


def as_write_failure(exc: BaseException, path: str | Path | None = None) -> OSError | None:
    """`exc` as an OSError naming the file (`path` where the error names none), when it is a write
    failure; None when it is something else."""
    if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS and not _unreadable(exc):
        if exc.filename is None and path is not None:
            failed = WriteFailed(exc.errno, exc.strerror or str(exc), str(path))
            failed.__cause__ = exc
            return failed
        return exc
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        code = next((c for msg, c in _SQLITE_WRITE.items() if msg in text), None)
        if code is not None:
            failed = WriteFailed(code, f"SQLite: {exc}", str(path) if path is not None else None)
            failed.__cause__ = exc
            return failed
    return None


def _unreadable(exc: OSError) -> bool:
    """A permission error on a file that exists and cannot be read: a read that failed (an input the
    user may not open), not a write; the job's own input handling reports it."""
    if exc.errno not in (errno.EACCES, errno.EPERM) or not exc.filename:
        return False
    target = Path(str(exc.filename))
    return target.exists() and not os.access(target, os.R_OK)


def write_failure(exc: BaseException) -> str | None:
    """The one line for a write failure (None: not one): what could not be written and why."""
    failed = as_write_failure(exc)
    if failed is None:
        return None
    where = f" {failed.filename}" if failed.filename else " a file"
    why = failed.strerror or str(failed)
    hint = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space (quota)"}.get(
        failed.errno or 0, "check the folder's permissions")
    return (f"cannot write{where}: {why} ({hint}, or write elsewhere; a job's journal is kept as it was, "
            "so --resume finishes it)")
