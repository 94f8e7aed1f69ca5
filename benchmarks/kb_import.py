"""Benchmark: import a synthetic E-VQA-format wiki JSON into the KB store, side by side with the plain
ijson -> FTS5 row loop, at several sizes; then open and query the KB.

    python benchmarks/kb_import.py                          # 10k and 100k articles
    python benchmarks/kb_import.py --sizes 10000,100000,1000000 --baseline-max 100000

For every size, on the same generated file and in child processes (so each one's CPU and peak
memory are its own): the naive loop (row by row, default pragmas, FTS5 holding the text; only up to
--baseline-max), kbvqa in one process (`workers=1`) and kbvqa with its default sharded FTS build
(`workers=None`: one indexing process per core). Peak memory of a sharded import is the importing
process's peak plus every shard's (VmHWM each, an upper bound of the total at any moment). The curve
of articles/s over sizes is extrapolated (a straight line in log(size)) to the 2M-article E-VQA KB.
Targets (shared/design/PERFORMANCE.md, issue 17): >= 5k articles/s at < 500 MB, >= 2.3x the naive
loop, open < 1 s, FTS query < 50 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STOP = ("the of and in to a is was for on as with by that from at his an he it were which are be this "
        "also or its first had their has but after one new two who they her been she not all other when "
        "there more than into during most some over between only city state world years team").split()


def make_vocab(rng: np.random.Generator, size: int = 60_000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set(STOP)
    out = list(STOP)
    while len(out) < size:
        n = int(rng.integers(3, 11))
        w = "".join(rng.choice(letters, n))
        if w not in words:
            words.add(w)
            out.append(w)
    return out


def generate(path: Path, n: int, seed: int = 0) -> None:
    """Write an E-VQA-style url -> article JSON with Zipf-distributed words (real text's shape):
    5-11 sections of 100-200 words each, 0-5 images. Word draws are vectorised per block of
    articles, so a million articles take minutes, not an hour."""
    rng = np.random.default_rng(seed)
    vocab = make_vocab(rng)
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks ** 1.05
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    dumps = json.dumps
    with open(path, "w", encoding="utf-8") as f:
        f.write("{")
        block = 2000
        for b0 in range(0, n, block):
            m = min(block, n - b0)
            n_sec = rng.integers(5, 12, m)
            lens = rng.integers(100, 200, int(n_sec.sum()))
            need = int(lens.sum()) + 4 * int(n_sec.sum()) + 3 * m
            words = np.searchsorted(cdf, rng.random(need)).tolist()
            n_img = rng.integers(0, 6, m)
            pos = 0
            si = 0
            out = []
            for k in range(m):
                i = b0 + k
                titles, texts = [], []
                for _ in range(int(n_sec[k])):
                    L = int(lens[si])
                    si += 1
                    titles.append(f"{vocab[words[pos]]} {vocab[words[pos + 1]]}".title())
                    pos += 2
                    texts.append(" ".join([vocab[w] for w in words[pos:pos + L]]) + ".")
                    pos += L
                name = f"{vocab[words[pos]]} {vocab[words[pos + 1]]}".title() + f" {i}"
                pos += 3
                url = "https://en.wikipedia.org/wiki/" + name.replace(" ", "_")
                ni = int(n_img[k])
                art = {"title": name, "section_titles": ["Summary"] + titles[1:], "section_texts": texts,
                       "image_urls": [f"https://upload.wikimedia.org/wikipedia/commons/{i % 16:x}/{i}_{j}.jpg"
                                      for j in range(ni)],
                       "image_reference_descriptions": [f"Photo {j} of {name}" for j in range(ni)],
                       "image_section_indices": [int(x) for x in rng.integers(0, int(n_sec[k]), ni)],
                       "url": url}
                out.append(("," if i else "") + dumps(url) + ":" + dumps(art))
            f.write("".join(out))
        f.write("}")


CHILD = r"""
import json, resource, sys, time
from kbvqa.kb.importer import import_wiki_json
workers = None if sys.argv[4] == "auto" else int(sys.argv[4])
t = time.perf_counter()
batch = None if sys.argv[3] == "auto" else int(sys.argv[3])
st = import_wiki_json(sys.argv[1], sys.argv[2], batch_size=batch, overwrite=True, workers=workers)
wall = time.perf_counter() - t
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0] / 1024
d = st.as_dict(); d["peak_rss_mb"] = hwm + sum(st.shard_peak_rss_mb); d["main_peak_rss_mb"] = hwm
d["cpu_seconds"] = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime; d["wall"] = wall
print(json.dumps(d))
"""


BASELINE = r"""
import itertools, json, resource, sqlite3, sys, time, ijson
# The straightforward approach: ijson -> SQLite FTS5 row by row, default pragmas, FTS5 holding the text.
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = sqlite3.connect(out)
db.execute("CREATE TABLE articles(url TEXT PRIMARY KEY, title TEXT, image_urls TEXT)")
db.execute("CREATE VIRTUAL TABLE fts USING fts5(url UNINDEXED, section_title, section_text)")
t = time.perf_counter()
with open(src, "rb") as f:
    for i, (url, a) in enumerate(itertools.islice(ijson.kvitems(f, ""), n)):
        db.execute("INSERT OR IGNORE INTO articles VALUES (?,?,?)", (url, a["title"], json.dumps(a["image_urls"])))
        for st, tx in zip(a["section_titles"], a["section_texts"]):
            db.execute("INSERT INTO fts VALUES (?,?,?)", (url, st, tx))
        if i % 1000 == 999:
            db.commit()
db.commit()
me = resource.getrusage(resource.RUSAGE_SELF)
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0] / 1024
print(json.dumps({"articles": n, "seconds": time.perf_counter() - t, "peak_rss_mb": hwm,
                  "cpu_seconds": me.ru_utime + me.ru_stime}))
"""

SUBSET = r"""
import itertools, json, sys
import ijson
# The first N articles of the big file, for a same-input comparison with the baseline.
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("{")
    for i, (k, v) in enumerate(itertools.islice(ijson.kvitems(f, "", use_float=True), int(sys.argv[3]))):
        out.write(("," if i else "") + json.dumps(k) + ":" + json.dumps(v))
    out.write("}")
"""


def _child(code: str, *args: object) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def measure_queries(db: Path, n_queries: int) -> dict:
    from kbvqa.kb.store import KBStore

    t = time.perf_counter()
    kb = KBStore(db)
    open_ms = (time.perf_counter() - t) * 1e3
    rng = np.random.default_rng(1)
    urls = list(kb.iter_urls())
    # Question-like queries: a few function words plus words lifted from random articles' text.
    queries = []
    for u in rng.choice(urls, n_queries):
        words = [w for w in kb.get(str(u)).sections[0].text.rstrip(".").split() if w not in STOP]
        picks = [words[int(j)] for j in rng.integers(0, len(words), 4)]
        queries.append("what is the " + " ".join(picks) + "?")
    kb.search(queries[0])  # warm the page cache once
    lat: list[float] = []
    answered = 0
    hits = []
    for q in queries:
        t = time.perf_counter()
        h = kb.search(q, k=10)
        lat.append((time.perf_counter() - t) * 1e3)
        answered += bool(h)
        hits.append(h)
    get_lat = []
    for u in rng.choice(urls, 200):
        t = time.perf_counter()
        kb.get(str(u))
        get_lat.append((time.perf_counter() - t) * 1e3)
    kb.close()
    return {"open_ms": open_ms, "query_median_ms": statistics.median(lat),
            "query_p90_ms": sorted(lat)[int(0.9 * len(lat))], "answered": answered, "n_queries": len(lat),
            "get_median_ms": statistics.median(get_lat), "hits": hits}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="article counts, comma-separated")
    ap.add_argument("--baseline-max", type=int, default=100_000, help="run the naive loop up to this size")
    ap.add_argument("--batch-size", default="auto", help="articles per batch (auto: the importer's default)")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--workers", default="auto", help="the sharded run's workers (auto = one per core)")
    ap.add_argument("--modes", default="one,sharded", help="kbvqa runs per size: one (1 process), sharded")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (prints its path)")
    ap.add_argument("--dir", help="work here (generated wiki files are reused if present)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]

    tmp = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kbvqa-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    query_info = None
    for n in sizes:
        src = tmp / f"wiki_{n}.json"
        if not src.exists():
            t = time.perf_counter()
            generate(src, n)
            print(f"generated {n} articles, {src.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s",
                  file=sys.stderr)
        row = {"n": n, "mb": src.stat().st_size / 1e6}
        if n <= args.baseline_max:
            bdb = tmp / f"naive_{n}.sqlite"
            row["naive"] = _child(BASELINE, src, bdb, n)
            bdb.unlink()
            print(f"{n} naive: {json.dumps(row['naive'])}", file=sys.stderr)
        for key, w in (("one", "1"), ("sharded", args.workers)):
            if key not in args.modes.split(","):
                continue
            db = tmp / f"kb_{key}_{n}.sqlite"
            row[key] = _child(CHILD, src, db, args.batch_size, w)
            row[key]["db_mb"] = db.stat().st_size / 1e6
            print(f"{n} kbvqa {key}: {json.dumps(row[key])}", file=sys.stderr)
        if "one" in row and "sharded" in row and n == max(s for s in sizes if s <= 100_000 or s == min(sizes)):
            q1 = measure_queries(tmp / f"kb_one_{n}.sqlite", args.queries)
            q2 = measure_queries(tmp / f"kb_sharded_{n}.sqlite", args.queries)
            query_info = (n, q1, q2, q1.pop("hits") == q2.pop("hits"))
        for key in ("one", "sharded"):
            (tmp / f"kb_{key}_{n}.sqlite").unlink(missing_ok=True)
        rows.append(row)
        if not args.dir:
            src.unlink()

    la = os.getloadavg()
    print(f"\nKB import: {os.cpu_count()} CPUs, load average {la[0]:.1f} / {la[1]:.1f} / {la[2]:.1f} at the end; "
          f"each row's runs back to back on the same file\n")
    print("| articles | wiki JSON | naive loop | kbvqa, 1 process | kbvqa, sharded | sharded vs naive | "
          "sharded vs 1 process | peak RSS naive / 1 process / sharded (all processes) | CPU-s per 1k articles "
          "naive / 1 / sharded | target |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    for r in rows:
        n = r["n"]
        one, sh = r.get("one"), r["sharded"]
        o_rate, s_rate = (n / one["wall"] if one else None), n / sh["wall"]
        nv = r.get("naive")
        n_rate = n / nv["seconds"] if nv else None
        naive_cell = f"{n_rate:,.0f}/s" if nv else "–"
        vs = f"{s_rate / n_rate:.2f}x" if nv else "–"
        one_rss = f"{one['peak_rss_mb']:.0f}" if one else "–"
        one_cpu = f"{1000 * one['cpu_seconds'] / n:.2f}" if one else "–"
        rss = (f"{nv['peak_rss_mb']:.0f} / " if nv else "– / ") + f"{one_rss} / {sh['peak_rss_mb']:.0f} MB"
        cpu = (f"{1000 * nv['cpu_seconds'] / n:.2f} / " if nv else "– / ") + f"{one_cpu} / {1000 * sh['cpu_seconds'] / n:.2f}"
        one_cell, vs_one = (f"{o_rate:,.0f}/s", f"{s_rate / o_rate:.2f}x") if o_rate else ("–", "–")
        print(f"| {n:,} | {r['mb']:,.0f} MB | {naive_cell} | {one_cell} | {s_rate:,.0f}/s "
              f"({sh['workers']} workers) | {vs} | {vs_one} | {rss} | {cpu} | >= 5,000/s, >= 2.3x, < 500 MB |")
    if len(rows) >= 2:
        xs = [math.log(r["n"]) for r in rows]
        ys = [r["n"] / r["sharded"]["wall"] for r in rows]
        slope = (ys[-1] - ys[0]) / (xs[-1] - xs[0])
        rate_2m = max(ys[-1] + slope * (math.log(2_000_000) - xs[-1]), 1.0)
        print(f"\nExtrapolated to the 2M-article E-VQA KB (articles/s falling linearly in log(size) as from "
              f"{rows[0]['n']:,} to {rows[-1]['n']:,}): ~{rate_2m:,.0f} articles/s sharded, ~{2e6 / rate_2m / 60:.0f} "
              f"minutes.")
    if query_info:
        n, q1, q2, same = query_info
        print(f"\nQueries on the {n:,}-article KB ({q1['n_queries']} question-like queries, k = 10): "
              f"open {q1['open_ms']:.1f} ms (sharded build {q2['open_ms']:.1f} ms); median {q1['query_median_ms']:.1f} ms, "
              f"p90 {q1['query_p90_ms']:.1f} ms (sharded build {q2['query_median_ms']:.1f} / {q2['query_p90_ms']:.1f} ms); "
              f"get(url) median {q1['get_median_ms']:.2f} ms; hits identical between the two builds: **{same}**. "
              f"Targets: open < 1 s, query < 50 ms.")
    if args.keep or args.dir:
        print(f"\nkept {tmp}")
    else:
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    main()
