"""The summary tables a job shows when it finishes: studies, audit, augmentation.

Each function turns the JSON-ready result a pipeline or study returned into `ResultTable`s (the one
table type, rendered by report.tables or printed by the command line), with the lines that belong
under the table as its notes. Kept here, not in the commands, so a command only parses flags, calls
one function and prints, and the same rows serve the terminal, markdown and the HTML report.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any, Mapping, Sequence

from kbvqa.report.tables import PCT, ResultTable, footnoted, percent, prose

__all__ = ["ivr12_terminal_tables", "ivr12_compare_terminal_table", "study_table", "recall_by_variant_table", "audit_summary_table", "audit_diff_table",
           "augment_stats_tables", "dataset_stats_table", "kb_stats_table", "kb_hits_table"]


def _ci(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"


def study_table(res: Mapping[str, Any]) -> ResultTable:
    """The headline table of a `kbvqa study` result (by-group, compare or retrieval-2x2)."""
    kind = res.get("kind")
    if kind == "by-group":
        by = res["by"]
        judged = bool(res.get("judged"))  # judge verdicts: graded / invalid / error beside every accuracy
        # judge verdicts: seed 001's accuracy over all responses first, then kbvqa's over graded verdicts
        extra = (lambda g: [g["n_graded"], g["n_invalid"], g["n_error"], g.get("accuracy_all")]) if judged else (
            lambda g: [])
        rows: list[list[Any]] = [[g["group"], g["n"], *extra(g), g["accuracy"], _ci(g["ci_low"], g["ci_high"])]
                                 for g in res["groups"]]
        o = res["overall"]
        rows.append(["all", o["n"], *extra(o), o["estimate"], _ci(o["low"], o["high"])])
        grounded = " (grounded subset)" if res.get("subset") else ""
        return ResultTable("by-group", f"{res['method']}: accuracy by {by}{grounded}", res["scorer"],
                           [by, "n", *(["graded", "invalid", "error", "accuracy (all) %"] if judged else []),
                            "accuracy (graded) %" if judged else "accuracy %", "95% CI"],
                           rows, judged_note(res) + _subset_note(res.get("subset")))
    if kind == "compare":
        a, b = res["splits"]
        rows = [[m["method"], m["accuracy_a"], m["accuracy_b"], m["delta"],
                 _ci(m["delta_ci"]["low"], m["delta_ci"]["high"]), m["rank_a"], m["rank_b"]] for m in res["methods"]]
        notes = [f"reversal: {p['method_1']} vs {p['method_2']} ({a}: {p['diff_a']:+.2f}, {b}: {p['diff_b']:+.2f})"
                 for p in res["pairs"] if p["status"] == "reversed"]
        grounded = " (grounded subset)" if res.get("subset") else ""
        if res.get("judged"):
            notes += judged_note(res) + [
                f"{m['method']}: {a} graded {m['accounting_a']['n_graded']} (invalid {m['accounting_a']['n_invalid']}, "
                f"error {m['accounting_a']['n_error']}), {b} graded {m['accounting_b']['n_graded']} (invalid "
                f"{m['accounting_b']['n_invalid']}, error {m['accounting_b']['n_error']}); paired {m['n_paired']}"
                + (f"; accuracy (all responses) {a} {m['accounting_a']['accuracy_all']:.2f}%, {b} "
                   f"{m['accounting_b']['accuracy_all']:.2f}%" if m['accounting_a'].get('accuracy_all') is not None
                   and m['accounting_b'].get('accuracy_all') is not None else "")
                for m in res["methods"]]
        return ResultTable("compare", f"{a} vs {b}{grounded}", res["scorer"],
                           ["method", f"acc {a}", f"acc {b}", "delta", "95% CI", f"rank {a}", f"rank {b}"], rows,
                           notes + _subset_note(res.get("subset")))
    if kind == "retrieval-2x2":
        o, g = res["overall"], res["gain"]
        rows = [[k.replace("_", " "), o[k], o[f"{k}_pct"]]
                for k in ("both_correct", "only_with", "only_without", "neither")]
        notes = [f"gain {g['estimate']:+.2f} points, 95% CI [{g['low']:.2f}, {g['high']:.2f}]; "
                 f"exact McNemar p = {res['mcnemar_p']:.4g}", *ungraded_note(res)]
        return ResultTable("retrieval-2x2", f"with vs without retrieval (n={o['n']})", res["scorer"],
                           ["outcome", "count", "%"], rows, notes)
    if kind == "agent-tools":
        return agent_tools_tables(res)[0]
    if kind == "agent-failures":
        return agent_failures_table(res)
    if kind == "image-ablation":
        return image_ablation_tables(res)[0]
    if kind == "fix-kinds":
        return fix_kinds_tables(res)[0]
    if kind == "grounded":
        return grounded_table(res)
    if kind == "modification-rates":
        return modification_rates_table(res)
    if kind == "variant-accuracy":
        return variant_tables(res)[0]
    if kind == "correctness-buckets":
        return buckets_tables(res)[0]
    raise ValueError(f"not a study result (kind {kind!r})")


def _count_line(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()) or "none"


def judged_note(res: Mapping[str, Any]) -> list[str]:
    """The rule under every table of judge verdicts (kbvqa.evaluate.judge)."""
    if not res.get("judged"):
        return []
    return ["accuracy (all) = correct / all responses, seed 001's definition (missing predictions, invalid replies "
            "and failed judge calls count as responses not correct); accuracy over graded verdicts (correct / "
            "incorrect / not_attempted) is kbvqa's: invalid replies and failed judge calls are not grades, excluded "
            "from it and counted apart; CIs and paired comparisons are over graded verdicts"]


def ungraded_note(res: Mapping[str, Any]) -> list[str]:
    """A 2x2's items left out because a verdict of either run was invalid or error."""
    aw, awo = ((res.get(f"accounting_{k}") or {}).get("accuracy_all") for k in ("with", "without"))
    alls = ([f"accuracy over all responses (seed 001's; invalid, failed and missing count as not correct): with "
             f"{aw:.2f}%, without {awo:.2f}%; the accuracies and the 2x2 above are over graded verdicts"]
            if aw is not None and awo is not None else [])
    u = res.get("ungraded") or {}
    if not u.get("n_unpaired"):
        return alls
    w, wo = u["with"], u["without"]
    return [f"{u['n_unpaired']} of {res['overall'].get('n_items')} items not paired: no grade in one run (with: "
            f"invalid {w['n_invalid']}, error {w['n_error']}; without: invalid {wo['n_invalid']}, error {wo['n_error']})",
            *alls]


def agent_tools_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa study agent-tools` (seed 001 Table 4 shape): with a single-pass run's verdicts, first the
    with/without-retrieval groups and their tool calls per episode; then tool calls per episode —
    overall and, with judge verdicts, for correct and non-correct episodes — with the useful-evidence
    hit rates; then how the episodes ended."""
    tables: list[ResultTable] = []
    paired = res.get("paired")
    if paired:
        tools = list(res["calls_per_episode"])
        rows = [[g["label"], "yes" if g["with_tools"] else "no", "yes" if g["without_tools"] else "no", g["n"],
                 g["pct"], *(g["calls_per_episode"][t] for t in tools)] for g in paired["groups"]]
        tables.append(ResultTable(
            "agent-tools-2x2", f"answer outcomes with and without retrieval, and tool calls per agent episode "
                               f"(seed 001 Table 4 shape; n={paired['n']} paired)", res["scorer"],
            ["group", "correct with tools", "correct without", "n", "%", *tools], rows,
            [f"net gain {paired['net_gain']:+d} (search helps - search hurts); set apart, in no group: "
             f"{_count_line(paired['apart'])}",
             "group names Search helps / Search hurts / Both wrong are seed 001's, Both correct is kbvqa's; wrong = "
             "incorrect, not attempted or no answer"]))
    by = res.get("calls_by_outcome") or {}
    ev = res.get("useful_evidence") or {}
    ev_tools = ev.get("tools") or {}
    judged = ev.get("measure") == "judge"

    def rate(t: str, key: str) -> Any:
        row = ev_tools.get(t)
        if row is None:
            return "-"
        if not judged and not row.get("checkable") and row.get("calls"):
            return "needs a model"
        return "n/a" if row.get(key) is None else percent(row[key], fraction=True)

    calls = res.get("calls") or {}
    cols = ["tool", "calls / episode", *(f"calls / episode, {g.replace('_', '-')} (n={by[g]['n']})" for g in by),
            "calls", "ok", "repeated (not run)", "over quota (not run)",
            *(f"useful evidence [{ev.get('measure', 'rule')}], {d} calls {PCT}" for d in ("all", "ok"))]
    rows = []
    for t, v in res["calls_per_episode"].items():
        c = calls.get(t) or {}
        rows.append([t, v, *(by[g][t] for g in by), c.get("calls", "-"), c.get("ok", "-"),
                     (c.get("not_run") or {}).get("repeated", "-"), (c.get("not_run") or {}).get("quota", "-"),
                     rate(t, "rate"), rate(t, "ok_rate")])
    tags = res["tags"]
    notes = [f"image tags: {tags['valid']} of {tags['total']} valid; violations "
             f"{_count_line(tags['violations']) if tags['violations'] else 'none'}",
             f"leakage: {res['leak']['steps']} steps in {res['leak']['episodes']} episodes showed a reference answer",
             res.get("note", "")]
    if ev:
        notes.append(_evidence_note(ev))
    end = res.get("ending")
    if end:
        notes.append(f"how the episodes ended: {_count_line(end['by'])}; forced answers {end['forced_answers']} "
                     "(budget and guard stops are followed by one answer-only turn)")
    if res.get("other_tool_calls"):
        notes.append(f"calls to unknown tools (not in the rows): {_count_line(res['other_tool_calls'])}")
    if res.get("outcomes"):
        notes.insert(0, f"episode outcomes: {_count_line(res['outcomes'])} (non-correct = incorrect + not attempted + "
                        "no answer; the others are in neither column)")
    tables.append(ResultTable("agent-tools", f"agent tool usage ({res['n']} episodes)", res["scorer"], cols, rows,
                              [n for n in notes if n]))
    if end:
        tables.append(ResultTable("agent-terminations", "how the episodes ended", res["scorer"],
                                  ["termination", "ended by", "episodes", "forced answers", "no answer"],
                                  [[r["termination"], r["ended_by"], r["episodes"], r["forced_answer"],
                                    r["no_answer"]] for r in end["rows"]]))
    else:  # a study file written before the ending counts
        tables.append(ResultTable("agent-terminations", "how the episodes ended", res["scorer"],
                                  ["termination", "episodes"], [[k, v] for k, v in res["terminations"].items()]))
    return tables


def _evidence_note(ev: Mapping[str, Any]) -> str:
    """Which useful-evidence measure the table shows, and its counts (kbvqa.evaluate.agent_evidence)."""
    parts = []
    for t, row in (ev.get("tools") or {}).items():
        if ev.get("measure") == "judge":
            parts.append(f"{t} {row['hits']} of {row['calls']} calls ({row['ok_calls']} ok; judge invalid "
                         f"{row['invalid']}, error {row['error']})")
        else:
            parts.append(f"{t} {row['hits']} of {row['checkable']} calls with a key answer ({row['needs_model']} "
                         "need a model)")
    what = (f"useful evidence judged by {ev['scorer']}" if ev.get("measure") == "judge"
            else f"useful evidence by the offline rule ({ev['scorer']}: a key answer of at most "
                 f"{ev.get('key_answer_words')} words verbatim; paragraph references need a model, --judge-*)")
    return (f"{what}; observations checked up to {ev.get('evidence_chars')} characters; {'; '.join(parts)}; "
            "all calls = seed 001's denominator (every call of the tool)")


def agent_failures_table(res: Mapping[str, Any]) -> ResultTable:
    """`kbvqa study agent-failures` (seed 001 Table 5 shape): judge-assigned categories of every
    non-correct episode, per outcome, as shares of every non-correct episode (the paper's denominator)
    with "not categorised" (the failure judge's invalid and failed replies) a row of its own; the
    episodes set apart (invalid or failed verdicts, failed records) are counted in the notes."""
    outcomes = ("incorrect", "not_attempted", "no_answer")

    def share(r: Mapping[str, Any], key: str) -> Any:
        return "-" if r.get(key) is None else 100.0 * r[key]

    rows = [[r["category"], r["n"], share(r, "share"), share(r, "share_of_categorised"),
             *((r.get("by_outcome") or {}).get(o, "") for o in outcomes)] for r in res["rows"]]
    notes = [f"{res['categorised']} of {res['n']} non-correct episodes categorised; not categorised "
             f"{res.get('not_categorised', res['n'] - res['categorised'])} (failure judge invalid {res['invalid']}, "
             f"error {res['error']}, no verdict yet {res.get('no_line', 0)}); tool-related {res['tool_related']}, "
             f"non-tool {res['non_tool']} (of all {res['n']})"]
    if "outcomes" in res:
        went = {k: v for k, v in res["outcomes"].items() if k != "correct"}
        notes.append(f"went in, of {res['episodes']} episodes: {_count_line(went)} (correct "
                     f"{res['outcomes'].get('correct', 0)}: not sent to the failure judge); counted apart: "
                     f"{_count_line(res.get('apart') or {})}")
    return ResultTable("agent-failures", "failure categories of every non-correct agent episode (T3 is named by seed "
                                         "001; the T1, T2, T4, N1, N2 wordings are kbvqa's reconstruction)",
                       res.get("judge", "judge"),
                       ["category", "episodes", "% of non-correct", "% of categorised", "incorrect",
                        "not attempted", "no answer"], rows, notes)


def recall_by_variant_table(rows: Sequence[dict[str, Any]], *, stage: str = "initial") -> ResultTable:
    """Recall@K per augmentation variant (the rows of evaluate.augmentation). Tables show percentages
    (the JSON keeps fractions): R@K and its delta in %, MRR as a fraction, as everywhere in kbvqa."""
    def pct(k: str, v: Any) -> tuple[str, Any]:
        if (k.startswith("R@") or k.startswith("dR@")) and isinstance(v, (int, float)) and not isinstance(v, bool):
            return f"{k} ({'% points' if k.startswith('d') else '%'})", round(100.0 * v, 2)
        return k, v

    return ResultTable.from_dicts([dict(pct(k, v) for k, v in r.items()) for r in rows], name="augmentation-recall",
                                  title=f"Recall@K per augmentation variant (retrieval stage {stage!r})",
                                  scorer="kbvqa retrieval metrics (canonical URLs, de-duplicated)", float_digits=2)


_SUPPORT = ("supported", "mismatched", "unsupported", "invalid")
_ACTIONS = ("keep", "repair", "drop")


def audit_summary_table(summary: Mapping[str, Any]) -> ResultTable:
    """Labels and actions by question type, then all; the tag counts as a note."""
    groups = dict(summary["by_question_type"])
    groups["all"] = {"total": summary["total"], "answer_support": summary["answer_support"],
                     "action": summary["action"]}
    rows = [[qt, v["total"], *[v["answer_support"].get(x, 0) for x in _SUPPORT],
             *[v["action"].get(x, 0) for x in _ACTIONS]] for qt, v in groups.items()]
    notes = ["tags: " + ", ".join(f"{k} {v}" for k, v in summary["tags"].items())] if summary.get("tags") else []
    return ResultTable("audit-summary", f"audit: {summary['total']} samples", "",
                       ["question type", "n", *_SUPPORT, *_ACTIONS], rows, notes)


def audit_diff_table(d: Mapping[str, Any]) -> ResultTable:
    """What changed between two versions of a benchmark (% of rows), overall, by type and by tag;
    the unmatched counts and example rows as notes."""

    def row(name: str, v: Mapping[str, Any]) -> list[Any]:
        p = v["pct"]
        return [name, v["n"], v["dropped"], v["kept"],
                *(f"{p[k]:.1f}" for k in ("question_only", "answer_only", "both", "neither"))]

    rows = [row("all", d), *(row(f"– {k}", v) for k, v in d["by_question_type"].items()),
            *(row(f"tag {k}", v) for k, v in d["by_tag"].items())]
    notes = [f"only in A: {d['only_in_a']['count']}  only in B: {d['only_in_b']['count']}",
             f"denominators: {d['denominators']}"]
    notes += [f"[{cat}] {r['id']}: “{r['question_a']}” → “{r['question_b']}”; {prose(r['answers_a'])} → "
              f"{prose(r['answers_b'])}"
              for cat, rs in d["examples"].items() for r in rs]
    a, b = Path(d["a"]).name, Path(d["b"]).name
    return ResultTable("audit-diff", f"{a} → {b}: {d['joined']} joined on id (% of the kept rows)", "",
                       ["slice", "n", "dropped", "kept", "Q only", "A only", "both", "neither"], rows, notes)


def _counts(name: str, title: str, counts: Mapping[str, Any]) -> ResultTable:
    return ResultTable(name, title, "", ["key", "n"], [[str(k), v] for k, v in counts.items()])


def augment_stats_tables(stats: Mapping[str, Any]) -> list[ResultTable]:
    """An augmentation run's stats.json as tables: anchors per type, side balance, exclusions, dropped
    types and variant status; the first table's note is the one-line overview."""
    quota = ResultTable("augment-types", "anchors per type", "", ["type", "selected", "available"],
                        [[t, v["selected"], v["available"]] for t, v in stats["per_type_quota"].items()],
                        [f"inputs {stats['inputs']}, augmented anchors {stats['augmented_anchors']}, "
                         f"status {stats['status']}"])
    tables = [quota, _counts("augment-sides", "side balance", stats["side_balance"])]
    if stats.get("exclusions"):
        tables.append(_counts("augment-exclusions", "exclusions", stats["exclusions"]))
    if stats.get("dropped_types"):
        tables.append(_counts("augment-dropped-types", "dropped types (entities)", stats["dropped_types"]))
    keys = sorted({k for d in stats["variant_status"].values() for k in d if k})
    tables.append(ResultTable("augment-variants", "variant status", "", ["variant", *keys],
                              [[v, *[d.get(k, 0) for k in keys]] for v, d in stats["variant_status"].items()]))
    return tables


def curation_funnel_table(f: Mapping[str, Any]) -> ResultTable:
    """A curation funnel (`kbvqa curate` OUT/funnel.json): items into and kept by each stage, what it
    dropped and where items stopped (by reason, as text); intake and output in the notes."""
    rows = [[st["stage"], st.get("step", ""), st.get("in", 0), st.get("kept", 0), _count_line(st.get("dropped") or {}),
             _count_line(st.get("stopped") or {})] for st in f["stages"]]
    i, o = f["intake"], f["output"]
    notes = [f"intake: {_count_line(i)}", f"output: {o.get('items', 0)} items, {o.get('dropped', 0)} dropped, "
             f"{o.get('stopped', 0)} stopped; accounted: {'yes' if f.get('accounted') else 'no'}",
             *(f"warning: {w}" for w in f.get("warnings") or [])]
    return ResultTable("curation-funnel", "curation funnel (counts of items)", "", ["stage", "step", "items in",
                       "items kept", "dropped (items)", "stopped (items)"], rows, notes)


def dataset_stats_table(stats: Mapping[str, Any], *, title: str = "dataset") -> ResultTable:
    """`kbvqa data stats` (kbvqa.data.stats.dataset_stats): counts by type, split and dataset, answer
    lengths, multi-part and numeric answers, missing fields."""
    rows: list[list[Any]] = []
    groups = ("by_question_type", "by_answer_type", "by_split", "by_dataset", "by_category", "by_intent",
              "by_language")  # the last three: community (NoteVQA-style) data, when present
    for key in (g for g in groups if g in stats):
        rows += [[key[3:] if i == 0 else "", label, n] for i, (label, n) in enumerate(stats[key].items())]
    for key in ("answer_words", "answer_chars"):
        s = stats[key]
        rows.append([key.replace("_", " "), "mean / median / max", f"{s['mean']} / {s['median']} / {s['max']}"])
    rows += [["answers", "multi-part", stats["multipart"]], ["", "numeric with range", stats["numeric_with_range"]]]
    if "interleaved_references" in stats:
        rows.append(["references", "interleaved / their images",
                     f"{stats['interleaved_references']} / {stats['reference_images']}"])
    rows += [["missing" if i == 0 else "", k.replace("_", " "), n] for i, (k, n) in enumerate(stats["missing"].items())]
    return ResultTable("dataset-stats", f"{title}: {stats['total']} samples", "", ["group", "value", "count"], rows)


def kb_stats_table(stats: Mapping[str, Any], *, title: str = "KB") -> ResultTable:
    """`kbvqa kb stats`: one row per statistic."""
    return ResultTable("kb-stats", title, "", ["statistic", "value"], [[k, v] for k, v in stats.items()],
                       float_digits=None)


def kb_hits_table(hits: Sequence[Mapping[str, Any]], *, title: str = "") -> ResultTable:
    """`kbvqa kb search`: rank, BM25 score, article (title and url), section, text (long texts cut)."""
    rows = [[i, f"{h['score']:.3g}", f"{h['title']}\n{h['url']}", f"[{h['section_index']}] {h['section_title']}",
             h["text"] if len(h["text"]) <= 160 else h["text"][:157] + "..."] for i, h in enumerate(hits, 1)]
    return ResultTable("kb-search", title, "", ["#", "score", "article", "section", "text"], rows)


def image_ablation_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa study image-ablation` (seed 001 Tables 6-7 shape): reader accuracy per probe kind and
    condition, the paired differences, accuracy by intent, and the probe funnel from generation to
    scoring. CIs are cluster-bootstrap intervals over reference items; the denominators and every
    count of what failed are in the notes and the funnel table, never left out. When the full
    condition repeated the control (a deterministic reader), its cells and the differences with it
    show their value with "repeats the control" where the CI would be, and a note says why."""

    def acc(cell: Mapping[str, Any]) -> list[Any]:
        if cell.get("not_independent"):
            return [cell.get("value"), "none: repeats the control"]
        ci = cell["ci"]
        return [ci["estimate"], _ci(ci["low"], ci["high"])] if ci else [None, "n/a"]

    kinds, conds, scorer = res["kinds"], res["conditions"], res["scorer"]
    f = res["counts"]["probes"]
    refs, gen = res["counts"]["references"], res["counts"]["generation"]
    b = res["bootstrap"]
    notes = [f"references: {refs['rows']} read, {refs['with_images']} with at least one image; probe generation: "
             f"{gen['ok']} ok, {gen['invalid']} invalid, {gen['error']} error",
             "probes generated / kept / complete: " + "; ".join(
                 f"{k} {f[k]['generated']} / {f[k]['kept']} / {f[k]['complete']}" for k in kinds),
             f"denominators: {res['denominators']}",
             f"{b['method']}, resampling {b['cluster']}s: {b['n_resamples']} resamples, seed {b['seed']}",
             *([f"full condition: {fc['sampling']}"] if (fc := res.get("full_condition")) else []),
             *(f"warning: {w}" for w in res["warnings"])]
    main = ResultTable("image-ablation", "reader accuracy under image ablation (%)", scorer,
                       ["probe kind", "probes", "references", *(x for c in conds for x in (f"{c} %", f"{c} 95% CI"))],
                       [[k, res["by_kind"][k]["n"], res["by_kind"][k]["n_references"],
                         *(x for c in conds for x in acc(res["by_kind"][k][c]))] for k in kinds], notes)
    diffs = ResultTable("image-ablation-differences", "paired differences between conditions (points)", scorer,
                        ["probe kind", "difference", "points", "95% CI", "gained", "lost", "probes"],
                        [[k, d.replace("-", " - "), *acc(res["by_kind"][k][d]), res["by_kind"][k][d]["gained"],
                          res["by_kind"][k][d]["lost"], res["by_kind"][k]["n"]]
                         for k in kinds for d in res["differences"]])
    intents = ResultTable("image-ablation-intents", "accuracy by intent (%)", scorer,
                          ["intent", "probe kind", "probes", "references", *(f"{c} %" for c in conds),
                           "full - text", "95% CI"],
                          [[r["intent"], r["kind"], r["n"], r["n_references"], *(acc(r[c])[0] for c in conds),
                            *acc(r["full-text"])] for r in res["by_intent"]])
    steps = ("planned", "not_generated", "generated", "failed_control", "control_not_graded", "kept", "incomplete",
             "complete")
    funnel = ResultTable("image-ablation-counts", "probes from generation to scoring", "", ["step", *kinds],
                         [[s.replace("_", " "), *(f[k][s] for k in kinds)] for s in steps],
                         [f"{c}: not graded {n}" for c, n in res["ungraded_by_condition"].items() if n])
    return [main, diffs, intents, funnel]


# ------------------------------------------------------------------------------------------- IVR-12


def _na(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(counts.items())) or "0"


_ABSENT = "–"  # an aggregate that does not exist (its reason is beside it), never an empty-looking number


def _fig(v: Any) -> Any:
    return _ABSENT if v is None else v


def _ivr12_dim_title(d: Mapping[str, Any], key: str, *measured: str | None) -> str:
    """A dimension's title, marked "(rule)" where a side's figure is a rule measure (a stand-in)."""
    return d.get("title", key) + (" (rule)" if "rule" in measured else "")


def _current_ivr12_summary(s: Mapping[str, Any]) -> dict[str, Any]:
    """The summary as it is, or — written by a kbvqa from before aggregates said how they were made (no
    `measured_by`) — with its group and overall means withheld: an old rules-mode "overall" stood on
    three rule measures and is never reprinted (`kbvqa score ivr12 --resume` recomputes the summary).
    The report only shows summaries; recomputing one is evaluate.ivr12's work (`normalize_summary`)."""
    dims = s.get("dimensions") or {}
    if all("measured_by" in d for d in dims.values()):
        return dict(s)
    why = ("summary written by an older kbvqa, whose aggregates may stand on rule measures: no overall "
           "(run `kbvqa score ivr12 --resume` to recompute it)")
    out = json.loads(json.dumps(s))
    for d in out.get("dimensions", {}).values():
        d["measured_by"] = {"judge": "judge", "rules": "rule"}.get(d.get("label"))
    for g in (out.get("groups") or {}).values():
        g.update(mean=None, gated_mean=None, reason=why)
    out["overall"] = {**(out.get("overall") or {}), "mean": None, "gated_mean": None, "reason": why}
    return out


def ivr12_terminal_tables(s: Mapping[str, Any]) -> list[ResultTable]:
    """`ivr12_tables` for an 80-column terminal: the main table with the group folded into its rows
    ("Content: group mean" after the group's dimensions), n/a counts and notes as numbered footnotes;
    the gates and agreement tables as they are. The full table is in the summary (--json) and in
    `report build`."""
    full = ivr12_tables(s)
    main = full[0]
    rows = []
    for group, dim, source, by, mean, n, na, gated, gated_n, note in main.rows:
        if dim.startswith("group mean") or group == "overall":
            label = dim if group == "overall" else f"{group}: {dim}"
        else:
            label = dim
            note = "; ".join(x for x in ((f"n/a: {na}" if na not in ("", "0") else ""), note) if x)
        rows.append([label, source, by, mean, n, gated, gated_n, note])
    rows, marks = footnoted(rows, 7)
    legend = ("items = items the dimension has a score for; by = how it was measured (judge, rule: kbvqa's "
              "stand-in, n/a: not measured); source = where its name comes from (paper, kbvqa)")
    compact = ResultTable(main.name, main.title, main.scorer,
                          ["dimension", "source", "by", "mean", "items", "gated mean", "gated items", "note"],
                          rows, [legend, *marks, *main.notes])
    return [compact, *full[1:]]


def ivr12_tables(s: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa score ivr12` (kind `ivr12`): the dimension means — each with where the dimension comes
    from (paper / kbvqa), how it was measured (judge / rule, a rule measure marked "(rule)"), the items
    it is over, its n/a counts by reason and its gated mean — then the group and overall means, shown
    only where every dimension in them was judged ("–" and the reason otherwise); the gate counts by
    who decided them; judge agreement (Krippendorff's α) when there were repeats or several judges."""
    s = _current_ivr12_summary(s)
    dims, groups = s["dimensions"], s["groups"]
    rows: list[list[Any]] = []
    for g, gv in groups.items():
        for key, d in dims.items():
            if d["group"] == g:
                by = d.get("measured_by")
                rows.append([gv["title"], _ivr12_dim_title(d, key, by), d.get("source", ""), by or "n/a",
                             _fig(d["mean"]), d["n"], _na(d["n_na"]), _fig(d["gated_mean"]), d["gated_n"],
                             "; ".join(x for x in (d.get("note"), d.get("source_note")) if x)])
        rows.append([gv["title"], f"group mean ({gv['n_dimensions']} dimensions)", gv.get("source", ""), "",
                     _fig(gv["mean"]), "", "", _fig(gv["gated_mean"]), "", gv.get("reason") or ""])
    o = s["overall"]
    rows.append(["overall", f"IVR-12 overall ({o['n_dimensions']} dimensions)", "", "", _fig(o["mean"]), "", "",
                 _fig(o["gated_mean"]), "", o.get("reason") or ""])
    st = s["status"]
    ls = s["length_score"]
    no_answer = f" ({_na(s['no_answer'])})" if s["no_answer"] else ""
    notes = [f"items {s['n_items']}: ok {st['ok']}, invalid {st['invalid']}, error {st['error']} (invalid and error "
             f"items are in no mean); no answer {s['n_no_answer']}{no_answer}; without images "
             f"{s['n_without_images']} (image group n/a, excluded, counted)",
             f"gated = policy {s['gating']['policy']}: an item failing an evaluated gate "
             f"({', '.join(s['gating']['gates_evaluated']) or 'none evaluated'}) scores {s['gating']['floor']} on "
             f"every dimension that applies to it; {s['n_gate_failed']} items failed a gate",
             f"length-score: Pearson {prose(ls['pearson'])}, Spearman {prose(ls['spearman'])} (n={ls['n']})"
             + (f"; {ls['note']}" if ls.get("note") else ""),
             f"rubric {s['rubric']['name']} {s['rubric']['version']}, sha256 {s['rubric']['sha256'][:12]}"
             + (f", grouping {prose(s['rubric']['grouping']['sizes'])} ({s['rubric']['grouping'].get('source', 'the file')})"
                if s["rubric"].get("grouping") else "")
             + (f": {s['rubric']['reconstruction']}" if s["rubric"].get("reconstruction") else ""),
             "items scored = items the dimension has a score for; source = where the dimension's name comes from "
             f"(paper: {(s.get('provenance') or {}).get('dimension_names_from_paper', '?')} names, sections in the "
             "rubric file; kbvqa: our reconstruction)"]
    if any(d.get("measured_by") == "rule" for d in dims.values()):
        notes.append("(rule): a rule measure, kbvqa's stand-in for a judge on that dimension; it is shown apart and "
                     "enters no group or overall mean")
    notes += [f"warning: {w}" for w in s.get("warnings") or []]
    main = ResultTable("ivr12", f"IVR-12 ({s.get('source', 'predictions')}, {s['mode']} mode)", s["scorer"],
                       ["group", "dimension", "source", "measured by", "mean", "items scored", "n/a (items)",
                        "gated mean", "gated items", "note"], rows, notes)

    def decided(g: Mapping[str, Any]) -> str:
        by = g.get("decided_by")
        if by is None:  # a summary written before kbvqa recorded who decided a gate
            return f"{g.get('judged_by')} (as the rubric says)"
        parts = [f"{who}: {v['pass']} pass, {v['fail']} fail"
                 + (f" ({_na(v['reasons'])})" if v.get("reasons") else "") for who, v in by.items()]
        return "; ".join(parts) or "none (n/a: needs a judge model)"

    gates = ResultTable("ivr12-gates", "IVR-12 gates", s["scorer"],
                        ["gate", "source", "decided by", "pass", "fail", "n/a"],
                        [[g.get("title", k), g.get("source", ""), decided(g), g["pass"], g["fail"], g["n_a"]]
                         for k, g in s["gates"].items()],
                        [f"gating policy {s['gating']['policy']}: {s['gating'].get('source', 'kbvqa')}'s"])
    tables = [main, gates]
    agr = s.get("agreement") or {}
    if agr:
        judges = sorted({j for v in agr.values() for j in (v.get("repeats") or {})})
        cols = ["dimension", "items", *(f"α repeats {j}" for j in judges), "α judges"]

        def alpha(v: Mapping[str, Any] | None) -> str:
            if not v:
                return ""
            return " / ".join("n/a" if x is None else f"{x:.3f}" for x in v.values())

        rows2 = [[k, v["n_items"], *(alpha((v.get("repeats") or {}).get(j)) for j in judges), alpha(v.get("judges"))]
                 for k, v in agr.items()]
        tables.append(ResultTable("ivr12-agreement", "IVR-12 judge agreement (Krippendorff's α, ordinal / interval; "
                                  "nominal for gates)", s["scorer"], cols, rows2,
                                  ["n/a: α is undefined when every rating is the same"]))
    return tables


def _compare_row_title(r: Mapping[str, Any], sep: str) -> tuple[str, str]:
    """A comparison row's title (a dimension marked "(rule)" where a side is a rule measure) and how each
    side was measured (dimensions only)."""
    ma, mb = r.get("measured_by_a"), r.get("measured_by_b")
    if r["level"] != "dimension":
        return (f"{r['title']} (group mean)" if r["level"] == "group" else r["title"]), ""
    return _ivr12_dim_title(r, r["key"], ma, mb), f"{ma or 'n/a'}{sep}{mb or 'n/a'}"


def ivr12_compare_terminal_table(res: Mapping[str, Any]) -> ResultTable:
    """`ivr12_compare_table` for an 80-column terminal: one row per dimension, group and overall, the two
    sides as A and B (named in the legend), each side's mean and items scored, the ungated gap and a
    footnote mark; each dimension's source and the gated means and gaps are in --json / --out (and
    `report build`'s table)."""
    a, b = res["names"]
    rows = []
    for r in res["rows"]:
        title, by = _compare_row_title(r, "/")
        rows.append([title, by, _fig(r["a"]), r["n_a"], _fig(r["b"]), r["n_b"], _fig(r["gap"]), r.get("reason") or ""])
    rows, marks = footnoted(rows, 7)
    legend = (f"A = {a} ({res['items'][a]} items), B = {b} ({res['items'][b]} items); by = how each side was "
              "measured (judge, rule: kbvqa's stand-in, n/a); items = the items a mean is over; gap = A - B, only "
              "where both sides were measured the same way; gated means and gaps and each dimension's source: "
              "--json or --out")
    return ResultTable("ivr12-compare", f"IVR-12: {a} (A) vs {b} (B)", res["scorer"],
                       ["dimension", "by A/B", "A", "items A", "B", "items B", "gap A-B", "note"], rows,
                       [legend, *marks, *res.get("notes", [])])


def ivr12_compare_table(res: Mapping[str, Any]) -> ResultTable:
    """`kbvqa score ivr12-compare` (kind `ivr12-compare`, seed 001 Table 3 shape): mean per dimension,
    group and overall for both runs with the items each is over, and the gap A − B, ungated and
    gated — a gap only where both sides were measured the same way, "–" and the reason otherwise."""
    a, b = res["names"]
    rows = []
    for r in res["rows"]:
        title, by = _compare_row_title(r, " / ")
        rows.append([title, r.get("source") or "", by, _fig(r["a"]), r["n_a"], _fig(r["b"]), r["n_b"], _fig(r["gap"]),
                     _fig(r["a_gated"]), _fig(r["b_gated"]), _fig(r["gap_gated"]), r.get("reason") or ""])
    notes = [f"items: {a} {res['items'][a]}, {b} {res['items'][b]}; items scored = the items a dimension's mean is "
             "over; a group mean or the overall exists only where every dimension in it was judged by a model",
             *res.get("notes", [])]
    return ResultTable("ivr12-compare", f"IVR-12: {a} vs {b}", res["scorer"],
                       ["dimension", "source", "measured by", a, f"items scored ({a})", b, f"items scored ({b})",
                        "gap", f"{a} gated", f"{b} gated", "gap gated", "note"], rows, notes)


def accuracy_by_group_matrix_table(results: Sequence[Mapping[str, Any]]) -> ResultTable:
    """Several `kbvqa study by-type` results grouped by the same field (e.g. `--by category` over the
    short-answer judge's verdicts of several models) as one table — a row per method, a column per
    group with its n, and overall: seed 001 Table 2 (by category) / Table 10 (by intent) shape."""
    if not results:
        raise ValueError("no by-group results to tabulate")
    bys = {r.get("by") for r in results}
    if len(bys) != 1 or any(r.get("kind") != "by-group" for r in results):
        raise ValueError(f"need by-group study results grouped by one field, got kinds "
                         f"{sorted({str(r.get('kind')) for r in results})} by {sorted(map(str, bys))}")
    names = sorted({g["group"] for r in results for g in r["groups"]})
    n_of = {g["group"]: g["n"] for r in results for g in r["groups"]}
    rows = []
    for r in results:
        acc = {g["group"]: g["accuracy"] for g in r["groups"]}
        rows.append([r["method"], r["overall"]["estimate"], *(acc.get(n) for n in names)])
    judged = [r for r in results if r.get("judged")]
    notes = judged_note(judged[0]) + [f"{r['method']}: graded {r['overall']['n_graded']}, invalid "
                                       f"{r['overall']['n_invalid']}, error {r['overall']['n_error']}"
                                       for r in judged] if judged else []
    return ResultTable(f"accuracy-by-{bys.pop()}", f"accuracy % by {results[0]['by']}", results[0]["scorer"],
                       ["method", f"overall (n={results[0]['overall']['n']})", *(f"{n} (n={n_of[n]})" for n in names)],
                       rows, notes)


# ------------------------------------------------------- seed 000 analyses (kbvqa.evaluate.analyses)


def _est(c: Mapping[str, float] | None) -> float | None:
    return None if c is None else c["estimate"]


def _cic(c: Mapping[str, float] | None) -> str:
    return "n/a" if c is None else _ci(c["low"], c["high"])


def _boot_note(res: Mapping[str, Any]) -> str:
    b = res["bootstrap"]
    return f"{b['method']}, {b['n_resamples']} resamples, seed {b['seed']}; percentages"


def _subset_note(sub: Mapping[str, Any] | None) -> list[str]:
    """The grounded subset's size and how it was made, under every table restricted to it."""
    if not sub:
        return []
    files = "; ".join(f"{n}: {f['grounded']} of {f['n']} grounded (missing {f['missing']}, failed {f['failed']}, "
                      f"no stage {f['no_stage']})" for n, f in sub["files"].items())
    return [f"grounded subset: {sub['n_items_in_subset']} of {sub['n_items_before']} items ({sub['rule']}, "
            f"grounded in every run of {len(sub['files'])}; gold from {Path(sub['references']).name}): {files}"]


_KIND_NAMES = {"all": "all", "question_only": "question only", "answer_only": "answer only",
               "both": "question and answer", "neither": "nothing", "(unknown)": "(no kind)"}


def fix_kinds_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa study fix-kinds` (seed 000 §6.2 / Appendix 0.D): one method's accuracy before -> after
    the fix per change kind with paired deltas, then per kind x question type; the pairing counts
    (items the audit dropped, items without a kind) and the grounded subset in the notes."""
    p = res["pairing"]
    notes = [f"paired {p['n_paired']} ids of {p['n_unfixed']} unfixed / {p['n_fixed']} fixed items; only in the "
             f"unfixed run (dropped by the audit or absent from the fixed split): {p['n_only_unfixed']}; only in the "
             f"fixed run: {p['n_only_fixed']}; paired without a change kind: {p['n_without_kind']}; analysed "
             f"{p['n_analysed']}", *_subset_note(res.get("subset")),
             f"change kinds from {res.get('kinds_from', 'the caller')}; delta = {res['delta']}", _boot_note(res)]
    title = f"{res['method']}: accuracy before -> after the fix, by what the audit changed"
    main = ResultTable("fix-kinds", title + (" (grounded subset)" if res.get("subset") else ""), res["scorer"],
                       ["fix kind", "n", "acc before %", "95% CI before", "acc after %", "95% CI after", "delta",
                        "delta 95% CI", "gained", "lost", "McNemar p"],
                       [[_KIND_NAMES.get(g["kind"], g["kind"]), g["n"], _est(g["before"]), _cic(g["before"]),
                         _est(g["after"]), _cic(g["after"]), _est(g["delta"]), _cic(g["delta"]), g["gained"], g["lost"],
                         f"{g['mcnemar_p']:.3g}"] for g in res["groups"]], notes)
    by_type = ResultTable("fix-kinds-by-type", f"{res['method']}: by fix kind and question type", res["scorer"],
                          ["fix kind", "question type", "n", "acc before %", "acc after %", "delta", "delta 95% CI"],
                          [[_KIND_NAMES.get(g["kind"], g["kind"]), g["question_type"], g["n"], _est(g["before"]),
                            _est(g["after"]), _est(g["delta"]), _cic(g["delta"])] for g in res["by_question_type"]],
                          _subset_note(res.get("subset")))
    return [main, by_type]


def grounded_table(res: Mapping[str, Any]) -> ResultTable:
    """`kbvqa study grounded` (seed 000 Table 3's unfixed / fixed columns): per run, the items whose
    final evidence is the gold entity, with every item that could not count spelled out."""
    rows = [[r["run"], r["n"], r["grounded"], _est(r["recall"]), _cic(r["recall"]), r["missing"], r["failed"],
             r["no_stage"], r["unknown_ids"]] for r in res["runs"]]
    notes = [f"denominator: the {res['n_references']} reference ids of {Path(res['references']).name}; a missing "
             "or failed prediction, or one without the stage, counts as not grounded",
             f"grounded in every run: {res['n_grounded_in_all']} items (the shared grounded subset)", _boot_note(res)]
    return ResultTable("grounded", f"post-retrieval recall (stage {res['stage']})", res["scorer"],
                       ["run", "n", "grounded", "recall %", "95% CI", "missing", "failed", "no stage",
                        "unknown ids"], rows, notes)


def modification_rates_table(res: Mapping[str, Any]) -> ResultTable:
    """`kbvqa study modification-rates` (seed 000 Table 6 shape): per dataset and question type, the
    share dropped, and of the kept items the share whose question / answer the audit modified; the
    change kinds and tags as counts."""

    def tags(t: Mapping[str, Any]) -> str:
        return ", ".join(f"{k} {v['n']} ({v['pct']:.1f}%)" for k, v in t.items()) or "-"

    rows = [[r["dataset"], r["question_type"], r["n"], r["dropped"], _est(r["dropped_pct"]), _cic(r["dropped_pct"]),
             r["not_finished"], r["kept"], _est(r["question_pct"]), _cic(r["question_pct"]), _est(r["answer_pct"]),
             _cic(r["answer_pct"]), f"{r['question_only']} / {r['answer_only']} / {r['both']} / {r['neither']}",
             tags(r["tags"])] for r in res["rows"]]
    b = Path(res["b"]).name if res.get("b") else "(audit.question_before / answers_before)"
    notes = [f"denominators: {res['denominators']}", f"tags from {res.get('tags_from', 'audit.tags')}",
             f"{res['n_a']} items in A, {res['n_joined']} joined with B; only in B (added): {res['only_in_b']['count']}",
             _boot_note(res)]
    return ResultTable("modification-rates", f"modification rates: {Path(res['a']).name} → {b}", res["scorer"],
                       ["dataset", "question type", "n", "dropped", "dropped %", "95% CI dropped", "not finished",
                        "kept", "questions modified %", "95% CI questions", "answers modified %", "95% CI answers",
                        "Q only / A only / both / neither", "tags"], rows, notes)


def variant_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa study variants`: QA accuracy per augmentation variant and question type with the paired
    change against the anchor (seed 000 Table 4 shape), then post-retrieval recall per variant from
    the same predictions' trails (Table 3 shape)."""
    types = res["types"]

    def typed(r: Mapping[str, Any], t: str) -> str:
        c = r["by_type"][t]
        return f"{c['accuracy']['estimate']:.1f} (n={c['n']})" if c["accuracy"] else f"n/a (n={c['n']})"

    def vs(r: Mapping[str, Any]) -> list[Any]:
        v = r.get("vs_anchor")
        return [None, "", None] if not v else [_est(v["delta"]), _cic(v["delta"]), v["n"]]

    acc = res["accounting"]
    notes = [f"{acc['n']} reference items; missing predictions count as wrong ({acc['n_missing']}); unknown "
             f"prediction ids ignored: {acc['n_unknown_ids']}", f"delta = {res['delta']}", _boot_note(res)]
    main = ResultTable("variant-accuracy", f"{res['method']}: QA accuracy per augmentation variant", res["scorer"],
                       ["variant", "n", "correct", "accuracy %", "95% CI", *(f"{t} %" for t in types),
                        "Δ vs anchor", "Δ 95% CI", "paired n"],
                       [[r["variant"], r["n"], r["correct"], _est(r["accuracy"]), _cic(r["accuracy"]),
                         *(typed(r, t) for t in types), *vs(r)] for r in res["variants"]], notes)
    tables = [main]
    if res.get("recall"):
        ri = res["recall_info"]
        tables.append(ResultTable(
            "variant-recall", f"{res['method']}: post-retrieval recall per variant",
            f"post-retrieval recall: {ri['rule']} (canonical URLs)",
            ["variant", "n", "grounded", "recall %", "95% CI", "Δ vs anchor", "Δ 95% CI", "paired n"],
            [[r["variant"], r["n"], r["grounded"], _est(r["recall"]), _cic(r["recall"]), *vs(r)] for r in res["recall"]],
            [f"of {ri['n']} reference items: missing {ri['missing']}, failed {ri['failed']}, without the stage "
             f"{ri['no_stage']} (all counted as not grounded)", _boot_note(res)]))
    return tables


def buckets_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa study buckets`: the patterns of which runs answer an item correctly, with counts,
    shares and example ids; with a second split its patterns and the items whose pattern changed."""
    names = res["methods"]
    acc = {a["method"]: a for a in res["accuracy"]}

    def table(name: str, split: str, buckets: Sequence[Mapping[str, Any]], n: int,
              accuracy: Mapping[str, Any]) -> ResultTable:
        listed = "every pattern" if res["all_patterns_listed"] else \
            f"the patterns that occur ({sum(b['count'] > 0 for b in buckets)} of {res['n_patterns']})"
        notes = [f"{n} items (denominator of %); {listed}",
                 "accuracy: " + "; ".join(f"{m} {_est(a['accuracy']) or 0:.1f}% [{a['correct']}/{n}]"
                                          for m, a in accuracy.items()), *_subset_note(res.get("subset")),
                 _boot_note(res)]
        what = f"across the variants of {', '.join(res['variants_of'])}" if res.get("variants_of") else \
            f"across {len(names)} runs"
        return ResultTable(name, f"correctness buckets {what}" + (f" on {split}" if len(res["splits"]) > 1 else ""),
                           res["scorer"],
                           [*names, "count", "%", "95% CI", "by type", "examples"],
                           [[*("✓" if x else "✗" for x in b["pattern"]), b["count"], _est(b["share"]),
                             _cic(b["share"]), ", ".join(f"{k} {v}" for k, v in b["by_type"].items()),
                             " ".join(b["examples"])] for b in buckets], notes)

    tables = [table("buckets", res["splits"][0], res["buckets"], res["n"], acc)]
    if res.get("buckets_b") is not None:
        a, b = res["splits"]
        tables.append(table("buckets-b", b, res["buckets_b"], res["n_b"], {x["method"]: x for x in res["accuracy_b"]}))
        p = res["pairing"]
        tables.append(ResultTable(
            "buckets-transitions", f"items whose pattern changed from {a} to {b}", res["scorer"],
            ["on " + a, "on " + b, "count", "examples"],
            [[t["from"], t["to"], t["count"], " ".join(t["examples"])] for t in res["transitions"]],
            [f"{p['n_changed']} of {p['n_paired']} paired items changed pattern; only on {a}: {p['n_only_a']}, only "
             f"on {b}: {p['n_only_b']}"]))
    return tables


def study_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """Every table of a study result, headline first (`study_table` gives the headline alone): what
    a page embedding a study (the demo's report) shows."""
    multi = {"fix-kinds": fix_kinds_tables, "variant-accuracy": variant_tables, "correctness-buckets": buckets_tables,
             "agent-tools": agent_tools_tables, "image-ablation": image_ablation_tables}
    kind = res.get("kind")
    return multi[kind](res) if kind in multi else [study_table(res)]
