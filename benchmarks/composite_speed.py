"""Composites per second: kbvqa's compositor (draft decode, process pool) vs the authors' approach.

The baseline mirrors ARA's build_composite_images: one process, every image fully decoded for every
composite, EXIF transpose, RGB, LANCZOS to the target height, JPEG q95. kbvqa runs the same 400
anchor/distractor pairs with JPEG draft decoding, in one process and in a process pool; and once
more grouped per anchor (intra + inter of one anchor in one task, so the anchor is decoded once).

Inputs are real photographs from scikit-image / scikit-learn / matplotlib saved as JPEG at their
native sizes (~300-900 px) and resized to 1024 px on the long side.

    .venv/bin/python benchmarks/composite_speed.py [--pairs 400] [--workers N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from kbvqa.pipelines.augment import composite as comp  # noqa: E402


def photos() -> list[np.ndarray]:
    import matplotlib.cbook as cbook
    from skimage import data
    from sklearn.datasets import load_sample_images

    out = [getattr(data, n)() for n in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
                                         "immunohistochemistry", "colorwheel")]
    out += list(load_sample_images().images)
    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        out.append(np.asarray(Image.open(fh).convert("RGB")))
    return out


def write_inputs(root: Path, long_side: int | None) -> list[Path]:
    paths = []
    for i, arr in enumerate(photos()):
        im = Image.fromarray(arr)
        if long_side:
            s = long_side / max(im.size)
            im = im.resize((round(im.width * s), round(im.height * s)), Image.Resampling.LANCZOS)
        p = root / f"src_{long_side or 'native'}_{i}.jpg"
        im.save(p, quality=92)
        paths.append(p)
    return paths


def baseline(pairs: list[tuple[Path, Path]], out: Path, height: int) -> None:
    """One process, full decode of both images for every composite (the authors' script)."""

    def load(p: Path) -> Image.Image:
        with Image.open(p) as im:
            im = ImageOps.exif_transpose(im).convert("RGB")
            return im.resize((max(1, round(im.width * height / im.height)), height), Image.Resampling.LANCZOS)

    for n, (a, d) in enumerate(pairs):
        ia, idd = load(a), load(d)
        canvas = Image.new("RGB", (ia.width + idd.width, height))
        canvas.paste(ia, (0, 0))
        canvas.paste(idd, (ia.width, 0))
        canvas.save(out / f"base_{n:04d}.jpg", quality=95)


def ours(pairs: list[tuple[Path, Path]], out: Path, height: int, workers: int, per_anchor: bool) -> None:
    style = comp.Style(height=height)
    if per_anchor:  # intra + inter of one anchor in one task: the anchor is decoded once
        tasks = [comp.Task({"anchor": str(pairs[i][0]), "d": str(pairs[i][1]), "e": str(pairs[i + 1][1])},
                           (comp.Job(str(out / f"o_{i:04d}_1.jpg"), ("anchor", "d")),
                            comp.Job(str(out / f"o_{i:04d}_2.jpg"), ("e", "anchor"))), style)
                 for i in range(0, len(pairs), 2)]
    else:
        tasks = [comp.Task({"anchor": str(a), "d": str(d)}, (comp.Job(str(out / f"o_{n:04d}.jpg"), ("anchor", "d")),),
                           style) for n, (a, d) in enumerate(pairs)]
    res = comp.run_tasks(tasks, workers)
    bad = [r for rs in res for r in rs if r.status != "saved"]
    if bad:
        raise RuntimeError(bad[0].reason)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for label, long_side in (("native (300-1000 px)", None), ("1024 px", 1024)):
            srcs = write_inputs(root, long_side)
            pairs = [(srcs[i % len(srcs)], srcs[(i * 7 + 3) % len(srcs)]) for i in range(args.pairs)]
            runs = {
                "ARA-style, 1 process, full decode": lambda o: baseline(pairs, o, args.height),
                "kbvqa, 1 process": lambda o: ours(pairs, o, args.height, 1, False),
                f"kbvqa, pool of {args.workers}": lambda o: ours(pairs, o, args.height, args.workers, False),
                f"kbvqa, pool of {args.workers}, per-anchor tasks": lambda o: ours(pairs, o, args.height, args.workers, True),
            }
            for name, fn in runs.items():
                times = []
                for r in range(args.repeat):
                    o = root / f"out_{len(rows)}_{r}"
                    o.mkdir()
                    t0 = time.perf_counter()
                    fn(o)
                    times.append(time.perf_counter() - t0)
                med = statistics.median(times)
                rows.append((label, name, args.pairs / med, med))
    base = {lab: v for lab, name, v, _ in rows if name.startswith("ARA")}
    print(f"\nComposites/s, {args.pairs} anchor/distractor pairs, height {args.height}, "
          f"{os.cpu_count()} CPUs, median of {args.repeat}\n")
    print("| inputs | compositor | composites/s | seconds | vs ARA-style |")
    print("|---|---|---:|---:|---:|")
    for lab, name, v, med in rows:
        print(f"| {lab} | {name} | {v:.1f} | {med:.2f} | {v / base[lab]:.2f}x |")


if __name__ == "__main__":
    main()
