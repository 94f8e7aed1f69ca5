"""Dense section embeddings beside the KB's FTS5 (BM25) index.

One row per KB section, in KB order, so the rows of one article are contiguous: `search_in(url, ...)`
scores an article's sections with a slice and a dot product (no FAISS needed), and `search` runs a
flat FAISS inner-product search over everything. Saved as `<path>.npy` + `<path>.json` (embedder
name, per-article row ranges, sha256 of the vectors); a checksum or embedder mismatch is refused.
Embedding the sections is `kbvqa.pipelines.index.build_text_index`: this layer loads no model.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from kbvqa.data.urls import canonical_url

try:
    import faiss  # type: ignore
except ImportError:  # pragma: no cover
    faiss = None

FORMAT = "kbvqa-text-index"


class TextIndex:
    def __init__(self, embedder: str, dim: int):
        self.embedder = embedder
        self.dim = dim
        self.vectors = np.zeros((0, dim), dtype=np.float32)
        self.ranges: dict[str, tuple[int, int]] = {}  # canonical url -> [start, end) rows
        self.section_ids: list[int] = []  # section index of each row
        self._faiss = None
        self._order: list[str] = []  # urls in row order (for `search`)
        self._starts = np.zeros(0, dtype=np.int64)
        self.options: dict[str, Any] = {}  # the building job's options as used (`kbvqa index text`), saved with it

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the FAISS object (not picklable); `search` rebuilds the flat index lazily."""
        return {**self.__dict__, "_faiss": None}

    def __len__(self) -> int:
        return len(self.vectors)

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and canonical_url(url) in self.ranges

    def _reindex(self) -> None:
        self._order = sorted(self.ranges, key=lambda u: self.ranges[u][0])
        self._starts = np.array([self.ranges[u][0] for u in self._order], dtype=np.int64)
        self._faiss = None

    def url_of_row(self, row: int) -> str:
        return self._order[int(np.searchsorted(self._starts, row, side="right")) - 1]

    def search_in(self, url: str, query_vec: np.ndarray, k: int = 10) -> list[tuple[int, float]]:
        """(section index, cosine) of one article's best sections; [] if the article is not indexed."""
        r = self.ranges.get(canonical_url(url))
        if r is None or r[0] == r[1]:
            return []
        sims = self.vectors[r[0]:r[1]] @ np.asarray(query_vec, dtype=np.float32).ravel()
        order = np.argsort(-sims)[:k]
        return [(self.section_ids[r[0] + i], float(sims[i])) for i in order]

    def section_vectors(self, url: str) -> dict[int, np.ndarray]:
        r = self.ranges.get(canonical_url(url))
        if r is None:
            return {}
        return {self.section_ids[i]: self.vectors[i] for i in range(r[0], r[1])}

    def search(self, query_vec: np.ndarray, k: int = 10) -> list[tuple[str, int, float]]:
        """(url, section index, cosine) over the whole KB."""
        if len(self) == 0:
            return []
        q = np.ascontiguousarray(np.atleast_2d(query_vec), dtype=np.float32)
        if faiss is not None:
            if self._faiss is None:
                self._faiss = faiss.IndexFlatIP(self.dim)
                self._faiss.add(self.vectors)
            scores, ids = self._faiss.search(q, min(k, len(self)))
            pairs = [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]
        else:
            sims = self.vectors @ q[0]
            top = np.argsort(-sims)[:k]
            pairs = [(int(i), float(sims[i])) for i in top]
        return [(self.url_of_row(i), self.section_ids[i], s) for i, s in pairs]

    def checksum(self) -> str:
        return hashlib.sha256(memoryview(np.ascontiguousarray(self.vectors)).cast("B")).hexdigest()

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path.with_suffix(".npy"), self.vectors)
        meta = {"format": FORMAT, "version": 1, "embedder": self.embedder, "dim": self.dim, "n": len(self),
                "sha256": self.checksum(), "ranges": self.ranges, "section_ids": self.section_ids,
                "options": self.options}
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, path.with_suffix(".json"))
        return path.with_suffix(".json")

    @classmethod
    def load(cls, path: str | Path, expect_embedder: str | None = None) -> "TextIndex":
        path = Path(path)
        meta_path = path.with_suffix(".json")
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path}: no text index here (build one with `kbvqa index text`)")
        rebuild = "rebuild it with `kbvqa index text`"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:  # a damaged file: one line naming it, not a JSON traceback
            raise ValueError(f"{meta_path}: the text index cannot be read ({e}); {rebuild}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
            raise ValueError(f"{meta_path}: not a kbvqa text index (format {found!r})")
        if expect_embedder and meta.get("embedder") != expect_embedder:
            raise ValueError(f"{path}: built with embedder {meta.get('embedder')!r}, not {expect_embedder!r}")
        try:
            idx = cls(meta["embedder"], meta["dim"])
            idx.vectors = np.load(path.with_suffix(".npy"))
            idx.ranges = {u: (int(a), int(b)) for u, (a, b) in meta["ranges"].items()}
            idx.section_ids = [int(s) for s in meta["section_ids"]]
        except (ValueError, OSError, KeyError, TypeError, EOFError) as e:  # np.load of a damaged .npy, a lost key
            raise ValueError(f"{path}: the text index cannot be read ({type(e).__name__}: {e}); {rebuild}") from None
        idx.options = meta.get("options") or {}
        if idx.checksum() != meta["sha256"]:
            raise ValueError(f"{path}: vector checksum mismatch (index file changed or corrupt); {rebuild}")
        idx._reindex()
        return idx

    @classmethod
    def from_rows(cls, embedder: str, dim: int, vectors: np.ndarray, ranges: dict[str, tuple[int, int]],
                  section_ids: list[int]) -> "TextIndex":
        """An index from rows computed elsewhere (`kbvqa.pipelines.index.build_text_index` embeds
        them: the KB layer stores vectors and computes none)."""
        idx = cls(embedder, dim)
        idx.vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, dim)
        idx.ranges = {canonical_url(u): (int(a), int(b)) for u, (a, b) in ranges.items()}
        idx.section_ids = [int(x) for x in section_ids]
        if len(idx.section_ids) != len(idx.vectors):
            raise ValueError(f"{len(idx.vectors)} vectors but {len(idx.section_ids)} section ids")
        idx._reindex()
        return idx
