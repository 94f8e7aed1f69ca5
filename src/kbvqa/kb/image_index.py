"""A vector index of KB images mapped to article urls (FAISS inner product on L2-normalised vectors).

Saved as `<path>.npy` (the vectors) plus `<path>.json` holding the encoder name, the index kind and
parameters, the url (and source image) of every vector and a sha256 of the vectors, so a stale or
foreign index is refused rather than silently mis-read. IVF and HNSW indexes also save the trained
FAISS structure as `<path>.faiss` (with its own sha256) so a million-vector index is not retrained
on every load; the flat index is rebuilt from the vectors (seconds).

Kinds: `flat` (exact; the default and right up to ~1M vectors), `ivf` (inverted lists, `nlist`
centroids trained on 64 points each, `nprobe` probed per query; the cheap one to build), `hnsw`
(graph, `m` links, `ef_search`; fastest queries, slowest build: benchmarks/index_speed.py).

The index stores vectors and computes none: building one (KB image urls -> local files -> an
encoder) is `kbvqa.pipelines.index.build_image_index`, so this layer never loads a model.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kbvqa.data.urls import canonical_url

try:  # FAISS is the [faiss] extra; numpy is the exact fallback.
    import faiss  # type: ignore
except ImportError:  # pragma: no cover - exercised only without the extra
    faiss = None

IndexKind = Literal["flat", "ivf", "hnsw"]
FORMAT = "kbvqa-image-index"
FORMAT_VERSION = 2


class IndexParams(BaseModel):
    """The FAISS structure's settings (each used by one kind; the others are recorded, unused). The
    only place their defaults are written: `kbvqa index images` nests this model as it is
    (`ImageIndexOptions.params`), and an index saves the values it was built and searched with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nlist: int | None = Field(None, ge=1)  # IVF centroids (None: sqrt(n), see ImageIndex._nlist)
    nprobe: int = Field(16, ge=1)  # IVF lists probed per query
    m: int = Field(16, ge=2)  # HNSW links per node
    ef_construction: int = Field(40, ge=1)  # HNSW build depth
    ef_search: int = Field(128, ge=1)  # HNSW search depth


class _FaissView:
    """Exposes a flat (or HNSW-flat) index's float storage as a numpy array that holds a reference
    to the index."""

    def __init__(self, index: Any, n: int, dim: int):
        self.index = index  # the owner; for HNSW the flat storage lives (and dies) with it
        flat = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
        self.flat = flat
        self._arr = faiss.rev_swig_ptr(flat.get_xb(), n * dim).reshape(n, dim)
        self.__array_interface__ = self._arr.__array_interface__

    def array(self) -> np.ndarray:
        arr = np.asarray(self)  # arr.base is this object, so the index outlives every view
        arr.flags.writeable = False
        return arr


def _sha256(b: bytes | memoryview) -> str:
    return hashlib.sha256(b).hexdigest()


class ImageIndex:
    """Vectors + the article url of each. `search` returns article urls de-duplicated (best image wins)."""

    def __init__(self, encoder: str, dim: int, kind: IndexKind = "flat", params: IndexParams | None = None,
                 **settings: Any):
        """`params` (or `settings`, IndexParams fields such as nprobe=8, validated into one) set the
        FAISS structure; `params` is read, never kept: set_search_params changes this index's copy."""
        if kind not in ("flat", "ivf", "hnsw"):
            raise ValueError(f"index kind must be flat, ivf or hnsw, not {kind!r}")
        if params is not None and settings:
            raise TypeError(f"pass IndexParams or its settings, not both ({', '.join(settings)})")
        self.encoder = encoder
        self.dim = dim
        self.kind = kind
        self.params: dict[str, Any] = (params or IndexParams(**settings)).model_dump()
        self.urls: list[str] = []
        self.images: list[str] = []  # source image of each vector ("" when unknown)
        self.stats: dict[str, Any] = {}  # build report (resolved / missing images ...), saved with the index
        self.options: dict[str, Any] = {}  # the building job's options as used (`kbvqa index images`), saved with it
        self._chunks: list[np.ndarray] = []
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        self._faiss = None

    # -- pickling (Ray actors) ---------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Vectors as one plain array (chunks merged; a memory map read into the pickle) and a trained
        IVF/HNSW structure as `faiss.serialize_index` bytes, so a copy is not retrained; a flat index is
        rebuilt from the vectors on first search. HNSW keeps its vectors inside the structure, so
        they are not pickled twice."""
        vectors = np.asarray(self.vectors)
        state = {**self.__dict__, "_chunks": [], "_vectors": vectors, "_faiss": None}
        if self._faiss is not None and self.kind != "flat":
            state["_faiss_bytes"] = faiss.serialize_index(self._faiss)
            if self.kind == "hnsw" and len(vectors):
                state["_vectors"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        blob = state.pop("_faiss_bytes", None)
        self.__dict__.update(state)
        if blob is not None:
            self._faiss = faiss.deserialize_index(blob)  # keeps nlist/nprobe, efSearch
            if self._vectors is None:
                self._vectors = _FaissView(self._faiss, len(self.urls), self.dim).array()

    # -- building ---------------------------------------------------------------------------------
    def add(self, vectors: np.ndarray, urls: list[str], images: list[str] | None = None) -> None:
        vectors = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        if len(vectors) != len(urls):
            raise ValueError(f"{len(vectors)} vectors but {len(urls)} urls")
        if len(urls) and vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dimension {vectors.shape[1]}, index expects {self.dim}")
        if images is not None and len(images) != len(urls):
            raise ValueError(f"{len(images)} image names but {len(urls)} urls")
        self._chunks.append(vectors)
        self.urls.extend(canonical_url(u) for u in urls)
        self.images.extend(images if images is not None else [""] * len(urls))
        self._faiss = None

    @property
    def vectors(self) -> np.ndarray:
        if self._chunks:
            parts = ([self._vectors] if len(self._vectors) else []) + self._chunks
            # one chunk is used as is: no second copy of a multi-GB array
            self._vectors = parts[0] if len(parts) == 1 else np.ascontiguousarray(np.vstack(parts), dtype=np.float32)
            self._chunks = []
        return self._vectors

    def __len__(self) -> int:
        return len(self.urls)

    def _nlist(self) -> int:
        n = len(self)
        # sqrt(n) lists keeps k-means training affordable on a few cores (1M vectors: 1000 lists,
        # 64k training points); pass nlist for more lists when many cores are available.
        nlist = self.params.get("nlist") or int(round(math.sqrt(max(n, 1))))
        return max(1, min(nlist, n // 39 if n >= 39 else 1))  # FAISS wants >= 39 training points per centroid

    def _backend(self):
        if faiss is None:
            return None
        if self._faiss is None:
            vecs = self.vectors
            if self.kind == "flat":
                index = faiss.IndexFlatIP(self.dim)
            elif self.kind == "ivf":
                nlist = self._nlist()
                quantizer = faiss.IndexFlatIP(self.dim)
                index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
                rng = np.random.default_rng(0)
                n_train = 64 * nlist
                train = vecs if len(vecs) <= n_train else vecs[np.sort(rng.choice(len(vecs), n_train, replace=False))]
                index.train(train)
                index.nprobe = min(self.params["nprobe"], nlist)
                self.params["nlist"] = nlist
            else:
                index = faiss.IndexHNSWFlat(self.dim, self.params["m"], faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = self.params["ef_construction"]
                index.hnsw.efSearch = self.params["ef_search"]
            if len(vecs):
                index.add(vecs)
            self._faiss = index
            if self.kind in ("flat", "hnsw") and len(vecs):
                # Share the index's flat storage instead of keeping a second copy (2 GB per 1M
                # 512-d vectors). The view keeps the FAISS index alive, and `add` replaces the index
                # rather than growing it, so the memory under an outstanding view never moves.
                # (IVF reorders vectors into its lists, so it keeps the separate copy.)
                self._vectors = _FaissView(index, len(vecs), self.dim).array()
        return self._faiss

    def build(self) -> "ImageIndex":
        """Build (train) the FAISS structure now rather than on the first search."""
        self._backend()
        return self

    # -- querying ---------------------------------------------------------------------------------
    def _raw_search(self, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        index = self._backend()
        if index is not None:
            return index.search(queries, depth)
        sims = queries @ self.vectors.T
        ids = np.argsort(-sims, axis=1)[:, :depth]
        return np.take_along_axis(sims, ids, axis=1), ids

    def search(self, queries: np.ndarray, k: int = 20, dedupe: bool = True) -> list[list[tuple[str, float]]]:
        """Ranked (url, score) lists per query; with `dedupe` each article appears once (best image).

        When one article owns many of the nearest images, the search is widened (doubling the depth)
        until k distinct articles are found or the index is exhausted."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if queries.shape[1] != self.dim:
            raise ValueError(f"query dimension {queries.shape[1]} != index dimension {self.dim}")
        n = len(self)
        if n == 0 or k <= 0:
            return [[] for _ in queries]
        depth = min(n, k * 4 if dedupe else k)
        out: list[list[tuple[str, float]] | None] = [None] * len(queries)
        todo = list(range(len(queries)))
        while todo:
            scores, ids = self._raw_search(queries[todo], depth)
            again = []
            for qi, row_ids, row_scores in zip(todo, ids, scores):
                seen: set[str] = set()
                ranked: list[tuple[str, float]] = []
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
                if len(ranked) < k and depth < n and dedupe:
                    again.append(qi)
                out[qi] = ranked
            if not again:
                break
            todo, depth = again, min(n, depth * 2)
        return [r or [] for r in out]

    # -- persistence ------------------------------------------------------------------------------
    def checksum(self) -> str:
        return _sha256(memoryview(self.vectors).cast("B") if self.vectors.size else b"")

    @staticmethod
    def _paths(path: Path) -> tuple[Path, Path, Path]:
        path = Path(path)
        return path.with_suffix(".npy"), path.with_suffix(".json"), path.with_suffix(".faiss")

    def save(self, path: Path) -> Path:
        """Write `<path>.npy`, `<path>.json` (and `<path>.faiss` for ivf/hnsw); returns the json path."""
        npy, meta_path, fpath = self._paths(path)
        npy.parent.mkdir(parents=True, exist_ok=True)
        tmp_npy = npy.with_name(npy.name + ".tmp")
        with open(tmp_npy, "wb") as f:  # temp + rename: the old file may be memory-mapped by this index
            np.save(f, self.vectors)
        os.replace(tmp_npy, npy)
        meta: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, "encoder": self.encoder,
                                "dim": self.dim, "kind": self.kind, "params": self.params, "n": len(self),
                                "sha256": self.checksum(), "urls": self.urls, "images": self.images,
                                "stats": self.stats, "options": self.options}
        if self.kind != "flat" and faiss is not None:
            faiss.write_index(self._backend(), str(fpath))
            meta["faiss_sha256"] = _sha256(fpath.read_bytes())
            meta["params"] = self.params
        elif fpath.exists():
            fpath.unlink()
        tmp = meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, meta_path)
        return meta_path

    @classmethod
    def load(cls, path: Path, expect_encoder: str | None = None) -> "ImageIndex":
        npy, meta_path, fpath = cls._paths(path)
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path}: no image index here (build one with `kbvqa index images`)")
        rebuild = "rebuild it with `kbvqa index images`"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                raise ValueError(f"a JSON {type(meta).__name__}, not the index's description")
        except (ValueError, OSError) as e:  # a damaged file: one line naming it, not a JSON traceback
            raise ValueError(f"{meta_path}: the image index cannot be read ({e}); {rebuild}") from None
        if expect_encoder and meta.get("encoder") != expect_encoder:
            raise ValueError(f"{path}: index built with encoder {meta.get('encoder')!r}, not {expect_encoder!r}")
        params = meta.get("params") or {}
        try:
            index = cls(meta["encoder"], meta["dim"], meta.get("kind", "flat"),
                        **{k: v for k, v in params.items() if k in IndexParams.model_fields})
            # Memory-mapped: a flat index copies them into FAISS (and then shares that copy); IVF/HNSW
            # keep their own copy inside the FAISS structure, so these pages stay reclaimable file cache.
            index._vectors = np.load(npy, mmap_mode="r")
            index.urls = meta["urls"]
        except (ValueError, OSError, KeyError, TypeError, EOFError) as e:  # np.load of a damaged .npy, a lost key
            raise ValueError(f"{path}: the image index cannot be read ({type(e).__name__}: {e}); {rebuild}") from None
        index.images = meta.get("images") or [""] * len(index.urls)
        index.stats = meta.get("stats") or {}
        index.options = meta.get("options") or {}
        if len(index._vectors) != len(index.urls):
            raise ValueError(f"{path}: {len(index._vectors)} vectors but {len(index.urls)} urls")
        if index.checksum() != meta["sha256"]:
            raise ValueError(f"{path}: vector checksum mismatch (index file changed or corrupt); {rebuild}")
        if index.kind != "flat" and faiss is not None and fpath.is_file():
            if _sha256(fpath.read_bytes()) != meta.get("faiss_sha256"):
                raise ValueError(f"{fpath}: FAISS structure checksum mismatch (changed or corrupt); {rebuild}")
            index._faiss = faiss.read_index(str(fpath))
            if index.kind == "ivf":
                index._faiss.nprobe = index.params["nprobe"]
            elif index.kind == "hnsw":
                index._faiss.hnsw.efSearch = index.params["ef_search"]
        return index

    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Trade recall for speed at query time (IVF nprobe, HNSW efSearch)."""
        if nprobe is not None:
            self.params["nprobe"] = nprobe
            if self._faiss is not None and self.kind == "ivf":
                self._faiss.nprobe = nprobe
        if ef_search is not None:
            self.params["ef_search"] = ef_search
            if self._faiss is not None and self.kind == "hnsw":
                self._faiss.hnsw.efSearch = ef_search

