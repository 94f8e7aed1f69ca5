"""InfoSeek official JSONL (+ the separate question-type JSONL) <-> Sample.

Mapping: data_id -> id, image_id -> images[0], question, answer_eval -> answers (a numeric entry
{"wikidata": v, "range": [lo, hi]} becomes Answer(value=v, range=(lo, hi)) whose text is the
canonical `answer[0]`), data_split -> split, entity_id (KB variant) -> entity.wikidata_id. The
question type comes from the qtype file (`qtypes=`) or an in-row `question_type` key: the verbatim
label goes to question_type and its normalised form to answer_type.

Lossless: every other key (including the canonical `answer` list) is kept in meta, the key order in
meta["_source"]["keys"], and when the canonical re-serialisation of a field would not reproduce the
input exactly (an int data_id, a bare numeric dict instead of a list, ...) the original value is kept
in meta["_source"]["raw"] and written back as long as the sample's field still means the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.jsonl import read_jsonl
from kbvqa.data.schema import Answer, AnswerType, Entity, Sample

SOURCE_KEY = "_source"
_ANSWER_TYPES: dict[str, AnswerType] = {"string": "String", "numerical": "Numerical", "time": "Time"}


def normalise_answer_type(label: Any) -> AnswerType:
    """'string' / ' TIME ' / 'Numerical' -> the schema's AnswerType; anything else is a ValueError."""
    key = str(label).strip().lower() if label is not None else ""
    if key not in _ANSWER_TYPES:
        raise ValueError(f"unknown question type {label!r} (expected String, Numerical or Time)")
    return _ANSWER_TYPES[key]


def _fmt_number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _num(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"expected a number, got {x!r}")
    return float(x)


def answer_eval_string(value: str) -> str:
    """The one refusal of a string `answer_eval` (the data readers and the scorer share it)."""
    import json

    return (f"is the string {json.dumps(value[:60], ensure_ascii=False)}, not a list of accepted answers; "
            f"InfoSeek writes answer_eval as a list (e.g. {json.dumps([value[:60]], ensure_ascii=False)}) "
            "or one numeric dict")


def parse_answer_eval(value: Any, canonical: Any = None) -> list[Answer]:
    """answer_eval (list of strings / numeric dicts, or one numeric dict) -> Answers. Raises ValueError."""
    if value is None:
        return []
    if isinstance(value, str):  # never iterated as characters, never guessed into a one-answer list
        raise ValueError(answer_eval_string(value))
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise ValueError(f"expected a list or a numeric dict, got {type(value).__name__}")
    out: list[Answer] = []
    for item in items:
        if isinstance(item, str):
            out.append(Answer(text=item))
        elif isinstance(item, dict):
            if "wikidata" not in item:
                raise ValueError(f"numeric answer {item!r} has no 'wikidata' value")
            v = _num(item["wikidata"])
            rng = None
            if "range" in item:
                r = item["range"]
                if not isinstance(r, list) or len(r) < 2:
                    raise ValueError(f"numeric range {r!r} is not a [low, high] list")
                lo, hi = _num(r[0]), _num(r[1])
                if lo > hi:
                    raise ValueError(f"numeric range {r!r} has low > high")
                rng = (lo, hi)
            text = (canonical[0] if isinstance(canonical, list) and len(items) == 1 and canonical
                    and isinstance(canonical[0], str) else _fmt_number(v))
            out.append(Answer(text=text, value=v, range=rng))
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            out.append(Answer(text=_fmt_number(item), value=float(item)))
        else:
            raise ValueError(f"unsupported answer_eval entry {item!r}")
    return out


def serialize_answer_eval(answers: list[Answer]) -> list[Any]:
    out: list[Any] = []
    for a in answers:
        if a.range is not None or a.value is not None:
            d: dict[str, Any] = {"wikidata": a.value if a.value is not None else a.text}
            if a.range is not None:
                d["range"] = [a.range[0], a.range[1]]
            out.append(d)
        else:
            out.append(a.text)
    return out


def answers_digest(answers: list[Answer]) -> str:
    """Fingerprint used to tell, at write time, whether a stage changed the answers."""
    blob = json.dumps([a.model_dump(mode="json") for a in answers], sort_keys=True, ensure_ascii=False)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:12]


# --- per-key codecs: parse(raw, obj) -> field values; get(sample) -> field values; dump(values) -> raw
@dataclass(frozen=True)
class _Codec:
    parse: Callable[[Any, dict[str, Any]], dict[str, Any]]
    get: Callable[[Sample], dict[str, Any]]
    dump: Callable[[dict[str, Any]], Any]


def _str_field(name: str) -> _Codec:
    return _Codec(parse=lambda v, o: {name: None if v is None else str(v)},
                  get=lambda s: {name: getattr(s, name)},
                  dump=lambda d: d[name])


def _parse_image(v: Any, o: dict[str, Any]) -> dict[str, Any]:
    if v is None:
        return {"images": []}
    if isinstance(v, list):
        return {"images": [str(x) for x in v]}
    return {"images": [str(v)]}


def _dump_image(d: dict[str, Any]) -> Any:
    imgs = d["images"]
    if not imgs:
        return None
    return imgs[0] if len(imgs) == 1 else list(imgs)


def _parse_entity(v: Any, o: dict[str, Any]) -> dict[str, Any]:
    return {"wikidata_id": None if v is None else str(v)}


_CODECS: dict[str, _Codec] = {
    "data_id": _Codec(parse=lambda v, o: {"id": str(v)}, get=lambda s: {"id": s.id}, dump=lambda d: d["id"]),
    "image_id": _Codec(parse=_parse_image, get=lambda s: {"images": list(s.images)}, dump=_dump_image),
    "question": _str_field("question"),
    "answer_eval": _Codec(parse=lambda v, o: {"answers": parse_answer_eval(v, o.get("answer"))},
                          get=lambda s: {"answers": list(s.answers)},
                          dump=lambda d: serialize_answer_eval(d["answers"])),
    "data_split": _str_field("split"),
    "entity_id": _Codec(parse=_parse_entity,
                        get=lambda s: {"wikidata_id": s.entity.wikidata_id if s.entity else None},
                        dump=lambda d: d["wikidata_id"]),
}
_DEFAULT_KEYS = ["data_id", "image_id", "question", "answer", "answer_eval", "data_split", "entity_id"]


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


class QTypes:
    """The question-type JSONL loaded as data_id -> (line, label); labels are checked when used, so a
    bad label only fails (or, with skip_invalid, skips) the samples that carry it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.by_id: dict[str, tuple[int, Any]] = {}
        strict = ErrorPolicy()
        for lineno, obj in read_jsonl(self.path, strict):
            for k in ("data_id", "question_type"):
                if k not in obj:
                    raise DataError(f"missing {k!r}", file=self.path, row=lineno, field=k)
            self.by_id[str(obj["data_id"])] = (lineno, obj["question_type"])

    def lookup(self, data_id: str, *, file: str | Path, row: int) -> tuple[str, AnswerType]:
        if data_id not in self.by_id:
            raise DataError(f"data_id {data_id!r} is not in the question-type file {self.path}", file=file,
                            row=row, field="question_type")
        qrow, label = self.by_id[data_id]
        try:
            return str(label), normalise_answer_type(label)
        except ValueError as e:
            raise DataError(str(e), file=self.path, row=qrow, field="question_type") from None


def infoseek_sample(obj: dict[str, Any], *, file: str | Path | None = None, row: int | None = None,
                    qtypes: QTypes | None = None) -> Sample:
    """One InfoSeek JSON object -> Sample (raises DataError naming the field)."""
    for k in ("data_id", "question"):
        if k not in obj or obj[k] is None or not str(obj[k]).strip():
            raise DataError(f"missing {k}", file=file, row=row, field=k)
    fields: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for key, value in obj.items():
        codec = _CODECS.get(key)
        if codec is None:
            if key == "question_type" and qtypes is None:
                continue  # in-row label, handled below
            meta[key] = value
            continue
        try:
            parsed = codec.parse(value, obj)
        except (ValueError, ValidationError) as e:
            msg = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
            raise DataError(msg, file=file, row=row, field=key) from None
        fields.update(parsed)
        if not _same(codec.dump(parsed), value):
            raw[key] = value
    data_id = fields["id"]
    if qtypes is not None:
        qlabel, atype = qtypes.lookup(data_id, file=file or "?", row=row or 0)
    elif "question_type" in obj:
        qlabel = obj["question_type"]
        try:
            atype = normalise_answer_type(qlabel)
        except ValueError as e:
            raise DataError(str(e), file=file, row=row, field="question_type") from None
        qlabel = str(qlabel)
    else:
        qlabel = None
        atype = "Numerical" if any(a.value is not None for a in fields.get("answers", [])) else None
    wikidata_id = fields.pop("wikidata_id", None)
    source: dict[str, Any] = {"format": "infoseek", "keys": list(obj.keys()),
                              "answers_digest": answers_digest(fields.get("answers", []))}
    if raw:
        source["raw"] = raw
    meta[SOURCE_KEY] = source
    try:
        return Sample(**fields, question_type=qlabel, answer_type=atype,
                      entity=Entity(wikidata_id=wikidata_id) if wikidata_id else None,
                      dataset="infoseek", meta=meta)
    except ValidationError as e:
        raise from_validation_error(e, file=file, row=row) from None


def read_infoseek(path: str | Path, *, qtypes: str | Path | QTypes | None = None,
                  policy: ErrorPolicy | None = None, **_: Any) -> Iterator[Sample]:
    policy = policy or ErrorPolicy()
    qt = QTypes(qtypes) if qtypes is not None and not isinstance(qtypes, QTypes) else qtypes
    for lineno, obj in read_jsonl(path, policy):
        try:
            yield infoseek_sample(obj, file=path, row=lineno, qtypes=qt)
        except DataError as e:
            policy.handle(e)


def infoseek_record(s: Sample) -> dict[str, Any]:
    """Sample -> InfoSeek JSON object (identical to the input for an unchanged sample)."""
    src = s.meta.get(SOURCE_KEY) if isinstance(s.meta.get(SOURCE_KEY), dict) else None
    if src is not None and src.get("format") != "infoseek":
        src = None
    keys = list(src["keys"]) if src else [k for k in _DEFAULT_KEYS if k != "entity_id"]
    raw = (src or {}).get("raw", {})
    answers_changed = src is None or src.get("answers_digest") != answers_digest(s.answers)
    out: dict[str, Any] = {}
    wrote: set[str] = set()

    def emit(key: str) -> None:
        codec = _CODECS[key]
        current = codec.get(s)
        if key in raw:
            try:
                if codec.parse(raw[key], {**s.meta, "answer": s.meta.get("answer")}) == current:
                    out[key] = raw[key]
                    return
            except (ValueError, ValidationError):
                pass
        out[key] = codec.dump(current)

    for key in keys:
        if key in _CODECS:
            emit(key)
            wrote.add(key)
            if src is None and out[key] is None:
                del out[key]  # a field the other format did not have
        elif key == "answer":
            if not answers_changed and "answer" in s.meta:
                out["answer"] = s.meta["answer"]
            elif s.answers:
                out["answer"] = [s.answers[0].text]
        elif key == "question_type" and src is not None and key not in s.meta:
            out[key] = s.question_type
        elif key in s.meta:
            out[key] = s.meta[key]
    # fields set after reading (or from another format) that the original keys did not carry
    if "entity_id" not in wrote and s.entity and s.entity.wikidata_id:
        emit("entity_id")
    if "data_split" not in wrote and s.split is not None:
        emit("data_split")
    if src is None:
        for key, value in s.meta.items():
            if key not in out and key != SOURCE_KEY:
                out[key] = value
    return out


def write_infoseek(samples: Iterable[Sample], path: str | Path, *, qtypes_out: str | Path | None = None,
                   **_: Any) -> int:
    """Write InfoSeek JSONL; with `qtypes_out` also the {data_id, question_type} file."""
    n = 0
    qfh = open(qtypes_out, "w", encoding="utf-8") if qtypes_out else None
    try:
        with open(path, "w", encoding="utf-8") as fh:
            for s in samples:
                fh.write(json.dumps(infoseek_record(s), ensure_ascii=False) + "\n")
                if qfh is not None:
                    label = s.question_type if s.question_type is not None else s.answer_type
                    if label is None:
                        raise DataError("sample has no question_type/answer_type for the qtype file",
                                        file=qtypes_out, row=n + 1, field="question_type")
                    qfh.write(json.dumps({"data_id": s.id, "question_type": label}, ensure_ascii=False) + "\n")
                n += 1
    finally:
        if qfh is not None:
            qfh.close()
    return n
