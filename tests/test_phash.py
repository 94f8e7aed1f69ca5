"""Perceptual hashes, calibrated on near-duplicate pairs built from scikit-image's photographs, and the
guarded image decoder every hash goes through."""

from __future__ import annotations

import io
import itertools
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from skimage import data

from kbvqa.data.images import BadImage, open_image
from kbvqa.data.jsonl import read_jsonl
from kbvqa.data.phash import DISTINCT_BITS, NEAR_DUPLICATE_BITS, dedupe, dhash, distance, phash, verdict

NAMES = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "retina", "coins", "camera", "moon",
         "clock", "immunohistochemistry")


def _photo(name: str) -> Image.Image:
    a = getattr(data, name)()
    return Image.fromarray(np.stack([a] * 3, -1) if a.ndim == 2 else a[..., :3]).convert("RGB")


PHOTOS = {n: _photo(n) for n in NAMES}


def _jpeg(im: Image.Image, quality: int) -> Image.Image:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def test_near_duplicates_and_distinct_photos_are_separated():
    for im in PHOTOS.values():
        w, h = im.size
        h0 = phash(im)
        for copy in (im.resize((w // 2, h // 2)), _jpeg(im, 40), Image.eval(im, lambda v: min(255, int(v * 1.15)))):
            assert distance(h0, phash(copy)) <= 4 and verdict(distance(h0, phash(copy))) == "duplicate"
        cropped = im.crop((int(w * .05), int(h * .05), int(w * .95), int(h * .95)))
        assert distance(h0, phash(cropped)) <= DISTINCT_BITS  # never called distinct
        assert distance(dhash(im), dhash(im.resize((w // 2, h // 2)))) <= 2
    for a, b in itertools.combinations(PHOTOS, 2):
        assert distance(phash(PHOTOS[a]), phash(PHOTOS[b])) > DISTINCT_BITS, (a, b)


def test_dedupe_keeps_the_first_of_each_picture(tmp_path):
    paths = {}
    for key, im in (("a", PHOTOS["coffee"]), ("b", PHOTOS["chelsea"]), ("a2", _jpeg(PHOTOS["coffee"], 30)),
                    ("b2", PHOTOS["chelsea"].resize((200, 150)))):
        paths[key] = tmp_path / f"{key}.jpg"
        im.save(paths[key], quality=90)
    kept, dropped = dedupe((k, phash(p)) for k, p in paths.items())
    assert kept == ["a", "b"] and dropped == {"a2": "a", "b2": "b"}
    assert NEAR_DUPLICATE_BITS < DISTINCT_BITS


def _png_header_only(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width×height (the classic decompression bomb)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_hostile_images_are_refused_before_decoding(tmp_path):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_header_only(100_000, 100_000))
    assert bomb.stat().st_size < 100
    with pytest.raises(BadImage, match="pixel cap"):
        open_image(bomb)
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"not an image at all")
    with pytest.raises(BadImage, match="not a readable image"):
        open_image(junk)
    big = tmp_path / "big.jpg"
    PHOTOS["camera"].save(big)
    with pytest.raises(BadImage, match="byte cap"):
        open_image(big, max_bytes=1000)
    assert open_image(big).size == PHOTOS["camera"].size


def test_a_decompression_bomb_is_a_counted_failure_in_indexing_and_retrieval(tmp_path):
    """Indexing the KB and retrieving with it survive a hostile image: one counted failure, no crash,
    no temporary file left behind."""
    from kbvqa.data.schema import Article, Section
    from kbvqa.kb.importer import build_kb
    from kbvqa.kb.store import KBStore
    from kbvqa.models.image_encoders import HistogramEncoder
    from kbvqa.pipelines.index import build_image_index
    from kbvqa.pipelines.retrieve import run_retrieval

    (tmp_path / "img").mkdir()
    PHOTOS["coffee"].save(tmp_path / "img" / "good.jpg")
    (tmp_path / "img" / "bomb.png").write_bytes(_png_header_only(100_000, 100_000))
    build_kb([Article(url=f"https://en.wikipedia.org/wiki/{name}", title=name, image_urls=[f"img/{name}"],
                      sections=[Section(index=0, title=name, text="text")]) for name in ("good.jpg", "bomb.png")],
             tmp_path / "kb.sqlite")
    kb = KBStore(tmp_path / "kb.sqlite")
    index, report = build_image_index(kb, tmp_path, HistogramEncoder())
    assert report.images_failed == 1 and len(index) == 1
    samples = [{"id": "ok", "question": "q", "images": ["img/good.jpg"]},
               {"id": "bomb", "question": "q", "images": ["img/bomb.png"]}]
    run = run_retrieval(samples, index, HistogramEncoder(), out=tmp_path / "r.jsonl", image_root=tmp_path,
                        progress=False)
    lines = {rec["id"]: rec for _, rec in read_jsonl(run.out)}
    assert lines["ok"]["status"] == "ok" and lines["bomb"]["status"] == "error"
    assert "pixel cap" in lines["bomb"]["reason"]
    assert not list(tmp_path.rglob("*.tmp"))
    kb.close()
