"""Image encoders behind one interface.

The embedded default needs no weights: a global colour + gradient-orientation histogram. It is a
baseline (it finds near-duplicate photographs, not semantic matches) and is named as such in every
index and report. Neural encoders (CLIP/SigLIP from a local directory) plug in behind the same
`encode()` signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Protocol

import numpy as np
from PIL import Image, ImageOps


class ImageEncoder(Protocol):
    name: str
    dim: int

    def encode(self, images: Iterable[Image.Image | str | Path]) -> np.ndarray: ...


def load_image(image: Image.Image | str | Path) -> Image.Image:
    """Open an image with EXIF orientation applied, as RGB. Raises FileNotFoundError/OSError with the path."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    with Image.open(image) as im:
        im.draft("RGB", (512, 512))  # JPEG: decode at reduced size, we only need a small thumbnail
        return ImageOps.exif_transpose(im).convert("RGB")


class HistogramEncoder:
    """HSV colour histogram (8x4x4) + 8-bin gradient-orientation histograms on a 2x2 grid.

    Hellinger-mapped (square root) and L2-normalised, so inner product ~ histogram similarity.
    """

    name = "colorgrad-hist-v1"
    dim = 8 * 4 * 4 + 2 * 2 * 8

    def __init__(self, side: int = 128):
        self.side = side

    def _one(self, image: Image.Image | str | Path) -> np.ndarray:
        im = load_image(image).resize((self.side, self.side), Image.Resampling.BILINEAR)
        hsv = np.asarray(im.convert("HSV"), dtype=np.int32)
        h, s, v = hsv[..., 0] * 8 // 256, hsv[..., 1] * 4 // 256, hsv[..., 2] * 4 // 256
        colour = np.bincount((h * 16 + s * 4 + v).ravel(), minlength=128).astype(np.float64)
        colour /= colour.sum()
        gray = np.asarray(im.convert("L"), dtype=np.float64)
        gy, gx = np.gradient(gray)
        mag = np.hypot(gx, gy)
        ori = ((np.arctan2(gy, gx) + np.pi) / (2 * np.pi) * 8).astype(np.int64) % 8
        half = self.side // 2
        cells = []
        for r in (slice(0, half), slice(half, None)):
            for c in (slice(0, half), slice(half, None)):
                cells.append(np.bincount(ori[r, c].ravel(), weights=mag[r, c].ravel(), minlength=8))
        grad = np.concatenate(cells)
        grad /= grad.sum() or 1.0
        vec = np.sqrt(np.concatenate([colour, grad]))
        return (vec / (np.linalg.norm(vec) or 1.0)).astype(np.float32)

    def encode(self, images: Iterable[Image.Image | str | Path]) -> np.ndarray:
        rows = [self._one(im) for im in images]
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)


def get_encoder(name: str = HistogramEncoder.name) -> ImageEncoder:
    if name in (HistogramEncoder.name, "default", "hist"):
        return HistogramEncoder()
    raise ValueError(f"unknown image encoder {name!r} (available: {HistogramEncoder.name})")
