"""Curated posts → benchmark items in the NoteVQA layout (kbvqa.data.notevqa), images copied in.

Each item's images are the post's readable, de-duplicated images, copied content-addressed to
`OUT/images/<sha256><ext>` so the benchmark folder stands alone; `image_urls` keeps the public URLs
the post gave. Everything the funnel measured about the item (scores, probe answers, the original and
source-language question, who judged) is under `curation`, which the NoteVQA reader keeps and writes
back unchanged.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from kbvqa.data.notevqa import sample_from_notevqa
from kbvqa.pipelines.curate.audit import review_flags
from kbvqa.pipelines.curate.common import item, stage_payload

IMAGES_DIR = "images"


def copy_image(src: Path, out_dir: Path) -> str:
    """Copy `src` under OUT/images by content; the path relative to OUT."""
    h = hashlib.sha256()
    with open(src, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    rel = f"{IMAGES_DIR}/{h.hexdigest()}{src.suffix.lower() or '.img'}"
    dst = out_dir / rel
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, tmp)
        tmp.replace(dst)
    return rel


def build_item(record: dict[str, Any], out_dir: Path, max_images: int = 4) -> dict[str, Any] | str:
    """The NoteVQA item of a post that passed the funnel, or the reason it cannot be one."""
    it = item(record)
    if not it.get("answer"):
        return "no_short_answer"
    kept = stage_payload(record, "images").get("kept") or []
    images = [copy_image(Path(im["path"]), out_dir) for im in kept[:max_images]]
    urls = [im["url"] for im in kept[:max_images] if im.get("url")]
    platform = record.get("platform") or {}
    curation: dict[str, Any] = {
        "post_row": record.get("row"),
        "original_question": it.get("original_question") or it["question"],
        "answer_source": it.get("answer_source"),
        **({"key_answer": it["key_answer"]} if it.get("key_answer") else {}),
        **{k: it[k] for k in ("source_language", "source_question", "source_answer") if it.get(k)},
        "review_flags": review_flags(record),
        "scores": {k: v for k, v in (("aesthetic", stage_payload(record, "aesthetic").get("score")),
                                     ("rubric", stage_payload(record, "rubric").get("scores")),
                                     ("aspects", stage_payload(record, "interleaved").get("aspects")),
                                     ("consistency", stage_payload(record, "difficulty").get("consistency")),
                                     ("accuracy", stage_payload(record, "difficulty").get("accuracy")),
                                     ("difficulty", stage_payload(record, "difficulty").get("difficulty")))
                   if v is not None},
        "disabled_stages": sorted(k for k, v in (record.get("curate") or {}).items() if v.get("disabled")),
    }
    out: dict[str, Any] = {"id": record["id"], "images": images, **({"image_urls": urls} if urls else {}),
                           "question": it["question"], "answer": it["answer"]}
    for k in ("category", "intent"):
        if it.get(k):
            out[k] = it[k]
    out["language"] = it.get("language") or "und"
    out["source"] = {"platform": platform.get("name") or platform.get("platform"), "post_id": record["id"],
                     **({"url": platform["url"]} if platform.get("url") else {}),
                     **({"tags": record["tags"]} if record.get("tags") else {})}
    out["curation"] = curation
    sample_from_notevqa(out)  # the item must read back as NoteVQA (raises DataError otherwise)
    return out
