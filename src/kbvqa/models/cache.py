"""The one response cache every model call goes through (SQLite, WAL).

Only deterministic calls are cached (temperature 0 or an explicit seed) and only `ok` results are
stored: errors and invalid replies are never cached, so resuming a run retries them. The key is a
sha256 over canonical JSON of everything that decides the reply; the API key is never part of it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kbvqa.models.result import ChatResult


def _default(o: Any) -> Any:
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    if isinstance(o, type) and issubclass(o, BaseModel):
        return schema_json(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    if isinstance(o, (bytes, bytearray)):
        return {"sha256": hashlib.sha256(o).hexdigest()}
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot build a cache key from {type(o).__name__}")


def canonical_json(obj: Any) -> str:
    """Sorted-key, compact JSON: equal requests give byte-equal strings."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)


def schema_json(schema: type[BaseModel] | dict | None) -> dict | None:
    """A schema as plain JSON Schema (pydantic classes via `model_json_schema`)."""
    if schema is None:
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return {"name": schema.__name__, "schema": schema.model_json_schema()}
    return dict(schema)


def make_key(backend: str, base_url: str | None, model: str | None, messages: list[dict],
             params: dict[str, Any] | None, prompt_version: str = "",
             schema: type[BaseModel] | dict | None = None) -> str:
    """sha256 hex of the canonical request. Params with value None are dropped so that
    `max_tokens=None` and an absent max_tokens share a key."""
    clean = {k: v for k, v in (params or {}).items() if v is not None}
    payload = {"backend": backend, "base_url": base_url or "", "model": model or "",
               "messages": messages, "params": clean, "prompt_version": prompt_version or "",
               "schema": schema_json(schema)}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def is_deterministic(params: dict[str, Any]) -> bool:
    """Cacheable only when the reply should repeat: temperature 0 or a seed is given."""
    if params.get("seed") is not None:
        return True
    t = params.get("temperature")
    return t is not None and float(t) == 0.0


class ResponseCache:
    """SQLite (WAL) store of `ok` ChatResults by request key.

    Calls are short synchronous statements behind a threading lock, so one instance is safe to share
    between the tasks of an event loop and between threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, created REAL NOT NULL, "
            "backend TEXT, model TEXT, response TEXT NOT NULL)")
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def get(self, key: str) -> ChatResult | None:
        """The stored result (as it was stored; callers mark it cached), or None."""
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return ChatResult.model_validate_json(row[0])

    def put(self, key: str, result: ChatResult) -> bool:
        """Store an `ok` result; anything else is refused (returns False) so it is retried later."""
        if result.status != "ok":
            return False
        body = result.model_dump_json()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, created, backend, model, response) VALUES (?,?,?,?,?)",
                (key, time.time(), result.provenance.backend, result.provenance.model, body))
        self.writes += 1
        return True

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def stats(self) -> dict[str, Any]:
        """Counts for the run report: entries, this process's hits/misses/writes, per model."""
        with self._lock:
            per_model = self._db.execute(
                "SELECT backend, model, COUNT(*) FROM responses GROUP BY backend, model").fetchall()
            total = self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return {"path": str(self.path), "entries": total, "hits": self.hits, "misses": self.misses,
                "writes": self.writes,
                "by_model": {f"{b}:{m}": n for b, m, n in per_model}}

    def close(self) -> None:
        with self._lock:
            self._db.close()
