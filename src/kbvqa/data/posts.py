"""Community posts — the raw material of a curated benchmark (seed 001 §3.1) — read from JSONL, CSV or
Parquet into one validated shape.

JSONL layout, one post per line (only `id` is required; fields not listed are kept in `meta`):

    {"id": "p0001",
     "title": "What is this tower?",                       # may be empty
     "text": "Saw it on a trip near Beijing ...",           # the post body
     "images": ["imgs/p0001_1.jpg",                         # paths relative to the posts file (or --images),
                {"path": "imgs/p0001_2.jpg", "url": "https://…"},   # with the public URL when known,
                "https://…/p0001_3.jpg"],                   # or a URL alone (kept, but not fetched: no pixels)
     "comments": [{"text": "Tower of Buddhist Incense ...", "likes": 41}, "a plain comment"],
     "tags": ["travel", "architecture"],
     "language": "en",                                      # as the platform declares it (detected anyway)
     "category": "Travel & Architecture", "intent": "Identification",   # optional labels
     "answer": "Tower of Buddhist Incense",                 # optional short answer known already
     "platform": {"name": "…", "url": "https://…", "likes": 120, "created": "2026-05-01"}}

CSV / Parquet: one row per post with a `field=column` mapping like the generic adapter's (`--mapping
id=note_id,text=body`); without one each field is read from the column of its own name. List cells
(`images`, `tags`, `comments`) are JSON arrays or strings split on `sep` (default "|"); `platform` is a
JSON object cell; other columns go to `meta`.

The input policy is kbvqa's: a row that cannot be a post (not JSON, not UTF-8, a field of the wrong
type) is a `DataError` naming the file, the row and the field — or, under a skipping policy, a counted
skip. Duplicate ids are not decided here: the curation intake drops the later post with a reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.generic import _records

__all__ = ["POST_FIELDS", "Comment", "Post", "PostImage", "detect_post_format", "parse_post_mapping", "read_posts"]

POST_FIELDS = ("id", "title", "text", "images", "comments", "tags", "language", "category", "intent", "answer",
               "platform")
_LIST_FIELDS = ("images", "comments", "tags")
POST_FORMATS = ("jsonl", "csv", "parquet")


class PostImage(BaseModel):
    """One image of a post: a file (`path`, relative to the posts file or the image root), a public
    `url`, or both."""

    model_config = ConfigDict(extra="forbid")
    path: str | None = None
    url: str | None = None

    @classmethod
    def parse(cls, value: Any) -> "PostImage":
        if isinstance(value, str):
            v = value.strip()
            if not v:
                raise ValueError("empty image reference")
            return cls(url=v) if "://" in v else cls(path=v)
        if isinstance(value, dict):
            img = cls.model_validate(value)
            if not (img.path or img.url):
                raise ValueError("an image needs a path or a url")
            return img
        raise ValueError(f"an image is a path/URL string or {{path, url}}, not {type(value).__name__}")


class Comment(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str
    likes: int = Field(0, ge=0)

    @classmethod
    def parse(cls, value: Any) -> "Comment":
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, dict):
            return cls.model_validate(value)
        raise ValueError(f"a comment is a string or {{text, likes}}, not {type(value).__name__}")


class Post(BaseModel):
    """One community post, validated. `row` is where it was read (1-based; CSV counts the header)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    row: int
    title: str = ""
    text: str = ""
    images: list[PostImage] = Field(default_factory=list)
    comments: list[Comment] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    language: str | None = None
    category: str | None = None
    intent: str | None = None
    answer: str | None = None
    platform: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("empty id")
        return v

    def record(self) -> dict[str, Any]:
        """The JSON-ready record the curation stages read."""
        return self.model_dump(mode="json", exclude_defaults=False)


def _as_list(value: Any, sep: str) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return value
    if hasattr(value, "tolist"):  # a Parquet/NumPy array
        return list(value.tolist())
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                parsed = json.loads(s)
            except ValueError:
                parsed = None
            if isinstance(parsed, list):
                return parsed
        return [x for x in (p.strip() for p in value.split(sep)) if x]
    return [value]


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError("must be a JSON object")


def _as_text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be text, not {type(value).__name__}")
    return str(value)


def _field(name: str, value: Any, sep: str) -> Any:
    if name == "id":
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"must be a string (or an integer), not {type(value).__name__}")
        return str(value)
    if name == "images":
        return [PostImage.parse(v) for v in _as_list(value, sep)]
    if name == "comments":
        return [Comment.parse(v) for v in _as_list(value, sep)]
    if name == "tags":
        return [str(_as_text(v, name)) for v in _as_list(value, sep) if v is not None]
    if name == "platform":
        return _as_dict(value)
    text = _as_text(value, name)
    if name in ("title", "text"):
        return text or ""
    return text or None


def parse_post_mapping(text: str | None) -> dict[str, str] | None:
    """'id=note_id,text=body' -> {'id': 'note_id', 'text': 'body'} (the CLI's --mapping for posts)."""
    if not text:
        return None
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"mapping entry {part!r} is not field=column")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in POST_FIELDS:
            raise ValueError(f"unknown post field {k!r} in the mapping; known: {list(POST_FIELDS)}")
        out[k] = v
    return out


def post_from_row(rec: dict[str, Any], *, row: int, file: str | Path, mapping: dict[str, str] | None = None,
                  sep: str = "|") -> Post:
    """A Post from one input row; a DataError naming the file, row and field (the column) otherwise."""
    mapping = dict(mapping or {})
    taken = set(mapping.values())
    for f in POST_FIELDS:
        if f not in mapping and f not in taken:
            mapping[f] = f
    id_col = mapping["id"]
    if rec.get(id_col) in (None, ""):
        raise DataError("missing post id", file=file, row=row, field=id_col)
    fields: dict[str, Any] = {}
    for name, col in mapping.items():
        if col not in rec:
            continue
        try:
            fields[name] = _field(name, rec[col], sep)
        except (ValueError, ValidationError) as exc:
            msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise DataError(msg, file=file, row=row, field=col) from None
    cols = set(mapping.values())
    meta = {k: v for k, v in rec.items() if k not in cols}
    try:
        return Post(**fields, row=row, meta=meta)
    except ValidationError as exc:
        raise from_validation_error(exc, file=file, row=row) from None


class _Utf8Policy(ErrorPolicy):
    """The caller's policy, with an undecodable line named for what it is (orjson says 'surrogates')."""

    def __init__(self, inner: ErrorPolicy):
        super().__init__(inner.skip_invalid, inner.report)

    def handle(self, err: DataError) -> None:
        if "UTF-8" in err.message or "utf-8" in err.message:
            err.message = f"not UTF-8 text; re-encode the file as UTF-8 ({err.message})"
            err.args = (str(err),)
        super().handle(err)


def detect_post_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    raise DataError(f"cannot tell the posts format from the extension {suffix!r}; pass the format "
                    f"(one of {list(POST_FORMATS)})", file=path)


def read_posts(path: str | Path, fmt: str | None = None, *, mapping: dict[str, str] | None = None, sep: str = "|",
               policy: ErrorPolicy | None = None, batch_size: int = 1024) -> Iterator[Post]:
    """Stream Posts from a JSONL/CSV/Parquet file. Bad rows raise DataError (file, row, field) unless
    `policy` skips them, in which case they are counted in its report."""
    path = Path(path)
    if not path.is_file():
        raise DataError("posts file not found", file=path)
    fmt = fmt or detect_post_format(path)
    if fmt not in POST_FORMATS:
        raise ValueError(f"unknown posts format {fmt!r}; known: {list(POST_FORMATS)}")
    if mapping:
        unknown = sorted(set(mapping) - set(POST_FIELDS))
        if unknown:
            raise ValueError(f"unknown post field(s) {unknown} in the mapping; known: {list(POST_FIELDS)}")
    policy = _Utf8Policy(policy or ErrorPolicy())
    try:
        for row, rec in _records(path, fmt, policy, batch_size):
            try:
                yield post_from_row(rec, row=row, file=path, mapping=mapping, sep=sep)
            except DataError as exc:
                policy.handle(exc)
    except UnicodeDecodeError as exc:  # a CSV is decoded as a whole stream: name the file
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start}); re-encode the file as UTF-8",
                        file=path) from None
