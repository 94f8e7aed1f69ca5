"""Review sheets: the CSV files people fill in by hand and kbvqa reads back (the curation funnel's
proofreading sheet, the reference builder's audit sheet).

Writing never replaces a sheet that may already hold decisions unless asked, and goes through a
temporary file renamed at the end. Reading is strict in the same way for every sheet: a missing
column, an id the source does not hold, an id given twice and a file that is not UTF-8 are
`DataError`s naming the file, the row (the header is row 1; a cell may span several lines) and the
column. What each decision means stays with the job that exported the sheet.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Container, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kbvqa.data.errors import DataError

__all__ = ["read_sheet", "write_sheet"]


def write_sheet(out: str | Path, columns: Sequence[str], rows: Iterable[dict[str, Any]], *, overwrite: bool,
                who: str) -> int:
    """Write `rows` under `columns` to `out`; refuse an existing sheet (it may hold `who`'s decisions)
    unless `overwrite`. Returns the number of rows."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (it may hold {who}' decisions); choose another --out or "
                              "pass --overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    n = 0
    try:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(columns))
            w.writeheader()
            for row in rows:
                w.writerow(row)
                n += 1
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def read_sheet(sheet: str | Path, required: Sequence[str], ids: Container[str], *, source: str | Path,
               noun: str, export: str) -> Iterator[tuple[int, str, dict[str, str]]]:
    """(row number, id, row) for every row of a reviewed sheet, after the checks in the module
    docstring: `required` columns, ids among `ids` (what `source` holds, a `noun` each) and each id
    once. `export` is the command that writes the sheet, named when it is missing or incomplete."""
    sheet = Path(sheet)
    if not sheet.is_file():
        raise DataError(f"sheet not found (write it with `{export}`)", file=sheet)
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a cell may hold a whole interleaved answer
    seen: dict[str, int] = {}
    try:
        with open(sheet, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"missing column(s) {', '.join(missing)} (export a sheet with `{export}`)",
                                file=sheet, row=1, field=missing[0])
            for n, row in enumerate(reader, start=2):
                rid = (row.get("id") or "").strip()
                if rid not in ids:
                    raise DataError(f"no {noun} {rid!r} in {Path(source).name}", file=sheet, row=n, field="id")
                if rid in seen:
                    raise DataError(f"{noun} {rid!r} appears again (first at row {seen[rid]})", file=sheet, row=n,
                                    field="id")
                seen[rid] = n
                yield n, rid, row
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason}); save the sheet as UTF-8 CSV", file=sheet) from None
