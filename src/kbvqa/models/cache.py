"""The one response cache every model call goes through (SQLite, WAL), and a run's model cassette.

Only deterministic calls are cached (temperature 0 or an explicit seed) and only `ok` results are
stored: errors and invalid replies are never cached, so resuming a run retries them. A reply a stage
refuses after parsing (`ChatResult.reject`) is forgotten the same way: its entry is replaced by a
marker that reads as a miss (`forget`), so a resumed run asks again and the next `ok` reply takes its
place. The key is a sha256 over canonical JSON of everything that decides the reply; the API key is
never part of it.

A `ModelCassette` is the other use of the same key: the record of one run. It keeps every call the
run made, whatever its status and whether or not the call was deterministic or answered by the
response cache, so that replaying the run gives back exactly what the run saw (an invalid reply
replays as invalid, a failed call as the same failure).
"""

from __future__ import annotations

import hashlib
import functools
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kbvqa.data.kvstore import KVStore
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
    """A schema as plain JSON Schema (pydantic classes via `model_json_schema`, built once per class:
    it cost ~1 ms of event-loop time per request, a sixth of a judge job's CPU). Read-only."""
    if schema is None:
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return _model_schema(schema)
    return dict(schema)


@functools.cache
def _model_schema(schema: type[BaseModel]) -> dict:
    return {"name": schema.__name__, "schema": schema.model_json_schema()}


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


#: what a forgotten entry holds: a marker, not a ChatResult (its first key tells it apart)
_REJECTED_KEY = "kbvqa_rejected"
_REJECTED_PREFIX = '{"' + _REJECTED_KEY + '"'


class ResponseCache:
    """`ok` ChatResults by request key, in a kbvqa.data.kvstore.KVStore (SQLite, WAL): safe to share
    between the tasks of an event loop and between threads; pickles as its path (Ray actors reopen
    the same file, with their own counters). `read_only`: a cassette being replayed, an input every
    node must have (never created or written)."""

    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.store = KVStore(path, table="chat_responses", read_only=read_only)
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self.forgotten = 0

    @property
    def path(self) -> Path:
        return self.store.path

    def node_inputs(self) -> dict[str, str]:
        return self.store.node_inputs()

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.store = state["store"]
        self.hits = self.misses = self.writes = self.forgotten = 0

    def get(self, key: str) -> ChatResult | None:
        """The stored result (as it was stored; callers mark it cached), or None."""
        raw = self.store.get(key)
        if raw is None or raw.startswith(_REJECTED_PREFIX):  # never stored, or a stage refused it
            self.misses += 1
            return None
        self.hits += 1
        return ChatResult.model_validate_json(raw)

    def put(self, key: str, result: ChatResult) -> bool:
        """Store an `ok` result; anything else is refused (returns False) so it is retried later."""
        if result.status != "ok":
            return False
        self.store.put(key, result.model_dump_json(), label=f"{result.provenance.backend}:{result.provenance.model}")
        self.writes += 1
        return True

    def forget(self, key: str, reason: str = "") -> None:
        """A stage refused the reply stored under `key` (`ChatResult.reject`): replace it by a marker
        that reads as a miss. Through the store's outbox like any write, so inside a record it lands
        after the entry the same record wrote, and a resumed run asks the model again."""
        marker = json.dumps({_REJECTED_KEY: reason[:500], "at": round(time.time(), 3)}, ensure_ascii=False)
        self.store.put(key, marker, label="rejected")
        self.forgotten += 1

    def __len__(self) -> int:
        return len(self.store)

    def stats(self) -> dict[str, Any]:
        """Counts for the run report: entries (forgotten ones under the label "rejected"), this
        process's hits/misses/writes/forgotten, per model."""
        return {"path": str(self.path), "entries": len(self.store), "hits": self.hits, "misses": self.misses,
                "writes": self.writes, "forgotten": self.forgotten, "by_model": self.store.labels()}

    def close(self) -> None:
        self.store.close()


class ModelCassette(ResponseCache):
    """Every model call of one run by request key, any status (see the module docstring). Written
    while a run records (`OpenAIChatClient.cassette`), read when it replays (`cassette_replay`)."""

    def put(self, key: str, result: ChatResult) -> bool:
        self.store.put(key, result.model_dump_json(), label=f"{result.provenance.backend}:{result.provenance.model}")
        self.writes += 1
        return True

    def forget(self, key: str, reason: str = "") -> None:
        """Never: the run's record keeps the reply it saw, refused or not (replay stays exact)."""
