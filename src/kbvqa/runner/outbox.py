"""The driver's half of the outbox (kbvqa.data.outbox): apply a record's side writes before its line.

Every executor hands `emit` the writes `run_record` collected; the runner applies them here, in the
driver, then journals the line. So the journal never names an artifact or a cassette entry that is
not on disk, and a side file is written by exactly one process whichever executor ran the record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kbvqa.data.kvstore import KVStore
from kbvqa.data.outbox import EntryWrite, FileWrite, LineAppend, apply_file, apply_line, is_worker
from kbvqa.runner.write_errors import as_write_failure

__all__ = ["Writer"]


class Writer:
    """Applies side writes in the driver; keeps the KV stores it opened until `close` (one per file and table)."""

    def __init__(self) -> None:
        self._stores: dict[tuple[str, str], KVStore] = {}
        self.files = self.entries = 0

    def apply(self, writes: Iterable[FileWrite | EntryWrite | LineAppend]) -> None:
        if is_worker():
            raise RuntimeError("a worker never applies side writes: they go back to the driver with the record")
        for w in writes:
            try:
                self._apply_one(w)
            except Exception as exc:  # a full disk or a read-only folder: say which file, in one line
                failed = as_write_failure(exc, w.path if isinstance(w, EntryWrite) else w.target)
                if failed is None or failed is exc:
                    raise  # not a write failure, or one that names its file already
                raise failed from exc

    def _apply_one(self, w: FileWrite | EntryWrite | LineAppend) -> None:
        if isinstance(w, FileWrite):
            apply_file(w)
            self.files += 1
        elif isinstance(w, LineAppend):
            apply_line(w)
            self.files += 1
        else:
            self._store(w.path, w.table).put_now(w.key, w.value, w.label, w.created)
            self.entries += 1

    def _store(self, path: str, table: str) -> KVStore:
        store = self._stores.get((path, table))
        if store is None:
            store = self._stores[(path, table)] = KVStore(path, table=table)
        return store

    def counts(self) -> dict[str, Any]:
        return {"files": self.files, "entries": self.entries}

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
