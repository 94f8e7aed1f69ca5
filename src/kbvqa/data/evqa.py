"""Encyclopedic-VQA CSV (and the E-VQA-shaped ARA ground-truth CSVs) <-> Sample.

Mapping: `answer` is split on `|` into alternatives, each alternative on `&&` into parts (kept exactly
as written, so joining reproduces the cell); `dataset_image_ids` on `|` -> images; `wikipedia_url` /
`wikipedia_title` -> entity, and for 2-hop rows (`|` in the url) the second hop -> related_entities;
`evidence` (+ `evidence_section_id`, `evidence_section_title`, `|`-aligned when the counts agree) ->
Evidence; `encyclopedic_vqa_split` -> split; `dataset_name` -> dataset; `question_type` verbatim, and
when it is String/Numerical/Time (InfoSeek rows in ARA files) also answer_type, with dataset
"infoseek" when there is no dataset_name. An evidence / split cell equal to "0" is ARA's placeholder
and never becomes Evidence or a split. Every other column goes to meta under its own name.

Numeric answers: in a row whose question_type is Numerical (InfoSeek rows of the ARA files), an
alternative written as a range ("6 - 7", "between 5 and 7") gets `Answer.range`, read by the data
layer's quantity parser (`kbvqa.data.matching.parse_quantity`); the text stays as written.

Ids: the `data_id` column when present; otherwise `E-VQA_<0-based data row>`, the convention ARA
used when it added ids to the official test CSV.

Lossless: meta["_source"] keeps the column order and, for a column group whose canonical
re-serialisation would differ from the cells (placeholders, odd evidence alignment), the original
cells; they are written back while the sample's fields still parse the same. The file's line ending
is kept too: an LF file is recorded (`meta["_source"]["line_terminator"]`) and written back with LF;
CRLF, the csv module's default, is what a sample without that record gets. Rows are CSV records;
errors name the record number with the header as row 1.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.infoseek import SOURCE_KEY, normalise_answer_type
from kbvqa.data.schema import Answer, Entity, Evidence, Sample

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

PLACEHOLDER = "0"
#: E-VQA's question types (its CSV's `question_type`)
EVQA_QUESTION_TYPES = ("templated", "automatic", "multi_answer", "2_hop")
#: `Sample.dataset` values that mean E-VQA (its CSV's `dataset_name`, or the benchmark's own name)
EVQA_DATASETS = frozenset({"inaturalist", "landmarks", "evqa", "e-vqa", "encyclopedic-vqa", "encyclopedic_vqa"})
OFFICIAL_COLUMNS = ["question", "answer", "dataset_image_ids", "dataset_name", "dataset_category_id",
                    "question_type", "wikipedia_url", "wikipedia_title", "evidence", "evidence_section_id",
                    "evidence_section_title", "encyclopedic_vqa_split", "question_original",
                    "wikipedia_url_used_in_train"]
DEFAULT_COLUMNS = ["data_id", *OFFICIAL_COLUMNS]


_SCALE_WORDS = re.compile(r"\b(?:thousand|million|billion)s?\b", re.IGNORECASE)


def numeric_range(text: str) -> tuple[float, float] | None:
    """(low, high) when a numeric answer is written as a range ("6 - 7", "170-200 cm"), else None;
    a single number is no range. A range with a scale word ("1 - 2 million") is left unset (kbvqa's
    choice): the InfoSeek scorers read numbers as written, unscaled, and a reference must not mean
    one thing as CSV and another as JSONL. Shared by every CSV reader that sees numeric answers."""
    from kbvqa.data.matching import parse_quantity

    if _SCALE_WORDS.search(text):
        return None
    q = parse_quantity(text)
    return (q.low, q.high) if q is not None and q.is_range else None


def parse_answer_cell(cell: str, *, numeric: bool = False) -> list[Answer]:
    """`|` alternatives, `&&` parts; with `numeric` (a Numerical row) each range gets Answer.range."""
    if not cell.strip():
        raise ValueError("empty answer")
    return [Answer(text=alt, parts=alt.split("&&") if "&&" in alt else [],
                   range=numeric_range(alt) if numeric else None) for alt in cell.split("|")]


def _is_numerical(c: dict[str, str]) -> bool:
    return c.get("question_type", "").strip().lower() == "numerical"


def _split(cell: str) -> list[str]:
    return cell.split("|") if cell else []


def _opt(cell: str) -> str | None:
    return cell if cell else None


def _parse_entity(c: dict[str, str]) -> dict[str, Any]:
    url, title = c.get("wikipedia_url", ""), c.get("wikipedia_title", "")
    urls = url.split("|")
    titles = title.split("|")
    if len(urls) > 1 and len(titles) in (1, len(urls)):
        if len(titles) == 1:
            titles = titles + [""] * (len(urls) - 1)
        ents = [Entity(url=_opt(u), title=_opt(t)) for u, t in zip(urls, titles)]
    elif url or title:
        ents = [Entity(url=_opt(url), title=_opt(title))]
    else:
        ents = []
    return {"entity": ents[0] if ents else None, "related_entities": ents[1:]}


def _dump_entity(v: dict[str, Any]) -> dict[str, str]:
    ents = ([v["entity"]] if v["entity"] is not None else [Entity()] if v["related_entities"] else [])
    ents += list(v["related_entities"])
    return {"wikipedia_url": "|".join(e.url or "" for e in ents),
            "wikipedia_title": "|".join(e.title or "" for e in ents)}


def _parse_evidence(c: dict[str, str]) -> dict[str, Any]:
    text = c.get("evidence", "")
    if not text or text == PLACEHOLDER:
        return {"evidence": []}
    texts = text.split("|")
    sid, stitle = c.get("evidence_section_id", ""), c.get("evidence_section_title", "")

    def aligned(cell: str) -> list[str | None]:
        parts = cell.split("|")
        return [_opt(p) for p in parts] if len(parts) == len(texts) else [_opt(cell)] * len(texts)

    return {"evidence": [Evidence(text=t, section_id=i, section_title=s)
                         for t, i, s in zip(texts, aligned(sid), aligned(stitle))]}


def _dump_evidence(v: dict[str, Any]) -> dict[str, str]:
    ev: list[Evidence] = v["evidence"]
    return {"evidence": "|".join(e.text for e in ev),
            "evidence_section_id": "|".join(e.section_id or "" for e in ev),
            "evidence_section_title": "|".join(e.section_title or "" for e in ev)}


@dataclass(frozen=True)
class _Group:
    """A set of columns that together map to some Sample fields."""
    columns: tuple[str, ...]
    parse: Callable[[dict[str, str]], dict[str, Any]]
    get: Callable[[Sample], dict[str, Any]]
    dump: Callable[[dict[str, Any]], dict[str, str]]


def _simple(col: str, field: str, placeholder: bool = False) -> _Group:
    def parse(c: dict[str, str]) -> dict[str, Any]:
        cell = c.get(col, "")
        return {field: None if (not cell or (placeholder and cell == PLACEHOLDER)) else cell}
    return _Group((col,), parse, lambda s: {field: getattr(s, field)},
                  lambda v: {col: v[field] if v[field] is not None else ""})


GROUPS: list[_Group] = [
    _Group(("question",), lambda c: {"question": c.get("question", "")}, lambda s: {"question": s.question},
           lambda v: {"question": v["question"]}),
    _Group(("answer",), lambda c: {"answers": parse_answer_cell(c.get("answer", ""), numeric=_is_numerical(c))},
           lambda s: {"answers": list(s.answers)}, lambda v: {"answer": "|".join(a.text for a in v["answers"])}),
    _Group(("dataset_image_ids",), lambda c: {"images": _split(c.get("dataset_image_ids", ""))},
           lambda s: {"images": list(s.images)}, lambda v: {"dataset_image_ids": "|".join(v["images"])}),
    _simple("question_type", "question_type"),
    _Group(("wikipedia_url", "wikipedia_title"), _parse_entity,
           lambda s: {"entity": s.entity, "related_entities": list(s.related_entities)}, _dump_entity),
    _Group(("evidence", "evidence_section_id", "evidence_section_title"), _parse_evidence,
           lambda s: {"evidence": list(s.evidence)}, _dump_evidence),
    _simple("encyclopedic_vqa_split", "split", placeholder=True),
    _simple("dataset_name", "dataset"),
]
_GROUP_OF = {c: g for g in GROUPS for c in g.columns}


def _parse_group(g: _Group, cells: dict[str, str]) -> dict[str, Any]:
    try:
        return g.parse(cells)
    except (ValueError, ValidationError) as e:
        msg = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
        raise DataError(msg, field=g.columns[0]) from None


def evqa_sample(header: list[str], row: list[str], index: int, *, file: str | Path | None = None,
                rownum: int | None = None, fmt: str = "evqa", line_terminator: str | None = None) -> Sample:
    """One CSV record -> Sample. `index` is the 0-based data row (for the E-VQA_<n> id);
    `line_terminator` the file's, recorded when it is not CRLF."""
    if len(row) != len(header):
        raise DataError(f"expected {len(header)} cells, found {len(row)}", file=file, row=rownum)
    cells = dict(zip(header, row))
    if not cells.get("question", "").strip():
        raise DataError("missing question", file=file, row=rownum, field="question")
    fields: dict[str, Any] = {}
    raw: dict[str, str] = {}
    present = set(header)
    for g in GROUPS:
        if not present.intersection(g.columns):
            continue
        try:
            parsed = _parse_group(g, cells)
        except DataError as e:
            raise e.with_location(file=file, row=rownum) from None
        fields.update(parsed)
        dumped = g.dump(parsed)
        if any(dumped[c] != cells[c] for c in g.columns if c in present):
            raw.update({c: cells[c] for c in g.columns if c in present})
    qt = fields.get("question_type")
    try:
        answer_type = normalise_answer_type(qt) if qt is not None else None
    except ValueError:
        answer_type = None
    if "dataset_name" not in present:
        fields["dataset"] = "infoseek" if answer_type is not None else None
    if "data_id" in present:
        data_id = cells["data_id"]
        if not data_id.strip():
            raise DataError("empty data_id", file=file, row=rownum, field="data_id")
    else:
        data_id = f"E-VQA_{index}"
    meta: dict[str, Any] = {c: cells[c] for c in header if c not in _GROUP_OF and c != "data_id"}
    source: dict[str, Any] = {"format": fmt, "columns": list(header)}
    if line_terminator is not None and line_terminator != "\r\n":
        source["line_terminator"] = line_terminator
    if raw:
        source["raw"] = raw
    meta[SOURCE_KEY] = source
    try:
        return Sample(id=data_id, answer_type=answer_type, meta=meta, **fields)
    except ValidationError as e:
        raise from_validation_error(e, file=file, row=rownum) from None


def iter_csv(path: str | Path, policy: ErrorPolicy) -> Iterator[tuple[int, list[str], list[str]]]:
    """Yield (record number with the header as 1, header, cells); blank records are ignored."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError("empty file (no header)", file=path, row=1) from None
        except csv.Error as e:
            raise DataError(f"unreadable CSV header: {e}", file=path, row=1) from None
        if header and header[0].startswith("\ufeff"):
            header[0] = header[0][1:]
        dup = {c for c in header if header.count(c) > 1}
        if dup:
            raise DataError(f"duplicate column(s) {sorted(dup)}", file=path, row=1)
        num = 1
        while True:
            num += 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                policy.handle(DataError(f"unreadable CSV record: {e}", file=path, row=num))
                continue
            if not row:
                num -= 1
                continue
            yield num, header, row


def detect_line_terminator(path: str | Path) -> str:
    """The line ending of a CSV file's header line: "\r\n" or "\n" (CRLF for a one-line file
    without one). A header cannot hold a quoted newline in these files, so its end is the file's."""
    with open(path, "rb") as fh:
        head = fh.readline(1 << 20)
    return "\n" if head.endswith(b"\n") and not head.endswith(b"\r\n") else "\r\n"


def read_evqa(path: str | Path, *, policy: ErrorPolicy | None = None, fmt: str = "evqa",
              **_: Any) -> Iterator[Sample]:
    policy = policy or ErrorPolicy()
    eol = detect_line_terminator(path)
    index = -1
    checked = False
    for num, header, row in iter_csv(path, policy):
        if not checked:
            for col in ("question", "answer"):
                if col not in header:
                    raise DataError(f"missing column {col!r} (columns: {header})", file=path, row=1, field=col)
            checked = True
        index += 1
        if "data_id" not in header:  # the official E-VQA CSV has none: ids come from row order, said so
            policy.report.warn("ids_made_from_row_order", f"no data_id column: row {num} is E-VQA_{index}")
        try:
            yield evqa_sample(header, row, index, file=path, rownum=num, fmt=fmt, line_terminator=eol)
        except DataError as e:
            policy.handle(e)


def evqa_row(s: Sample, columns: list[str]) -> list[str]:
    """Sample -> cells in `columns` order (the original cells for an unchanged sample)."""
    src = s.meta.get(SOURCE_KEY) if isinstance(s.meta.get(SOURCE_KEY), dict) else {}
    raw: dict[str, str] = src.get("raw", {}) if src.get("format") in ("evqa", "ara") else {}
    present = set(columns)
    done: dict[str, str] = {}
    for g in GROUPS:
        cols = [c for c in g.columns if c in present]
        if not cols:
            continue
        current = g.get(s)
        if all(c in raw for c in cols):
            try:
                if g.parse({c: raw[c] for c in cols}) == current:
                    done.update({c: raw[c] for c in cols})
                    continue
            except (ValueError, ValidationError):
                pass
        dumped = g.dump(current)
        done.update({c: dumped[c] for c in cols})
    out = []
    for c in columns:
        if c in done:
            out.append(done[c])
        elif c == "data_id":
            out.append(s.id)
        else:
            v = s.meta.get(c)
            out.append("" if v is None else v if isinstance(v, str) else str(v))
    return out


def csv_columns_for(s: Sample) -> list[str]:
    src = s.meta.get(SOURCE_KEY)
    if isinstance(src, dict) and src.get("format") in ("evqa", "ara") and src.get("columns"):
        return list(src["columns"])
    extra = [k for k, v in s.meta.items() if k != SOURCE_KEY and k not in DEFAULT_COLUMNS
             and isinstance(v, (str, int, float, bool))]
    return DEFAULT_COLUMNS + extra


def write_evqa(samples: Iterable[Sample], path: str | Path, *, columns: list[str] | None = None,
               **_: Any) -> int:
    """Write an E-VQA-shaped CSV. Columns: `columns`, else the first sample's source columns, else
    data_id + the official columns + the first sample's scalar meta keys. Line ending: the first
    sample's source file's (LF stays LF), else CRLF."""
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w: Any = None
        cols = columns
        for s in samples:
            if cols is None:
                cols = csv_columns_for(s)
            if n == 0:
                src = s.meta.get(SOURCE_KEY)
                eol = src.get("line_terminator") if isinstance(src, dict) else None
                w = csv.writer(fh, lineterminator=eol if eol in ("\n", "\r\n") else "\r\n")
                w.writerow(cols)
            w.writerow(evqa_row(s, cols))
            n += 1
        if n == 0:
            csv.writer(fh).writerow(cols if cols is not None else DEFAULT_COLUMNS)
    return n
