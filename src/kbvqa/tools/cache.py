"""The tool-result cache, separate from the model cache: half of a run's cassette.

Key: backend name and version, tool, canonical arguments, the query image's sha256 (never its path
or URL, which change between machines) and the locale. Only `ok` and `empty` results are stored —
`empty` explicitly, since "nothing found" is an answer — while errors, quotas and blocks never are,
so a transient outage is retried on the next run instead of being replayed forever.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kbvqa.data.kvstore import KVStore
from kbvqa.tools.base import ToolResult

CACHEABLE = ("ok", "empty")


def tool_key(backend: str, version: str, tool: str, args: dict[str, Any], image_sha256: str | None,
             locale: str) -> str:
    payload = {"backend": backend, "version": version, "tool": tool, "args": args,
               "image": image_sha256 if tool == "image_search" else None, "locale": locale}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class ToolCache:
    def __init__(self, path: str | Path):
        self.store = KVStore(path, table="tool_results")
        self.hits = self.misses = self.writes = 0

    @property
    def path(self) -> Path:
        return self.store.path

    def get(self, key: str) -> ToolResult | None:
        raw = self.store.get(key)
        if raw is None:
            self.misses += 1
            return None
        self.hits += 1
        return ToolResult.model_validate_json(raw)

    def put(self, key: str, result: ToolResult) -> bool:
        if result.status not in CACHEABLE:
            return False
        self.store.put(key, result.model_dump_json(), label=result.tool)
        self.writes += 1
        return True

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "entries": len(self.store), "hits": self.hits, "misses": self.misses,
                "writes": self.writes, "by_tool": self.store.labels()}
