"""A lazily built byte-offset index of one JSONL output, so a 100k-record run opens at once.

The rules are `kbvqa.runner.sinks.scan_journal`'s (last line per id wins, first-seen order, a
truncated last line left by a crash is passed over), but the scan runs in a background thread and
publishes entries as it goes: the first page is served as soon as its lines are scanned, while
filters, search and counts wait for (or say they lack) the rest. Unlike the runner, the viewer does
not refuse a corrupt line: it becomes an entry with status `corrupt` and its reason, shown like any
record, never skipped. Each entry keeps a few facet values (label, action, tag...) taken by the
output's kind, so filtering never re-reads the file; memory grows with the number of records, not
with their size.

A file can change under the index between two looks at it (a run appending, or the end-of-run
compaction rewriting it in place of the old one, possibly to the same size within the same second).
So every read checks that the file is still the one indexed (its inode: a growing file still is) and
that the line at the offset still holds the record asked for (its id); if not, the file is indexed
again and the record looked up afresh: a page never shows another record than the one it names. The
scan itself restarts when the size, mtime or inode changed (looked at every `recheck_s`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("kbvqa.viewer")

#: Keys tried, in order, for a record's id in files that are not runner outputs.
ID_KEYS = ("id", "data_id", "sample_id", "anchor_data_id")

Facets = dict[str, tuple[str, ...]]
FacetFn = Callable[[dict[str, Any]], Facets]


@dataclass(frozen=True)
class Entry:
    """Where the last line of one record lives, and what its list row and filters need."""

    rid: str
    offset: int
    length: int
    line: int
    status: str | None
    facets: Facets = field(default_factory=dict)
    problem: str | None = None  # a corrupt line: why it could not be read


class StaleRecord(LookupError):
    """The file changed under the index and the record asked for is not in it any more (or the file
    kept changing while it was read)."""


def _stamp(st: Any) -> tuple[int, int, int, int]:
    """What says a file is still the one indexed: size, mtime, and its identity (a replacement by
    `os.replace`, as the compaction does, is a new inode even at the same size and mtime)."""
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def record_id(obj: Any, line: int) -> str:
    """The record's id; a line without one is named by its line number (`#12`), never dropped."""
    if isinstance(obj, dict):
        for k in ID_KEYS:
            v = obj.get(k)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v):
                return str(v)
    return f"#{line}"


class RecordIndex:
    """Byte offsets of the records of one JSONL file, filled by a background scan.

    `page`, `get` and `filtered` are safe to call while the scan runs: they wait (on a condition)
    for as much of the file as they need, at most `wait` seconds, and report whether the answer is
    complete. The index is rebuilt when the file's size, mtime or inode changes (a run still writing,
    a compaction), and when a read finds another record than the one indexed at its offset."""

    def __init__(self, path: Path, facet_fn: FacetFn | None = None):
        self.path = Path(path)
        self.facet_fn = facet_fn
        self._cond = threading.Condition()
        self._entries: list[Entry] = []
        self._pos: dict[str, int] = {}
        self._counts: dict[str, Counter] = {}
        self._postings: dict[str, dict[str, list[int]]] = {}  # facet -> value -> positions (may repeat)
        self._complete = False
        self._error: str | None = None
        self._bytes = 0
        self._size = 0
        self._stamp: tuple[int, int, int, int] | None = None
        self._thread: threading.Thread | None = None
        self.truncated_tail = 0
        self._checked = 0.0
        self.recheck_s = 1.0

    # -- scanning ------------------------------------------------------------------------------
    def start(self, *, force: bool = False) -> RecordIndex:
        """Start (or restart, when the file changed) the background scan; returns self. The file
        is looked at again at most every `recheck_s` seconds; `force` rescans it now, changed or not
        (a read found the index wrong)."""
        now = time.monotonic()
        if not force and self._thread is not None and now - self._checked < self.recheck_s:
            return self
        self._checked = now
        with self._cond:
            try:
                stamp = _stamp(self.path.stat())
            except OSError as exc:
                self._error, self._complete = f"{type(exc).__name__}: {exc}", True
                self._cond.notify_all()
                return self
            if not force and self._thread is not None and stamp == self._stamp:
                return self
            self._stamp, self._size = stamp, stamp[0]
            self._entries, self._pos, self._complete, self._bytes, self._error = [], {}, False, 0, None
            self._counts, self._postings = {}, {}
            self._thread = threading.Thread(target=self._scan, name=f"kbvqa-view-index:{self.path.name}", daemon=True)
            self._thread.start()
        return self

    def _scan(self) -> None:
        me = threading.current_thread()
        batch: list[tuple[str, Entry]] = []
        offset = 0
        try:
            with open(self.path, "rb") as f:
                for lineno, raw in enumerate(f, start=1):
                    if self._thread is not me:
                        return  # a newer scan replaced this one
                    length = len(raw)
                    stripped = raw.strip()
                    if stripped:
                        entry = self._entry(stripped, offset, length, lineno, partial=not raw.endswith(b"\n"))
                        if entry is not None:
                            batch.append((entry.rid, entry))
                    offset += length
                    if len(batch) >= 256:
                        self._publish(me, batch, offset)
                        batch = []
            self._publish(me, batch, offset, done=True)
        except OSError as exc:
            with self._cond:
                if self._thread is me:
                    self._error, self._complete = f"{type(exc).__name__}: {exc}", True
                    self._cond.notify_all()

    def _entry(self, stripped: bytes, offset: int, length: int, lineno: int, *, partial: bool) -> Entry | None:
        try:
            obj = orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            if partial:  # the runner's rule: a crash-truncated last line is not a record
                self.truncated_tail = length
                log.warning("%s: ignoring a truncated last line (%d bytes)", self.path, length)
                return None
            return Entry(f"#{lineno}", offset, length, lineno, "corrupt", {"status": ("corrupt",)},
                         problem=f"line {lineno}: not valid JSON ({exc})")
        if not isinstance(obj, dict):
            return Entry(f"#{lineno}", offset, length, lineno, "corrupt", {"status": ("corrupt",)},
                         problem=f"line {lineno}: not a JSON object")
        status = obj.get("status") if isinstance(obj.get("status"), str) else None
        facets: Facets = {}
        if self.facet_fn is not None:
            try:
                facets = self.facet_fn(obj)
            except Exception as exc:  # a record of an unexpected shape still lists, with the reason
                facets = {"facet error": (f"{type(exc).__name__}",)}
        if status:
            facets = {"status": (status,), **facets}
        return Entry(record_id(obj, lineno), offset, length, lineno, status, facets)

    def _publish(self, scanner: threading.Thread, batch: Iterable[tuple[str, Entry]], scanned: int,
                 done: bool = False) -> None:
        with self._cond:
            if self._thread is not scanner:
                return
            for rid, entry in batch:
                at = self._pos.get(rid)
                if at is None:
                    at = self._pos[rid] = len(self._entries)
                    self._entries.append(entry)
                else:  # last line per id wins, in first-seen position (read_results' order)
                    self._tally(self._entries[at], at, -1)
                    self._entries[at] = entry
                self._tally(entry, at, +1)
            self._bytes = scanned
            self._complete = done
            self._cond.notify_all()

    def _tally(self, entry: Entry, at: int, sign: int) -> None:
        """Keep the facet counts and postings up to date as entries come and are replaced (a stale
        posting left by a replaced line is dropped when a filter checks the entry itself)."""
        for k, vals in entry.facets.items():
            counts = self._counts.setdefault(k, Counter())
            for v in vals:
                counts[v] += sign
                if sign > 0:
                    self._postings.setdefault(k, {}).setdefault(v, []).append(at)

    # -- reading -------------------------------------------------------------------------------
    def wait(self, n: int | None = None, timeout: float = 30.0) -> bool:
        """Wait until `n` entries are known (None: the whole file); True if that holds now."""
        self.start()
        with self._cond:
            return self._cond.wait_for(lambda: self._complete or (n is not None and len(self._entries) >= n),
                                       timeout=timeout)

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def error(self) -> str | None:
        return self._error

    def progress(self) -> tuple[int, int]:
        """(bytes scanned, file size) for the 'still indexing' note."""
        return self._bytes, self._size

    def __len__(self) -> int:
        return len(self._entries)

    def page(self, start: int, count: int, *, wait: float = 30.0) -> list[Entry]:
        """Entries [start, start+count) in first-seen order, waiting only for those lines."""
        self.wait(start + count, timeout=wait)
        with self._cond:
            return self._entries[start:start + count]

    def entries(self, *, wait: float = 60.0) -> list[Entry]:
        """Every entry (after waiting for the whole scan, at most `wait` seconds)."""
        self.wait(None, timeout=wait)
        with self._cond:
            return list(self._entries)

    def find(self, rid: str, *, wait: float = 60.0) -> Entry | None:
        """The entry for an id: the whole file is scanned first, since a later line may replace it."""
        self.wait(None, timeout=wait)
        with self._cond:
            at = self._pos.get(rid)
            return self._entries[at] if at is not None else None

    def peek(self, rid: str) -> Entry | None:
        """The entry for an id if the scan has seen it; never waits (for cross-links)."""
        at = self._pos.get(rid)
        return self._entries[at] if at is not None else None

    def position(self, rid: str) -> int | None:
        return self._pos.get(rid)

    def read(self, entry: Entry) -> dict[str, Any]:
        """The record one entry points at (a corrupt line comes back as a record saying so), checked
        to be that record: when the file changed under the index (the line there is another record,
        or no record, or the file is not the one indexed) it is indexed again and the record read
        where it now lies. StaleRecord when it is gone, or the file keeps changing."""
        for _ in range(3):
            rec = self._read_at(entry)
            if rec is not None:
                return rec
            fresh = self._fresh(entry)
            if fresh is None:
                raise StaleRecord(f"record {entry.rid!r} is no longer in {self.path.name} (the file changed)")
            entry = fresh
        raise StaleRecord(f"{self.path.name} kept changing while record {entry.rid!r} was read: reload the page")

    def _read_at(self, entry: Entry) -> dict[str, Any] | None:
        """The record at the entry's offset if it is still the one indexed there, else None."""
        try:
            with open(self.path, "rb") as f:
                if self._stamp is None or _stamp(os.fstat(f.fileno()))[2:] != self._stamp[2:]:
                    return None  # another file now has this name (a growing one is still this file)
                f.seek(entry.offset)
                raw = f.read(entry.length)
        except OSError:
            return None
        if len(raw) != entry.length:
            return None
        if entry.problem:
            return {"id": entry.rid, "status": "corrupt", "reason": entry.problem,
                    "raw": raw.decode("utf-8", "replace")[:4000]}
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return obj if isinstance(obj, dict) and record_id(obj, entry.line) == entry.rid else None

    def _fresh(self, stale: Entry) -> Entry | None:
        """The entry for `stale`'s id after the file is indexed again (by a rebuild already under way
        or finished since `stale` was handed out, else one started now)."""
        self.wait(None, timeout=60.0)
        with self._cond:
            at = self._pos.get(stale.rid)
            current = self._entries[at] if at is not None else None
        if current is not None and current != stale:
            return current
        self.start(force=True)
        return self.find(stale.rid)

    def filtered(self, filters: dict[str, str], *, wait: float = 60.0) -> list[Entry]:
        """Entries whose facets hold every `facet=value` asked for (after the whole scan)."""
        if not filters:
            return self.entries(wait=wait)
        self.wait(None, timeout=wait)
        with self._cond:
            lists = [self._postings.get(k, {}).get(v, []) for k, v in filters.items()]
            candidates = sorted(set(min(lists, key=len)))
            entries = [self._entries[p] for p in candidates]
        return [e for e in entries if all(v in e.facets.get(k, ()) for k, v in filters.items())]

    def facet_counts(self) -> dict[str, Counter]:
        """Counts of each facet value over the entries scanned so far (complete tells if that is all)."""
        with self._cond:
            return {k: Counter({v: n for v, n in c.items() if n > 0}) for k, c in self._counts.items()}
