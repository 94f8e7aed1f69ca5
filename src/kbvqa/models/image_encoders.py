"""Image encoders behind one interface.

The embedded default needs no weights: a global colour + gradient-orientation histogram. It is a
baseline (it finds near-duplicate photographs, not semantic matches) and is named as such in every
index and report. Neural encoders plug in behind the same `encode()` signature:

- `CLIPEncoder(model_dir)`: CLIP or SigLIP through transformers, from a local directory only
  (`local_files_only=True`; nothing is ever downloaded), batched, with a progress bar.
- `OpenCLIPEncoder(model, pretrained)`: open_clip (EVA-CLIP, the EchoSight encoder), an optional
  extra imported only when asked for; `pretrained` must be a local checkpoint file.

Every encoder returns L2-normalised float32 rows, so inner product = cosine similarity. `ENCODERS`
names them (`get_encoder(name)`; `kbvqa index images --encoder` offers its names); `encode_batch`
is the one loop that encodes a batch of files while surviving bad ones.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from PIL import Image

from kbvqa.data.images import open_image
from kbvqa.progress import ProgressBar
from kbvqa.registry import Registry

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where vectors are made, not at the top: `kbvqa --help` lists ENCODERS' names
# and should not pay for loading numpy to do so.

ImageLike = Image.Image | str | Path

#: Images an encoder takes per call. One setting wherever images are encoded in batches: the KB images
#: of `kbvqa index images` and the query images of `kbvqa retrieve` (their options' `batch_size`).
ENCODE_BATCH = 64


class ImageEncoder(Protocol):
    name: str
    dim: int

    def encode(self, images: Iterable[ImageLike]) -> np.ndarray: ...


def load_image(image: ImageLike, draft: int = 512) -> Image.Image:
    """Open an image with EXIF orientation applied, as RGB, through kbvqa's guarded decoder. Raises
    FileNotFoundError, or BadImage (a ValueError) naming the path for an unreadable or hostile file."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    return open_image(image, draft=(draft, draft))  # guarded; JPEG decodes at reduced size


def _normalise(x: np.ndarray) -> np.ndarray:
    import numpy as np

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

    def __init__(self, side: int = 128, batch_size: int = ENCODE_BATCH, progress: bool = False):
        self.side = side
        self.batch_size = batch_size
        self.progress = progress

    def _one(self, image: ImageLike) -> np.ndarray:
        import numpy as np

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
        import numpy as np

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
        import numpy as np

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


def encode_batch(encoder: ImageEncoder, images: Sequence[ImageLike]) -> list[np.ndarray | Exception]:
    """One encoder call for a batch, surviving bad files: per item its vector, or the exception
    (missing file, undecodable image) that kept it out, so one bad image never fails its batch."""
    out: list[np.ndarray | Exception] = [None] * len(images)  # type: ignore[list-item]
    loaded: list[tuple[int, Image.Image]] = []
    for i, im in enumerate(images):
        try:
            loaded.append((i, load_image(im)))
        except (OSError, ValueError) as e:
            out[i] = e
    if loaded:
        vecs = encoder.encode([im for _, im in loaded])
        if len(vecs) != len(loaded):
            raise ValueError(f"encoder {encoder.name!r} returned {len(vecs)} vectors for {len(loaded)} images")
        for (i, _), v in zip(loaded, vecs):
            out[i] = v
    return out


def encode_files(encoder: ImageEncoder, paths: Sequence[ImageLike], *, batch_size: int,
                 on_batch: Callable[[int], None] | None = None) -> tuple[np.ndarray, list[int], dict[int, str]]:
    """Encode many files, surviving bad ones: (vectors, indices of `paths` encoded, {index: error}).

    A file that is missing or does not decode is reported with its reason instead of aborting the
    batch (and never silently dropped)."""
    import numpy as np

    vecs: list[np.ndarray] = []
    kept: list[int] = []
    failed: dict[int, str] = {}
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        for i, r in enumerate(encode_batch(encoder, chunk), start):
            if isinstance(r, Exception):
                failed[i] = f"{type(r).__name__}: {r}"
            else:
                vecs.append(r)
                kept.append(i)
        if on_batch:
            on_batch(len(chunk))
    dim = int(getattr(encoder, "dim", 0))
    out = np.stack(vecs).astype(np.float32, copy=False) if vecs else np.zeros((0, dim), dtype=np.float32)
    return out, kept, failed


# -- the registry ------------------------------------------------------------------------------------
#: Encoders by name. An entry is a factory `(model_dir, arg, **options) -> ImageEncoder`. Info:
#: `aliases` (other names for it), `arg` (it takes a parameter after a colon: `open_clip:ARCH`),
#: `recorded` (the prefix of the full names an index records, `hf-clip:<dir>:<hash>`: they reload
#: the same model and are checked to match), `needs` (what --model-dir must hold). Third-party
#: encoders register through the entry-point group `kbvqa.encoder`.
ENCODERS: Registry[Callable[..., ImageEncoder]] = Registry("encoder")


@ENCODERS.register(HistogramEncoder.name, help="embedded baseline (colour + gradient histograms; no weights)",
                   aliases=("hist", "histogram", "default"))
def _histogram(model_dir: str | Path | None, arg: str | None, **options: Any) -> ImageEncoder:
    return HistogramEncoder(**{k: v for k, v in options.items() if k in ("batch_size", "progress")})


def _transformers(model_dir: str | Path, arg: str | None, **options: Any) -> ImageEncoder:
    return CLIPEncoder(model_dir, **options)


for _name, _what in (("clip", "CLIP"), ("siglip", "SigLIP"), ("hf", "any image tower")):
    ENCODERS.add(_name, _transformers, help=f"{_what} through transformers from --model-dir (local files only)",
                 needs="a local model directory", **({"recorded": "hf-"} if _name == "hf" else {}))
del _name, _what


@ENCODERS.register("open_clip", help="open_clip (optional extra); --model-dir is the local checkpoint file",
                   arg="ARCH", needs="a local checkpoint file")
def _open_clip(model_dir: str | Path, arg: str | None, **options: Any) -> ImageEncoder:
    if not arg:
        raise ValueError("name the open_clip architecture: open_clip:ARCH (e.g. open_clip:EVA01-g-14)")
    return OpenCLIPEncoder(arg, model_dir, **options)


def encoder_choices() -> list[str]:
    """The names `--encoder` offers (aliases left out; a parameterised one shown as `open_clip:ARCH`)."""
    return [f"{e.name}:{e.info['arg']}" if e.info.get("arg") else e.name for e in ENCODERS]


def resolve_encoder(name: str) -> tuple[str, str | None, bool]:
    """(registry name, the part after its colon, whether `name` is a recorded full name that the
    loaded encoder must reproduce) for a requested or an index-recorded encoder name. ValueError
    lists the choices. Nothing is loaded, so the command line checks `--encoder` up front."""
    for e in ENCODERS:
        if name == e.name or name in e.info.get("aliases", ()):
            return e.name, None, False
    for e in ENCODERS:
        if e.info.get("arg") and name.startswith(e.name + ":"):
            arg, _, rest = name[len(e.name) + 1:].partition(":")
            return e.name, arg, bool(rest)
        if e.info.get("recorded") and name.startswith(e.info["recorded"]):
            return e.name, None, True
    raise ValueError(f"unknown image encoder {name!r} (available: {', '.join(encoder_choices())})")


def get_encoder(name: str = HistogramEncoder.name, model_dir: str | Path | None = None, **options: Any) -> ImageEncoder:
    """An encoder by registered name (`ENCODERS`): `colorgrad-hist-v1` (aliases `hist`, `default`),
    `clip`/`siglip`/`hf` (needs `model_dir`), `open_clip:<ARCH>` (needs `model_dir` = checkpoint
    file), or the full name an index recorded (`hf-<type>:<dir>:<hash>`; with `model_dir`, checked
    to match). `options` (device, batch_size, progress) go to the encoder; the baseline ignores device."""
    key, arg, recorded = resolve_encoder(name)
    entry = ENCODERS.entry(key)
    if entry.info.get("needs") and model_dir is None:
        raise ValueError(f"encoder {name!r} needs {entry.info['needs']} (--model-dir); nothing is downloaded")
    enc = entry.obj(model_dir, arg, **options)
    if recorded and enc.name != name:
        raise ValueError(f"{model_dir} gives encoder {enc.name!r}, not the requested {name!r}")
    return enc
