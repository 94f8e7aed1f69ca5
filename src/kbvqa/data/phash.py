"""Perceptual hashes for near-duplicate images: de-duplication in reference construction, the
non-redundancy dimension of IVR-12, curation.

`phash` is the DCT hash (32×32 grayscale, the 8×8 lowest frequencies against their median: robust to
rescaling, mild crops and JPEG re-encoding) and `dhash` the gradient hash (9×8, adjacent pixels).
Both are 64-bit integers compared by Hamming distance.

Two thresholds, for two uses:
- `CERTAIN_BITS` (<= 6): the pair is the same picture for sure — what reference de-duplication lets
  the hash settle without asking the model. Measured by `benchmarks/phash_threshold.py` on the
  photographs shipped in PyPI packages (scikit-image, scikit-learn, matplotlib): every resize and
  every JPEG re-encode down to quality 30 stay within 6 bits (quality 10 reaches 10), while the
  closest two different photographs (any of 17 crops/resizes/re-encodes of each) are 16 bits apart:
  no different pair is merged up to 15 bits, and 6 keeps a margin of more than 2x. Crops do not stay
  near: a 5% crop on every side lands at 6-26 bits, a 10% one-corner crop at 10-28, so crops go to
  the model probe.
- `NEAR_DUPLICATE_BITS` (<= 10) and `DISTINCT_BITS` (> 19): the older three-way split (duplicate /
  ambiguous / distinct) that curation's own-image check and IVR-12's rule measure still use; it is a
  heuristic, not a certainty (a 10% crop is 20 bits away and would be called distinct).
No hash survives rotation or a heavy one-sided crop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from kbvqa.data.images import open_image

CERTAIN_BITS = 6  # at or below: the same picture for sure (resized / re-encoded); measured, see above
NEAR_DUPLICATE_BITS = 10  # at or below: the same picture (rescaled, re-encoded, lightly cropped)
DISTINCT_BITS = 19  # above: different pictures; in between: ambiguous


def _gray(image: "str | Path | object", size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    img = image if isinstance(image, Image.Image) else open_image(image, mode="L", draft=(size[0] * 4, size[1] * 4))
    img = img.convert("L") if img.mode != "L" else img
    return np.asarray(img.resize(size, Image.Resampling.BILINEAR), dtype=np.float32)


def _bits(mask: np.ndarray) -> int:
    return int.from_bytes(np.packbits(mask.astype(np.uint8).ravel()).tobytes(), "big")


def phash(image: "str | Path | object") -> int:
    """64-bit DCT hash of an image file (or PIL image)."""
    from scipy.fft import dctn

    coeffs = dctn(_gray(image, (32, 32)), norm="ortho")[:8, :8]
    low = coeffs.ravel()[1:]  # the DC term says only how bright the picture is
    return _bits(coeffs > np.median(low))


def dhash(image: "str | Path | object") -> int:
    """64-bit gradient hash: is each pixel brighter than its right neighbour (9×8 grayscale)."""
    g = _gray(image, (9, 8))
    return _bits(g[:, 1:] > g[:, :-1])


def distance(a: int, b: int) -> int:
    """Hamming distance between two 64-bit hashes."""
    return (a ^ b).bit_count()


def verdict(bits: int, near: int = NEAR_DUPLICATE_BITS, distinct: int = DISTINCT_BITS) -> str:
    """'duplicate', 'ambiguous' or 'distinct' for a Hamming distance."""
    return "duplicate" if bits <= near else ("distinct" if bits > distinct else "ambiguous")


def dedupe(hashes: Iterable[tuple[str, int]], near: int = NEAR_DUPLICATE_BITS) -> tuple[list[str], dict[str, str]]:
    """(kept keys in order, dropped key -> the kept key it duplicates): greedy, first seen wins."""
    kept: list[tuple[str, int]] = []
    dropped: dict[str, str] = {}
    for key, h in hashes:
        twin = next((k for k, kh in kept if distance(h, kh) <= near), None)
        if twin is None:
            kept.append((key, h))
        else:
            dropped[key] = twin
    return [k for k, _ in kept], dropped
