"""Benchmark: image encoding speed and FAISS index build / query / memory at 100k and 1M vectors.

    python benchmarks/index_speed.py                  # encoders + 100k and 1M (HNSW at 1M projected)
    python benchmarks/index_speed.py --sizes 100000   # quicker
    python benchmarks/index_speed.py --hnsw-1m        # also build HNSW on 1M (slow on 2 cores)

Encoders: images/s from JPEG files (decode included) for the weight-free histogram baseline and a
randomly initialised CLIP with ViT-B/32's vision tower (same compute as the real model; no weights
exist offline, and speed does not depend on them).

Indexes go through kbvqa's `ImageIndex` (what `kbvqa index images` builds), one child process per
case so peak RSS is that case alone. Vectors are synthetic 512-d unit vectors in 2000 clusters (4
images per article); 200 queries are perturbed copies. recall@10 is the fraction of the exact top-10
image ids the index returns (IVF and HNSW are also queried at a wider setting, nprobe=64 /
ef_search=512, on the same index); single-query latency is the median over 200 queries (50 at 1M), with
FAISS's default OpenMP threads. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DIM = 512
N_QUERIES = 200


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _data(n: int):
    import numpy as np

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((2000, DIM), dtype=np.float32)
    x = np.empty((n, DIM), dtype=np.float32)
    step = 100_000
    for s in range(0, n, step):
        e = min(n, s + step)
        x[s:e] = centres[rng.integers(0, 2000, e - s)] + 0.6 * rng.standard_normal((e - s, DIM), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(n, N_QUERIES, replace=False)] + 0.05 * rng.standard_normal((N_QUERIES, DIM), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x, q


def index_case(kind: str, n: int) -> dict:
    import faiss
    import numpy as np

    from kbvqa.kb.image_index import ImageIndex

    x, q = _data(n)
    urls = [f"https://en.wikipedia.org/wiki/E{i // 4}" for i in range(n)]
    base = _rss_mb()
    t0 = time.perf_counter()
    idx = ImageIndex("bench", DIM, kind)  # type: ignore[arg-type]
    idx.add(x, urls)
    del x
    idx.build()
    build = time.perf_counter() - t0
    lat = []
    for i in range(N_QUERIES if n < 1_000_000 else 50):
        t = time.perf_counter()
        idx.search(q[i], k=20)
        lat.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    idx.search(q, k=20)
    batch = (time.perf_counter() - t) * 1000 / N_QUERIES
    # exact neighbours by brute force (chunked) for recall
    vecs = idx.vectors
    best = np.full((len(q), 10), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(q), 10), dtype=np.int64)
    for s in range(0, len(vecs), 200_000):  # chunked exact top-10 (argpartition, not a full sort)
        sims = q @ vecs[s:s + 200_000].T
        top = np.argpartition(-sims, 10, axis=1)[:, :10]
        cand = np.concatenate([best, np.take_along_axis(sims, top, axis=1)], axis=1)
        cand_ids = np.concatenate([best_ids, top + s], axis=1)
        keep = np.argsort(-cand, axis=1)[:, :10]
        best, best_ids = np.take_along_axis(cand, keep, axis=1), np.take_along_axis(cand_ids, keep, axis=1)
    exact = best_ids
    _, got = idx._raw_search(q, 10)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, got)]))
    size = len(faiss.serialize_index(idx._backend())) / 2**20
    params = {k: idx.params[k] for k in {"flat": (), "ivf": ("nlist", "nprobe"),
                                         "hnsw": ("m", "ef_construction", "ef_search")}[kind]}
    sweep = {}  # recall / batched latency at a wider search setting, same index
    if kind in ("ivf", "hnsw"):
        wide = {"ivf": {"nprobe": 64}, "hnsw": {"ef_search": 512}}[kind]
        idx.set_search_params(**wide)
        t = time.perf_counter()
        _, got_w = idx._raw_search(q, 20)
        ms = (time.perf_counter() - t) * 1000 / N_QUERIES
        rec_w = float(np.mean([len(set(a) & set(b[:10])) / 10 for a, b in zip(exact, got_w)]))
        sweep = {**wide, "recall@10": round(rec_w, 3), "query_ms_batched": round(ms, 3)}
    return {"kind": kind, "n": n, "build_s": round(build, 2), "query_ms_p50": round(statistics.median(lat), 3),
            "query_ms_batched": round(batch, 3), "recall@10": round(recall, 3), "index_mb": round(size, 1),
            "rss_added_mb": round(_rss_mb() - base, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "wider_search": sweep,
            "params": params}


def hnsw_add_rate(n: int = 20_000) -> float:
    """Vectors/s HNSW inserts on this machine (for projecting a build that is too slow to run)."""
    from kbvqa.kb.image_index import ImageIndex

    x, _ = _data(n)
    idx = ImageIndex("bench", DIM, "hnsw")
    idx.add(x, ["u"] * n)
    t = time.perf_counter()
    idx.build()
    return n / (time.perf_counter() - t)


def _photos(d: Path, n: int) -> list[Path]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        small = rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((640, 480), Image.Resampling.BICUBIC)
        p = d / f"img{i}.jpg"
        img.save(p, quality=90)
        out.append(p)
    return out


def encoder_case(n_hist: int, n_clip: int) -> list[dict]:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    from kbvqa.models.image_encoders import CLIPEncoder, HistogramEncoder

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = _photos(Path(tmp), max(n_hist, n_clip))
        enc = HistogramEncoder()
        enc.encode(files[:4])
        t = time.perf_counter()
        enc.encode(files[:n_hist])
        rows.append({"encoder": f"{enc.name} (baseline)", "images": n_hist,
                     "images_per_s": round(n_hist / (time.perf_counter() - t), 1)})
        torch.manual_seed(0)
        cfg = CLIPConfig(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                          num_attention_heads=2, bos_token_id=0, eos_token_id=1, pad_token_id=1),
                         vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                            num_attention_heads=12, image_size=224, patch_size=32),
                         projection_dim=512)
        d = Path(tmp) / "clip-vit-b32-random"
        CLIPModel(cfg).save_pretrained(d)
        CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}).save_pretrained(d)
        clip = CLIPEncoder(d, device="cpu", batch_size=32)
        clip.encode(files[:2])
        t = time.perf_counter()
        clip.encode(files[:n_clip])
        rows.append({"encoder": "CLIP ViT-B/32 vision tower (random init, transformers, CPU)", "images": n_clip,
                     "images_per_s": round(n_clip / (time.perf_counter() - t), 1),
                     "torch_threads": torch.get_num_threads()})
    return rows


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--kinds", default="flat,ivf,hnsw")
    ap.add_argument("--hnsw-1m", action="store_true", help="build HNSW at sizes >= 1M instead of projecting")
    ap.add_argument("--hist-images", type=int, default=200)
    ap.add_argument("--clip-images", type=int, default=64)
    ap.add_argument("--skip-encoders", action="store_true")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.case:
        what, _, arg = a.case.partition(":")
        if what == "index":
            kind, n = arg.split("@")
            print(json.dumps(index_case(kind, int(n))))
        elif what == "hnsw-rate":
            print(json.dumps({"rate": hnsw_add_rate()}))
        elif what == "enc":
            h, c = arg.split(",")
            print(json.dumps({"rows": encoder_case(int(h), int(c))}))
        return

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# index_speed: {os.cpu_count()} CPUs (load average {load} at start), {DIM}-d vectors, "
          f"{N_QUERIES} queries, k=20\n")
    if not a.skip_encoders:
        enc = _child(["--case", f"enc:{a.hist_images},{a.clip_images}"])
        print("| encoder | images | images/s |\n|---|---|---|")
        for r in enc.get("rows", []):
            print(f"| {r['encoder']} | {r['images']} | {r['images_per_s']} |")
        if "error" in enc:
            print(f"| encoders failed: {enc['error']} | | |")
        print()
    print("| kind | vectors | build s | query ms (p50, single) | query ms (batched) | recall@10 | index MB "
          "| RSS added MB | peak RSS MB | params |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rate = None
    hnsw_rates: dict[int, float] = {}
    for n in [int(s) for s in a.sizes.split(",")]:
        for kind in a.kinds.split(","):
            if kind == "hnsw" and n >= 1_000_000 and not a.hnsw_1m:
                if rate is None:  # the largest HNSW built in this run, else a quick 20k build
                    rate = hnsw_rates[max(hnsw_rates)] if hnsw_rates else _child(["--case", "hnsw-rate"]).get("rate")
                # inserts slow down as the graph grows (about log n), so scale by log(n)/log(n_measured)
                n_meas = max(hnsw_rates) if hnsw_rates else 20_000
                proj = (f"~{n / rate * math.log(n) / math.log(n_meas) / 60:.0f} min projected from "
                        f"{rate:.0f} inserts/s at {n_meas:,}") if rate else "n/a"
                print(f"| hnsw | {n:,} | not run: {proj} | | | | | | | use --hnsw-1m |")
                continue
            r = _child(["--case", f"index:{kind}@{n}"])
            if "error" in r:
                print(f"| {kind} | {n:,} | error: {r['error']} | | | | | | | |")
                continue
            if kind == "hnsw":
                hnsw_rates[n] = n / r["build_s"]
            print(f"| {kind} | {n:,} | {r['build_s']} | {r['query_ms_p50']} | {r['query_ms_batched']} | "
                  f"{r['recall@10']} | {r['index_mb']} | {r['rss_added_mb']} | {r['peak_rss_mb']} | {r['params']} |",
                  flush=True)
            w = r.get("wider_search") or {}
            if w:
                knob = ", ".join(f"{k}={v}" for k, v in w.items() if k not in ("recall@10", "query_ms_batched"))
                print(f"| {kind} ({knob}) | {n:,} | same index | | {w['query_ms_batched']} | {w['recall@10']} "
                      f"| | | | search-time setting |", flush=True)


if __name__ == "__main__":
    main()
