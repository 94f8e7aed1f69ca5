"""Curation funnel throughput: the deterministic stages (keyword/length rules, language detection, the
image check with perceptual hashing, cross-post de-duplication) on synthetic posts, with peak memory.

The posts (default 100,000) are written once to a folder (`--data`, reused when it holds them): each
has a distinct 224×224 JPEG (a random colour grid, so perceptual hashes are spread like unrelated
photos), a title and a text drawn from templates in English, with about 10% Chinese; a few percent
of posts are made to trip each filter (too short, spam, no question, no image, a missing file) and 2%
repost an earlier post's picture. The funnel then runs offline in a child process (`kbvqa.pipelines.
curate.curate_posts`, runner concurrency 8): every post that passes the deterministic stages stops at
the first model stage (NeedsModel), which is timed too. Reported: per-stage wall time from the stage
manifests, posts/s of the four deterministic stages together and of the whole offline run, and the
child's peak RSS.

    .venv/bin/python benchmarks/curate_speed.py [--n 100000] [--data /tmp/kbvqa-curate-bench] [--workers 2]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

EN = ["What is this {x} I found near the {y}, and is it {z}?", "Can anyone tell me what kind of {x} this is? "
      "We saw it at the {y} last weekend.", "How do I take care of this {x}? It came from the {y} and looks {z}."]
ZH = ["这个{x}是什么？在{y}附近看到的，是不是{z}？", "请问这是什么{x}？上周末在{y}拍的。"]
WORDS = {"x": ["plant", "bird", "coin", "building", "mushroom", "lamp", "stone", "insect"],
         "y": ["river", "market", "old town", "museum", "garden", "beach"], "z": ["rare", "edible", "old", "valuable"]}
ZWORDS = {"x": ["植物", "鸟", "硬币", "建筑", "蘑菇"], "y": ["河边", "市场", "老城", "博物馆"], "z": ["稀有", "可以吃", "古董"]}


def _image(args: tuple[int, str]) -> None:
    from PIL import Image

    seed, path = args
    rng = np.random.default_rng(seed)
    grid = (rng.random((7, 7, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(grid).resize((224, 224), Image.Resampling.NEAREST).save(buf, "JPEG", quality=70)
    Path(path).write_bytes(buf.getvalue())


def make_posts(n: int, folder: Path, workers: int) -> Path:
    posts = folder / "posts.jsonl"
    if posts.is_file() and sum(1 for _ in open(posts, "rb")) == n:
        return posts
    rng = np.random.default_rng(0)
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        roll = rng.random()
        zh = rng.random() < 0.1
        tpl, words = (ZH, ZWORDS) if zh else (EN, WORDS)
        text = tpl[int(rng.integers(len(tpl)))].format(**{k: v[int(rng.integers(len(v)))] for k, v in words.items()})
        images = [f"img/{i}.jpg"]
        if roll < 0.03:
            text = "Thoughts?"
        elif roll < 0.05:
            text = "Giveaway! " + text + " Link in bio."
        elif roll < 0.08:
            text = text.replace("?", ".").replace("？", "。")
        elif roll < 0.10:
            images = []
        elif roll < 0.11:
            images = [f"img/missing_{i}.jpg"]
        elif roll < 0.13 and i > 10:
            images = [f"img/{int(rng.integers(0, i - 1))}.jpg"]  # a repost (the original may itself be missing)
        rows.append({"id": f"post{i:07d}", "title": "", "text": text, "images": images, "tags": ["bench"],
                     "comments": [{"text": "Looks like a common one.", "likes": int(rng.integers(0, 50))}],
                     "language": "zh" if zh else "en"})
    # one picture per post index (a repost names an earlier one; a "missing" post names another file)
    jobs = [(i, str(folder / f"img/{i}.jpg")) for i in range(n)]
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_image, jobs, chunksize=512))
    with open(posts, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return posts


def child(posts: Path, out: Path, concurrency: int) -> None:
    from kbvqa.pipelines.curate import curate_posts

    t0 = time.perf_counter()
    res = curate_posts(posts, out, resume=False, concurrency=concurrency)
    res_dict = res.as_dict()
    res_dict["wall_seconds"] = time.perf_counter() - t0
    print(json.dumps(res_dict))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--data", type=Path, default=Path("/tmp/kbvqa-curate-bench"))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    data = a.data / f"n{a.n}"
    out = data / "run"
    if a.child:
        child(data / "posts.jsonl", out, a.concurrency)
        return
    t0 = time.perf_counter()
    make_posts(a.n, data, a.workers)
    print(f"posts: {a.n:,} in {data} (made in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    proc = subprocess.run([sys.executable, __file__, "--n", str(a.n), "--data", str(a.data), "--concurrency",
                           str(a.concurrency), "--child"], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    walls = {}
    for s in res["stages"]:
        m = out / "stages"
        mf = next(m.glob(f"*_{s['stage']}.manifest.json"), None)
        # the job's wall time, plus (corpus stages) the decision over all posts made before the job
        walls[s["stage"]] = (json.loads(mf.read_text())["wall_seconds"] if mf else 0.0) + (s.get("decide_seconds") or 0)
    det = ("text", "language", "images", "dedup")
    det_s = sum(walls[k] for k in det)
    print("\n| stage | in | kept | dropped | wall s | posts/s |\n|---|---:|---:|---|---:|---:|")
    for s in res["stages"]:
        if s["in"] == 0:
            continue
        w = walls[s["stage"]]
        print(f"| {s['stage']} | {s['in']:,} | {s['kept']:,} | "
              f"{', '.join(f'{k} {v:,}' for k, v in {**s['dropped'], **s['stopped']}.items()) or '-'} | {w:.1f} | "
              f"{s['in'] / w if w else float('nan'):,.0f} |")
    print(f"\ndeterministic stages ({', '.join(det)}): {a.n:,} posts in {det_s:.1f} s = {a.n / det_s:,.0f} posts/s")
    print(f"whole offline run (incl. intake, the NeedsModel stop, funnel files): {res['wall_seconds']:.1f} s = "
          f"{a.n / res['wall_seconds']:,.0f} posts/s; accounted: {res['accounted']}")
    print(f"peak RSS of the curation process: {peak_mb:,.0f} MB")


if __name__ == "__main__":
    main()
