"""NoteVQA-style community VQA items (seed 001) ⇄ kbvqa Samples, losslessly.

One JSON object per line. The layout kbvqa reads and writes (fields beyond these are kept in
`meta.extra` and written back unchanged):

    {"id": "nv_0001",
     "images": ["images/q1.jpg"],            # query image(s): paths relative to the file, or ids
     "image_urls": ["https://…/q1.jpg"],       # optional: public URLs of the same images (web reverse search)
     "question": "What mushroom is this, and is it edible?",
     "answer": "Chanterelle; edible",          # the short reference (or "answers": [aliases])
     "category": "Nature", "intent": "Identification", "language": "en",
     "reference": {                            # optional: the interleaved reference answer
        "text": "… sentence.\\n<image>{\\"candidate_images\\": 1}</image>\\n…",
        "images": [{"path": "images/r1.jpg", "source_url": "https://…", "sha256": "…"}]},
     "source": {"platform": "…", "post_id": "…", "url": "…"}}

The reference's tags use the grammar of seed 001's reference synthesis (C.2): `candidate_images` is
the 1-based index into `reference.images`. Samples carry category, intent, language, image_urls,
reference and source in `meta`; the short reference becomes `answers`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.data.schema import Answer, Sample

DATASET = "notevqa"
META_KEYS = ("category", "intent", "language", "image_urls", "reference", "source")
_KNOWN = {"id", "images", "question", "answer", "answers", *META_KEYS}


def looks_like_notevqa(obj: dict[str, Any]) -> bool:
    """Format sniffing: a question with a community category/intent or an interleaved reference."""
    return "question" in obj and ("answer" in obj or "answers" in obj) and bool(
        {"intent", "category", "reference"} & set(obj))


def sample_from_notevqa(obj: dict[str, Any], *, file: str | Path | None = None, row: int | None = None) -> Sample:
    if "answer" in obj and "answers" in obj:
        raise DataError("give the short reference as 'answer' or as 'answers', not both", file=file, row=row,
                        field="answers")
    answers = obj.get("answers") if "answers" in obj else ([obj["answer"]] if obj.get("answer") is not None else [])
    if not isinstance(answers, list):
        raise DataError("must be a list of strings", file=file, row=row, field="answers")
    ref = obj.get("reference")
    if ref is not None and (not isinstance(ref, dict) or not isinstance(ref.get("text", ""), str)
                            or not isinstance(ref.get("images", []), list)):
        raise DataError("must be {text, images: [...]}", file=file, row=row, field="reference")
    meta: dict[str, Any] = {k: obj[k] for k in META_KEYS if k in obj}
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    if extra:
        meta["extra"] = extra
    if "answers" in obj:  # remembered only to write the same layout back
        meta["answers_as_list"] = True
    try:
        return Sample(id=obj.get("id"), question=obj.get("question"), images=obj.get("images") or [],
                      answers=[Answer(text=str(a)) for a in answers], dataset=DATASET, meta=meta)
    except ValidationError as e:
        raise from_validation_error(e, file=file, row=row) from None


def notevqa_record(s: Sample) -> dict[str, Any]:
    meta = dict(s.meta)
    out: dict[str, Any] = {"id": s.id, "images": list(s.images), "question": s.question}
    texts = [a.text for a in s.answers]
    if meta.pop("answers_as_list", False) or len(texts) != 1:
        out["answers"] = texts
    else:
        out["answer"] = texts[0]
    for k in META_KEYS:
        if k in meta:
            out[k] = meta[k]
    out.update(meta.get("extra") or {})
    return out


def read_notevqa(path: str | Path, *, policy: ErrorPolicy | None = None, **_: Any) -> Iterator[Sample]:
    policy = policy or ErrorPolicy()
    for lineno, obj in read_jsonl(path, policy):
        try:
            yield sample_from_notevqa(obj, file=path, row=lineno)
        except DataError as e:
            policy.handle(e.with_location(file=path, row=lineno))


def write_notevqa(samples: Iterable[Sample], path: str | Path, **_: Any) -> int:
    return write_jsonl(path, (notevqa_record(s) for s in samples))


# ------------------------------------------------------------------------------ reference image tags

_TAG = re.compile(r"<image>(.*?)</image>", re.S)
_TAG_PARTS = re.compile(r"</?image>")


class ReferenceTag(NamedTuple):
    """One well-formed `<image>{"candidate_images": N}</image>` tag: its span and N (1-based)."""

    start: int
    end: int
    index: int
    raw: str


def candidate_tag(n: int) -> str:
    """The canonical spelling of a reference image tag."""
    return f'<image>{{"candidate_images": {n}}}</image>'


def reference_tags(text: str, n_images: int | None = None, *,
                   allow_duplicates: bool = False) -> tuple[list[ReferenceTag], list[dict[str, Any]]]:
    """The one parser of reference image tags: (well-formed tags in order, violations). A violation
    is {kind, tag, detail}: malformed_tag (not exactly {"candidate_images": positive int}, or an
    unpaired <image>/</image> marker), idx_out_of_range (with `n_images`: past the image list),
    duplicate_image (an image cited again; its tag is not in the list). Callers decide which
    violations matter: reference construction and IVR-12 refuse all; the image ablation shows an
    image cited twice twice (`allow_duplicates`)."""
    tags: list[ReferenceTag] = []
    violations: list[dict[str, Any]] = []
    seen: set[int] = set()
    for m in _TAG.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            obj = None
        n = obj.get("candidate_images") if isinstance(obj, dict) and set(obj) == {"candidate_images"} else None
        if type(n) is not int:
            violations.append({"kind": "malformed_tag", "tag": m.group(0),
                               "detail": 'the tag must be exactly <image>{"candidate_images": N}</image>'})
        elif n < 1 or (n_images is not None and n > n_images):
            violations.append({"kind": "idx_out_of_range", "tag": m.group(0), "index": n,
                               "detail": f"{n} is not between 1 and {n_images if n_images is not None else 'N'}"})
        elif n in seen and not allow_duplicates:
            violations.append({"kind": "duplicate_image", "tag": m.group(0), "detail": f"image {n} cited twice"})
        else:
            seen.add(n)
            tags.append(ReferenceTag(m.start(), m.end(), n, m.group(0)))
    stray = len(_TAG_PARTS.findall(_TAG.sub("", text)))
    if stray:
        violations.append({"kind": "malformed_tag", "tag": "<image>/</image>",
                           "detail": f"{stray} unpaired <image> or </image> marker(s)"})
    return tags, violations
