"""One writer per output: a run holds an exclusive lock on `<out>.lock` while it writes `out`.

Two drivers started on the same `--out` would each process every record (twice the model calls) and
interleave their journal lines; the second is refused at once, naming the process that holds the
output. The lock is an advisory `flock` on a file beside the journal (the journal itself is renamed
and rewritten during a run, so it cannot carry the lock); it covers everything the run writes beside
its journal (manifest, artifacts, the agent's cassette). The kernel drops it when the process dies, so
a killed run never leaves a stale lock behind. The file is never removed (removing a locked file would
let a third run lock a new file beside a holder of the old one); a later run reuses it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking (documented)
    fcntl = None  # type: ignore[assignment]


class OutputLocked(ValueError):
    """Another process is writing this output."""


def lock_path(out: Path) -> Path:
    return out.with_name(out.name + ".lock")


class OutputLock:
    """`with OutputLock(out):` — held for the whole run, released on exit (or by the kernel on death)."""

    def __init__(self, out: Path):
        self.path = lock_path(Path(out))
        self._fd: int | None = None

    def acquire(self) -> "OutputLock":
        if fcntl is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise OutputLocked(f"{self.path.with_name(self.path.name[:-5])} is being written by another kbvqa run "
                               f"({holder}); wait for it to finish, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays (a later run reuses it)
            self._fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "a process that holds its lock"
    return f"pid {info['pid']} on {info.get('host', '?')}, started {info.get('started', '?')}"
