"""A vector index of KB images mapped to article urls (FAISS inner product on L2-normalised vectors).

Saved as `<path>.npy` (the vectors; the flat FAISS index is rebuilt from them on load) plus
`<path>.json` holding the encoder name, the url of every vector and a sha256 of the vectors, so a
stale or foreign index is refused rather than silently mis-read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from kbvqa.data.urls import canonical_url

try:  # FAISS is the [faiss] extra; numpy is the exact fallback.
    import faiss  # type: ignore
except ImportError:  # pragma: no cover - exercised only without the extra
    faiss = None


class ImageIndex:
    def __init__(self, encoder: str, dim: int):
        self.encoder = encoder
        self.dim = dim
        self.urls: list[str] = []
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        self._faiss = None

    def add(self, vectors: np.ndarray, urls: list[str]) -> None:
        if len(vectors) != len(urls):
            raise ValueError(f"{len(vectors)} vectors but {len(urls)} urls")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._vectors = np.vstack([self._vectors, vectors])
        self.urls.extend(canonical_url(u) for u in urls)
        self._faiss = None

    def __len__(self) -> int:
        return len(self.urls)

    def _backend(self):
        if faiss is not None and self._faiss is None:
            self._faiss = faiss.IndexFlatIP(self.dim)
            self._faiss.add(self._vectors)
        return self._faiss

    def search(self, queries: np.ndarray, k: int = 20, dedupe: bool = True) -> list[list[tuple[str, float]]]:
        """Ranked (url, score) lists per query; with `dedupe` each article appears once (best image)."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        depth = min(len(self), k * 4 if dedupe else k)
        if depth == 0:
            return [[] for _ in queries]
        index = self._backend()
        if index is not None:
            scores, ids = index.search(queries, depth)
        else:
            sims = queries @ self._vectors.T
            ids = np.argsort(-sims, axis=1)[:, :depth]
            scores = np.take_along_axis(sims, ids, axis=1)
        out = []
        for row_ids, row_scores in zip(ids, scores):
            seen, ranked = set(), []
            for i, s in zip(row_ids, row_scores):
                if i < 0:
                    continue
                url = self.urls[i]
                if dedupe and url in seen:
                    continue
                seen.add(url)
                ranked.append((url, float(s)))
                if len(ranked) == k:
                    break
            out.append(ranked)
        return out

    def checksum(self) -> str:
        return hashlib.sha256(self._vectors.tobytes()).hexdigest()

    def save(self, path: Path) -> None:
        path = Path(path)
        np.save(path.with_suffix(".npy"), self._vectors)
        meta = {"encoder": self.encoder, "dim": self.dim, "urls": self.urls, "sha256": self.checksum()}
        path.with_suffix(".json").write_text(json.dumps(meta))

    @classmethod
    def load(cls, path: Path, expect_encoder: str | None = None) -> "ImageIndex":
        path = Path(path)
        meta = json.loads(path.with_suffix(".json").read_text())
        if expect_encoder and meta["encoder"] != expect_encoder:
            raise ValueError(f"{path}: index built with encoder {meta['encoder']!r}, not {expect_encoder!r}")
        index = cls(meta["encoder"], meta["dim"])
        index._vectors = np.load(path.with_suffix(".npy"))
        index.urls = meta["urls"]
        if index.checksum() != meta["sha256"]:
            raise ValueError(f"{path}: vector checksum mismatch (index file changed or corrupt)")
        return index
