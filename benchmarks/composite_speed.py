"""Composites per second: kbvqa's compositor (draft decode, process pool) vs the authors' approach.

The baseline mirrors ARA's build_composite_images: one process, every image fully decoded for every
composite, EXIF transpose, RGB, LANCZOS to the target height, JPEG q95. kbvqa runs the same 400
anchor/distractor pairs with JPEG draft decoding, in one process and in a process pool; and once
more grouped per anchor (intra + inter of one anchor in one task, so the anchor is decoded once).

Inputs are real photographs from scikit-image / scikit-learn / matplotlib, made into `--pairs`
distinct JPEG files (a different random crop of one of the 13 photographs each, so no two files
decode to the same pixels) at their native sizes (~300-900 px) and resized to 1024 px on the long
side. Anchor i is file i; its distractors are files drawn at random (seeded), so, as in a real
augment run, an image is the anchor of one task and the distractor of a couple of others, and a
worker's panel cache hits only where that reuse happens to fall within its window.

The ratio that matters on a shared box is composites per CPU-second (user + system of this process
and its reaped pool workers): it does not move with other load. Wall time is reported too.

    .venv/bin/python benchmarks/composite_speed.py [--pairs 400] [--workers N] [--repeat 3] [--resample lanczos]
"""

from __future__ import annotations

import argparse
import os
import resource
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


def write_inputs(root: Path, long_side: int | None, n: int = 0, seed: int = 0) -> list[Path]:
    """The photographs as JPEG files: the 13 as they are (n = 0), or n distinct random crops of them
    (70-100% of each side), each resized to `long_side` on its long side when given."""
    import random

    rng = random.Random(seed)
    base = [Image.fromarray(a) for a in photos()]
    paths = []
    for i in range(n or len(base)):
        im = base[i % len(base)]
        if n:
            fw, fh = rng.uniform(0.7, 1.0), rng.uniform(0.7, 1.0)
            w, h = max(8, round(im.width * fw)), max(8, round(im.height * fh))
            x, y = rng.randint(0, im.width - w), rng.randint(0, im.height - h)
            im = im.crop((x, y, x + w, y + h))
        if long_side:
            s = long_side / max(im.size)
            im = im.resize((round(im.width * s), round(im.height * s)), Image.Resampling.LANCZOS)
        p = root / f"src_{long_side or 'native'}_{i}.jpg"
        im.save(p, quality=92)
        paths.append(p)
    return paths


def baseline(pairs: list[tuple[Path, Path, Path]], out: Path, height: int) -> None:
    """One process, full decode of both images for every composite (the authors' script)."""

    def load(p: Path) -> Image.Image:
        with Image.open(p) as im:
            im = ImageOps.exif_transpose(im).convert("RGB")
            return im.resize((max(1, round(im.width * height / im.height)), height), Image.Resampling.LANCZOS)

    for n, (a, d, _) in enumerate(pairs):
        ia, idd = load(a), load(d)
        canvas = Image.new("RGB", (ia.width + idd.width, height))
        canvas.paste(ia, (0, 0))
        canvas.paste(idd, (ia.width, 0))
        canvas.save(out / f"base_{n:04d}.jpg", quality=95)


def ours(pairs: list[tuple[Path, Path, Path]], out: Path, height: int, workers: int, group: int,
         resample: str = "fast") -> None:
    """group 1: one composite per task; 2: intra + inter of one anchor per task; 4: intra, inter,
    blank and double of one anchor per task (what `kbvqa augment` runs by default)."""
    style = comp.Style(height=height, resample=resample)
    tasks = []
    for i in range(0, len(pairs), group):
        a, d, e = pairs[i]
        images = {"anchor": str(a), "d": str(d)}
        jobs = [comp.Job(str(out / f"o_{i:04d}_1.jpg"), ("anchor", "d"))]
        if group >= 2:
            images["e"] = str(e)
            jobs.append(comp.Job(str(out / f"o_{i:04d}_2.jpg"), ("e", "anchor")))
        if group == 4:
            jobs.append(comp.Job(str(out / f"o_{i:04d}_3.jpg"), ("anchor", "blank:d")))
            jobs.append(comp.Job(str(out / f"o_{i:04d}_4.jpg"), ("anchor", "anchor")))
        tasks.append(comp.Task(images, tuple(jobs), style))
    res = comp.run_tasks(tasks, workers)
    bad = [r for rs in res for r in rs if r.status != "saved"]
    if bad:
        raise RuntimeError(bad[0].reason)
    n = sum(len(rs) for rs in res)
    if n != len(pairs):
        raise RuntimeError(f"made {n} composites, expected {len(pairs)}")


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (pool workers are reaped at shutdown)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--resample", choices=comp.RESAMPLE, default="fast",
                    help="kbvqa's panel resampling (fast: the default of `kbvqa augment`)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for label, long_side in (("native (300-1000 px)", None), ("1024 px", 1024)):
            import random

            srcs = write_inputs(root, long_side, args.pairs)
            rng = random.Random(1)
            # composites in the order of their anchors; anchor i = file i, distractors drawn at random.
            # The 4-variant run uses every 4th anchor's task (intra, inter, blank, double of that anchor).
            pairs = []
            for i in range(args.pairs):
                d, e = rng.randrange(args.pairs), rng.randrange(args.pairs)
                while d == i:
                    d = rng.randrange(args.pairs)
                while e in (i, d):
                    e = rng.randrange(args.pairs)
                pairs.append((srcs[i], srcs[d], srcs[e]))
            w = args.workers
            runs = {
                "ARA-style, 1 process, full decode": lambda o: baseline(pairs, o, args.height),
                "kbvqa, 1 process, 1 composite/task": lambda o: ours(pairs, o, args.height, 1, 1, args.resample),
                f"kbvqa, pool of {w}, 1 composite/task": lambda o: ours(pairs, o, args.height, w, 1, args.resample),
                f"kbvqa, pool of {w}, intra+inter per anchor": lambda o: ours(pairs, o, args.height, w, 2, args.resample),
                f"kbvqa, pool of {w}, 4 variants per anchor": lambda o: ours(pairs, o, args.height, w, 4, args.resample),
            }
            for name, fn in runs.items():
                times, cpus = [], []
                for r in range(args.repeat):
                    o = root / f"out_{len(rows)}_{r}"
                    o.mkdir()
                    c0, t0 = cpu_seconds(), time.perf_counter()
                    fn(o)
                    times.append(time.perf_counter() - t0)
                    cpus.append(cpu_seconds() - c0)
                med, cpu = statistics.median(times), statistics.median(cpus)
                rows.append((label, name, args.pairs / med, med, args.pairs / cpu))
    base = {lab: v for lab, name, v, _, _ in rows if name.startswith("ARA")}
    print(f"\nComposites/s, {args.pairs} anchor/distractor pairs, height {args.height}, "
          f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), median of {args.repeat}\n")
    print("| inputs | compositor | composites/s (wall) | seconds | vs ARA-style | composites per CPU-second |")
    print("|---|---|---:|---:|---:|---:|")
    for lab, name, v, med, per_cpu in rows:
        print(f"| {lab} | {name} | {v:.1f} | {med:.2f} | {v / base[lab]:.2f}x | {per_cpu:.1f} |")
    print("\nComposites per CPU-second does not depend on other load on the machine; on N dedicated cores a "
          "pool approaches N times it.")
    print("\n| inputs | compositor | per CPU-second vs ARA-style | wall vs ARA-style | target |")
    print("|---|---|---:|---:|---|")
    base_cpu = {lab: pc for lab, name, _, _, pc in rows if name.startswith("ARA")}
    for lab, name, v, med, per_cpu in rows:
        if not name.startswith("ARA"):
            print(f"| {lab} | {name} | {per_cpu / base_cpu[lab]:.2f}x | {v / base[lab]:.2f}x | >= 2.5x both |")


if __name__ == "__main__":
    main()
