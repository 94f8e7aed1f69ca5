"""Image encoders: the weight-free baseline, and the neural path through a tiny random CLIP."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from PIL import Image

from kbvqa.models.image_encoders import (CLIPEncoder, HistogramEncoder, OpenCLIPEncoder, encode_files, get_encoder)


def _photo(seed: int, size=(96, 80)) -> Image.Image:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, size=(4, 4, 3)).astype(np.uint8)
    img = Image.fromarray(base).resize(size, Image.Resampling.BICUBIC)
    noise = rng.integers(0, 20, size=(size[1], size[0], 3)).astype(np.uint8)
    return Image.fromarray(np.clip(np.asarray(img) + noise, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """A randomly initialised CLIP with tiny towers, saved like a real checkpoint directory."""
    torch = pytest.importorskip("torch")
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=4,
                         vocab_size=99, max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=16)
    d = tmp_path_factory.mktemp("tinyclip")
    CLIPModel(cfg).save_pretrained(d)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(d)
    return d


def test_histogram_baseline_matches_views_of_same_photo():
    enc = HistogramEncoder()
    a, b = _photo(1), _photo(2)
    view = a.crop((5, 5, 90, 75)).transpose(Image.Transpose.FLIP_LEFT_RIGHT).resize((120, 100))
    v = enc.encode([a, b, view])
    assert v.shape == (3, enc.dim) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[2] @ v[0] > v[2] @ v[1]  # the cropped mirror is nearer its source than another photo
    assert enc.baseline is True and "hist" in enc.name
    assert enc.encode([]).shape == (0, enc.dim)


def test_get_encoder_names_and_refusals(tmp_path):
    assert isinstance(get_encoder("hist"), HistogramEncoder)
    assert isinstance(get_encoder("colorgrad-hist-v1"), HistogramEncoder)
    with pytest.raises(ValueError, match="unknown image encoder"):
        get_encoder("resnet")
    with pytest.raises(ValueError, match="local model directory"):
        get_encoder("clip")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        CLIPEncoder(tmp_path / "nothing-here")


def test_encode_files_reports_missing_and_corrupt(tmp_path):
    good = tmp_path / "good.png"
    _photo(3).save(good)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    vecs, kept, failed = encode_files(HistogramEncoder(), [good, tmp_path / "missing.jpg", bad, good], batch_size=2)
    assert kept == [0, 3] and vecs.shape == (2, HistogramEncoder.dim)
    assert set(failed) == {1, 2}
    assert "FileNotFoundError" in failed[1] and "missing.jpg" in failed[1]


def test_clip_encoder_from_local_dir(tiny_clip, tmp_path):
    enc = CLIPEncoder(tiny_clip, batch_size=2, device="cpu")
    assert enc.name.startswith("hf-clip:") and enc.dim == 16 and enc.baseline is False
    files = []
    for i in range(5):
        p = tmp_path / f"im{i}.jpg"
        _photo(i, size=(40 + 7 * i, 50)).save(p)
        files.append(p)
    v = enc.encode(files)
    assert v.shape == (5, 16)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # batching does not change the result, and PIL inputs give the same vectors as paths
    v1 = CLIPEncoder(tiny_clip, batch_size=5, device="cpu").encode([Image.open(f) for f in files])
    assert np.allclose(v, v1, atol=1e-5)
    # the recorded name reloads the same model; a different name for this dir is refused
    assert get_encoder(enc.name, tiny_clip, device="cpu").name == enc.name
    with pytest.raises(ValueError, match="not the requested"):
        get_encoder("hf-clip:other:00000000", tiny_clip, device="cpu")
    assert enc.encode([]).shape == (0, 16)


@pytest.mark.skipif(importlib.util.find_spec("open_clip") is not None, reason="open_clip installed")
def test_open_clip_is_optional(tmp_path):
    with pytest.raises(ImportError, match="optional"):
        OpenCLIPEncoder("ViT-B-32", tmp_path / "ckpt.bin")


@pytest.mark.skipif(importlib.util.find_spec("open_clip") is None, reason="open_clip not installed")
def test_open_clip_refuses_hub_names():
    with pytest.raises(FileNotFoundError, match="local files only"):
        OpenCLIPEncoder("ViT-B-32", "laion2b_s34b_b79k")
