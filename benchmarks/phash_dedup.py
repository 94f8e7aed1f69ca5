"""Perceptual-hash de-duplication throughput and quality on ~10k images (reference construction, stage 4b).

The images are generated from the photographs that ship with scikit-image, scikit-learn and
matplotlib: each variant is a rescale (25-100%), a brightness change (±15%) and a JPEG re-encode
(quality 30-95) of one source after a crop — a light one (0-3% per side) for half of them, a heavy
one (5-12% per side, so up to a quarter of the frame) for the other half — written to a temporary
folder. Measured:

- hashing: `kbvqa.data.phash.phash` over every file (guarded decode with JPEG draft, DCT), in one
  process and in a process pool — images/s;
- the de-duplication pass: `kbvqa.data.phash.dedupe` (greedy, first kept wins) over all hashes at
  once, per item in groups of 10 candidates (what the Dedup stage sees), and its worst case (10k
  random hashes, nothing collapses, every pair compared) — images/s;
- the calibrated thresholds at scale: of the pairs of light variants of one source, and of light vs
  heavy variants, the share the hash calls duplicate / ambiguous / distinct; of sampled pairs from
  different sources, the share called distinct (a false duplicate there would drop a real candidate
  without a probe).

    .venv/bin/python benchmarks/phash_dedup.py [--n 10000] [--workers N] [--seed 0]
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import random
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kbvqa.data.phash import dedupe, distance, phash, verdict  # noqa: E402


def sources() -> list[Image.Image]:
    import matplotlib.cbook as cbook
    from skimage import data
    from sklearn.datasets import load_sample_images

    arrs = [getattr(data, n)() for n in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
                                         "immunohistochemistry", "retina", "coins", "camera", "moon")]
    arrs += list(load_sample_images().images)
    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        arrs.append(np.asarray(Image.open(fh).convert("RGB")))
    return [Image.fromarray(a).convert("RGB") for a in arrs]


_SOURCES: list[Image.Image] = []


def variant(img: Image.Image, rng: random.Random, heavy: bool) -> bytes:
    w, h = img.size
    lo, hi = (0.05, 0.12) if heavy else (0.0, 0.03)
    left, top, right, bottom = (rng.uniform(lo, hi) for _ in range(4))
    im = img.crop((int(w * left), int(h * top), int(w * (1 - right)), int(h * (1 - bottom))))
    s = rng.uniform(0.25, 1.0)
    im = im.resize((max(32, int(im.width * s)), max(32, int(im.height * s))), Image.Resampling.BILINEAR)
    im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.85, 1.15))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=rng.randint(30, 95))
    return buf.getvalue()


def _write_chunk(args: tuple[str, list[tuple[int, int]], int]) -> None:
    folder, jobs, seed = args
    if not _SOURCES:  # once per worker process
        _SOURCES.extend(sources())
    for i, src in jobs:
        rng = random.Random(seed * 1_000_003 + i)
        heavy = i % 2 == 1
        Path(folder, f"{i:06d}_{src:02d}_{'h' if heavy else 'l'}.jpg").write_bytes(
            variant(_SOURCES[src], rng, heavy))


def _hash_chunk(paths: list[str]) -> list[int]:
    return [phash(p) for p in paths]


def chunks(xs: list, n: int) -> list[list]:
    k = max(1, len(xs) // n + (len(xs) % n > 0))
    return [xs[i:i + k] for i in range(0, len(xs), k)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairs", type=int, default=200_000, help="cross-source pairs sampled for the quality check")
    args = ap.parse_args()
    n_src = len(sources())
    with tempfile.TemporaryDirectory(prefix="kbvqa-phash-") as tmp:
        jobs = [(i, i % n_src) for i in range(args.n)]
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.workers) as ex:
            list(ex.map(_write_chunk, [(tmp, c, args.seed) for c in chunks(jobs, args.workers * 4)], chunksize=1))
        gen_s = time.perf_counter() - t0
        paths = sorted(str(p) for p in Path(tmp).glob("*.jpg"))
        mb = sum(os.path.getsize(p) for p in paths) / 1e6
        src_of = [int(Path(p).stem.split("_")[1]) for p in paths]
        heavy_of = [Path(p).stem.endswith("_h") for p in paths]
        sizes = [Image.open(p).size for p in paths[:500]]

        t0 = time.perf_counter()
        one = _hash_chunk(paths[: min(len(paths), 2000)])
        one_s = time.perf_counter() - t0
        with ProcessPoolExecutor(args.workers) as ex:
            list(ex.map(_hash_chunk, [paths[:1]] * args.workers))  # start the workers and their imports
            t0 = time.perf_counter()
            hashes = [h for part in ex.map(_hash_chunk, chunks(paths, args.workers * 8)) for h in part]
            pool_s = time.perf_counter() - t0
        assert hashes[: len(one)] == one

        keyed = list(zip(paths, hashes))
        t0 = time.perf_counter()
        kept_all, _ = dedupe(keyed)
        all_s = time.perf_counter() - t0
        rng = random.Random(args.seed)
        shuffled = keyed[:]
        rng.shuffle(shuffled)  # an item's 10 candidates: mostly different sources, some near-duplicates
        t0 = time.perf_counter()
        kept_items = sum(len(dedupe(shuffled[i:i + 10])[0]) for i in range(0, len(shuffled), 10))
        item_s = time.perf_counter() - t0
        n_worst = min(args.n, 10_000)
        distinct = [(i, rng.getrandbits(64)) for i in range(n_worst)]
        t0 = time.perf_counter()
        kept_worst = len(dedupe(distinct)[0])  # nothing collapses: every pair is compared (n²/2)
        worst_s = time.perf_counter() - t0

        light: Counter[str] = Counter()
        mixed: Counter[str] = Counter()
        by_src: dict[int, dict[bool, list[int]]] = {}
        for s, hv, h in zip(src_of, heavy_of, hashes):
            by_src.setdefault(s, {False: [], True: []})[hv].append(h)
        for groups in by_src.values():
            for a, b in itertools.combinations(groups[False][:100], 2):
                light[verdict(distance(a, b))] += 1
            for a, b in itertools.product(groups[False][:60], groups[True][:60]):
                mixed[verdict(distance(a, b))] += 1
        cross: Counter[str] = Counter()
        for _ in range(args.pairs):
            i, j = rng.randrange(len(hashes)), rng.randrange(len(hashes))
            if src_of[i] != src_of[j]:
                cross[verdict(distance(hashes[i], hashes[j]))] += 1

    n = len(paths)
    print(f"{n} images from {n_src} shipped photographs ({mb:.0f} MB JPEG, e.g. {sizes[0][0]}x{sizes[0][1]}); "
          f"generated in {gen_s:.1f} s with {args.workers} workers; CPUs: {os.cpu_count()}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print()
    print("| step | images | seconds | images/s |")
    print("|---|---:|---:|---:|")
    print(f"| phash, 1 process | {len(one)} | {one_s:.2f} | {len(one) / one_s:,.0f} |")
    print(f"| phash, pool of {args.workers} | {n} | {pool_s:.2f} | {n / pool_s:,.0f} |")
    print(f"| dedupe pass, all {n} at once (kept {len(kept_all)}) | {n} | {all_s:.3f} | {n / all_s:,.0f} |")
    print(f"| dedupe pass, items of 10 (kept {kept_items}) | {n} | {item_s:.3f} | {n / item_s:,.0f} |")
    print(f"| dedupe pass, worst case: {n_worst} random (all distinct) hashes (kept {kept_worst}) | {n_worst} | "
          f"{worst_s:.2f} | {n_worst / worst_s:,.0f} |")
    print()
    print("| pairs | n | duplicate | ambiguous (probe) | distinct |")
    print("|---|---:|---:|---:|---:|")
    for name, c in (("same source, light variants", light), ("same source, light vs heavy crop", mixed),
                    ("different sources", cross)):
        tot = sum(c.values())
        print(f"| {name} | {tot:,} | " + " | ".join(f"{c[k] / tot:.3%}" for k in ("duplicate", "ambiguous", "distinct"))
              + " |")


if __name__ == "__main__":
    main()
