"""The tool-result cache, separate from the model cache: half of a run's cassette.

Key: backend name and version, tool, canonical arguments, the query image (for `image_search`: its
bytes' sha256 — never its path, which changes between machines — or, for a sample with no local image
file, its URL) and the locale. Every result is stored, errors, quota and blocked results included,
because a replay must give the episode exactly what the run saw. A live run reuses only `ok` and
`empty` results (`empty` explicitly, since "nothing found" is an answer): an error stored by an
earlier run is tried again, so a transient outage is never replayed into a new run.

The same file keeps the harness's wall-time stops (`stops` table: record id -> the turn and the point
where `--max-seconds` ended the tool phase). Time is the one thing a replay cannot re-measure, so a
replay stops each episode where the recorded run stopped, not by its own clock.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kbvqa.data.kvstore import KVStore
from kbvqa.tools.base import ToolResult

CACHEABLE = ("ok", "empty")


def query_image_key(image_sha256: str | None, image_url: str | None) -> str | None:
    """What identifies the query image in a key: its bytes' hash, else (no local file) its URL."""
    if image_sha256:
        return image_sha256
    return f"url:{image_url}" if image_url else None


def tool_key(backend: str, version: str, tool: str, args: dict[str, Any], image: str | None,
             locale: str) -> str:
    """`image`: `query_image_key` of the episode's query image (used by image_search only)."""
    payload = {"backend": backend, "version": version, "tool": tool, "args": args,
               "image": image if tool == "image_search" else None, "locale": locale}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class ToolCache:
    """`read_only`: a cassette being replayed, an input every node must have (never created or written)."""

    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.store = KVStore(path, table="tool_results", read_only=read_only)
        self._stop_store: KVStore | None = None
        self.hits = self.misses = self.writes = 0

    @property
    def path(self) -> Path:
        return self.store.path

    def node_inputs(self) -> dict[str, str]:
        return self.store.node_inputs()

    def get(self, key: str, *, replay: bool = False) -> ToolResult | None:
        """The stored result; a live run (`replay=False`) gets only a reusable one (`CACHEABLE`)."""
        raw = self.store.get(key)
        result = ToolResult.model_validate_json(raw) if raw is not None else None
        if result is None or (not replay and result.status not in CACHEABLE):
            self.misses += 1
            return None
        self.hits += 1
        return result

    def put(self, key: str, result: ToolResult) -> bool:
        self.store.put(key, result.model_dump_json(), label=result.tool)
        self.writes += 1
        return True

    def note_stop(self, record_id: str, turn: int, where: str) -> None:
        """One of the recorded run's wall-time stops in an episode (`where`: before_turn, ask, tool or
        forced_ask; at most two: the tool phase's end, and the forced turn's if even the reserve ran out)."""
        stops = [s for s in self.recorded_stops(record_id) if s != (turn, where)] + [(turn, where)]
        self._stops().put(record_id, json.dumps(stops), label="wall_time")

    def recorded_stops(self, record_id: str) -> list[tuple[int, str]]:
        raw = self._stops().get(record_id)
        return [(int(t), str(w)) for t, w in json.loads(raw)] if raw is not None else []

    def _stops(self) -> KVStore:
        if self._stop_store is None:  # opened on first use: most runs never stop for time
            self._stop_store = KVStore(self.path, table="stops", read_only=self.store.read_only)
        return self._stop_store

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "entries": len(self.store), "hits": self.hits, "misses": self.misses,
                "writes": self.writes, "by_tool": self.store.labels()}
