"""`kbvqa audit human-import`'s tables: the paper's human accuracy first, agreement second.

The headline table has one row per split (fixed / intra / inter): annotator answer accuracy as
mean ± sample standard deviation across annotators (the way seed 000 reports 92.9 ± 1.1), the
scorer named in the caption. The second table is per annotator: accuracy per split, agreement with
the audit's keep/drop decision, how many items were left blank, flaw reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbvqa.report.tables import PCT, ResultTable, percent, prose

__all__ = ["human_eval_tables"]


def _pm(ms: Mapping[str, Any]) -> str:
    if ms.get("mean") is None:
        return "n/a"
    return f"{100 * ms['mean']:.1f} ± {100 * ms['std']:.1f}"


def human_eval_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """The headline (accuracy per split) and the per-annotator table, with agreement as notes."""
    head = [[split, v["annotators"], percent(v["mean"], fraction=True), percent(v["std"], fraction=True), _pm(v)]
            for split, v in res["accuracy"].items()]
    notes = ["accuracy: each annotator's answers scored against the fixed reference over the items the audit "
             "kept; ± is the sample standard deviation across annotators (n - 1), as the paper reports it"]
    if res["agreement_with_audit"]["mean"] is not None:
        notes.append(f"second figure, agreement with the audit's keep/drop decision: {_pm(res['agreement_with_audit'])}")
    notes += [f"{p}: agreement {prose(v['agreement'])}, Cohen's kappa {prose(v['cohen_kappa'])}, answers judged alike "
              f"{prose(v['answers_agree'])} ({v['items']} items)" for p, v in res["pairwise"].items()]
    notes.append(f"Fleiss' kappa {prose(res['fleiss_kappa'])} over {res['items_rated_by_all']} items")
    for split, f in res["flaws"].items():
        notes.append(f"flaw reports on {split}: {f['reports']} on {f['items']} items")
    headline = ResultTable("human-eval", f"human answer accuracy ({res['items_in_key']} items)", res["scorer"],
                           ["split", "annotators", f"accuracy mean {PCT}", f"accuracy std {PCT}", "mean ± std"],
                           head, notes)
    splits = list(res["accuracy"])
    rows = []
    for name, a in res["annotators"].items():
        rows.append([name, a["rated"], a["unannotated"],
                     *[percent(a["accuracy"].get(s, {}).get("accuracy"), fraction=True) for s in splits],
                     a["agreement_with_audit"], a["flaws"]])
    per = ResultTable("human-eval-annotators", "per annotator", res["scorer"],
                      ["annotator", "rated", "left blank", *[f"{s} accuracy {PCT}" for s in splits],
                       "agreement with audit", "flaws"], rows)
    return [headline, per]
