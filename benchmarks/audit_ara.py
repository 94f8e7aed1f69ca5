"""Measure the rules audit against the ARA authors' repairs (../shared/data/ara/ground_truth).

KB: one article per entity url whose sections are the distinct evidence spans of the authors' FIXED
rows for that url (the public CSVs carry no full articles; a span's trailing " ..." truncation mark is
removed). E-VQA unfixed rows also carry their own evidence column, which the audit reads first.

Ground truth for "flag": the authors changed the answer (answers compared as sets of `|` alternatives
after lower-casing and removing punctuation and extra spaces). Prediction: answer_support !=
supported. Also reported: how many of the answers the rules rewrote equal the authors' fixed answer.

    .venv/bin/python benchmarks/audit_ara.py [--data DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

from kbvqa.data.formats import read_samples
from kbvqa.data.schema import Article, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import audit_records, audit_summary

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"


def _n(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def answer_set(cell: str) -> frozenset[str]:
    return frozenset(_n(a) for a in cell.split("|") if _n(a))


def build_kb(fixed_csvs: list[Path]) -> InMemoryKB:
    spans: dict[str, dict[str, str]] = defaultdict(dict)  # url -> {text: title}
    titles: dict[str, str] = {}
    for path in fixed_csvs:
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                url = row["wikipedia_url"]
                titles[url] = row["wikipedia_title"]
                for ev in {row.get("evidence", ""), row.get("final_evidence", "")}:
                    ev = re.sub(r"\s*\.\.\.\s*$", "", ev or "").strip()
                    if ev and ev != "0":
                        sec_titles = (row.get("evidence_section_title") or "").split("|")
                        spans[url].setdefault(ev, sec_titles[0] if len(set(sec_titles)) == 1 else "")
    return InMemoryKB(Article(url=u, title=titles[u], sections=[Section(index=i, title=t, text=x)
                                                               for i, (x, t) in enumerate(d.items())])
                      for u, d in spans.items())


def measure(name: str, unfixed: Path, fixed: Path, kb: InMemoryKB, limit: int | None) -> dict:
    with fixed.open(newline="", encoding="utf-8") as f:
        gold = {r["data_id"]: r for r in csv.DictReader(f)}
    samples = [s.dump() for s in read_samples(unfixed, "ara")]
    if limit:
        samples = samples[:limit]
    t0 = time.perf_counter()
    out = asyncio.run(audit_records(samples, kb))
    secs = time.perf_counter() - t0
    tp = fp = fn = tn = 0
    rewrites = rewrites_equal = 0
    fp_examples = []
    for rec, src in zip(out, samples):
        g = gold[rec["id"]]
        before = answer_set("|".join(a if isinstance(a, str) else a["text"] for a in src["answers"]))
        changed = before != answer_set(g["answer"])
        flagged = rec["audit"]["answer_support"] != "supported"
        tp += flagged and changed
        fp += flagged and not changed
        fn += (not flagged) and changed
        tn += (not flagged) and not changed
        if flagged and not changed and len(fp_examples) < 8:
            fp_examples.append((rec["id"], src["answers"], rec["audit"]["stages"]["derive"].get("rationale")))
        final = rec["answers"][0] if rec["answers"] else ""
        final = final if isinstance(final, str) else final["text"]
        if answer_set("|".join(a if isinstance(a, str) else a["text"] for a in rec["answers"])) != before:
            rewrites += 1
            rewrites_equal += _n(final) in answer_set(g["answer"])
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"name": name, "n": len(out), "changed": tp + fn, "flagged": tp + fp, "tp": tp, "fp": fp,
            "precision": p, "recall": r, "f1": f1, "rewrites": rewrites, "rewrites_equal": rewrites_equal,
            "samples_per_s": len(out) / secs, "summary": audit_summary(out), "fp_examples": fp_examples}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--examples", action="store_true", help="print false-positive examples")
    args = ap.parse_args(argv)
    d = args.data
    if not (d / "infoseek_fixed.csv").exists():
        print(f"ARA data not found under {d}", file=sys.stderr)
        return 1
    kb = build_kb([d / "infoseek_fixed.csv", d / "evqa_fixed.csv"])
    rows = [measure("InfoSeek", d / "infoseek_unfixed_subset.csv", d / "infoseek_fixed.csv", kb, args.limit),
            measure("E-VQA", d / "evqa_unfixed_test_with_id.csv", d / "evqa_fixed.csv", kb, args.limit)]
    print(f"KB: {len(kb)} articles built from the fixed rows' evidence\n")
    print("| split | n | answers changed by authors | flagged | TP | FP | precision | recall | F1 "
          "| answers rewritten | = authors' answer | samples/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in rows:
        print(f"| {m['name']} | {m['n']} | {m['changed']} | {m['flagged']} | {m['tp']} | {m['fp']} "
              f"| {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {m['rewrites']} "
              f"| {m['rewrites_equal']} | {m['samples_per_s']:.0f} |")
    for m in rows:
        s = m["summary"]
        print(f"\n{m['name']}: answer_support {s['answer_support']}; action {s['action']}")
        print("  by type: " + "; ".join(f"{k}: {v['answer_support']}" for k, v in s["by_question_type"].items()))
        print(f"  tags: {s['tags']}")
        if args.examples:
            for ex in m["fp_examples"]:
                print("  FP", ex)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
