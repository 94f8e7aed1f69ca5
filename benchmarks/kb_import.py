"""Benchmark: import a synthetic E-VQA-format wiki JSON into the KB store, then open and query it.

    python benchmarks/kb_import.py            # 100k articles (~8 sections x ~150 words each)
    python benchmarks/kb_import.py --n 10000  # quicker

The import runs in a child process so its peak RSS (ru_maxrss) is measured alone. Prints a
markdown table; targets from shared/design/PERFORMANCE.md: >= 5k articles/s at < 500 MB,
open < 1 s, FTS query < 50 ms.
"""

from __future__ import annotations

import argparse
import json
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
    """Write an E-VQA-style url -> article JSON with Zipf-distributed words (real text's shape)."""
    rng = np.random.default_rng(seed)
    vocab = np.array(make_vocab(rng))
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks ** 1.05
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    with open(path, "w", encoding="utf-8") as f:
        f.write("{")
        for i in range(n):
            n_sec = int(rng.integers(5, 12))
            lens = rng.integers(100, 200, n_sec)
            words = vocab[np.searchsorted(cdf, rng.random(int(lens.sum()) + 4 * n_sec + 3))]
            pos = 0
            titles, texts = [], []
            for L in lens:
                titles.append(" ".join(words[pos:pos + 2]).title())
                pos += 2
                sent = words[pos:pos + L]
                pos += L
                texts.append(" ".join(sent) + ".")
            name = f"{' '.join(words[pos:pos + 2]).title()} {i}"
            url = "https://en.wikipedia.org/wiki/" + name.replace(" ", "_")
            n_img = int(rng.integers(0, 6))
            art = {"title": name, "section_titles": ["Summary"] + titles[1:], "section_texts": texts,
                   "image_urls": [f"https://upload.wikimedia.org/wikipedia/commons/{i % 16:x}/{i}_{j}.jpg"
                                  for j in range(n_img)],
                   "image_reference_descriptions": [f"Photo {j} of {name}" for j in range(n_img)],
                   "image_section_indices": [int(rng.integers(0, n_sec)) for _ in range(n_img)],
                   "url": url}
            f.write(("," if i else "") + json.dumps(url) + ":" + json.dumps(art))
        f.write("}")


CHILD = r"""
import json, resource, sys, time
from kbvqa.kb.importer import import_wiki_json
st = import_wiki_json(sys.argv[1], sys.argv[2], batch_size=int(sys.argv[3]), overwrite=True)
ru = resource.getrusage(resource.RUSAGE_SELF)
d = st.as_dict(); d["peak_rss_mb"] = ru.ru_maxrss / 1024; d["cpu_seconds"] = ru.ru_utime + ru.ru_stime
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
print(json.dumps({"articles": n, "seconds": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="articles to generate")
    ap.add_argument("--batch-size", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (prints its path)")
    ap.add_argument("--baseline", type=int, default=10_000,
                    help="also import the first N articles row by row (the common approach) and with kbvqa; 0 = skip")
    ap.add_argument("--wiki", help="reuse this generated wiki JSON (generated there if missing)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kbvqa-bench-"))
    src, db = (Path(args.wiki) if args.wiki else tmp / "wiki.json"), tmp / "kb.sqlite"
    if not src.exists():
        t = time.perf_counter()
        generate(src, args.n)
        print(f"generated {args.n} articles, {src.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s",
              file=sys.stderr)

    out = subprocess.run([sys.executable, "-c", CHILD, str(src), str(db), str(args.batch_size)],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"import failed:\n{out.stderr}")
    st = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"import: {json.dumps(st)}", file=sys.stderr)

    cmp = None
    if args.baseline:
        n = min(args.baseline, args.n)
        sub, bdb, kdb = tmp / "subset.json", tmp / "baseline.sqlite", tmp / "subset.sqlite"
        _child(SUBSET, src, sub, n)
        base = _child(BASELINE, sub, bdb, n)
        ours = _child(CHILD, sub, kdb, args.batch_size)
        cmp = (n, base, ours)
        print(f"baseline: {json.dumps(base)}", file=sys.stderr)
        for p in (sub, bdb, kdb):
            p.unlink()

    from kbvqa.kb.store import KBStore
    t = time.perf_counter()
    kb = KBStore(db)
    open_ms = (time.perf_counter() - t) * 1e3
    rng = np.random.default_rng(1)
    urls = list(kb.iter_urls())
    # Question-like queries: a few function words plus words lifted from random articles' text.
    queries = []
    for u in rng.choice(urls, args.queries):
        words = [w for w in kb.get(str(u)).sections[0].text.rstrip(".").split() if w not in STOP]
        picks = [words[int(j)] for j in rng.integers(0, len(words), 4)]
        queries.append("what is the " + " ".join(picks) + "?")
    kb.search(queries[0])  # warm the page cache once
    lat: list[float] = []
    answered = 0
    for q in queries:
        t = time.perf_counter()
        hits = kb.search(q, k=10)
        lat.append((time.perf_counter() - t) * 1e3)
        answered += bool(hits)
    get_lat = []
    for u in rng.choice(urls, 200):
        t = time.perf_counter()
        kb.get(str(u))
        get_lat.append((time.perf_counter() - t) * 1e3)
    kb.close()

    print(f"\nKB import benchmark: {st['articles']} articles, {st['sections']} sections "
          f"({src.stat().st_size / 1e6:.0f} MB wiki JSON), batch size {args.batch_size}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| metric | value | target |")
    print("|---|---|---|")
    print(f"| import (parse + load + FTS build) | {st['articles_per_s']:,.0f} articles/s ({st['seconds']:.1f} s: "
          f"parse+load+index {st['load_seconds']:.1f} s, optimize {st['index_seconds']:.1f} s) | >= 5,000 articles/s |")
    print(f"| import CPU time (all threads) | {st['cpu_seconds']:.1f} s = {st['articles'] / st['cpu_seconds']:,.0f} "
          f"articles per CPU-second | |")
    print(f"| import peak RSS (child process) | {st['peak_rss_mb']:.0f} MB | < 500 MB |")
    print(f"| database size | {db.stat().st_size / 1e6:.0f} MB | |")
    print(f"| open KBStore | {open_ms:.1f} ms | < 1 s |")
    print(f"| FTS query, median of {len(lat)} (p90) | {statistics.median(lat):.1f} ms "
          f"({sorted(lat)[int(0.9 * len(lat))]:.1f} ms); {answered} returned hits | < 50 ms |")
    print(f"| get(url), median of {len(get_lat)} | {statistics.median(get_lat):.2f} ms | |")
    if cmp:
        n, base, ours = cmp
        b_rate, o_rate = n / base["seconds"], ours["articles"] / ours["seconds"]
        print(f"\nSame run, first {n:,} articles: row-by-row ijson -> FTS5 {b_rate:,.0f} articles/s "
              f"({base['peak_rss_mb']:.0f} MB); kbvqa {o_rate:,.0f} articles/s ({ours['peak_rss_mb']:.0f} MB): "
              f"{o_rate / b_rate:.1f}x.")
    if args.keep:
        print(f"\nkept {tmp}")
    else:
        db.unlink()
        if not args.wiki:
            src.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    main()
