"""A small SQLite (WAL) key → JSON store: what the model response cache and the tool cache sit on.

Calls are short synchronous statements behind a lock, so one instance is safe to share between the
tasks of an event loop and between threads. It pickles as its path (a copy in another process, e.g.
a Ray actor, reopens the same file).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator


class KVStore:
    def __init__(self, path: str | Path, table: str = "entries"):
        if not table.isidentifier():
            raise ValueError(f"bad table name {table!r}")
        self.path, self.table = Path(path), table
        self._open()

    def _open(self) -> None:
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, created REAL NOT NULL, "
                         "label TEXT, value TEXT NOT NULL)")

    def __getstate__(self) -> dict[str, Any]:
        """The path, made absolute (a copy in another process opens the same file); `:memory:` has
        no file, so a copy of an in-memory store starts empty."""
        path = self.path if str(self.path) == ":memory:" else self.path.resolve()
        return {"path": path, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.table = state["path"], state["table"]
        self._open()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute(f"SELECT value FROM {self.table} WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, value: str, label: str = "") -> None:
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO {self.table} (key, created, label, value) VALUES (?,?,?,?)",
                             (key, time.time(), label, value))

    def labels(self) -> dict[str, int]:
        """Entries per label (e.g. per model or per tool), for run reports."""
        with self._lock:
            rows = self._db.execute(f"SELECT label, COUNT(*) FROM {self.table} GROUP BY label").fetchall()
        return {str(k): int(n) for k, n in rows}

    def items(self) -> Iterator[tuple[str, str]]:
        with self._lock:
            rows = self._db.execute(f"SELECT key, value FROM {self.table} ORDER BY key").fetchall()
        return iter(rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
