"""Generic JSONL / CSV / Parquet tables with a column mapping field -> column.

Fields that can be mapped: id, question, answers, images, question_type, answer_type, split, dataset,
entity_url, entity_title, entity_wikidata_id, evidence. Without a mapping each field maps to a column
of the same name. `answers`, `images` and `evidence` cells may be lists or strings split on `sep`
(default "|"). Unmapped columns go to meta under their own name; writing uses the inverse mapping and
keeps the column order and value kinds (meta["_source"]), so a table read and written with the same
mapping comes back equal. Parquet is read and written in record batches.

`read_rows` is the one mapping implementation: it turns (file, row, record) triples from any table
source into Samples — these files, and Hugging Face `datasets` exports (`kbvqa.data.hf`, format `hf`),
whose samples write back through the same inverse mapping.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.evqa import iter_csv
from kbvqa.data.infoseek import SOURCE_KEY, normalise_answer_type
from kbvqa.data.jsonl import read_jsonl
from kbvqa.data.schema import Answer, Entity, Evidence, Sample

FIELDS = ("id", "question", "answers", "images", "question_type", "answer_type", "split", "dataset",
          "entity_url", "entity_title", "entity_wikidata_id", "evidence")
LIST_FIELDS = ("answers", "images", "evidence")
GENERIC_FORMATS = ("jsonl", "csv", "parquet")
#: Formats whose samples keep their source columns in meta["_source"] (written back by the generic writers).
TABLE_SOURCES = (*GENERIC_FORMATS, "hf")


def parse_mapping(text: str | None) -> dict[str, str] | None:
    """'id=qid,question=q' -> {'id': 'qid', 'question': 'q'} (the CLI's --mapping)."""
    if not text:
        return None
    out: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"mapping entry {part!r} is not field=column")
        k, v = (x.strip() for x in part.split("=", 1))
        out[k] = v
    check_mapping(out)
    return out


def check_mapping(mapping: dict[str, str]) -> None:
    unknown = sorted(set(mapping) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown mapping field(s) {unknown}; known: {list(FIELDS)}")


def resolve_mapping(mapping: dict[str, str] | None, columns: Iterable[str] | None = None) -> dict[str, str]:
    """The user's mapping plus, for every other field, a column of the same name (when present in
    `columns`, or always when columns is None) unless the user already mapped that column."""
    user = dict(mapping or {})
    check_mapping(user)
    taken = set(user.values())
    cols = None if columns is None else set(columns)
    for f in FIELDS:
        if f not in user and f not in taken and (cols is None or f in cols):
            user[f] = f
    return user


def _as_list(v: Any, sep: str) -> list[Any]:
    if v is None:
        return []
    if isinstance(v, list):
        return v
    if isinstance(v, str):
        return v.split(sep) if v else []
    if hasattr(v, "tolist"):
        return list(v.tolist())
    return [v]


def _opt_str(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def _parse_field(field: str, v: Any, sep: str) -> dict[str, Any]:
    if field == "id":
        if v is None or not str(v).strip():
            raise ValueError("missing id")
        return {"id": str(v)}
    if field == "question":
        if v is None or not str(v).strip():
            raise ValueError("missing question")
        return {"question": str(v)}
    if field == "answers":
        return {"answers": [Answer.model_validate(x) for x in _as_list(v, sep)]}
    if field == "images":
        items = _as_list(v, sep)
        if any(isinstance(x, dict) for x in items):  # str() of a struct is no image reference
            raise ValueError("an image cell that is a struct (a Hugging Face Image column: bytes/path); "
                             "read it with the hf format, which writes the bytes to image files")
        return {"images": [str(x) for x in items]}
    if field == "evidence":
        return {"evidence": [Evidence.model_validate(x) if isinstance(x, dict) else Evidence(text=str(x))
                             for x in _as_list(v, sep)]}
    if field == "answer_type":
        return {"answer_type": normalise_answer_type(v) if _opt_str(v) else None}
    if field.startswith("entity_"):
        return {field: _opt_str(v)}
    return {field: _opt_str(v)}


def _get_field(field: str, s: Sample) -> Any:
    if field.startswith("entity_"):
        attr = {"entity_url": "url", "entity_title": "title", "entity_wikidata_id": "wikidata_id"}[field]
        return getattr(s.entity, attr) if s.entity else None
    return getattr(s, field)


def _dump_field(field: str, value: Any, kind: str, sep: str) -> Any:
    if field in LIST_FIELDS:
        if field == "answers":
            items = [a.model_dump(mode="json") for a in value]
            texts = [a.text for a in value]
        elif field == "evidence":
            items = [e.text if e.section_id is None and e.section_title is None and e.url is None
                     else e.model_dump(mode="json", exclude_none=True) for e in value]
            texts = [e.text for e in value]
        else:
            items = texts = list(value)
        return items if kind == "list" else sep.join(texts)
    return value


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, ensure_ascii=False, default=str) == json.dumps(b, ensure_ascii=False, default=str)


def _build_sample(rec: dict[str, Any], mapping: dict[str, str], *, fmt: str, sep: str,
                  file: str | Path, row: int) -> Sample:
    fields: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    raw: dict[str, Any] = {}
    for field in ("id", "question"):
        if mapping.get(field) not in rec:
            raise DataError(f"missing column {mapping.get(field)!r} for {field}", file=file, row=row,
                            field=mapping.get(field) or field)
    for field, col in mapping.items():
        if col not in rec:
            continue
        v = rec[col]
        try:
            parsed = _parse_field(field, v, sep)
        except (ValueError, ValidationError) as e:
            msg = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
            raise DataError(msg, file=file, row=row, field=col) from None
        fields.update(parsed)
        kind = "list" if isinstance(v, list) or hasattr(v, "tolist") else "str"
        if field in LIST_FIELDS:
            kinds[field] = kind
        if not _same(_dump_field(field, parsed[field], kind, sep), v):
            raw[col] = v
    ent = {k: fields.pop(k) for k in ("entity_url", "entity_title", "entity_wikidata_id") if k in fields}
    entity = None
    if any(v is not None for v in ent.values()):
        entity = Entity(url=ent.get("entity_url"), title=ent.get("entity_title"),
                        wikidata_id=ent.get("entity_wikidata_id"))
    cols = set(mapping.values())
    meta = {k: v for k, v in rec.items() if k not in cols}
    source: dict[str, Any] = {"format": fmt, "keys": list(rec.keys()), "mapping": dict(mapping), "sep": sep,
                              "kinds": kinds}
    if raw:
        source["raw"] = raw
    meta[SOURCE_KEY] = source
    try:
        return Sample(**fields, entity=entity, meta=meta)
    except ValidationError as e:
        raise from_validation_error(e, file=file, row=row) from None


def _records(path: str | Path, fmt: str, policy: ErrorPolicy, batch_size: int) -> Iterator[tuple[int, dict[str, Any]]]:
    if fmt == "jsonl":
        yield from read_jsonl(path, policy)
    elif fmt == "csv":
        for num, header, row in iter_csv(path, policy):
            if len(row) != len(header):
                policy.handle(DataError(f"expected {len(header)} cells, found {len(row)}", file=path, row=num))
                continue
            yield num, dict(zip(header, row))
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        num = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            for rec in batch.to_pylist():
                num += 1
                yield num, rec
    else:
        raise ValueError(f"not a generic format: {fmt!r}")


def read_rows(rows: Iterable[tuple[str | Path, int, dict[str, Any]]], *, fmt: str,
              mapping: dict[str, str] | None = None, sep: str = "|",
              policy: ErrorPolicy | None = None) -> Iterator[Sample]:
    """Samples from (file, 1-based row, record) triples of any table source, through the column
    mapping (resolved against the first record's columns); a bad row is a DataError naming its file,
    row and column, raised or counted by `policy`. `fmt` is recorded in meta["_source"]."""
    policy = policy or ErrorPolicy()
    if mapping is not None:
        check_mapping(mapping)
    resolved: dict[str, str] | None = None
    for file, num, rec in rows:
        if resolved is None:
            resolved = resolve_mapping(mapping, rec.keys())
        try:
            yield _build_sample(rec, resolved, fmt=fmt, sep=sep, file=file, row=num)
        except DataError as e:
            policy.handle(e)


def read_generic(path: str | Path, fmt: str, *, mapping: dict[str, str] | None = None, sep: str = "|",
                 policy: ErrorPolicy | None = None, batch_size: int = 1024, **_: Any) -> Iterator[Sample]:
    """Stream Samples from a JSONL/CSV/Parquet table (row = line / record with header as 1 / record)."""
    policy = policy or ErrorPolicy()
    rows = ((path, num, rec) for num, rec in _records(path, fmt, policy, batch_size))
    yield from read_rows(rows, fmt=fmt, mapping=mapping, sep=sep, policy=policy)


def _record_for(s: Sample, mapping: dict[str, str] | None, sep: str, fmt: str) -> dict[str, Any]:
    src = s.meta.get(SOURCE_KEY)
    src = src if isinstance(src, dict) and src.get("format") in TABLE_SOURCES else None
    if mapping is None:
        mapping = dict(src["mapping"]) if src else resolve_mapping(None)
    elif not src:
        mapping = resolve_mapping(mapping)
    kinds = (src or {}).get("kinds", {})
    raw = (src or {}).get("raw", {})
    inverse = {col: field for field, col in mapping.items()}
    if src:
        keys = list(src["keys"])
    else:
        keys = [mapping[f] for f in FIELDS if f in mapping
                and _get_field(f, s) not in (None, [])] + [k for k in s.meta if k != SOURCE_KEY]
    default_kind = "str" if fmt == "csv" else "list"
    out: dict[str, Any] = {}
    for col in keys:
        field = inverse.get(col)
        if field is None:
            if col in s.meta:
                out[col] = s.meta[col]
            continue
        current = _get_field(field, s)
        if col in raw:
            try:
                if _parse_field(field, raw[col], sep).get(field) == current:
                    out[col] = raw[col]
                    continue
            except (ValueError, ValidationError):
                pass
        value = _dump_field(field, current, kinds.get(field, default_kind), sep)
        if fmt == "parquet" and isinstance(value, list) and any(isinstance(x, dict) for x in value):
            # Arrow lists need one item type: keep the surface texts (multi-part text keeps its `&&`)
            value = [x if isinstance(x, str) else x["text"] for x in value]
        out[col] = value
    return out


def _csv_cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def write_generic(samples: Iterable[Sample], path: str | Path, fmt: str, *, mapping: dict[str, str] | None = None,
                  sep: str = "|", batch_size: int = 1024, **_: Any) -> int:
    if mapping is not None:
        check_mapping(mapping)
    n = 0
    if fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as fh:
            for s in samples:
                fh.write(json.dumps(_record_for(s, mapping, sep, fmt), ensure_ascii=False, default=str) + "\n")
                n += 1
    elif fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            cols: list[str] | None = None
            for s in samples:
                rec = _record_for(s, mapping, sep, fmt)
                if cols is None:
                    cols = list(rec)
                    w.writerow(cols)
                w.writerow([_csv_cell(rec.get(c)) for c in cols])
                n += 1
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = None
        schema = None
        buf: list[dict[str, Any]] = []

        def flush() -> None:
            nonlocal writer, schema
            if not buf:
                return
            table = pa.Table.from_pylist(buf, schema=schema)
            if writer is None:
                schema = table.schema
                writer = pq.ParquetWriter(str(path), schema)
            writer.write_table(table)
            buf.clear()

        try:
            for s in samples:
                buf.append(_record_for(s, mapping, sep, fmt))
                n += 1
                if len(buf) >= batch_size:
                    flush()
            flush()
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise DataError(f"cannot write this batch to Parquet: {e}", file=path,
                            row=n - len(buf) + 1 if buf else n) from None
        finally:
            if writer is not None:
                writer.close()
        if n == 0:
            pq.write_table(pa.table({}), str(path))
    else:
        raise ValueError(f"not a generic format: {fmt!r}")
    return n
