"""How far the three InfoSeek readings differ on the ARA release (../shared/data/ara/ground_truth).

Seed 000 (§6) scores InfoSeek with VQA accuracy — the official scorer's rules, kbvqa's
`infoseek-official` (the studies' default). The other two readings kbvqa offers are the ARA authors'
released scorer (`infoseek-reward`: containment of the normalised reference, ±10% around a single
number, number words as digits) and kbvqa's own `infoseek-strict` (official rules plus a ±1-year Time
leniency). This script scores the same answers under all three and counts where they part.

No method predictions are in the shared ARA subset (the authors' outputs/generated_methods files are
not part of it), so the answers scored here are the released answers themselves, which is what the
rows print as "answers":

* `original -> fixed`: each question's original answer (first `|` alternative of the unfixed row)
  against the authors' fixed reference — how often the repair changed what counts as right;
* `fixed -> original`: the repaired answer against the original reference;
* `fixed -> fixed`: the fixed reference's own first answer against itself (a reading that rejects
  a reference's own answer shows here).

Only the rows the authors kept are scored (fixed tag other than Not_answerable). Without the data
folder the script says so and exits 1.

    .venv/bin/python benchmarks/infoseek_readings.py [--data DIR] [--examples N] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

READINGS = ("infoseek-official", "infoseek-reward", "infoseek-strict")
QTYPES = ("String", "Numerical", "Time")


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["data_id"]: r for r in csv.DictReader(fh)}


def _first(answer: str) -> str:
    return answer.split("|")[0].strip()


def measure(data: Path, examples: int = 3) -> dict[str, Any]:
    from kbvqa.evaluate.io import PredictionRecord
    from kbvqa.evaluate.studies import load_references, score_items

    gt = data / "ground_truth"
    fixed_p, unfixed_p = gt / "infoseek_fixed.csv", gt / "infoseek_unfixed_subset.csv"
    fixed, unfixed = _rows(fixed_p), _rows(unfixed_p)
    kept = [i for i, r in fixed.items() if r.get("final_check_tag") != "Not_answerable" and i in unfixed]
    conditions = {"original -> fixed": ({i: _first(unfixed[i]["answer"]) for i in kept}, fixed_p),
                  "fixed -> original": ({i: _first(fixed[i]["answer"]) for i in kept}, unfixed_p),
                  "fixed -> fixed": ({i: _first(fixed[i]["answer"]) for i in kept}, fixed_p)}
    out: dict[str, Any] = {"data": str(data), "n_rows": len(fixed), "n_kept": len(kept),
                           "n_dropped_not_answerable": len(fixed) - len(kept), "conditions": {}}
    for name, (answers, ref_path) in conditions.items():
        preds = [PredictionRecord(i, a, n) for n, (i, a) in enumerate(answers.items(), 1)]
        per: dict[str, dict[str, bool]] = {}
        qtype: dict[str, str] = {}
        for reading in READINGS:
            refs = load_references(ref_path, reading)
            refs = {i: refs[i] for i in kept}
            sc = score_items(preds, refs, reading)
            per[reading] = dict(zip(sc.ids, sc.correct.tolist()))
            qtype.update(zip(sc.ids, sc.qtype))
        cond: dict[str, Any] = {"references": ref_path.name, "n": len(kept), "accuracy": {}, "by_question_type": {},
                                "disagreements": {}}
        for reading in READINGS:
            ok = per[reading]
            cond["accuracy"][reading] = round(100 * sum(ok.values()) / len(ok), 2)
            cond["by_question_type"][reading] = {
                qt: round(100 * sum(ok[i] for i in ok if qtype[i] == qt) / n, 2) if (n := sum(
                    1 for i in ok if qtype[i] == qt)) else None for qt in QTYPES}
        cond["n_by_question_type"] = {qt: sum(1 for i in kept if qtype[i] == qt) for qt in QTYPES}
        base = per["infoseek-official"]
        for reading in READINGS[1:]:
            only_other = [i for i in kept if per[reading][i] and not base[i]]
            only_official = [i for i in kept if base[i] and not per[reading][i]]
            cond["disagreements"][reading] = {
                f"right only under {reading}": len(only_other), "right only under infoseek-official": len(only_official),
                "examples": [{"id": i, "type": qtype[i], "answer": answers[i], "reference": _ref_text(ref_path, i,
                              fixed, unfixed)} for i in (only_other + only_official)[:examples]]}
        out["conditions"][name] = cond
    return out


def _ref_text(ref_path: Path, did: str, fixed: dict[str, dict[str, str]], unfixed: dict[str, dict[str, str]]) -> str:
    return (fixed if ref_path.name == "infoseek_fixed.csv" else unfixed)[did]["answer"]


def table(res: dict[str, Any]) -> str:
    lines = [f"InfoSeek readings on the ARA release ({res['n_kept']} kept rows of {res['n_rows']}; the answers "
             "scored are the released answers, no method predictions are in the shared subset)", "",
             "| answers -> references | " + " | ".join(READINGS) + " | official vs reward (+/-) | official vs strict (+/-) |",
             "| --- | " + " | ".join("---:" for _ in READINGS) + " | ---: | ---: |"]
    for name, c in res["conditions"].items():
        d = c["disagreements"]
        pm = [f"+{d[r][f'right only under {r}']} / -{d[r]['right only under infoseek-official']}" for r in READINGS[1:]]
        lines.append(f"| {name} | " + " | ".join(f"{c['accuracy'][r]:.2f}" for r in READINGS) + " | " + " | ".join(pm) + " |")
    lines += ["", "by question type (n: " + ", ".join(f"{q} {n}" for q, n in
                                                    next(iter(res["conditions"].values()))["n_by_question_type"].items()) + ")"]
    for name, c in res["conditions"].items():
        lines.append(f"  {name}: " + "; ".join(
            f"{r} " + ", ".join(f"{q} {v:.1f}" for q, v in c["by_question_type"][r].items() if v is not None)
            for r in READINGS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "ara")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if not (a.data / "ground_truth" / "infoseek_fixed.csv").is_file():
        print(f"no ARA data at {a.data} (ground_truth/infoseek_fixed.csv)", file=sys.stderr)
        return 1
    res = measure(a.data, a.examples)
    print(table(res))
    for name, c in res["conditions"].items():
        for reading, d in c["disagreements"].items():
            for ex in d["examples"]:
                print(f"  e.g. {name}, {reading}: {ex['id']} ({ex['type']}) answer {ex['answer']!r} vs {ex['reference']!r}")
    if a.json is not None:
        a.json.write_text(json.dumps(res, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
