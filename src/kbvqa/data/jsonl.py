"""The one JSONL reader and writer.

Lines are strict JSON (NaN and Infinity are refused, so jq, pyarrow and other readers agree with
us), UTF-8, one object per line. Reading is streamed and fast (orjson when installed); a bad line is
a `DataError` naming the file and the 1-based line, or — under a skipping `ErrorPolicy` — a counted
skip. Writing goes to a temporary file renamed over the target only when every line was written,
so a failed write never leaves a truncated file over a previous good one.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kbvqa.data.errors import DataError, ErrorPolicy

try:  # optional speed-up for reading
    import orjson as _orjson

    _loads = _orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson
    _loads = json.loads

__all__ = ["dumps_line", "gc_paused", "read_jsonl", "write_jsonl"]


def dumps_line(obj: Any) -> str:
    """One JSONL line, newline included. Strict JSON: NaN/Infinity raise ValueError."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def read_jsonl(path: str | Path, policy: ErrorPolicy | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for every non-blank line. A line that is not a JSON object is a
    DataError (file, line) — raised, or recorded and skipped when `policy` skips invalid rows."""
    policy = policy or ErrorPolicy()
    loads = _loads
    with open(path, "rb") as fh:
        lineno = 0
        for raw in fh:  # the scorers read ~1M lines: parse first, look at blanks only when that fails
            lineno += 1
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM, as CSV readers accept
                raw = raw[3:]
            try:
                obj = loads(raw)
            except ValueError as exc:
                if raw.strip():
                    policy.handle(DataError(f"invalid JSON ({exc})", file=path, row=lineno))
                continue
            if type(obj) is not dict:
                policy.handle(DataError(f"expected a JSON object, got {type(obj).__name__}", file=path, row=lineno))
                continue
            yield lineno, obj


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cycle collector while a loader builds a large table of records.

    Parsed JSON and the records made from it hold no reference cycles, so the collector finds nothing
    to free there, yet it runs again and again as the table grows (about a tenth of loading 300k
    InfoSeek references). Reference counting still frees everything as usual. Usable as a decorator
    on functions that return a whole table — not on generators, which would run after it ended.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write every record as one line to `path` atomically; returns the number of lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(dumps_line(rec))
                n += 1
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n
