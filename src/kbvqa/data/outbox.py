"""Side files travel with their record; the driver alone writes them.

ARCHITECTURE.md: "The driver owns paths and writes; workers read and return." A store that keeps
something beside a run's output — agent artifacts, cassette entries (model calls, tool results,
wall-time stops), harvested images, verdict caches, the response cache — never opens a file for
writing inside a record. It calls `write_file` or `defer_entry`; inside a record (`run_record` opens
an `Outbox` for it) the write is collected and returned with the record's line, and the driver
applies it (`kbvqa.runner.outbox.Writer`) before it journals that line, so a record's side files are on disk
before its line says it is done.

One code path for both executors: locally the driver is the process that ran the record; on Ray the
writes come back with the batch's results. Nodes without a shared writable filesystem therefore end
with exactly the files a local run leaves, all under the driver's output.

- **Outside a record** (a pipeline preparing its output folder in the driver) a write happens at once.
- **In a worker process** (`mark_worker`: a Ray actor) nothing is ever written: a write outside a
  record raises, and a store whose file is missing there reads as empty instead of creating it.
- **A record reads its own writes**: `pending_entry` answers a KV read from the record's outbox, and
  `readable(path)` gives a file written earlier in the record, staged in a private temporary folder
  that is removed when the record ends (never the worker's working folder).
"""

from __future__ import annotations

import contextvars
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EntryWrite", "FileWrite", "LineAppend", "Outbox", "append_line", "apply_file", "apply_line",
           "collecting", "current", "defer_entry", "is_worker", "mark_worker", "readable", "write_file"]


@dataclass(frozen=True)
class FileWrite:
    """A whole file at an absolute `target`: its bytes, or (in the driver) a file to link or copy."""

    target: str
    data: bytes | None = None
    source: str | None = None


@dataclass(frozen=True)
class EntryWrite:
    """One row of a KV store (kbvqa.data.kvstore): the store's absolute path and table, the row."""

    path: str
    table: str
    key: str
    value: str
    label: str
    created: float


@dataclass(frozen=True)
class LineAppend:
    """One line appended to a text file at an absolute `target` (a JSONL record-mode cassette)."""

    target: str
    line: str


_WORKER = {"on": False}
_CURRENT: contextvars.ContextVar["Outbox | None"] = contextvars.ContextVar("kbvqa_outbox", default=None)


def mark_worker(on: bool = True) -> None:
    """This process only runs records for a driver elsewhere (a Ray actor): it never writes files."""
    _WORKER["on"] = on


def is_worker() -> bool:
    return _WORKER["on"]


class Outbox:
    """The side writes of one record, in the order they were made."""

    def __init__(self) -> None:
        self.writes: list[FileWrite | EntryWrite | LineAppend] = []
        self._lock = threading.Lock()  # stages write from worker threads too (asyncio.to_thread)
        self._stage: Path | None = None

    def add(self, write: FileWrite | EntryWrite | LineAppend) -> None:
        with self._lock:
            self.writes.append(write)

    def pending_entry(self, path: str, table: str, key: str) -> str | None:
        with self._lock:
            for w in reversed(self.writes):
                if isinstance(w, EntryWrite) and w.key == key and w.table == table and w.path == path:
                    return w.value
        return None

    def pending_file(self, target: str) -> FileWrite | None:
        with self._lock:
            return next((w for w in reversed(self.writes) if isinstance(w, FileWrite) and w.target == target), None)

    def readable(self, target: Path) -> Path:
        """`target` itself, or a staged copy of what this record wrote there and the driver has not yet."""
        w = self.pending_file(str(target))
        if w is None:
            return target
        if w.source is not None:
            return Path(w.source)
        with self._lock:
            if self._stage is None:
                self._stage = Path(tempfile.mkdtemp(prefix="kbvqa-staged-"))
            staged = self._stage / f"{len(self.writes)}-{target.name}"
        staged.write_bytes(w.data or b"")
        return staged

    def close(self) -> None:
        if self._stage is not None:
            shutil.rmtree(self._stage, ignore_errors=True)
            self._stage = None


def current() -> Outbox | None:
    return _CURRENT.get()


@contextmanager
def collecting() -> Iterator[Outbox]:
    """Collect the side writes of the code inside (one record, and every task and thread it starts)."""
    box = Outbox()
    token = _CURRENT.set(box)
    try:
        yield box
    finally:
        _CURRENT.reset(token)
        box.close()


def _no_write_here(what: str) -> RuntimeError:
    return RuntimeError(f"a worker never writes files ({what}): side files go back to the driver with their "
                        "record, so this write must happen inside a record (kbvqa.data.outbox)")


def write_file(target: str | Path, data: bytes | None = None, *, source: str | Path | None = None) -> None:
    """Write `data` (or a copy of `source`) to the absolute path `target`: deferred to the driver inside a
    record, at once in the driver outside one."""
    target = Path(target)
    if not target.is_absolute():
        raise ValueError(f"side file {target} is relative: the driver resolves every path before a job ships")
    if (data is None) == (source is None):
        raise ValueError("write_file takes exactly one of data and source")
    box = _CURRENT.get()
    if source is not None and (box is None and not is_worker()):
        apply_file(FileWrite(str(target), source=str(source)))
        return
    if source is not None and is_worker():  # the driver cannot read the worker's file: ship the bytes
        data, source = Path(source).read_bytes(), None
    write = FileWrite(str(target), data=data, source=str(source) if source is not None else None)
    if box is not None:
        box.add(write)
    elif is_worker():
        raise _no_write_here(str(target))
    else:
        apply_file(write)


def defer_entry(write: EntryWrite) -> bool:
    """True when the entry was collected for the driver; False when the caller (the driver, outside a
    record) should write it now. Raises in a worker outside a record."""
    box = _CURRENT.get()
    if box is not None:
        box.add(write)
        return True
    if is_worker():
        raise _no_write_here(f"{write.path} [{write.table}]")
    return False


def append_line(target: str | Path, line: str) -> None:
    """Append `line` (no newline) to the absolute path `target`: deferred to the driver inside a record, at
    once in the driver outside one; never in a worker outside a record."""
    target = Path(target)
    if not target.is_absolute():
        raise ValueError(f"side file {target} is relative: the driver resolves every path before a job ships")
    write = LineAppend(str(target), line)
    box = _CURRENT.get()
    if box is not None:
        box.add(write)
    elif is_worker():
        raise _no_write_here(str(target))
    else:
        apply_line(write)


def apply_line(w: LineAppend) -> None:
    target = Path(w.target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as f:
        f.write(w.line + "\n")


def readable(target: str | Path) -> Path:
    """The path to read `target` from: a staged copy when the current record wrote it and the driver
    has not applied it yet, else `target`."""
    box = _CURRENT.get()
    return box.readable(Path(target)) if box is not None else Path(target)


def apply_file(w: FileWrite) -> None:
    target = Path(w.target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    if w.source is not None:
        try:
            os.link(w.source, tmp)  # a hard link where the file system allows
        except OSError:
            shutil.copyfile(w.source, tmp)
    else:
        tmp.write_bytes(w.data or b"")
    os.replace(tmp, target)
