"""One writer per output, and the names of everything it writes beside its journal.

Two drivers started on the same `--out` would each process every record (twice the model calls) and
interleave their journal lines; the second is refused at once, naming the process that holds the
output. The lock is an advisory `flock` on a file beside the journal (the journal itself is renamed
and rewritten during a run, so it cannot carry the lock); it covers everything the run writes beside
its journal (manifest, retrieval records, artifacts, the agent's cassette), which is why every one of
those names comes from `side_path`, and the lock's own name too: two outputs whose side files would
share a name share the lock, so the second is refused instead of clobbering the first's manifest.

The kernel drops the lock when the process dies, so a killed run never blocks the next one (it leaves
the file, and `run_state` reads a free lock as "nobody is writing"). A clean exit removes the file
while still holding it; a run that opened the old file in that instant finds it unlinked and retries
on a fresh one, so two holders can never lock two different files of one name.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Mapping

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking (documented)
    fcntl = None  # type: ignore[assignment]


class OutputLocked(ValueError):
    """Another process is writing this output (or another output whose side files share its names)."""


def side_base(out: Path) -> str:
    """What every side file of `out` is named after: the whole file name, except that a `.jsonl`
    journal drops that suffix (so `p.jsonl` keeps its documented `p.manifest.json`, while `p.json`
    gets `p.json.manifest.json` and the two never meet)."""
    name = Path(out).name
    return name[: -len(".jsonl")] if name.endswith(".jsonl") and len(name) > len(".jsonl") else name


def side_path(out: Path, suffix: str) -> Path:
    """The one naming of a side file of output `out`: `side_path(out, ".manifest.json")`,
    `".retrieval.jsonl"`, `".cassette"`, `".artifacts"`, `".summary.json"`, `".lock"`."""
    out = Path(out)
    return out.with_name(side_base(out) + suffix)


def legacy_side_path(out: Path, suffix: str) -> Path:
    """Where kbvqa before side_path put that file (`<stem><suffix>`, shared by `p.jsonl` and `p.json`):
    read for outputs written then, never written."""
    out = Path(out)
    return out.with_name(out.stem + suffix)


def lock_path(out: Path) -> Path:
    return side_path(out, ".lock")


#: lock files held by a pipeline that writes side files after its Job.run (`OutputLock(out, lend=True)`):
#: the job's own acquisition inside it nests instead of refusing its own pipeline
_LENT: set[Path] = set()


class OutputLock:
    """`with OutputLock(out):` — held for the whole run, released on exit (or by the kernel on death).
    `lend=True`: a pipeline holding it across Job.run and the side files it writes after (retrieval
    records, a summary) lends it to the runs inside; any other second acquisition is refused, in this
    process too."""

    def __init__(self, out: Path, *, lend: bool = False):
        self.out = Path(out)
        self.path = lock_path(self.out)
        self.lend = lend
        self._fd: int | None = None
        self._nested = False

    def acquire(self) -> "OutputLock":
        if fcntl is None:
            return self
        if self.path.absolute() in _LENT:
            self._nested = True
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tries = 0
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                tries += 1
                if tries < 3:  # a reader's probe (`lock_is_held`) holds it for microseconds
                    time.sleep(0.02)
                    continue
                raise OutputLocked(f"{self.out} is being written by another kbvqa run ({holder}); wait for it to "
                                   f"finish, or choose another --out (its side files are {side_base(self.out)}.*)"
                                   ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # a clean exit removed the file we opened: lock the fresh one
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "output": str(self.out),
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
        self._fd = fd
        if self.lend:
            _LENT.add(self.path.absolute())
        return self

    def release(self) -> None:
        if self._nested:
            self._nested = False
            return
        if self._fd is not None:
            if self.lend:
                _LENT.discard(self.path.absolute())
            try:
                self.path.unlink(missing_ok=True)  # while still held: see the module docstring
            except OSError:  # pragma: no cover - a read-only folder now: the free lock is harmless
                pass
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "a process that holds its lock"
    writing = f"writing {info['output']}, " if info.get("output") else ""
    return f"{writing}pid {info['pid']} on {info.get('host', '?')}, started {info.get('started', '?')}"


def lock_is_held(out: Path) -> bool | None:
    """Whether some process holds `out`'s lock now (None: cannot tell, e.g. no flock here). Probes with
    a shared lock, dropped at once; a file that is gone is a free lock."""
    if fcntl is None:
        return None
    try:
        fd = os.open(lock_path(Path(out)), os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing drops the probe's shared lock
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError as exc:  # pragma: no cover
        return exc.errno != errno.ESRCH
    return True


def run_state(manifest: Mapping[str, Any] | None, out: Path) -> str | None:
    """The state of the run that wrote `out`, as a reader should show it: the manifest's `state`,
    except that a `running` manifest whose writer is gone is `interrupted` (SIGKILL, a lost machine,
    a kill -9 of the terminal). Gone means: its pid is not alive on this host, or (another host, or
    a manifest older than the pid field) nobody holds the output's lock. `journal status` and the
    viewer both read states through this."""
    if not manifest:
        return None
    state = manifest.get("state")
    if state != "running":
        return state
    writer = manifest.get("writer") or {}
    pid, host = writer.get("pid"), writer.get("host")
    if isinstance(pid, int) and host == socket.gethostname() and not _pid_alive(pid):
        return "interrupted"
    return "interrupted" if lock_is_held(out) is False else "running"
