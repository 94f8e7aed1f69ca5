"""Image index: flat / IVF / HNSW search, entity de-duplication, persistence with checksums, KB build."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from kbvqa.data.schema import Article, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.kb.image_index import ImageIndex
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.pipelines.index import ImageResolver, build_image_index


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def clustered():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(50, 32))
    vecs = _unit(np.repeat(centres, 40, axis=0) + 0.05 * rng.normal(size=(2000, 32)))
    urls = [f"https://en.wikipedia.org/wiki/E{i // 40}" for i in range(2000)]
    queries = _unit(centres + 0.05 * rng.normal(size=centres.shape))
    return vecs, urls, queries


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_kinds_find_the_right_entity_and_round_trip(tmp_path, clustered, kind):
    vecs, urls, queries = clustered
    idx = ImageIndex("enc", 32, kind)
    idx.add(vecs, urls)
    res = idx.search(queries, k=5)
    top1 = [r[0][0] for r in res]
    assert sum(t == f"https://en.wikipedia.org/wiki/E{i}" for i, t in enumerate(top1)) >= 48
    assert all(len({u for u, _ in r}) == 5 for r in res)  # de-duplicated: 5 distinct articles
    assert all(r[0][1] >= r[-1][1] for r in res)
    meta = idx.save(tmp_path / "img")
    assert (tmp_path / "img.faiss").exists() == (kind != "flat")
    back = ImageIndex.load(tmp_path / "img", expect_encoder="enc")
    assert back.kind == kind and len(back) == 2000
    assert [r[0][0] for r in back.search(queries, k=5)] == top1
    m = json.loads(meta.read_text())
    assert m["encoder"] == "enc" and m["sha256"] == idx.checksum() and m["n"] == 2000


def test_dedupe_widens_when_one_article_owns_the_neighbourhood():
    rng = np.random.default_rng(1)
    q = _unit(rng.normal(size=(1, 8)))
    near = _unit(q + 0.01 * rng.normal(size=(60, 8)))  # 60 images of one article closest to the query
    far = _unit(rng.normal(size=(5, 8)))
    idx = ImageIndex("enc", 8)
    idx.add(np.vstack([near, far]), ["https://x.org/A"] * 60 + [f"https://x.org/B{i}" for i in range(5)])
    res = idx.search(q, k=4)[0]
    assert len(res) == 4 and res[0][0] == "https://x.org/A"
    assert len({u for u, _ in res}) == 4
    assert len(idx.search(q, k=4, dedupe=False)[0]) == 4


def test_load_refuses_tampering_and_wrong_encoder(tmp_path, clustered):
    vecs, urls, _ = clustered
    idx = ImageIndex("enc", 32, "ivf")
    idx.add(vecs[:500], urls[:500])
    idx.save(tmp_path / "i")
    with pytest.raises(ValueError, match="not 'other'"):
        ImageIndex.load(tmp_path / "i", expect_encoder="other")
    f = tmp_path / "i.faiss"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="FAISS structure checksum"):
        ImageIndex.load(tmp_path / "i")
    arr = np.load(tmp_path / "i.npy")
    arr[0, 0] += 1
    np.save(tmp_path / "i.npy", arr)
    with pytest.raises(ValueError, match="checksum mismatch"):
        ImageIndex.load(tmp_path / "i")
    with pytest.raises(FileNotFoundError, match="kbvqa index images"):
        ImageIndex.load(tmp_path / "nope")


def test_version1_index_files_still_load(tmp_path):
    """The first index format (npy + json with encoder/dim/urls/sha256) stays readable."""
    import hashlib

    v = _unit(np.eye(3, 4, dtype=np.float32) + 0.1)
    np.save(tmp_path / "old.npy", v)
    (tmp_path / "old.json").write_text(json.dumps({"encoder": "e", "dim": 4, "urls": ["https://a.org/1", "https://a.org/2",
                                                                                      "https://a.org/3"],
                                                   "sha256": hashlib.sha256(v.tobytes()).hexdigest()}))
    idx = ImageIndex.load(tmp_path / "old")
    assert idx.kind == "flat" and idx.search(v[1], k=1)[0][0][0] == "https://a.org/2"


def test_add_validates_shapes():
    idx = ImageIndex("e", 4)
    with pytest.raises(ValueError, match="2 vectors but 1 urls"):
        idx.add(np.zeros((2, 4)), ["u"])
    with pytest.raises(ValueError, match="dimension"):
        idx.add(np.zeros((1, 5)), ["u"])
    with pytest.raises(ValueError, match="flat, ivf or hnsw"):
        ImageIndex("e", 4, "lsh")  # type: ignore[arg-type]
    assert idx.search(np.ones(4), k=3) == [[]]


def test_resolver_rules(tmp_path):
    (tmp_path / "Eiffel tower.jpg").write_bytes(b"x")
    (tmp_path / "wikipedia/commons/a/ab").mkdir(parents=True)
    (tmp_path / "wikipedia/commons/a/ab/Fox.png").write_bytes(b"x")
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs/k.jpg").write_bytes(b"x")
    url = "https://upload.wikimedia.org/wikipedia/commons/1/1a/Eiffel%20tower.jpg"
    assert ImageResolver(tmp_path).resolve(url) == tmp_path / "Eiffel tower.jpg"
    assert ImageResolver(tmp_path, "basename").resolve(url) == tmp_path / "Eiffel tower.jpg"
    fox = "https://upload.wikimedia.org/wikipedia/commons/a/ab/Fox.png"
    assert ImageResolver(tmp_path, "urlpath").resolve(fox) == tmp_path / "wikipedia/commons/a/ab/Fox.png"
    assert ImageResolver(tmp_path).resolve(fox) == tmp_path / "wikipedia/commons/a/ab/Fox.png"  # auto falls back
    assert ImageResolver(tmp_path, "relative").resolve("imgs/k.jpg") == tmp_path / "imgs/k.jpg"
    assert ImageResolver(tmp_path, "basename").resolve("imgs/nothing.jpg") is None
    assert ImageResolver(tmp_path, lambda u, r: r / "imgs" / "k.jpg").resolve("anything") == tmp_path / "imgs/k.jpg"
    with pytest.raises(ValueError, match="unknown image rule"):
        ImageResolver(tmp_path, "md5").candidates("x")  # type: ignore[arg-type]


def test_build_from_kb_counts_missing_and_broken_images(tmp_path):
    rng = np.random.default_rng(2)
    for name in ("a1.jpg", "a2.jpg", "b1.jpg"):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(tmp_path / name)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 truncated")
    kb = InMemoryKB([
        Article(url="https://en.wikipedia.org/wiki/A", title="A", sections=[Section(index=0, text="a")],
                image_urls=["https://upload.wikimedia.org/x/a1.jpg", "https://upload.wikimedia.org/x/a2.jpg",
                            "https://upload.wikimedia.org/x/gone.jpg"]),
        Article(url="https://en.wikipedia.org/wiki/B", title="B", image_urls=["b1.jpg", "broken.jpg"]),
        Article(url="https://en.wikipedia.org/wiki/C", title="C"),
    ])
    idx, rep = build_image_index(kb, tmp_path, HistogramEncoder(), batch_size=2)
    assert (rep.articles, rep.articles_without_images, rep.images_listed) == (3, 1, 5)
    assert (rep.images_resolved, rep.images_missing, rep.images_failed, rep.vectors) == (4, 1, 1, 3)
    assert rep.examples_missing == ["https://upload.wikimedia.org/x/gone.jpg"]
    assert rep.examples_failed[0].startswith("broken.jpg")
    assert idx.urls.count("https://en.wikipedia.org/wiki/A") == 2 and rep.articles_indexed == 2
    q = HistogramEncoder().encode([tmp_path / "b1.jpg"])
    assert idx.search(q, k=1)[0][0] == ("https://en.wikipedia.org/wiki/B", pytest.approx(1.0, abs=1e-5))
    idx.save(tmp_path / "kbimg")
    assert ImageIndex.load(tmp_path / "kbimg").stats["images_missing"] == 1


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_load_then_save_in_place_and_extend(tmp_path, clustered, kind):
    """A loaded index maps its vectors from disk; saving over the same files must not corrupt them."""
    vecs, urls, queries = clustered
    idx = ImageIndex("enc", 32, kind)
    idx.add(vecs[:400], urls[:400])
    idx.save(tmp_path / "i")
    back = ImageIndex.load(tmp_path / "i")
    back.save(tmp_path / "i")
    back.add(vecs[400:800], urls[400:800])
    back.save(tmp_path / "i")
    again = ImageIndex.load(tmp_path / "i")
    assert len(again) == 800 and np.array_equal(np.asarray(again.vectors), vecs[:800])
    assert again.search(vecs[700], k=1)[0][0][0] == urls[700]
