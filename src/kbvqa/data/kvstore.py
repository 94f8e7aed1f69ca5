"""A small SQLite (WAL) key → JSON store: what the model response cache, the tool cache, the cassettes
and the reference verdicts sit on.

Calls are short synchronous statements behind a lock, so one instance is safe to share between the
tasks of an event loop and between threads. It pickles as its absolute path (a copy in another
process, e.g. a Ray actor, reads the same file).

Writes follow the outbox (kbvqa.data.outbox): inside a record a `put` is collected and applied by
the driver, and a read in that record sees it (`pending_entry`). A store never creates its file in a
worker process, nor when it is `read_only` (a cassette being replayed): a missing file or table
reads as empty there, so a worker never leaves an empty database behind that a later run would
take for a recording.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from kbvqa.data import outbox


class KVStore:
    def __init__(self, path: str | Path, table: str = "entries", *, read_only: bool = False):
        if not table.isidentifier():
            raise ValueError(f"bad table name {table!r}")
        self.path, self.table, self.read_only = Path(path), table, read_only
        self._setup()
        if not (read_only or outbox.is_worker()):
            self._connect()  # the driver creates its store at once (an empty cassette is still a cassette)

    @property
    def _memory(self) -> bool:
        return str(self.path) == ":memory:"

    def _setup(self) -> None:
        self._abs = str(self.path if self._memory else self.path.resolve())  # what outbox writes name
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection | None:
        """The connection, opened on first use; None where the store may not create its file and it
        does not exist (yet: the driver may write it later, so this is asked again)."""
        if self._db is not None:
            return self._db
        if self._memory or not (self.read_only or outbox.is_worker()):
            if not self._memory:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=10000")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, created REAL NOT NULL, "
                       "label TEXT, value TEXT NOT NULL)")
        else:
            if not Path(self._abs).is_file():
                return None
            db = sqlite3.connect(f"{Path(self._abs).as_uri()}?mode=ro", uri=True, check_same_thread=False,
                                 isolation_level=None)
            db.execute("PRAGMA busy_timeout=10000")
        self._db = db
        return db

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            db = self._connect()
            if db is None:
                return []
            try:
                return db.execute(sql.format(table=self.table), args).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc) and db is not None and (self.read_only or outbox.is_worker()):
                    return []  # a table the driver has not created (yet): empty
                raise

    def __getstate__(self) -> dict[str, Any]:
        """The path, made absolute (a copy in another process opens the same file); `:memory:` has
        no file, so a copy of an in-memory store starts empty."""
        return {"path": Path(self._abs), "table": self.table, "read_only": self.read_only}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.table, self.read_only = state["path"], state["table"], state.get("read_only", False)
        self._setup()  # opened on first use: a worker that never reads never touches the file

    def node_inputs(self) -> dict[str, str]:
        """A read-only store is an input every node reads at this absolute path (the runner checks it)."""
        return {self._abs: f"read-only store [{self.table}]"} if self.read_only else {}

    def _pending(self, key: str) -> str | None:
        box = outbox.current()
        return None if box is None or self._memory else box.pending_entry(self._abs, self.table, key)

    def get(self, key: str) -> str | None:
        pending = self._pending(key)
        if pending is not None:
            return pending
        rows = self._rows("SELECT value FROM {table} WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def put(self, key: str, value: str, label: str = "") -> None:
        """Store a row: collected for the driver inside a record (kbvqa.data.outbox), written now outside."""
        if self.read_only:
            raise PermissionError(f"{self.path} [{self.table}] is open read-only")
        now = time.time()
        if not self._memory and outbox.defer_entry(outbox.EntryWrite(self._abs, self.table, key, value, label, now)):
            return
        self.put_now(key, value, label, now)

    def put_now(self, key: str, value: str, label: str = "", created: float | None = None) -> None:
        """Write a row to the file at once (the driver applying a record's writes, or code outside records)."""
        with self._lock:
            db = self._connect()
            if db is None:
                raise PermissionError(f"{self.path} [{self.table}]: this process may not create the store")
            db.execute(f"INSERT OR REPLACE INTO {self.table} (key, created, label, value) VALUES (?,?,?,?)",
                       (key, time.time() if created is None else created, label, value))

    def labels(self) -> dict[str, int]:
        """Entries per label (e.g. per model or per tool), for run reports."""
        rows = self._rows("SELECT label, COUNT(*) FROM {table} GROUP BY label")
        return {str(k): int(n) for k, n in rows}

    def items(self) -> Iterator[tuple[str, str]]:
        return iter(self._rows("SELECT key, value FROM {table} ORDER BY key"))

    def __len__(self) -> int:
        rows = self._rows("SELECT COUNT(*) FROM {table}")
        return int(rows[0][0]) if rows else 0

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
