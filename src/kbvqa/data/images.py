"""Sample image references → files: the one resolver every job uses.

Benchmarks name images in several ways: a relative path (`images/x.jpg`), a bare dataset id without
an extension (InfoSeek `oven_04983046`, E-VQA image ids), or an absolute path. `resolve_image` turns
any of them into a file, trying the usual extensions for a bare id, and refuses a reference that
lands outside the image root (after `..`, percent-escapes and symlinks are resolved; absolute paths
included) unless the user opts in with `--allow-outside-root` (env KBVQA_ALLOW_OUTSIDE_ROOT=1) — a
benchmark row must not make kbvqa read, index or send a file the user did not point it at. kbvqa's
own outputs (augmented samples) name their images relative to the folder they are written in.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["ALLOW_OUTSIDE_ROOT_ENV", "IMAGE_SUFFIXES", "ImageRefError", "outside_root_allowed", "resolve_image"]

#: The opt-in, as an environment variable so that it reaches every worker process (Ray actors, pools).
ALLOW_OUTSIDE_ROOT_ENV = "KBVQA_ALLOW_OUTSIDE_ROOT"

#: Tried, in this order, after a reference that names no existing file.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".JPEG", ".JPG", ".PNG")
_KNOWN_SUFFIX = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


class ImageRefError(ValueError):
    """An image reference that may not be used (outside the root, a URL where a file is needed)."""


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a symlink loop
        return False


def outside_root_allowed() -> bool:
    """Whether the user opted in to image references outside the image root (`--allow-outside-root`)."""
    return os.environ.get(ALLOW_OUTSIDE_ROOT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def resolve_image(ref: str | Path, root: str | Path | None, *, allow_outside_root: bool | None = None) -> Path:
    """The file a sample's image reference names.

    Relative references are taken under `root`; a bare id is tried with IMAGE_SUFFIXES. With a
    root, the file must be inside it after symlinks are resolved, whether the reference is relative
    or absolute (ImageRefError otherwise). `allow_outside_root` None reads the user's opt-in
    (`outside_root_allowed`). A reference that names nothing raises FileNotFoundError ("image not
    found: <path>"). Without a root, references are taken as they are (library use; every command
    gives one)."""
    if allow_outside_root is None:
        allow_outside_root = outside_root_allowed()
    text = str(ref).strip()
    if not text:
        raise ImageRefError("empty image reference")
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text):
        raise ImageRefError(f"image reference {text!r} is a URL, not a file under the image root")
    if _ESCAPE.search(text):
        text = unquote(text)  # `%2e%2e/` is `../`: judge the path it really names
    p = Path(text)
    base = Path(root).resolve() if root is not None else None
    if base is not None and not p.is_absolute():
        p = base / p
    candidates = [p] if p.is_file() or p.suffix.lower() in _KNOWN_SUFFIX else \
        [p, *(p.with_name(p.name + ext) for ext in IMAGE_SUFFIXES)]
    found = next((c for c in candidates if c.is_file()), None)
    target = found or p
    if base is not None and not allow_outside_root and not _inside(target, base):
        raise ImageRefError(f"image reference {str(ref)!r} resolves outside the image root {base} "
                            "(pass --allow-outside-root to permit it)")
    if found is None:
        raise FileNotFoundError(f"image not found: {p}")
    return found


# ------------------------------------------------------------------------------------------ decoding

#: Caps every decode in kbvqa goes through: a 69-byte PNG can claim 100000×100000 pixels.
MAX_PIXELS = 64_000_000
MAX_BYTES = 50_000_000


class BadImage(ValueError):
    """A file that is not an image kbvqa will decode: unreadable, too large, or a decompression bomb."""


@contextlib.contextmanager
def _decode_errors(p: object, max_pixels: int) -> Iterator[None]:
    """PIL's ways of refusing a file, as one BadImage naming it."""
    from PIL import Image, UnidentifiedImageError

    try:
        yield
    except BadImage:
        raise
    except Image.DecompressionBombError as exc:  # PIL's own, far larger cap tripped first
        raise BadImage(f"{p}: over the {max_pixels:,}-pixel cap (a decompression bomb: {exc})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"{p}: not a readable image ({type(exc).__name__}: {exc})") from None


def _probe(src: Any, label: object, size: int, *, max_pixels: int, max_bytes: int,
           verify: bool) -> tuple[str, int, int]:
    """(format, width, height) from the header of `src` (a path or a file object; `label` names it in
    errors) after the byte and pixel caps, and with `verify` PIL's structural check."""
    from PIL import Image

    if size > max_bytes:
        raise BadImage(f"{label}: {size:,} bytes is over the {max_bytes:,}-byte cap")
    with _decode_errors(label, max_pixels), Image.open(src) as probe:
        fmt, (w, h) = probe.format or "", probe.size
        if w * h > max_pixels:
            raise BadImage(f"{label}: {w}×{h} pixels is over the {max_pixels:,}-pixel cap (a decompression bomb?)")
        if verify:
            probe.verify()
    return fmt, w, h


def check_image(path: str | Path, *, max_pixels: int = MAX_PIXELS, max_bytes: int = MAX_BYTES,
                verify: bool = False) -> tuple[int, int]:
    """(width, height) from the header after the byte and pixel caps (and, with `verify`, PIL's
    structural check), before any pixel is decoded. For decoders that need their own pipeline
    (composites) but must refuse the same files open_image refuses."""
    p = Path(path)
    _, w, h = _probe(p, p, p.stat().st_size, max_pixels=max_pixels, max_bytes=max_bytes, verify=verify)
    return w, h


def check_image_bytes(data: bytes, *, max_pixels: int = MAX_PIXELS,
                      max_bytes: int = MAX_BYTES) -> tuple[str, int, int]:
    """(format, width, height) of an image held in memory (a dataset's embedded bytes), under the same
    caps as check_image, from its header only. Raises BadImage."""
    return _probe(io.BytesIO(data), "image bytes", len(data), max_pixels=max_pixels, max_bytes=max_bytes,
                  verify=False)


def open_image(path: str | Path, *, mode: str | None = "RGB", max_pixels: int = MAX_PIXELS,
               max_bytes: int = MAX_BYTES, draft: tuple[int, int] | None = None) -> "Image.Image":
    """Decode an image file safely: a size cap on the file, a pixel cap checked from the header before
    any pixel is decoded, PIL's verification, EXIF orientation applied. `draft` lets a JPEG decode at
    a reduced size (fast thumbnails and hashes). Raises BadImage (or FileNotFoundError)."""
    from PIL import Image, ImageOps

    p = Path(path)
    check_image(p, max_pixels=max_pixels, max_bytes=max_bytes, verify=True)
    with _decode_errors(p, max_pixels):
        img = Image.open(p)
        if draft is not None:
            img.draft(mode or "RGB", draft)
        img.load()
        img = ImageOps.exif_transpose(img)
        return img.convert(mode) if mode and img.mode != mode else img
