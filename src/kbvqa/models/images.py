"""Image inputs for OpenAI-compatible chat: images travel inline as base64 data URLs.

Images are downscaled to `max_side` before encoding because servers bill and batch by pixels, and
an inline 4000-px photo only wastes bandwidth and tokens.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Iterable

from PIL import Image

from kbvqa.data.images import ImageRefError, open_image, outside_root_allowed

_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}


def image_to_data_url(image: str | Path | Image.Image, max_side: int = 1024, fmt: str = "JPEG",
                      quality: int = 90) -> str:
    """Encode a file path or PIL image as `data:image/...;base64,...`, longest side ≤ max_side.

    JPEG drops alpha (composited on white) since JPEG cannot store it."""
    fmt = fmt.upper()
    if fmt == "JPG":
        fmt = "JPEG"
    if fmt not in _MIME:
        raise ValueError(f"unsupported image format {fmt!r} (use one of {sorted(_MIME)})")
    if isinstance(image, Image.Image):
        img = image
    else:
        p = Path(image)
        if not p.is_file():
            raise FileNotFoundError(f"image not found: {p}")
        # guarded decode (caps, verification); JPEG downscales cheaply at decode time; alpha is kept
        img = open_image(p, mode=None, draft=(max_side, max_side) if fmt == "JPEG" else None)
    if max(img.size) > max_side:
        img = img.copy()
        img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    if fmt == "JPEG" and img.mode != "RGB":
        if img.mode in ("RGBA", "LA", "P"):
            rgba = img.convert("RGBA")
            bg = Image.new("RGB", rgba.size, (255, 255, 255))
            bg.paste(rgba, mask=rgba.split()[-1])
            img = bg
        else:
            img = img.convert("RGB")
    buf = io.BytesIO()
    save_kw: dict[str, Any] = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    img.save(buf, format=fmt, **save_kw)
    return f"data:{_MIME[fmt]};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def image_part(image: str | Path | Image.Image, max_side: int = 1024, fmt: str = "JPEG") -> dict:
    """One `image_url` content part; data URLs and public http(s) URLs pass through unchanged. The
    model server fetches a URL itself, so one naming this machine, a private, link-local (cloud
    metadata) or CGNAT address, or carrying credentials is refused (ImageRefError) — an answer or a
    dataset row must not turn the server into a proxy (`--allow-outside-root` lifts it)."""
    if isinstance(image, str) and image.startswith(("http://", "https://", "data:")):
        from kbvqa.data.fetch import url_refusal  # the HTTP stack only for URL images

        why = None if image.startswith("data:") or outside_root_allowed() else url_refusal(image)
        if why:
            raise ImageRefError(f"image URL {image[:200]!r} is not sent to the model server: {why}")
        url = image
    else:
        url = image_to_data_url(image, max_side=max_side, fmt=fmt)
    return {"type": "image_url", "image_url": {"url": url}}


def user_message(text: str, images: Iterable[str | Path | Image.Image] = (), *, max_side: int = 1024,
                 fmt: str = "JPEG") -> dict:
    """A user message: plain string content without images, text + image parts with them."""
    imgs = list(images)
    if not imgs:
        return {"role": "user", "content": text}
    parts: list[dict] = [{"type": "text", "text": text}]
    parts.extend(image_part(i, max_side=max_side, fmt=fmt) for i in imgs)
    return {"role": "user", "content": parts}
