"""The project's own format: one `Sample.dump()` per JSONL line.

Runner output lines are dumped samples with top-level `status`, `reason` and `attempts`; reading moves
those into `meta["run"]` so the same file can be audited again or converted to a public format.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.schema import Sample

RUN_KEYS = ("status", "reason", "attempts")


def sample_from_record(obj: dict[str, Any], *, file: str | Path | None = None,
                       row: int | None = None) -> Sample:
    """Validate one dumped sample (or runner record) into a Sample."""
    obj = dict(obj)
    run = {k: obj.pop(k) for k in RUN_KEYS if k in obj}
    if run:
        meta = dict(obj.get("meta") or {})
        meta["run"] = {**(meta.get("run") or {}), **run}
        obj["meta"] = meta
    try:
        return Sample.model_validate(obj)
    except ValidationError as e:
        raise from_validation_error(e, file=file, row=row) from None


def read_kbvqa(path: str | Path, *, policy: ErrorPolicy | None = None, **_: Any) -> Iterator[Sample]:
    policy = policy or ErrorPolicy()
    for lineno, obj in read_jsonl(path, policy):
        try:
            yield sample_from_record(obj, file=path, row=lineno)
        except DataError as e:
            policy.handle(e)


def write_kbvqa(samples: Iterable[Sample], path: str | Path, **_: Any) -> int:
    return write_jsonl(path, (s.dump() for s in samples))
