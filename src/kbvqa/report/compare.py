"""`kbvqa report compare RUN...`: one table across runs, every number with the scorer that made it.

A RUN is a `kbvqa eval` results file (`results.json`, kind `kbvqa-eval`), a folder holding one, or a
`kbvqa score ... --json` summary (InfoSeek official / strict / reward, E-VQA, the SimpleQA-style judge,
retrieval), which is read as a run with one metric. Rows are runs; each metric contributes its headline
values and its n. A metric's scorer is named in the notes under the table; where runs scored a metric
with different scorers (another judge model, another prompt, strict without its Time leniency, E-VQA
with and without an equivalence backend, a judge that graded the whole answer and one that graded the
short answer — `simpleqa-judge` vs `simpleqa-judge[short-answer]`) the metric's columns are flagged in
their header and the notes say which run used which — never compared silently. Runs scored against
different reference files are flagged the same way.

A judge-based metric (judge, judge-verdicts) shows two accuracies, named: `accuracy` = correct / all n
responses (seed 001's definition; a missing prediction is a response that is not correct) and
`accuracy_graded` = correct / graded (kbvqa's, invalid and failed verdicts left out), with n graded, n
invalid and n error as columns beside its n (kbvqa.evaluate.judge); the SimpleQA rates
(accuracy_given_attempted, f1) are over all n. A results file written when `accuracy` meant correct /
graded is read with its figures renamed (`upgrade_judge_values`), so a column never mixes the two.

Reads JSON only (report may import data, runner and report): the metric entries of a results file
are taken as `kbvqa eval` wrote them; a bare summary is interpreted here by its shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from kbvqa.report.tables import PCT, ResultTable, md_escape, percent, to_markdown

__all__ = ["Run", "load_run", "summary_metric", "scorer_identity", "judge_counts", "compare_runs", "compare_table",
           "compare_markdown", "results_table", "RESULTS_FILE", "FLAG"]

RESULTS_FILE = "results.json"
RESULTS_KIND = "kbvqa-eval"
FLAG = "(!) scorer differs"


@dataclass
class Run:
    label: str
    path: Path
    source: str  # "eval" | "score-summary"
    metrics: dict[str, dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# reading runs


def _pred_counts(s: Mapping[str, Any]) -> dict[str, int]:
    return {"error": int(s.get("n_error_lines", 0)), "invalid": int(s.get("n_invalid_lines", 0)),
            "abstained": int(s.get("n_abstained", 0))}


def _metric(scorer: dict[str, Any], values: dict[str, Any], headline: list[str], counts: dict[str, Any],
            summary: Mapping[str, Any]) -> dict[str, Any]:
    return {"scorer": scorer, "values": values, "headline": headline, "counts": counts, "summary": dict(summary),
            "status": "ok"}


def summary_metric(s: Mapping[str, Any], path: str | Path = "<summary>") -> tuple[str, dict[str, Any]]:
    """(metric name, metric entry) of a `kbvqa score ... --json` summary, in the shape `kbvqa eval`
    writes its metrics; a document of no known shape is a ValueError naming the file."""
    if not isinstance(s, Mapping):
        raise ValueError(f"{path}: not a JSON object")
    if s.get("mode") == "strict" and "final_score" in s:
        scorer = {"name": "infoseek-strict", "options": {
            "time_leniency": ((s.get("extensions") or {}).get("time_leniency") or {}).get("enabled")}}
        values = {"final_score": s["final_score"], "unseen_question": s["unseen_question_score"]["score"],
                  "unseen_entity": s["unseen_entity_score"]["score"], "coverage": s.get("coverage")}
        return "infoseek-strict", _metric(scorer, values, ["final_score"],
                                          {"n": s.get("n"), "missing": s.get("n_missing"), **_pred_counts(s)}, s)
    if s.get("mode") == "reward" and "accuracy" in s:
        values = {"accuracy": s["accuracy"], "coverage": s.get("coverage"),
                  **{f"accuracy {qt}": v["accuracy"] for qt, v in (s.get("by_question_type") or {}).items()}}
        return "infoseek-reward", _metric({"name": "infoseek-reward", "options": {}}, values, ["accuracy"],
                                          {"n": s.get("n"), "missing": s.get("n_missing"), **_pred_counts(s)}, s)
    if "mode" not in s and {"final_score", "unseen_question_score", "unseen_entity_score"} <= set(s):
        values = {"final_score": s["final_score"], "unseen_question": s["unseen_question_score"]["score"],
                  "unseen_entity": s["unseen_entity_score"]["score"]}
        return "infoseek-official", _metric({"name": "infoseek-official", "options": {}}, values, ["final_score"],
                                            {"n": None, "missing": None}, s)
    scorer_name = s.get("scorer")
    if isinstance(scorer_name, str) and scorer_name.startswith("simpleqa-judge") and "judge_provenance" in s:
        scorer = {"name": scorer_name, "options": {"graded_text": s.get("graded_text")},
                  "prompt_version": s.get("prompt_version"),
                  "judge": {k: v for k, v in (s.get("judge_provenance") or {}).items() if v is not None}}
        s = upgrade_judge_summary(s)
        values = {k: s.get(k) for k in ("accuracy", "accuracy_graded", "correct", "accuracy_given_attempted", "f1",
                                        "incorrect", "not_attempted")}
        counts = {"n": s.get("n"), "graded": s.get("n_graded"), "missing": s.get("n_missing"), **_pred_counts(s),
                  "judge_error": s.get("n_error"), "judge_invalid": s.get("n_invalid"), "empty": s.get("n_empty")}
        return "judge", _metric(scorer, values, list(JUDGE_HEADLINE), counts, s)
    if isinstance(scorer_name, str) and scorer_name.startswith("evqa") and "by_question_type" in s:
        values = {"accuracy": s["accuracy"], "accuracy_excluding_2_hop": s.get("accuracy_excluding_2_hop"),
                  "coverage": s.get("coverage")}
        name = "evqa-semantic" if "semantic" in scorer_name else "evqa"
        return name, _metric({"name": scorer_name, "options": {}}, values, ["accuracy"],
                             {"n": s.get("n"), "missing": s.get("n_missing"), **_pred_counts(s)}, s)
    if isinstance(s.get("stages"), Mapping) and "ks" in s and "n_references" in s:
        values: dict[str, Any] = {}
        for stage, m in s["stages"].items():
            values.update({f"{stage} R@{k}": m["recall"][f"@{k}"] for k in s["ks"]})
            values[f"{stage} MRR"] = m["mrr"]
        shown = [k for k in (1, 5) if k in s["ks"]] or list(s["ks"][:1])
        counts = {"n": s["n_references"],
                  "missing": max((m.get("n_missing", 0) for m in s["stages"].values()), default=0)}
        return "retrieval", _metric({"name": "retrieval", "options": {"two_hop": s.get("two_hop", "any")}}, values,
                                    [f"{st} R@{k}" for st in s["stages"] for k in shown], counts, s)
    raise ValueError(f"{path}: neither a `kbvqa eval` results file nor a `kbvqa score ... --json` summary "
                     "(InfoSeek, E-VQA, judge or retrieval)")


#: The figures a judge metric leads with: seed 001's accuracy, kbvqa's over graded verdicts, SimpleQA's
#: accuracy given attempted (`correct`, SimpleQA's rate over all n, equals `accuracy` and stays in values).
JUDGE_HEADLINE = ["accuracy", "accuracy_graded", "accuracy_given_attempted"]


def upgrade_judge_summary(s: Mapping[str, Any]) -> Mapping[str, Any]:
    """A judge summary (`kbvqa score judge`) with its figures named as now: one written when `accuracy`
    was correct / graded has that figure as `accuracy_graded` and its `correct` (correct / all n) as
    `accuracy`; one that has `accuracy_graded` is returned as it is."""
    if "accuracy_graded" in s:
        return s
    return {**s, "accuracy_graded": s.get("accuracy"), "accuracy": s.get("correct")}


def upgrade_judge_values(metric: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A judge-based metric entry of an older results file, whose `accuracy` was correct / graded,
    with its figures named as now: that figure becomes `accuracy_graded` and `accuracy` is correct /
    all n (the judge's SimpleQA `correct` rate; for judge-verdicts, from the counts). An entry that
    has `accuracy_graded`, or is not judge-based, is returned as it is."""
    values = entry.get("values") or {}
    if judge_counts(entry.get("counts")) is None or "accuracy_graded" in values or "accuracy" not in values:
        return entry
    s = entry.get("summary") or {}
    if "correct" in values and metric in ("judge", "simpleqa-judge"):
        now = values["correct"]
    elif isinstance(s.get("correct"), int) and s.get("n"):
        now = round(100 * s["correct"] / s["n"], 2)
    else:
        now = None
    headline = list(entry.get("headline") or [])
    headline = ["accuracy", "accuracy_graded", *(h for h in headline if h not in ("accuracy", "accuracy_graded",
                                                                                    "correct"))]
    return {**entry, "values": {**values, "accuracy": now, "accuracy_graded": values["accuracy"]},
            "headline": headline}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def load_run(path: str | Path, label: str | None = None) -> Run:
    """A results file, a folder with results.json, or a score summary, as a Run."""
    path = Path(path)
    if path.is_dir():
        if not (path / RESULTS_FILE).is_file():
            raise ValueError(f"{path}: a folder without {RESULTS_FILE} (give a `kbvqa eval --out` folder, its "
                             "results.json or a `kbvqa score ... --json` summary)")
        label = label or path.name
        path = path / RESULTS_FILE
    doc = _read_json(path)
    if isinstance(doc, Mapping) and doc.get("kind") == RESULTS_KIND:
        metrics = doc.get("metrics")
        if not isinstance(metrics, Mapping):
            raise ValueError(f"{path}: a results file without metrics")
        label = label or (path.parent.name if path.name == RESULTS_FILE else path.stem)
        answer = doc.get("answer") or {}
        info = {"pipeline": answer.get("pipeline"), "references": doc.get("references") or {},
                "samples": doc.get("samples") or {}, "kbvqa_version": doc.get("kbvqa_version"),
                "git": (doc.get("git") or {}).get("commit"), "answer_counts": answer.get("counts")}
        return Run(label, path, "eval", {str(k): upgrade_judge_values(str(k), dict(v)) for k, v in metrics.items()},
                   info)
    name, entry = summary_metric(doc, path)
    return Run(label or path.name.removesuffix(".json"), path, "score-summary", {name: entry}, {})


# --------------------------------------------------------------------------------------------------
# comparing


def scorer_identity(scorer: Mapping[str, Any] | None) -> str:
    """What must be equal for two numbers of one metric to be comparable: the scorer's name, its
    options, its prompt version and its judge model (not the judge's base URL: one model, two servers)."""
    if not scorer:
        return "unknown scorer"
    parts = [str(scorer.get("name") or "unknown scorer")]
    opts = {k: v for k, v in (scorer.get("options") or {}).items() if v is not None}
    if opts:
        parts.append(", ".join(f"{k}={v}" for k, v in sorted(opts.items())))
    if scorer.get("prompt_version"):
        parts.append(f"prompt {scorer['prompt_version']}")
    judge = scorer.get("judge")
    if judge:
        parts.append(f"judge {judge.get('backend') or '?'}:{judge.get('model') or '?'}")
    return ", ".join(parts)


def shown_figure(metric: str, entry: Mapping[str, Any], key: str, value: Any) -> tuple[str, Any]:
    """(label, value) of one metric value as every table shows it (kbvqa.report.tables' unit rule): a
    percentage with PCT in its label, or MRR as the fraction it is. Results files keep each number in
    its producer's unit (docs/reference.md, "Units"): fractions for Recall@K, MRR and coverage, for the SimpleQA
    judge's figures; percent for InfoSeek, E-VQA and the study scorers (judge-verdicts among them)."""
    if "MRR" in key:
        return key, value
    name = str((entry.get("scorer") or {}).get("name") or "")
    fraction = ("R@" in key or key == "coverage"
                or (name.startswith("simpleqa-judge") and metric in ("judge", "simpleqa-judge")))
    return f"{key} {PCT}", percent(value, fraction=fraction)


#: What a judge metric's two accuracies are, in every table note.
JUDGE_ACCURACIES = ("accuracy = correct / all responses (seed 001's definition; missing predictions, invalid and "
                    "failed verdicts count as responses not correct); accuracy_graded = correct / graded (kbvqa's: "
                    "invalid and failed verdicts excluded, counted in their columns)")

#: SimpleQA's own aggregates: rates over all n items, invalid and error included (kbvqa.evaluate.judge)
_SIMPLEQA_RATES = ("correct", "incorrect", "not_attempted", "accuracy_given_attempted", "f1")


def judge_counts(counts: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """{graded, invalid, error} of a judge-based metric's counts (the judge's verdicts, not the answer
    run's lines); None for a metric without judge verdicts. A results file written before `graded`
    was recorded gets it as n - invalid - error."""
    c = counts or {}
    if "judge_invalid" not in c and "graded" not in c:
        return None
    inv, err = c.get("judge_invalid"), c.get("judge_error")
    graded = c.get("graded")
    if graded is None and None not in (c.get("n"), inv, err):
        graded = c["n"] - inv - err
    return {"graded": graded, "invalid": inv, "error": err}


def _unique_labels(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out


def compare_runs(paths: Sequence[str | Path], *, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The comparison document: runs, per metric its columns, each run's scorer and n, whether the
    scorers agree, and the table rows (one per run)."""
    if not paths:
        raise ValueError("give at least one run")
    if names is not None and len(names) != len(paths):
        raise ValueError(f"{len(names)} names for {len(paths)} runs")
    runs = [load_run(p, names[i] if names else None) for i, p in enumerate(paths)]
    for r, lab in zip(runs, _unique_labels([r.label for r in runs])):
        r.label = lab
    order = list(dict.fromkeys(m for r in runs for m in r.metrics))
    metrics: dict[str, Any] = {}
    warnings: list[str] = []
    for m in order:
        present = [r for r in runs if r.metrics.get(m, {}).get("status", "ok") == "ok" and m in r.metrics]
        headline = list(dict.fromkeys(h for r in present for h in r.metrics[m].get("headline") or []))
        scorers = {r.label: scorer_identity(r.metrics[m].get("scorer")) for r in present}
        ns = {r.label: (r.metrics[m].get("counts") or {}).get("n") for r in present}
        judged = {r.label: jc for r in present if (jc := judge_counts(r.metrics[m].get("counts"))) is not None}
        consistent = len(set(scorers.values())) <= 1
        entry = {"columns": headline, "scorers": scorers, "consistent": consistent, "n": ns,
                 **({"judge_counts": judged} if judged else {}),
                 "absent": [r.label for r in runs if r not in present],
                 "errors": {r.label: r.metrics[m].get("reason") for r in runs
                            if m in r.metrics and r.metrics[m].get("status", "ok") != "ok"}}
        metrics[m] = entry
        if not consistent:
            warnings.append(f"{m}: scored with different scorers, not comparable: "
                            + "; ".join(f"{lab}: {s}" for lab, s in scorers.items()))
    refs = {r.label: r.info.get("references") or {} for r in runs if r.source == "eval"}
    if len({v.get("sha256") for v in refs.values() if v.get("sha256")}) > 1:
        warnings.append("the runs were scored against different reference files: "
                        + "; ".join(f"{lab}: {v.get('path')}" for lab, v in refs.items()))
    rows = []
    for r in runs:
        row: dict[str, Any] = {"run": r.label}
        for m, e in metrics.items():
            got = r.metrics.get(m) if r.label not in e["absent"] else None
            for col in e["columns"]:
                row[f"{m} {col}"] = (got or {}).get("values", {}).get(col) if got else None
            row[f"{m} n"] = (got or {}).get("counts", {}).get("n") if got else None
            if "judge_counts" in e:  # beside a judge-based figure: what was graded, and what was not
                jc = e["judge_counts"].get(r.label) or {}
                row.update({f"{m} {k}": jc.get(k) for k in ("graded", "invalid", "error")})
        rows.append(row)
    return {"kind": "kbvqa-compare",
            "runs": [{"label": r.label, "path": str(r.path), "source": r.source, **r.info} for r in runs],
            "metrics": metrics, "rows": rows, "warnings": warnings}


def compare_table(doc: Mapping[str, Any]) -> ResultTable:
    """The comparison as a ResultTable, one row per figure and one column per run (runs are few and
    figures many: the long layout stays readable in 80 columns); a metric whose scorers differ has
    FLAG in its rows' labels; percentages say so (kbvqa.report.tables.PCT); the notes name every
    metric's scorer(s). `report compare --json` keeps the document's one-row-per-run shape."""
    labels = [row["run"] for row in doc["rows"]]
    rows: list[list[Any]] = []
    for m, e in doc["metrics"].items():
        flag = "" if e["consistent"] else f" {FLAG}"
        entry = {"scorer": {"name": next(iter(e["scorers"].values()), "")}}
        for col in e["columns"]:
            label = shown_figure(m, entry, col, None)[0]
            rows.append([f"{m} {label}{flag}",
                         *[shown_figure(m, entry, col, row.get(f"{m} {col}"))[1] for row in doc["rows"]]])
        rows.append([f"{m} n", *[row.get(f"{m} n") for row in doc["rows"]]])
        if "judge_counts" in e:
            rows += [[f"{m} {k}", *[row.get(f"{m} {k}") for row in doc["rows"]]] for k in ("graded", "invalid", "error")]
    columns = ["figure", *labels]
    notes = []
    for m, e in doc["metrics"].items():
        if "judge_counts" in e:
            rates = [c for c in e["columns"] if c in _SIMPLEQA_RATES]
            notes.append(f"{m}: {JUDGE_ACCURACIES}" + (f"; {', '.join(rates)}: SimpleQA's rates over all n"
                                                       if rates else ""))
        if e["consistent"]:
            scorer = next(iter(e["scorers"].values()), "none")
            notes.append(f"{m}: scorer {scorer} (every run)")
        else:
            notes.append(f"{m}: {FLAG.removeprefix('(!) ')} between runs, NOT comparable: "
                         + "; ".join(f"{lab}: {s}" for lab, s in e["scorers"].items()))
        if len({n for n in e["n"].values() if n is not None}) > 1:
            notes.append(f"{m}: n differs between runs (" + ", ".join(f"{lab} {n}" for lab, n in e["n"].items())
                         + ")")
        if e["absent"]:
            notes.append(f"{m}: not in " + ", ".join(e["absent"])
                         + "".join(f" ({lab}: {why})" for lab, why in e["errors"].items()))
    notes += [w for w in doc["warnings"] if w.startswith("the runs were scored against")]
    return ResultTable("compare", f"{len(doc['rows'])} runs compared", "per metric, named in the notes", columns,
                       rows, notes)


def compare_markdown(doc: Mapping[str, Any]) -> str:
    """GitHub markdown of the comparison (every cell and note escaped by `to_markdown`), with the runs'
    files listed under it."""
    lines = [to_markdown(compare_table(doc)), "", "Runs:", ""]
    for r in doc["runs"]:
        what = f"{r['source']}" + (f", pipeline {r['pipeline']}" if r.get("pipeline") else "")
        lines.append(f"- {md_escape(r['label'])}: {md_escape(r['path'])} ({md_escape(what)})")
    return "\n".join(lines) + "\n"


def results_table(doc: Mapping[str, Any]) -> ResultTable:
    """One `kbvqa eval` results document as a table: a row per metric value shown (its headline),
    with the metric's counts and scorer."""
    rows = []
    notes = []
    for m, e in (doc.get("metrics") or {}).items():
        if e.get("status", "ok") != "ok":
            rows.append([m, "error", *[None] * 8])
            notes.append(f"{m}: not scored: {e.get('reason')}")
            continue
        c = e.get("counts") or {}
        jc = judge_counts(c) or {}
        simpleqa = [h for h in e.get("headline") or [] if jc and h in _SIMPLEQA_RATES]
        for h in e.get("headline") or []:
            label, value = shown_figure(m, e, h, e["values"].get(h))
            shown = f"{label} (SimpleQA, over all n)" if h in simpleqa else label
            rows.append([m, shown, value, c.get("n"), jc.get("graded"), c.get("missing"), c.get("error"),
                         c.get("invalid"), jc.get("error"), jc.get("invalid")])
        notes.append(f"{m}: scorer {scorer_identity(e.get('scorer'))}")
        if jc:
            notes.append(f"{m}: accuracy = correct / all {c.get('n')} responses (seed 001's definition; "
                         f"{c.get('missing')} missing predictions and {jc.get('invalid')} invalid and "
                         f"{jc.get('error')} failed judge verdicts count as responses not correct); accuracy_graded "
                         f"= correct / {jc.get('graded')} graded (kbvqa's: those verdicts excluded, not counted "
                         "wrong)" + (f"; {', '.join(simpleqa)}: SimpleQA's rates over all n" if simpleqa else ""))
    a = doc.get("answer") or {}
    counts = ", ".join(f"{k} {v}" for k, v in (a.get("counts") or {}).items())
    columns = ["metric", "figure", "value", "n (items)", "graded", "missing", "answer error", "answer invalid",
               "judge error", "judge invalid"]
    # a count column that is empty or 0 for every metric says nothing the title does not: left out, so the
    # table reads in 80 columns (the full counts are in results.json)
    keep = [i for i, c in enumerate(columns)
            if i < 4 or c == "missing" or any(r[i] not in (None, 0) for r in rows if len(r) > i)]
    left = [columns[i] for i in range(len(columns)) if i not in keep]
    if left and rows:
        notes.append(f"{', '.join(left)}: none for any metric")
    return ResultTable("results", f"kbvqa eval: {a.get('pipeline')} ({counts})", "per metric, named in the notes",
                       [columns[i] for i in keep], [[r[i] for i in keep] for r in rows], notes)
