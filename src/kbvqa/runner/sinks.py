"""Where finished records go: an append-only JSONL journal, its compaction, and a Parquet copy.

The JSONL file is the source of truth. During a run each finished record is appended as one line and
flushed at once, so a killed process loses only the records that were still in flight; a later run
reads the journal back (last line per id wins) to decide what to skip. Compaction rewrites the file
atomically with one line per id. Everything here streams: memory grows with the number of ids
(a byte offset each), never with the size of the records.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO


log = logging.getLogger("kbvqa.runner")


#: Parquet schema metadata key listing the columns stored as JSON text.
PARQUET_JSON_COLUMNS_KEY = b"kbvqa.json_columns"


class JournalError(ValueError):
    """A corrupt line inside a journal (not a crash-truncated last line): resuming on it could lose
    or repeat records, so the run refuses, naming the file and line and the way out."""

    def __init__(self, path: Path, line: int, problem: str):
        self.path, self.line = Path(path), line
        super().__init__(f"{path}:{line}: corrupt JSONL line in the journal ({problem}); run `kbvqa journal repair {path}` to move "
                         "corrupt lines aside (their records run again), or start over with --no-resume")


def repair_journal(path: Path) -> tuple[int, Path | None]:
    """Move every corrupt line of a journal to `<journal>.corrupt-<UTC time>.jsonl` (kept, never
    deleted) and keep the good ones in place, atomically. Returns (lines moved, where they went)."""
    from datetime import datetime, timezone

    path = Path(path)
    good: list[bytes] = []
    bad: list[bytes] = []
    with open(path, "rb") as f:
        for raw in f:
            stripped = raw.strip()
            if not stripped:
                continue
            try:
                obj = json.loads(stripped)
                ok = isinstance(obj, dict) and isinstance(obj.get("id"), str)
            except ValueError:
                ok = False
            (good if ok else bad).append(raw if raw.endswith(b"\n") else raw + b"\n")
    if not bad:
        return 0, None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}.jsonl")
    aside.write_bytes(b"".join(bad))
    tmp = path.with_name(path.name + ".repair.tmp")
    try:
        tmp.write_bytes(b"".join(good))
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_dir(path.parent)
    return len(bad), aside


@dataclass(frozen=True)
class JournalEntry:
    """Where the last line for one id lives, and what it said."""

    offset: int
    length: int
    status: str | None
    attempts: int


def _fsync_dir(path: Path) -> None:
    """Make a rename durable. Not every platform allows opening a directory; that is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def scan_journal(path: Path) -> tuple[dict[str, JournalEntry], list[str]]:
    """Index a journal: for each id the offset of its last line, plus ids in first-seen order.

    A final line without a newline that is not valid JSON is a write cut short by a crash and is
    ignored (with a warning). A bad line anywhere else is real corruption and raises JournalError.
    """
    path = Path(path)
    index: dict[str, JournalEntry] = {}
    order: list[str] = []
    if not path.exists():
        return index, order
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            length = len(raw)
            is_last_partial = not raw.endswith(b"\n")
            stripped = raw.strip()
            if stripped:
                try:
                    obj = json.loads(stripped)
                except ValueError as exc:
                    if is_last_partial:
                        log.warning("%s: ignoring a truncated last line (%d bytes) left by an interrupted run",
                                    path, length)
                        break
                    raise JournalError(path, lineno, f"not valid JSON ({exc})") from None
                if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
                    raise JournalError(path, lineno, "not a JSON object with a string 'id'")
                rid = obj["id"]
                if rid not in index:
                    order.append(rid)
                attempts = obj.get("attempts")
                index[rid] = JournalEntry(offset=offset, length=length, status=obj.get("status"),
                                          attempts=attempts if isinstance(attempts, int) else 1)
            offset += length
    return index, order


def _read_at(f: BinaryIO, entry: JournalEntry) -> bytes:
    f.seek(entry.offset)
    raw = f.read(entry.length)
    return raw if raw.endswith(b"\n") else raw + b"\n"


def read_results(out: Path) -> Iterator[dict[str, Any]]:
    """Yield one dict per id from a runner output file: the last line for each id, in first-seen
    order (after compaction that is input order). Tolerates a truncated final line."""
    out = Path(out)
    index, order = scan_journal(out)
    with open(out, "rb") as f:
        for rid in order:
            yield json.loads(_read_at(f, index[rid]))


class JsonlJournal:
    """Append-only JSONL writer: flush after every line, fsync every `fsync_every` lines and on close.

    Opening repairs the tail first: a crash can leave a last line without its newline, and appending
    straight after it would glue two records together. A complete-but-unterminated line gets its
    newline; a partial one is cut off (that record was in flight and will run again).
    """

    def __init__(self, path: Path, *, fsync_every: int = 100):
        if fsync_every < 1:
            raise ValueError("fsync_every must be >= 1")
        self.path = Path(path)
        self.fsync_every = fsync_every
        self._f: BinaryIO | None = None
        self._unsynced = 0
        self.lines_written = 0

    @staticmethod
    def repair_tail(path: Path) -> int:
        """Make the file end with a newline; return how many bytes of a partial last line were cut."""
        path = Path(path)
        if not path.exists() or path.stat().st_size == 0:
            return 0
        with open(path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return 0
            # Find the start of the unterminated last line.
            pos, chunk = size, 65536
            start = 0
            while pos > 0:
                read_from = max(0, pos - chunk)
                f.seek(read_from)
                buf = f.read(pos - read_from)
                nl = buf.rfind(b"\n")
                if nl >= 0:
                    start = read_from + nl + 1
                    break
                pos = read_from
            f.seek(start)
            tail = f.read()
            try:
                obj = json.loads(tail)
                complete = isinstance(obj, dict) and isinstance(obj.get("id"), str)
            except ValueError:
                complete = False
            if complete:
                f.seek(0, os.SEEK_END)
                f.write(b"\n")
                return 0
            f.truncate(start)
        log.warning("%s: cut a truncated last line (%d bytes) left by an interrupted run; "
                    "that record will run again", path, size - start)
        return size - start

    def open(self) -> "JsonlJournal":
        self.repair_tail(self.path)
        self._f = open(self.path, "ab")
        return self

    def write_line(self, line: str) -> None:
        assert self._f is not None, "journal is not open"
        self._f.write(line.encode("utf-8"))
        self._f.flush()
        self.lines_written += 1
        self._unsynced += 1
        if self._unsynced >= self.fsync_every:
            self.sync()

    def sync(self) -> None:
        if self._f is not None and not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._unsynced = 0

    def close(self) -> None:
        if self._f is not None and not self._f.closed:
            try:
                self.sync()
            finally:
                self._f.close()


def compact_journal(path: Path, order: Iterable[str] = ()) -> int:
    """Rewrite the journal with exactly one line per id (its last one), atomically.

    Ids are written in `order` first (the input order of this run), then any other ids the file holds
    (e.g. from an earlier run over a longer input) in first-seen order, so nothing is dropped. Lines
    are copied byte for byte. Returns the number of lines written.
    """
    path = Path(path)
    index, seen_order = scan_journal(path)
    tmp = path.with_name(path.name + ".compact.tmp")
    written: set[str] = set()
    n = 0
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for rid in list(order) + seen_order:
                if rid in written or rid not in index:
                    continue
                dst.write(_read_at(src, index[rid]))
                written.add(rid)
                n += 1
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: the journal stays as it was (resumable), the half copy goes
        _remove_quietly(tmp)
        raise
    _fsync_dir(path.parent)
    return n


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # pragma: no cover - the folder went read-only: the error that got us here matters more
        pass


# ---------------------------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------------------------

_SCALARS = {str: "string", bool: "bool", int: "int64", float: "float64"}
_INT64 = (-(2**63), 2**63 - 1)


def _parquet_plan(rows: Iterable[dict[str, Any]]) -> tuple[list[str], dict[str, str | None], int]:
    """Decide each column's storage from one pass: native scalar type, or None meaning JSON text.

    A column is native only when every row has it, with a non-null value of one scalar type, so
    reading back gives the very same dicts. Anything else (lists, dicts, mixed types, nulls, keys
    missing in some rows) is stored as JSON text: a missing key is a Parquet null and an explicit
    null is the text "null", so even that difference survives the round trip.
    """
    columns: list[str] = []
    kinds: dict[str, str | None] = {}
    present: dict[str, int] = {}
    n = 0
    for row in rows:
        n += 1
        for k, v in row.items():
            if k not in kinds:
                columns.append(k)
                kinds[k] = _SCALARS.get(type(v))
                present[k] = 0
            present[k] += 1
            kind = kinds[k]
            if kind is not None:
                if _SCALARS.get(type(v)) != kind:
                    kinds[k] = None
                elif kind == "int64" and not (_INT64[0] <= v <= _INT64[1]):
                    kinds[k] = None
    for k in columns:
        if present[k] != n:
            kinds[k] = None
    return columns, kinds, n


def write_parquet(jsonl_path: Path, parquet_path: Path, *, batch_rows: int = 2048) -> int:
    """Write the rows of a (compacted) runner output as Parquet beside it; returns the row count.

    Scalar columns are native Parquet types; nested or irregular columns are JSON text, listed in the
    schema metadata under `kbvqa.json_columns` so `read_parquet` (or any reader) can decode them.
    JSON text was chosen over native structs because structs merge the keys of all rows (a `meta`
    dict with different keys per row comes back padded with nulls) and cannot hold mixed types.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl_path, parquet_path = Path(jsonl_path), Path(parquet_path)
    columns, kinds, _ = _parquet_plan(read_results(jsonl_path))
    types = {"string": pa.string(), "bool": pa.bool_(), "int64": pa.int64(), "float64": pa.float64()}
    json_cols = [c for c in columns if kinds[c] is None]
    schema = pa.schema([pa.field(c, types[kinds[c]] if kinds[c] else pa.string(), nullable=True)
                        for c in columns],
                       metadata={PARQUET_JSON_COLUMNS_KEY: json.dumps(json_cols).encode()})
    tmp = parquet_path.with_name(parquet_path.name + ".tmp")
    n = 0

    def flush(batch: list[dict[str, Any]], writer: Any) -> None:
        data: dict[str, list[Any]] = {c: [] for c in columns}
        for row in batch:
            for c in columns:
                if kinds[c] is None:
                    data[c].append(json.dumps(row[c], ensure_ascii=False, allow_nan=False)
                                   if c in row else None)
                else:
                    data[c].append(row[c])
        writer.write_table(pa.Table.from_pydict(data, schema=schema))

    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            batch: list[dict[str, Any]] = []
            for row in read_results(jsonl_path):
                batch.append(row)
                n += 1
                if len(batch) >= batch_rows:
                    flush(batch, writer)
                    batch = []
            if batch or n == 0:
                flush(batch, writer)
        os.replace(tmp, parquet_path)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return n


def read_parquet(path: Path) -> Iterator[dict[str, Any]]:
    """Read a Parquet file written by `write_parquet` back into the same dicts as the JSONL rows."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    meta = pf.schema_arrow.metadata or {}
    json_cols = set(json.loads(meta.get(PARQUET_JSON_COLUMNS_KEY, b"[]")))
    for batch in pf.iter_batches():
        for row in batch.to_pylist():
            out: dict[str, Any] = {}
            for k, v in row.items():
                if k in json_cols:
                    if v is None:
                        continue  # the key was absent in this row
                    out[k] = json.loads(v)
                else:
                    out[k] = v
            yield out
