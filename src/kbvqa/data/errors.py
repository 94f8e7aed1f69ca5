"""Errors raised by the dataset adapters, and the report kept when bad rows are skipped.

Every adapter raises `DataError` for input it cannot turn into a Sample, naming the file, the row and
the field, so a user can open the file and fix it. With `skip_invalid` the caller collects the same
errors in a `SkipReport` instead of stopping; nothing is dropped without being counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DataError(Exception):
    """Input that cannot be read: `file`, 1-based `row` (JSONL line / CSV record with the header as
    row 1 / Parquet record), the offending `field`, and a human `message`."""

    def __init__(self, message: str, *, file: str | Path | None = None, row: int | None = None,
                 field: str | None = None):
        self.message = message
        self.file = str(file) if file is not None else None
        self.row = row
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        return f"{', '.join(where)}: {self.message}" if where else self.message

    def with_location(self, *, file: str | Path | None = None, row: int | None = None) -> "DataError":
        """Fill in file/row that a lower-level parser did not know."""
        if self.file is None and file is not None:
            self.file = str(file)
        if self.row is None and row is not None:
            self.row = row
        self.args = (str(self),)
        return self


def from_validation_error(err: Any, *, file: str | Path | None, row: int | None,
                          prefix: str = "") -> DataError:
    """Turn a pydantic ValidationError into a DataError naming the first failing field."""
    errors = err.errors()
    first = errors[0] if errors else {"loc": (), "msg": str(err)}
    loc = ".".join(str(p) for p in first.get("loc", ()))
    field_name = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or None)
    msg = first.get("msg", str(err))
    if len(errors) > 1:
        msg += f" (and {len(errors) - 1} more error(s))"
    return DataError(msg, file=file, row=row, field=field_name)


@dataclass
class SkipReport:
    """What reading left out or noticed: (row, reason) per row `skip_invalid` skipped, and counted
    warnings by kind (duplicate ids, samples without answers) with a few examples each — the other
    half of the one input policy: a clear error, or an explicit counted warning, never silence."""

    skipped: list[tuple[int | None, str]] = field(default_factory=list)
    warnings: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # how rows became samples, said once (not problems)

    @property
    def count(self) -> int:
        return len(self.skipped)

    def add(self, err: DataError) -> None:
        self.skipped.append((err.row, str(err)))

    def note(self, kind: str, text: str) -> None:
        self.notes.setdefault(kind, text)

    def warn(self, kind: str, example: str, keep: int = 5) -> None:
        self.warnings[kind] = self.warnings.get(kind, 0) + 1
        seen = self.examples.setdefault(kind, [])
        if len(seen) < keep:
            seen.append(example)


class ErrorPolicy:
    """Raise (the default) or record-and-skip, shared by every reader."""

    def __init__(self, skip_invalid: bool = False, report: SkipReport | None = None):
        self.skip_invalid = skip_invalid
        self.report = report if report is not None else SkipReport()

    def handle(self, err: DataError) -> None:
        if not self.skip_invalid:
            raise err
        self.report.add(err)
