"""Step 1 of the funnel, the deterministic half of type cleaning (seed 001 §3.1 step 1): keyword and
length filters, language identification, at least one readable image of a minimum size, and
perceptual-hash de-duplication across posts. These run offline, before any model stage, so the
expensive checks only see posts that could become items.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field

from kbvqa.data.compare import word_count
from kbvqa.data.images import BadImage, ImageRefError, check_image, open_image
from kbvqa.data.phash import NEAR_DUPLICATE_BITS, distance, phash
from kbvqa.pipelines.curate.common import CorpusStage, CurateStage, CurateStageConfig, Verdict, post_text
from kbvqa.pipelines.curate.corpus import duplicate_owners
from kbvqa.pipelines.curate.language import detect_language
from kbvqa.runner.stage import Context
from kbvqa.stages import register_stage

#: Marketing and spam phrases dropped by default (lower case; matched as substrings).
DEFAULT_BLOCKED = ("giveaway", "discount code", "promo code", "link in bio", "dm for price", "dm me for",
                   "use my code", "affiliate", "sponsored", "代购", "优惠券", "私信我", "抽奖")


class TextFilterConfig(CurateStageConfig):
    min_chars: int = Field(20, ge=0)
    max_chars: int = Field(4000, ge=1)
    min_words: int = Field(4, ge=0)
    block_keywords: list[str] = Field(default_factory=lambda: list(DEFAULT_BLOCKED))
    require_keywords: list[str] = Field(default_factory=list)  # any of them, when given
    require_question: bool = True
    question_markers: list[str] = Field(default_factory=lambda: ["?", "？", "吗", "呢"])


@register_stage
class TextFilter(CurateStage):
    """Keyword and length rules on the post's title and text."""

    name = "curate-text"
    version = "1"
    key = "text"
    config_model = TextFilterConfig

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        c: TextFilterConfig = self.config  # type: ignore[assignment]
        text = post_text(record)
        low = text.lower()
        payload = {"chars": len(text), "words": word_count(text)}
        if len(text) < c.min_chars or payload["words"] < c.min_words:
            return Verdict(payload, "too_short", f"{len(text)} characters, {payload['words']} words "
                                                 f"(minimum {c.min_chars} / {c.min_words})")
        if len(text) > c.max_chars:
            return Verdict(payload, "too_long", f"{len(text)} characters (maximum {c.max_chars})")
        blocked = next((k for k in c.block_keywords if k.lower() in low), None)
        if blocked is not None:
            return Verdict(payload, "blocked_keyword", f"contains {blocked!r}")
        if c.require_keywords and not any(k.lower() in low for k in c.require_keywords):
            return Verdict(payload, "missing_keyword", f"none of {c.require_keywords}")
        if c.require_question and not any(m in text for m in c.question_markers):
            return Verdict(payload, "no_question", f"no question marker ({' '.join(c.question_markers)})")
        return Verdict(payload)


class LanguageConfig(CurateStageConfig):
    languages: list[str] = Field(default_factory=list)  # keep only these (ISO 639-1); empty: every language
    keep_undetermined: bool = True


@register_stage
class LanguageFilter(CurateStage):
    """Detects the post's language (kbvqa's offline detector, `language.py`); keeps the languages asked for."""

    name = "curate-language"
    version = "1"
    key = "language"
    config_model = LanguageConfig

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        c: LanguageConfig = self.config  # type: ignore[assignment]
        guess = detect_language(post_text(record))
        declared = record.get("language")
        payload = {**guess.as_dict(), "declared": declared,
                   "agrees": None if not declared or guess.language == "und" else declared.split("-")[0].lower()
                   == guess.language}
        if guess.language == "und":
            if not c.keep_undetermined:
                return Verdict(payload, "language_undetermined", guess.evidence)
            return Verdict(payload)
        if c.languages and guess.language not in c.languages:
            return Verdict(payload, "language_not_allowed", f"{guess.language} ({guess.evidence}); kept: {c.languages}")
        return Verdict(payload)


class ImageCheckConfig(CurateStageConfig):
    min_side: int = Field(200, ge=1)  # pixels, shorter side
    max_aspect: float = Field(4.0, ge=1.0)
    max_images: int = Field(9, ge=1)  # images checked per post (platforms cap posts near 9-18)
    near_bits: int = Field(NEAR_DUPLICATE_BITS, ge=0, le=63)  # a post's own repeated image


def inspect_image(path: Path, c: ImageCheckConfig) -> dict[str, Any]:
    """One image file: {width, height, phash} or {reason, detail}. Decoding goes through open_image
    (byte and pixel caps from the header, PIL verification)."""
    try:
        w, h = check_image(path)  # header only: the size rules first; open_image verifies what it decodes
    except FileNotFoundError:
        return {"reason": "missing", "detail": f"image not found: {path}"}
    except BadImage as exc:
        msg = str(exc)
        return {"reason": "too_large" if "cap" in msg else "unreadable", "detail": msg}
    except OSError as exc:
        return {"reason": "unreadable", "detail": f"{type(exc).__name__}: {exc}"}
    if min(w, h) < c.min_side:
        return {"reason": "too_small", "detail": f"{w}×{h}, shorter side under {c.min_side} px"}
    if max(w, h) / max(min(w, h), 1) > c.max_aspect:
        return {"reason": "too_elongated", "detail": f"{w}×{h}, aspect over {c.max_aspect}"}
    try:
        img = open_image(path, mode="L", draft=(128, 128))
        return {"width": w, "height": h, "phash": phash(img)}
    except (BadImage, OSError) as exc:
        return {"reason": "unreadable", "detail": str(exc)}


@register_stage
class ImageCheck(CurateStage):
    """At least one readable image of the minimum size; hashes every readable one; a post's own
    repeated image is kept once. Resource: `image_root` (the posts file's folder or --images)."""

    name = "curate-images"
    version = "1"
    key = "images"
    config_model = ImageCheckConfig

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        c: ImageCheckConfig = self.config  # type: ignore[assignment]
        images = record.get("images") or []
        if not images:
            return Verdict({"kept": [], "dropped": []}, "no_image", "the post has no image")
        return await asyncio.to_thread(self._check, images, ctx, c)

    def _check(self, images: list[dict[str, Any]], ctx: Context, c: ImageCheckConfig) -> Verdict:
        kept: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        for n, im in enumerate(images):
            ref = im.get("path") or im.get("url")
            if n >= c.max_images:
                dropped.append({"ref": ref, "reason": "over_max_images", "detail": f"only {c.max_images} checked"})
                continue
            if not im.get("path"):
                dropped.append({"ref": ref, "reason": "url_only", "detail": "no local file; post images are not "
                                                                           "downloaded"})
                continue
            try:
                path = ctx.image_path(im["path"])
            except FileNotFoundError as exc:
                dropped.append({"ref": ref, "reason": "missing", "detail": str(exc)})
                continue
            except ImageRefError as exc:
                dropped.append({"ref": ref, "reason": "refused_path", "detail": str(exc)})
                continue
            got = inspect_image(path, c)
            if "reason" in got:
                dropped.append({"ref": ref, **got})
                continue
            twin = next((k for k in kept if distance(k["_hash"], got["phash"]) <= c.near_bits), None)
            if twin is not None:
                dropped.append({"ref": ref, "reason": "repeated_in_post", "detail": f"same picture as {twin['ref']}"})
                continue
            kept.append({"ref": ref, "url": im.get("url"), "path": str(path), "width": got["width"],
                         "height": got["height"], "phash": f"{got['phash']:016x}", "_hash": got["phash"]})
        for k in kept:
            del k["_hash"]
        payload = {"kept": kept, "dropped": dropped}
        if not kept:
            reasons = sorted({d["reason"] for d in dropped})
            return Verdict(payload, "no_readable_image", "; ".join(f"{d['ref']}: {d['reason']} ({d['detail']})"
                                                                   for d in dropped) or ", ".join(reasons))
        return Verdict(payload)


class DedupConfig(CurateStageConfig):
    near_bits: int = Field(NEAR_DUPLICATE_BITS, ge=0, le=63)


@register_stage
class Dedup(CorpusStage):
    """A post whose picture repeats (within `near_bits`) an image of an earlier kept post is dropped:
    reposts and re-uploads would put one photograph into two items."""

    name = "curate-dedup"
    version = "1"
    key = "dedup"
    config_model = DedupConfig

    def decide(self, records: Iterable[dict[str, Any]]) -> dict[str, Verdict]:
        c: DedupConfig = self.config  # type: ignore[assignment]
        order: list[str] = []
        images: list[tuple[str, int]] = []
        refs: dict[str, list[str]] = {}
        for r in records:
            order.append(r["id"])
            kept = ((r.get("curate") or {}).get("images") or {}).get("kept") or []
            images.extend((r["id"], int(im["phash"], 16)) for im in kept)
            refs[r["id"]] = [im["ref"] for im in kept]
        dups = duplicate_owners(images, c.near_bits)
        out: dict[str, Verdict] = {}
        for rid in order:
            hit = dups.get(rid)
            if hit is None:
                out[rid] = Verdict({"duplicate_of": None})
                continue
            other, d, mine, theirs = hit
            out[rid] = Verdict({"duplicate_of": other, "distance": d, "image": refs[rid][mine],
                                "other_image": refs[other][theirs]}, "duplicate_image",
                               f"{refs[rid][mine]} repeats {refs[other][theirs]} of post {other!r} ({d} bits apart)")
        return out
