"""Image encoders behind one interface.

The embedded default needs no weights: a global colour + gradient-orientation histogram. It is a
baseline (it finds near-duplicate photographs, not semantic matches) and is named as such in every
index and report. Neural encoders plug in behind the same `encode()` signature:

- `CLIPEncoder(model_dir)`: CLIP or SigLIP through transformers, from a local directory only
  (`local_files_only=True`; nothing is ever downloaded), batched, with a progress bar.
- `OpenCLIPEncoder(model, pretrained)`: open_clip (EVA-CLIP, the EchoSight encoder), an optional
  extra imported only when asked for; `pretrained` must be a local checkpoint file.

Every encoder returns L2-normalised float32 rows, so inner product = cosine similarity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np
from PIL import Image, ImageOps

from kbvqa.progress import ProgressBar

ImageLike = Image.Image | str | Path


class ImageEncoder(Protocol):
    name: str
    dim: int

    def encode(self, images: Iterable[ImageLike]) -> np.ndarray: ...


def load_image(image: ImageLike, draft: int = 512) -> Image.Image:
    """Open an image with EXIF orientation applied, as RGB. Raises FileNotFoundError/OSError with the path."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    with Image.open(image) as im:
        im.draft("RGB", (draft, draft))  # JPEG: decode at reduced size, we only need a small thumbnail
        return ImageOps.exif_transpose(im).convert("RGB")


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32)


class HistogramEncoder:
    """Baseline: HSV colour histogram (8x4x4) + 8-bin gradient-orientation histograms on a 2x2 grid.

    Hellinger-mapped (square root) and L2-normalised, so inner product ~ histogram similarity. Finds
    the same photograph cropped/mirrored/rescaled; it does not know what an entity looks like.
    """

    name = "colorgrad-hist-v1"
    dim = 8 * 4 * 4 + 2 * 2 * 8
    baseline = True

    def __init__(self, side: int = 128, batch_size: int = 64, progress: bool = False):
        self.side = side
        self.batch_size = batch_size
        self.progress = progress

    def _one(self, image: ImageLike) -> np.ndarray:
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

    def encode(self, images: Iterable[ImageLike]) -> np.ndarray:
        images = list(images)
        bar = ProgressBar(len(images), f"encode {self.name}", self.progress and len(images) > self.batch_size)
        rows = []
        for im in images:
            rows.append(self._one(im))
            bar.advance()
        bar.close()
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)


def _dir_fingerprint(model_dir: Path) -> str:
    """Short hash of the model's config files: two different checkpoints never share an encoder name."""
    h = hashlib.sha256()
    for name in ("config.json", "preprocessor_config.json", "open_clip_config.json"):
        p = model_dir / name
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()[:8]


class _BatchedEncoder:
    """Shared batching loop for neural encoders: subclasses set name/dim/batch_size/progress and
    implement `_features(list of PIL images) -> (n, dim) array`."""

    baseline = False
    name: str
    dim: int
    batch_size: int
    progress: bool

    def _features(self, ims: list[Image.Image]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode(self, images: Iterable[ImageLike]) -> np.ndarray:
        images = list(images)
        bar = ProgressBar(len(images), f"encode {self.name}", self.progress)
        rows = []
        try:
            for i in range(0, len(images), self.batch_size):
                batch = [load_image(im) for im in images[i:i + self.batch_size]]
                rows.append(self._features(batch))
                bar.advance(len(batch))
        finally:
            bar.close()
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = _normalise(np.concatenate(rows))
        self.dim = vecs.shape[1]
        return vecs


class CLIPEncoder(_BatchedEncoder):
    """CLIP / SigLIP image tower through transformers, loaded from a local directory only.

    `model_dir` holds `config.json` + weights (`save_pretrained` layout) and the image processor's
    `preprocessor_config.json`. Any transformers model with `get_image_features` works (CLIPModel,
    SiglipModel, ...). Images are decoded, preprocessed and encoded `batch_size` at a time.
    """

    def __init__(self, model_dir: str | Path, *, device: str | None = None, batch_size: int = 32,
                 progress: bool = False, dtype: str | None = None):
        import torch
        from transformers import AutoImageProcessor, AutoModel

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(f"{self.model_dir}: no config.json (expected a local transformers model "
                                    "directory; kbvqa never downloads encoder weights)")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        kwargs: dict[str, Any] = {"local_files_only": True}
        if dtype:
            kwargs["dtype"] = getattr(torch, dtype)
        self.model = AutoModel.from_pretrained(self.model_dir, **kwargs).to(self.device).eval()
        if not hasattr(self.model, "get_image_features"):
            raise ValueError(f"{self.model_dir}: {type(self.model).__name__} has no image tower (get_image_features)")
        self.processor = AutoImageProcessor.from_pretrained(self.model_dir, local_files_only=True)
        cfg = json.loads((self.model_dir / "config.json").read_text())
        self.model_type = cfg.get("model_type", "clip")
        self.name = f"hf-{self.model_type}:{self.model_dir.name}:{_dir_fingerprint(self.model_dir)}"
        self.dim = int(cfg.get("projection_dim") or cfg.get("vision_config", {}).get("hidden_size")
                       or self._probe_dim())
        self.batch_size = batch_size
        self.progress = progress
        self._torch = torch

    def _probe_dim(self) -> int:
        return int(self._features([Image.new("RGB", (32, 32))]).shape[1])

    def _features(self, ims: list[Image.Image]) -> np.ndarray:
        import torch

        inputs = self.processor(images=ims, return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        with torch.inference_mode():
            out = self.model.get_image_features(**inputs)
        if not isinstance(out, torch.Tensor):  # transformers >= 5 wraps the projected features
            out = out.pooler_output
        return out.float().cpu().numpy()

class OpenCLIPEncoder(_BatchedEncoder):
    """open_clip image tower (EVA-CLIP etc.): optional extra, imported lazily.

    `pretrained` must be a local checkpoint path; open_clip's hub names would download, so they are
    refused."""

    def __init__(self, model: str, pretrained: str | Path, *, device: str | None = None, batch_size: int = 32,
                 progress: bool = False):
        try:
            import open_clip  # type: ignore
        except ImportError as e:
            raise ImportError("open_clip is not installed (pip install open_clip_torch); it is optional") from e
        import torch

        ckpt = Path(pretrained)
        if not ckpt.is_file():
            raise FileNotFoundError(f"{ckpt}: open_clip checkpoint not found (local files only; no downloads)")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(model, pretrained=str(ckpt),
                                                                               device=self.device)
        self.model.eval()
        self.name = f"open_clip:{model}:{ckpt.name}"
        self.dim = int(getattr(self.model.visual, "output_dim", 0)) or 0
        self.batch_size = batch_size
        self.progress = progress

    def _features(self, ims: list[Image.Image]) -> np.ndarray:
        import torch

        batch = torch.stack([self.preprocess(im) for im in ims])
        with torch.inference_mode():
            return self.model.encode_image(batch.to(self.device)).float().cpu().numpy()


def encode_files(encoder: ImageEncoder, paths: Sequence[ImageLike], *, batch_size: int = 256,
                 on_batch: Callable[[int], None] | None = None) -> tuple[np.ndarray, list[int], dict[int, str]]:
    """Encode many files, surviving bad ones: (vectors, indices of `paths` encoded, {index: error}).

    A file that is missing or does not decode is reported with its reason instead of aborting the
    batch (and never silently dropped)."""
    vecs: list[np.ndarray] = []
    kept: list[int] = []
    failed: dict[int, str] = {}
    for start in range(0, len(paths), batch_size):
        chunk = list(enumerate(paths[start:start + batch_size], start))
        ims, idx = [], []
        for i, p in chunk:
            try:
                ims.append(load_image(p))
                idx.append(i)
            except (OSError, ValueError) as e:
                failed[i] = f"{type(e).__name__}: {e}"
        if ims:
            vecs.append(encoder.encode(ims))
            kept.extend(idx)
        if on_batch:
            on_batch(len(chunk))
    dim = int(getattr(encoder, "dim", 0))
    out = np.concatenate(vecs) if vecs else np.zeros((0, dim), dtype=np.float32)
    return out, kept, failed


ENCODERS = {
    HistogramEncoder.name: "embedded baseline (colour + gradient histograms; no weights)",
    "clip": "CLIP through transformers from --model-dir (local files only)",
    "siglip": "SigLIP through transformers from --model-dir (local files only)",
    "open_clip:<ARCH>": "open_clip (optional extra); --model-dir is the local checkpoint file",
}


def get_encoder(name: str = HistogramEncoder.name, model_dir: str | Path | None = None, **kwargs: Any) -> ImageEncoder:
    """An encoder by name: `colorgrad-hist-v1` (aliases `hist`, `default`), `clip`/`siglip`/`hf`
    (needs `model_dir`), `open_clip:<ARCH>` (needs `model_dir` = checkpoint file), or an index's
    recorded `hf-<type>:<dir>:<hash>` name (with `model_dir`, checked to match)."""
    if name in (HistogramEncoder.name, "default", "hist", "histogram"):
        return HistogramEncoder(**{k: v for k, v in kwargs.items() if k in ("batch_size", "progress")})
    if name in ("clip", "siglip", "hf") or name.startswith("hf-"):
        if model_dir is None:
            raise ValueError(f"encoder {name!r} needs a local model directory (--model-dir); nothing is downloaded")
        enc = CLIPEncoder(model_dir, **kwargs)
        if name.startswith("hf-") and enc.name != name:
            raise ValueError(f"{model_dir} gives encoder {enc.name!r}, not the requested {name!r}")
        return enc
    if name.startswith("open_clip:"):
        if model_dir is None:
            raise ValueError("open_clip encoders need --model-dir pointing at a local checkpoint file")
        arch = name.split(":")[1]
        return OpenCLIPEncoder(arch, model_dir, **kwargs)
    raise ValueError(f"unknown image encoder {name!r} (available: {', '.join(ENCODERS)})")
