"""Measure the audit against the ARA authors' repairs (../shared/data/ara/ground_truth).

KB: one article per entity url whose sections are the distinct evidence spans of the authors' FIXED
rows for that url (the public CSVs carry no full articles). A span the authors cut off keeps its
trailing "..." so the audit can see it is truncated (a truncated span whose text another span
contains in full is dropped). E-VQA unfixed rows also carry their own evidence column, which the
audit reads first.

Ground truth for "flag": the authors changed the answer (answers compared as sets of `|` alternatives
after lower-casing and removing punctuation and extra spaces). Prediction: the audit's `flagged`
(a label other than supported, any rewrite of the answers, several different supported answers;
`truncated_evidence` is inconclusive and not a flag - its count and the scores with it counted as a
flag are printed too). Also reported: how many of the audit's rewrites equal the authors' answer
(the same set of alternatives after that normalisation; and, looser, the same values/words when a
unit one side leaves out is ignored), precision/recall/F1 per decision path (rules / llm / undecided:
the rules could not decide and no model was configured), the false-flag rate (false flags / rows)
and the rules' throughput with cold caches (every text tokenised for the first time) and warm.

    .venv/bin/python benchmarks/audit_ara.py [--data DIR] [--limit N] [--examples] [--json OUT]
    .venv/bin/python benchmarks/audit_ara.py --llm http://127.0.0.1:8000/v1 --model qwen3-30b-a3b \
        [--llm2 URL --model2 M]   # two verifiers: consensus, per-verifier counts, Cohen's kappa

With --llm the model roles (verifier, repairer, checker; a second verifier with --llm2) run only
where the rules cannot decide, and the table adds the LLM-decided path. Without the data folder the
script says so and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kbvqa.data.formats import read_samples
from kbvqa.data.schema import Article, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import AuditConfig, audit_records, audit_summary, build_audit_stages

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"
_ELLIPSIS = re.compile(r"\s*(\.\.\.|\u2026)\s*$")


def _n(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def answer_set(cell: str) -> frozenset[str]:
    return frozenset(_n(a) for a in cell.split("|") if _n(a))


def _texts(answers: list[Any]) -> list[str]:
    return [a if isinstance(a, str) else a["text"] for a in answers]


def same_value(ours: str, theirs: str) -> bool:
    """Equal after normalisation, or the same numbers and words once a unit word that one side
    leaves out is ignored ("18–19" vs "18–19 days")."""
    a, b = _n(ours), _n(theirs)
    if a == b:
        return True
    wa, wb = a.split(), b.split()
    na, nb = [w for w in wa if w[0].isdigit()], [w for w in wb if w[0].isdigit()]
    if na and na == nb:
        rest_a, rest_b = set(wa) - set(na), set(wb) - set(nb)
        return not rest_a or not rest_b or rest_a == rest_b
    return False


def build_kb(fixed_csvs: list[Path]) -> InMemoryKB:
    spans: dict[str, dict[str, str]] = defaultdict(dict)  # url -> {text: title}
    titles: dict[str, str] = {}
    for path in fixed_csvs:
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                url = row["wikipedia_url"]
                titles[url] = row["wikipedia_title"]
                for ev in {row.get("evidence", ""), row.get("final_evidence", "")}:
                    ev = (ev or "").strip()
                    if ev and ev != "0":
                        sec_titles = (row.get("evidence_section_title") or "").split("|")
                        spans[url].setdefault(ev, sec_titles[0] if len(set(sec_titles)) == 1 else "")
    for url, d in spans.items():  # a cut-off span another span holds in full adds nothing
        full = [t for t in d if not _ELLIPSIS.search(t)]
        for t in [t for t in d if _ELLIPSIS.search(t)]:
            stem = _ELLIPSIS.sub("", t)
            if any(stem in x and len(x) > len(stem) for x in full):
                del d[t]
    return InMemoryKB(Article(url=u, title=titles[u], sections=[Section(index=i, title=t, text=x)
                                                               for i, (x, t) in enumerate(d.items())])
                      for u, d in spans.items())


def _flagged(audit: dict[str, Any], before: frozenset[str], after: frozenset[str], *, inconclusive: bool) -> bool:
    if "flagged" in audit:  # this version of the audit says so
        flags = audit.get("flags", [])
        return audit["flagged"] or (inconclusive and "truncated_evidence" in flags)
    return audit.get("answer_support") != "supported" or before != after  # older audits


def prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


async def _audit_concurrently(samples: list[dict[str, Any]], kb: InMemoryKB, config: AuditConfig | None,
                              roles: dict[str, Any], concurrency: int) -> list[dict[str, Any] | None]:
    """The stages over each record, `concurrency` records at a time (model calls overlap); a record
    whose model call failed or whose reply was unusable is None (counted, not scored)."""
    from kbvqa.runner.stage import Context

    stages = build_audit_stages(config)
    ctx = Context(kb=kb, roles=roles)
    sem = asyncio.Semaphore(concurrency)

    async def one(rec: dict[str, Any]) -> dict[str, Any] | None:
        async with sem:
            try:
                for st in stages:
                    rec = await st.run(rec, ctx)
                return rec
            except Exception as exc:  # noqa: BLE001 - counted as a failed record, like the runner does
                print(f"  {rec.get('id')}: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
                return None

    return await asyncio.gather(*(one(r) for r in samples))


def measure(name: str, unfixed: Path, fixed: Path, kb: InMemoryKB, limit: int | None,
            config: AuditConfig | None = None, roles: dict[str, Any] | None = None,
            concurrency: int = 16) -> dict[str, Any]:
    with fixed.open(newline="", encoding="utf-8") as f:
        gold = {r["data_id"]: r for r in csv.DictReader(f)}
    samples = [s.dump() for s in read_samples(unfixed, "ara")]
    if limit:
        samples = samples[:limit]
    build_audit_stages(config)  # imports and registry outside the timed part
    t0, c0 = time.perf_counter(), time.process_time()
    if roles:
        got = asyncio.run(_audit_concurrently(samples, kb, config, roles, concurrency))
        failed = sum(r is None for r in got)
        pairs = [(r, s) for r, s in zip(got, samples) if r is not None]
        out, samples = [r for r, _ in pairs], [s for _, s in pairs]
    else:
        out, failed = asyncio.run(audit_records(samples, kb, config, roles=roles)), 0
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    warm = 0.0
    if not roles:  # the same records again: the caches are warm (texts tokenised, matches known)
        t1 = time.perf_counter()
        asyncio.run(audit_records(samples, kb, config))
        warm = len(samples) / (time.perf_counter() - t1)
    c = Counter()
    paths: dict[str, Counter] = defaultdict(Counter)
    rewrites = rewrites_equal = rewrites_value = 0
    fp_examples, fn_examples = [], []
    for rec, src in zip(out, samples):
        g = gold[rec["id"]]
        before = answer_set("|".join(_texts(src["answers"])))
        after = answer_set("|".join(_texts(rec["answers"])))
        changed = before != answer_set(g["answer"])
        audit = rec["audit"]
        flagged = _flagged(audit, before, after, inconclusive=False)
        flagged_inc = _flagged(audit, before, after, inconclusive=True)
        path = audit.get("decided_by", "rules")
        for key, fl in (("", flagged), ("inc_", flagged_inc)):
            c[key + ("tp" if fl and changed else "fp" if fl else "fn" if changed else "tn")] += 1
        paths[path]["tp" if flagged and changed else "fp" if flagged else "fn" if changed else "tn"] += 1
        if flagged and not changed and len(fp_examples) < 12:
            fp_examples.append((rec["id"], _texts(src["answers"]), _texts(rec["answers"]), audit.get("flags"),
                                audit["stages"]["derive"].get("rationale")))
        if changed and not flagged and len(fn_examples) < 12:
            fn_examples.append((rec["id"], _texts(src["answers"]), g["answer"], path))
        if after != before:  # equal: the same set of alternatives as the authors' (each one the same value)
            rewrites += 1
            gold_alts = [x for x in g["answer"].split("|") if _n(x)]
            ours = [x for x in _texts(rec["answers"]) if _n(x)]
            rewrites_equal += after == answer_set(g["answer"])
            rewrites_value += bool(ours) and all(any(same_value(o, x) for x in gold_alts) for o in ours) and \
                all(any(same_value(o, x) for o in ours) for x in gold_alts)
    n = len(out)
    return {"name": name, "n": n, "changed": c["tp"] + c["fn"], "flagged": c["tp"] + c["fp"],
            "tp": c["tp"], "fp": c["fp"], "fn": c["fn"], **prf(c["tp"], c["fp"], c["fn"]),
            "false_flag_rate": c["fp"] / n if n else 0.0,
            "inconclusive": sum("truncated_evidence" in (r["audit"].get("flags") or []) for r in out),
            "with_inconclusive": {"tp": c["inc_tp"], "fp": c["inc_fp"], **prf(c["inc_tp"], c["inc_fp"], c["inc_fn"]),
                                  "false_flag_rate": c["inc_fp"] / n if n else 0.0},
            "paths": {k: {"n": sum(v.values()), **dict(v), **prf(v["tp"], v["fp"], v["fn"])} for k, v in paths.items()},
            "rewrites": rewrites, "rewrites_equal": rewrites_equal, "rewrites_same_value": rewrites_value,
            "seconds": secs, "samples_per_s": n / secs if secs else 0.0, "samples_per_s_warm": warm,
            "samples_per_cpu_s": n / cpu if cpu and not roles else 0.0,
            "failed": failed, "summary": audit_summary(out),
            "fp_examples": fp_examples, "fn_examples": fn_examples}


def verbatim_baseline(name: str, unfixed: Path, fixed: Path, kb: InMemoryKB) -> dict[str, Any]:
    """The naive audit the issue compares with: flag when no answer alternative (all its `&&` parts)
    is verbatim (normalised, word-bounded) in the row's evidence or the entity's KB sections."""
    from kbvqa.data import matching as mt

    with fixed.open(newline="", encoding="utf-8") as f:
        gold = {r["data_id"]: r for r in csv.DictReader(f)}
    c = Counter()
    for s in read_samples(unfixed, "ara"):
        art = kb.get(s.entity.url) if s.entity and s.entity.url else None
        texts = [e.text for e in s.evidence] + ([x.text for x in art.sections] if art else [])
        ok = any(all(mt.contains(t, p) for p in (a.parts or [a.text])) for a in s.answers for t in texts)
        changed = answer_set("|".join(s.answer_texts)) != answer_set(gold[s.id]["answer"])
        c["tp" if not ok and changed else "fp" if not ok else "fn" if changed else "tn"] += 1
    return {"name": name, **dict(c), **prf(c["tp"], c["fp"], c["fn"])}


def _roles(args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.llm:
        return None
    from kbvqa.models.client import OpenAIChatClient

    first = OpenAIChatClient(args.llm, args.model, timeout=args.timeout)
    verifiers = [first]
    if args.llm2:
        verifiers.append(OpenAIChatClient(args.llm2, args.model2 or args.model, timeout=args.timeout))
    return {"verifier": verifiers if len(verifiers) > 1 else first, "repairer": first, "checker": first}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--examples", action="store_true", help="print false-flag and missed examples")
    ap.add_argument("--baseline", action="store_true", help="also score the verbatim-match baseline")
    ap.add_argument("--llm", default=None, help="OpenAI-compatible base URL: model roles where rules cannot decide")
    ap.add_argument("--model", default=None)
    ap.add_argument("--llm2", default=None, help="a second verifier (consensus of two, Cohen's kappa)")
    ap.add_argument("--model2", default=None)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--concurrency", type=int, default=16, help="records audited at once with --llm")
    ap.add_argument("--json", type=Path, default=None, help="write the measurements as JSON")
    args = ap.parse_args(argv)
    if args.llm and not args.model:
        ap.error("--llm needs --model")
    d = args.data
    if not (d / "infoseek_fixed.csv").exists():
        print(f"ARA data not found under {d}", file=sys.stderr)
        return 1
    kb = build_kb([d / "infoseek_fixed.csv", d / "evqa_fixed.csv"])
    roles = _roles(args)
    sets = [("InfoSeek", d / "infoseek_unfixed_subset.csv", d / "infoseek_fixed.csv"),
            ("E-VQA", d / "evqa_unfixed_test_with_id.csv", d / "evqa_fixed.csv")]
    rows = [measure(n, u, f, kb, args.limit, roles=roles, concurrency=args.concurrency) for n, u, f in sets]
    print(f"KB: {len(kb)} articles built from the fixed rows' evidence"
          + (f"; models: {args.model}" + (f" + {args.model2 or args.model}" if args.llm2 else "") if roles else "")
          + "\n")
    print("| split | n | answers changed by authors | flagged | TP | FP | precision | recall | F1 | false-flag rate "
          "| inconclusive | answers rewritten | = authors' (strict / same value) | samples/s (cold / warm) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in rows:
        print(f"| {m['name']} | {m['n']} | {m['changed']} | {m['flagged']} | {m['tp']} | {m['fp']} "
              f"| {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {100 * m['false_flag_rate']:.1f}% "
              f"| {m['inconclusive']} | {m['rewrites']} | {m['rewrites_equal']} / {m['rewrites_same_value']} "
              f"| {m['samples_per_s']:.0f} / {m['samples_per_s_warm']:.0f} |" if m["samples_per_s_warm"] else
              f"| {m['samples_per_s']:.0f} / - |")
    if not roles:
        print("\nrules throughput per CPU-second (cold caches; less sensitive to other load on the machine): "
              + ", ".join(f"{m['name']} {m['samples_per_cpu_s']:.0f}" for m in rows))
    if any(m["failed"] for m in rows):
        print("\nrecords whose model call failed (not scored): "
              + ", ".join(f"{m['name']} {m['failed']}" for m in rows))
    print("\nPer decision path (who decided the answer's support):\n")
    print("| split | path | n | TP | FP | FN | precision | recall | F1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in rows:
        for k, v in sorted(m["paths"].items()):
            print(f"| {m['name']} | {k} | {v['n']} | {v.get('tp', 0)} | {v.get('fp', 0)} | {v.get('fn', 0)} "
                  f"| {v['precision']:.3f} | {v['recall']:.3f} | {v['f1']:.3f} |")
    for m in rows:
        w = m["with_inconclusive"]
        s = m["summary"]
        print(f"\n{m['name']}: truncated_evidence counted as a flag: P {w['precision']:.3f} R {w['recall']:.3f} "
              f"F1 {w['f1']:.3f}, false-flag rate {100 * w['false_flag_rate']:.1f}%")
        print(f"  answer_support {s['answer_support']}; unsupported reasons {s.get('unsupported_reasons')}; "
              f"action {s['action']}")
        print(f"  flags {s.get('flags')}; decided_by {s.get('decided_by')}")
        if s.get("verifiers", {}).get("per_verifier"):
            print(f"  verifiers {json.dumps(s['verifiers'])}")
        print("  by type: " + "; ".join(f"{k}: {v['answer_support']}" for k, v in s["by_question_type"].items()))
        print(f"  tags: {s['tags']}")
        if args.examples:
            for ex in m["fp_examples"]:
                print("  FP", ex)
            for ex in m["fn_examples"]:
                print("  FN", ex)
    if args.baseline:
        print("\nVerbatim baseline (flag when no alternative is verbatim in the evidence):")
        for n, u, f in sets:
            b = verbatim_baseline(n, u, f, kb)
            print(f"  {n}: P {b['precision']:.3f} R {b['recall']:.3f} F1 {b['f1']:.3f} (TP {b.get('tp', 0)}, "
                  f"FP {b.get('fp', 0)})")
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in m.items() if k not in ("fp_examples", "fn_examples")}
                                         for m in rows], indent=1, default=str), encoding="utf-8")
    if roles:
        async def _close() -> None:
            for c in {id(x): x for v in roles.values() for x in (v if isinstance(v, list) else [v])}.values():
                close = getattr(c, "aclose", None) or getattr(c, "close", None)
                if close is not None:
                    r = close()
                    if asyncio.iscoroutine(r):
                        await r
        asyncio.run(_close())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
