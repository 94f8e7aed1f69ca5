"""The one entry point every layer uses to read and write benchmark files.

`read_samples(path, fmt)` streams Samples from any supported format (auto-detected when `fmt` is
None) and `write_samples(samples, path, fmt)` writes them back. Formats:

- kbvqa    JSONL of Sample.dump() (also runner output; status/reason/attempts -> meta["run"])
- infoseek official InfoSeek JSONL (+ `qtypes=` question-type JSONL; write `qtypes_out=`)
- evqa     Encyclopedic-VQA CSV
- ara      ARA release CSVs (ground truth, or the augmented manifest as anchor/intra/inter samples)
- notevqa  NoteVQA-style community items (short + interleaved references, category, intent)
- jsonl / csv / parquet  generic tables with a field -> column `mapping`
- hf       Hugging Face `datasets` exports, read without `datasets`: a save_to_disk folder
           (Dataset, or DatasetDict + `split=`), Hub/cache shard folders, .arrow/.feather files, and
           .parquet given as `hf`; rows go through the generic `mapping`, Image cells become files
           (`image_dir=`, `image_root=`, `embedded_images=`) — see kbvqa.data.hf; written as a dataset
           folder with embedded images and a card (kbvqa.data.hf_export)
"""

from __future__ import annotations

import csv
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbvqa.data import ara, evqa, generic, hf, infoseek, kbvqa_jsonl, notevqa
from kbvqa.data.errors import DataError, ErrorPolicy, SkipReport
from kbvqa.data.schema import Sample

__all__ = ["FORMATS", "DataError", "SkipReport", "detect_format", "non_empty", "read_samples", "write_samples"]


@dataclass(frozen=True)
class Format:
    name: str
    read: Callable[..., Iterator[Sample]]
    write: Callable[..., int]
    help: str


FORMATS: dict[str, Format] = {
    "kbvqa": Format("kbvqa", kbvqa_jsonl.read_kbvqa, kbvqa_jsonl.write_kbvqa, "JSONL of kbvqa Samples"),
    "infoseek": Format("infoseek", infoseek.read_infoseek, infoseek.write_infoseek, "InfoSeek JSONL"),
    "evqa": Format("evqa", evqa.read_evqa, evqa.write_evqa, "Encyclopedic-VQA CSV"),
    "ara": Format("ara", ara.read_ara, ara.write_ara, "ARA ground-truth / augmented CSV"),
    "notevqa": Format("notevqa", notevqa.read_notevqa, notevqa.write_notevqa, "NoteVQA-style community VQA JSONL"),
    **{f: Format(f, lambda path, _f=f, **kw: generic.read_generic(path, _f, **kw),
                 lambda samples, path, _f=f, **kw: generic.write_generic(samples, path, _f, **kw),
                 f"generic {f.upper()} with a column mapping") for f in generic.GENERIC_FORMATS},
    hf.HF_FORMAT: Format(hf.HF_FORMAT, hf.read_hf, hf.write_hf,
                         "Hugging Face datasets export (save_to_disk folder, .arrow/.feather/.parquet; written as a dataset folder) "
                         "with a column mapping"),
}


def _first_json_object(path: Path) -> dict[str, Any] | None:
    with open(path, encoding="utf-8-sig") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return None
                return obj if isinstance(obj, dict) else None
    return None


def _not_utf8(path: str | Path, exc: UnicodeDecodeError) -> DataError:
    return DataError(f"not UTF-8 text ({exc.reason}: byte {exc.object[exc.start:exc.start + 1]!r}); "
                     "re-encode the file as UTF-8", file=path)


def detect_format(path: str | Path) -> str:
    """Guess the format from the extension and the first record/header; a folder is a Hugging Face
    `datasets` export (dataset_dict.json, state.json, dataset_info.json or data shards in it)."""
    p = Path(path)
    if not p.exists():
        raise DataError("file not found", file=p)
    if p.is_dir():
        if hf.looks_like_hf(p):
            return hf.HF_FORMAT
        raise DataError("a folder, but not a Hugging Face datasets export (no dataset_dict.json, state.json, "
                        "dataset_info.json or .arrow/.parquet/.feather files in it)", file=p)
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".arrow", ".feather"):
        return hf.HF_FORMAT
    if suffix in (".jsonl", ".json", ".ndjson"):
        try:
            obj = _first_json_object(p)
        except UnicodeDecodeError as exc:
            raise _not_utf8(p, exc) from None
        if obj is None:
            return "jsonl"
        if "data_id" in obj and ("answer_eval" in obj or "image_id" in obj):
            return "infoseek"
        if notevqa.looks_like_notevqa(obj):
            return "notevqa"
        if "id" in obj and "question" in obj:
            return "kbvqa"
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        try:
            with open(p, newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), [])
        except UnicodeDecodeError as exc:
            raise _not_utf8(p, exc) from None
        if header and header[0].startswith("\ufeff"):
            header[0] = header[0][1:]
        cols = set(header)
        if "anchor_data_id" in cols or ("data_id" in cols and {"question", "answer"} <= cols):
            return "ara"
        if {"question", "answer", "dataset_image_ids"} <= cols or {"question", "answer", "wikipedia_url"} <= cols:
            return "evqa"
        return "csv"
    raise DataError(f"cannot tell the format from the extension {suffix!r}; pass fmt "
                    f"(one of {sorted(FORMATS)})", file=p)


def _format(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {sorted(FORMATS)}")
    return FORMATS[fmt]


def read_samples(path: str | Path, fmt: str | None = None, *, qtypes: Path | None = None,
                 mapping: dict[str, str] | None = None, skip_invalid: bool = False,
                 report: SkipReport | None = None, **opts: Any) -> Iterator[Sample]:
    """Stream Samples from `path`. Bad rows raise DataError unless `skip_invalid`, in which case they
    are counted in `report` (pass one to see them), as are the warnings every adapter shares:
    duplicate ids and samples without answers. A file that is not UTF-8 is a DataError naming it.
    Extra `opts` go to the adapter (sep=, with_position=; hf: split=, image_dir=, image_root=,
    embedded_images=)."""
    fmt = fmt or detect_format(path)
    f = _format(fmt)
    if not Path(path).exists():
        raise DataError("file not found", file=path)
    report = report if report is not None else SkipReport()
    policy = ErrorPolicy(skip_invalid=skip_invalid, report=report)
    kwargs: dict[str, Any] = {"policy": policy, **opts}
    if qtypes is not None:
        if fmt != "infoseek":
            raise ValueError(f"qtypes= only applies to the infoseek format, not {fmt!r}")
        kwargs["qtypes"] = qtypes
    if mapping is not None:
        if fmt not in generic.TABLE_SOURCES:
            raise ValueError(f"mapping= only applies to {list(generic.TABLE_SOURCES)}, not {fmt!r}")
        kwargs["mapping"] = mapping
    seen: set[str] = set()
    n = 0
    try:
        for sample in f.read(path, **kwargs):
            n += 1
            if sample.id in seen:
                report.warn("duplicate_id", f"record {n}: {sample.id!r}")
            seen.add(sample.id)
            if not sample.answers:
                report.warn("no_answers", f"record {n}: {sample.id!r}")
            yield sample
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None


def empty_input(path: str | Path) -> DataError:
    """The one error for an input with no samples (docs/data-formats.md, "The input policy": an empty input
    is an error unless --allow-empty)."""
    return DataError("no samples in the input (an empty file, or a header without rows?); pass --allow-empty "
                     "if that is intended", file=path)


def non_empty(samples: Iterable[Sample], path: str | Path, allow_empty: bool = False) -> Iterator[Sample]:
    """`samples`, or `empty_input` when there are none and the user did not say that is fine. Reads
    one sample ahead, so a stream stays a stream. Every command that reads a benchmark goes through
    this (or SampleRecords, which calls it)."""
    it = iter(samples)
    first = next(it, None)
    if first is None:
        if not allow_empty:
            raise empty_input(path)
        return iter(())
    return itertools.chain([first], it)


COUNT_LIMIT_BYTES = 256 << 20  # inputs up to this size get a counting pre-pass (see SampleRecords)


class SampleRecords:
    """The samples of a file as the runner's input records (`Sample.dump()` dicts), streamed, with
    the number to expect: `len()` comes from a counting pre-pass over files up to COUNT_LIMIT_BYTES
    (parsing is cheap next to any job that runs stages), so progress bars show N/M and an ETA instead
    of N/?. Without a count (bigger files, Hugging Face folders whose pre-pass would write images)
    `len()` raises TypeError, which the runner reads as "unknown". Iterated once.

    An input with no samples is refused here, before anything runs (`non_empty`), unless `allow_empty`."""

    def __init__(self, path: str | Path, fmt: str | None = None, *, allow_empty: bool = False, **read_opts: Any):
        self.path, self.fmt, self.read_opts = Path(path), fmt or detect_format(path), read_opts
        self.allow_empty = allow_empty
        self.expected: int | None = None
        self.ids: list[str] | None = None  # from the same pre-pass: the runner checks them before any record runs
        if self.fmt != "hf" and self.path.is_file() and self.path.stat().st_size <= COUNT_LIMIT_BYTES:
            opts = {k: v for k, v in read_opts.items() if k not in ("skip_invalid", "report")}
            self.ids = [s.id for s in read_samples(self.path, self.fmt, skip_invalid=True, report=SkipReport(),
                                                   **opts)]
            self.expected = len(self.ids)
        if self.expected == 0 and not allow_empty:
            raise empty_input(self.path)

    def __len__(self) -> int:
        if self.expected is None:
            raise TypeError("sample count not known in advance")
        return self.expected

    def __iter__(self) -> Iterator[dict[str, Any]]:
        samples = non_empty(read_samples(self.path, self.fmt, **self.read_opts), self.path, self.allow_empty)
        return (s.dump() for s in samples)


def write_samples(samples: Iterable[Sample], path: str | Path, fmt: str, **opts: Any) -> int:
    """Write Samples in `fmt`; returns how many were written. The file appears only when every sample
    was written (a temporary file renamed at the end). Options: qtypes_out= (infoseek), mapping=/sep=
    (generic), columns= (evqa/ara)."""
    opts = {k: v for k, v in opts.items() if v is not None}
    writer = _format(fmt).write
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:  # a failed conversion never leaves a truncated file over a previous good one
        n = writer(samples, tmp, **opts)
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is None:  # write() on a full disk names no file: the one the user asked for
            exc.filename = str(path)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return n
