"""The summary tables a job shows when it finishes: studies, audit, augmentation.

Each function turns the JSON-ready result a pipeline or study returned into `ResultTable`s (the one
table type, rendered by report.tables or printed by the command line), with the lines that belong
under the table as its notes. Kept here, not in the commands, so a command only parses flags, calls
one function and prints, and the same rows serve the terminal, markdown and the HTML report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from kbvqa.report.tables import ResultTable

__all__ = ["study_table", "recall_by_variant_table", "audit_summary_table", "audit_diff_table",
           "human_eval_table", "augment_stats_tables", "dataset_stats_table", "kb_stats_table", "kb_hits_table"]


def _ci(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]"


def study_table(res: Mapping[str, Any]) -> ResultTable:
    """The headline table of a `kbvqa study` result (by-group, compare or retrieval-2x2)."""
    kind = res.get("kind")
    if kind == "by-group":
        by = res["by"]
        rows: list[list[Any]] = [[g["group"], g["n"], g["accuracy"], _ci(g["ci_low"], g["ci_high"])]
                                 for g in res["groups"]]
        o = res["overall"]
        rows.append(["all", o["n"], o["estimate"], _ci(o["low"], o["high"])])
        return ResultTable("by-group", f"{res['method']}: accuracy by {by}", res["scorer"],
                           [by, "n", "accuracy %", "95% CI"], rows)
    if kind == "compare":
        a, b = res["splits"]
        rows = [[m["method"], m["accuracy_a"], m["accuracy_b"], m["delta"],
                 _ci(m["delta_ci"]["low"], m["delta_ci"]["high"]), m["rank_a"], m["rank_b"]] for m in res["methods"]]
        notes = [f"reversal: {p['method_1']} vs {p['method_2']} ({a}: {p['diff_a']:+.2f}, {b}: {p['diff_b']:+.2f})"
                 for p in res["pairs"] if p["status"] == "reversed"]
        return ResultTable("compare", f"{a} vs {b}", res["scorer"],
                           ["method", f"acc {a}", f"acc {b}", "delta", "95% CI", f"rank {a}", f"rank {b}"], rows, notes)
    if kind == "retrieval-2x2":
        o, g = res["overall"], res["gain"]
        rows = [[k.replace("_", " "), o[k], o[f"{k}_pct"]]
                for k in ("both_correct", "only_with", "only_without", "neither")]
        notes = [f"gain {g['estimate']:+.2f} points, 95% CI [{g['low']:.2f}, {g['high']:.2f}]; "
                 f"exact McNemar p = {res['mcnemar_p']:.4g}"]
        return ResultTable("retrieval-2x2", f"with vs without retrieval (n={o['n']})", res["scorer"],
                           ["outcome", "count", "%"], rows, notes)
    if kind == "agent-tools":
        return agent_tools_tables(res)[0]
    if kind == "agent-failures":
        return agent_failures_table(res)
    raise ValueError(f"not a study result (kind {kind!r})")


def agent_tools_tables(res: Mapping[str, Any]) -> list[ResultTable]:
    """`kbvqa study agent-tools` (seed 001 Table 4 shape): tool calls per episode — overall and, with
    judge verdicts, for correct and incorrect episodes — with the useful-evidence hit rates, then how
    the episodes ended."""
    by = res.get("calls_by_outcome") or {}
    hit = res["hit_rate"]
    cols = ["tool", "calls / episode", *(f"{g} (n={by[g]['n']})" for g in by), "hit rate, calls", "calls",
            "hit rate, results", "results"]
    rows = [[t, v, *(by[g][t] for g in by), hit.get(t, {}).get("call_rate", "-"), hit.get(t, {}).get("calls", "-"),
             hit.get(t, {}).get("item_rate", "-"), hit.get(t, {}).get("items", "-")]
            for t, v in res["calls_per_episode"].items()]
    tags = res["tags"]
    notes = [f"image tags: {tags['valid']} of {tags['total']} valid; violations {tags['violations'] or 'none'}",
             f"leakage: {res['leak']['steps']} steps in {res['leak']['episodes']} episodes showed a reference answer",
             res.get("note", "")]
    usage = ResultTable("agent-tools", f"agent tool usage ({res['n']} episodes)", res["scorer"], cols, rows,
                        [n for n in notes if n])
    ends = ResultTable("agent-terminations", "how the episodes ended", res["scorer"], ["termination", "episodes"],
                       [[k, v] for k, v in res["terminations"].items()])
    return [usage, ends]


def agent_failures_table(res: Mapping[str, Any]) -> ResultTable:
    """`kbvqa study agent-failures` (seed 001 Table 5 shape): judge-assigned categories of the
    incorrect episodes; invalid and error verdicts are counted, not dropped."""
    rows = [[r["category"], r["n"], 100.0 * r["share"]] for r in res["rows"]]
    notes = [f"{res['categorised']} of {res['n']} episodes categorised; invalid {res['invalid']}, error "
             f"{res['error']}; tool-related {res['tool_related']}, non-tool {res['non_tool']}"]
    return ResultTable("agent-failures", "failure categories of incorrect agent episodes",
                       res.get("judge", "judge"), ["category", "episodes", "% of categorised"], rows, notes)


def recall_by_variant_table(rows: Sequence[dict[str, Any]], *, stage: str = "initial") -> ResultTable:
    """Recall@K per augmentation variant (the rows of evaluate.augmentation), numbers as computed."""
    return ResultTable.from_dicts(rows, name="augmentation-recall",
                                  title=f"Recall@K per augmentation variant (retrieval stage {stage!r})",
                                  scorer="kbvqa retrieval metrics (canonical URLs, de-duplicated)")


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
        return [name, v["n"], *(f"{p[k]:.1f}" for k in ("question_only", "answer_only", "both", "neither"))]

    rows = [row("all", d), *(row(f"– {k}", v) for k, v in d["by_question_type"].items()),
            *(row(f"tag {k}", v) for k, v in d["by_tag"].items())]
    notes = [f"only in A: {d['only_in_a']['count']}  only in B: {d['only_in_b']['count']}"]
    notes += [f"[{cat}] {r['id']}: {r['question_a']!r} → {r['question_b']!r}; {r['answers_a']} → {r['answers_b']}"
              for cat, rs in d["examples"].items() for r in rs]
    a, b = Path(d["a"]).name, Path(d["b"]).name
    return ResultTable("audit-diff", f"{a} → {b}: {d['joined']} joined on id (% of rows)", "",
                       ["slice", "n", "Q only", "A only", "both", "neither"], rows, notes)


def human_eval_table(res: Mapping[str, Any]) -> ResultTable:
    """Per-annotator accuracy against the audit; mean ± std, pairwise and Fleiss' kappa as notes."""
    rows = [[n, v["annotated"], v["accuracy"], v["judged_valid"], v["answer_accuracy"]]
            for n, v in res["annotators"].items()]
    notes = []
    acc = res["accuracy"]
    if acc["mean"] is not None:
        notes.append(f"accuracy {100 * acc['mean']:.1f} ± {100 * acc['std']:.1f}")
    notes += [f"{p}: agreement {v['agreement']}, Cohen's kappa {v['cohen_kappa']} ({v['items']} items)"
              for p, v in res["pairwise"].items()]
    notes.append(f"Fleiss' kappa {res['fleiss_kappa']} over {res['items_rated_by_all']} items")
    return ResultTable("human-eval", f"human evaluation ({res['items_in_key']} items)", "",
                       ["annotator", "annotated", "accuracy", "judged valid", "answer accuracy"], rows, notes,
                       float_digits=None)


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
