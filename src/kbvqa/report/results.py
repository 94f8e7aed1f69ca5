"""Turn study and score JSON files into a results folder: tables (md/csv/tex), PNG plots, index.html.

Inputs are the JSON files kbvqa writes:

* ``*.study.json`` from ``kbvqa study`` (kind ``by-group``, ``compare``, ``retrieval-2x2``, ``agent-tools``
  , ``agent-failures``, ``image-ablation``, ``fix-kinds``, ``grounded``, ``modification-rates``,
  ``variant-accuracy`` or ``correctness-buckets``); IVR-12 summaries (``*.summary.json``, kind ``ivr12``) and
  comparisons (kind ``ivr12-compare``);
* ``*.retrieval.json``: the ``kbvqa score retrieval --json`` output (Recall@K per stage);
* a curation funnel (``kbvqa curate`` OUT/funnel.json), passed with ``--input``;
* any other ``kbvqa score ... --json`` summary passed explicitly (one row per file in a scores table).

Layout written under OUT: ``tables/NAME.{md,csv,tex}``, ``plots/NAME.png``, ``report.md`` (all
markdown tables with image links) and ``index.html`` (report/html.py). Every table caption and plot
title names the scorer.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbvqa.report import plots
from kbvqa.report.compare import upgrade_judge_summary
from kbvqa.report.html import Figure, Table, render_page
from kbvqa.report.summaries import (agent_failures_table, agent_tools_tables, buckets_tables, curation_funnel_table,
                                     fix_kinds_tables, grounded_table, image_ablation_tables, ivr12_compare_table, ivr12_tables,
                                     judged_note, modification_rates_table, recall_by_variant_table, ungraded_note,
                                     variant_tables)
from kbvqa.report.tables import ResultTable, md_escape, to_markdown, write_table
from kbvqa.units import percent

__all__ = ["ReportOutput", "collect_inputs", "build_report"]

_WIDE_FIGS = "<style>figure img{max-height:none;max-width:100%;width:520px}figcaption{max-width:520px}</style>"


@dataclass
class ReportOutput:
    out_dir: Path
    tables: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    html: Path | None = None
    markdown: Path | None = None
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Section:
    heading: str
    notes: list[str]
    tables: list[ResultTable]
    figures: list[tuple[str, str]]  # (relative png path, caption)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def collect_inputs(results_dir: str | Path) -> list[Path]:
    """The study, retrieval and IVR-12 JSON files directly inside a results folder, sorted by name
    (`*.summary.json` files other than IVR-12's are passed over: build_report lists them as skipped)."""
    d = Path(results_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory")
    return sorted([*d.glob("*.study.json"), *d.glob("*.retrieval.json"), *d.glob("*.summary.json"),
                   *d.glob("*.compare.json")])


def _ci(c: dict[str, float]) -> str:
    return f"[{c['low']:.2f}, {c['high']:.2f}]"


def _by_group(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    scorer = obj["scorer"]
    by = obj.get("by", "group")
    method = obj.get("method") or "predictions"
    judged = bool(obj.get("judged"))  # judge verdicts: graded / invalid / error beside every accuracy
    # judge verdicts: seed 001's accuracy over all responses beside kbvqa's over graded verdicts
    extra = (lambda g: [g["n_graded"], g["n_invalid"], g["n_error"], g.get("accuracy_all")]) if judged else (
        lambda g: [])
    rows = [[g["group"], g["n"], *extra(g), g["correct"], g["n_missing"], g["accuracy"], g["ci_low"], g["ci_high"]]
            for g in obj["groups"]]
    o = obj["overall"]
    rows.append(["all", o["n"], *extra(o), o["correct"], obj["accounting"]["n_missing"], o["estimate"], o["low"],
                 o["high"]])
    b = obj["bootstrap"]
    notes = [f"{b['method']}, {b['n_resamples']} resamples, seed {b['seed']}; missing predictions count as wrong"
             + ("; accuracy (all) = correct / all responses (seed 001's definition: invalid replies and failed "
                "judge calls count as responses not correct); accuracy (graded) is over graded verdicts, with "
                "invalid replies and failed judge calls excluded and counted apart (kbvqa's); the CI is the "
                "graded accuracy's" if judged else ""),
             f"unknown prediction ids ignored: {obj['accounting']['n_unknown_ids']}; duplicate predictions: "
             f"{obj['accounting']['n_duplicate_predictions']} (last wins)"]
    if obj.get("n_unlabelled"):
        notes.append(f"{obj['n_unlabelled']} items have no '{by}' value (group '(none)')")
    t = ResultTable(stem, f"Accuracy by {by} – {method}", scorer,
                    [by, "n", *(["graded", "invalid", "error", "accuracy (all) (%)"] if judged else []), "correct",
                     "missing", "accuracy (graded) (%)" if judged else "accuracy (%)", "CI low", "CI high"], rows, notes)
    nan = float("nan")  # a group without a graded item has no accuracy: no bar
    png = plots.plot_group_bars([g["group"] for g in obj["groups"]],
                                {method: [tuple(nan if g[k] is None else g[k]
                                                for k in ("accuracy", "ci_low", "ci_high")) for g in obj["groups"]]},
                                plot_dir / f"{stem}.png", title=f"Accuracy by {by} – {method}", scorer=scorer)
    return _Section(f"Accuracy by {by}: {method}", [], [t], [(png.name, f"accuracy by {by}, {scorer}")])


def _compare(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    scorer = obj["scorer"]
    a, b = obj["splits"]
    rows = [[m["method"], m["accuracy_a"], _ci(m["ci_a"]), m["accuracy_b"], _ci(m["ci_b"]), m["delta"],
             _ci(m["delta_ci"]), m["rank_a"], m["rank_b"], m["gained"], m["lost"], f"{m['mcnemar_p']:.3g}"]
            for m in obj["methods"]]
    bt = obj["bootstrap"]
    t1 = ResultTable(f"{stem}-methods", f"Per-method accuracy on {a} vs {b}", scorer,
                     ["method", f"acc {a}", f"95% CI {a}", f"acc {b}", f"95% CI {b}", "delta", "delta 95% CI",
                      f"rank {a}", f"rank {b}", "gained", "lost", "McNemar p"], rows,
                     [f"delta = {obj['delta']}; {bt['method']}, {bt['n_resamples']} resamples, seed {bt['seed']}",
                      *judged_note(obj),
                      *(f"{m['method']}: graded {m['accounting_a']['n_graded']} / {m['accounting_b']['n_graded']}, "
                        f"invalid {m['accounting_a']['n_invalid']} / {m['accounting_b']['n_invalid']}, error "
                        f"{m['accounting_a']['n_error']} / {m['accounting_b']['n_error']} ({a} / {b})"
                        + (f"; accuracy over all responses {m['accounting_a']['accuracy_all']:.2f}% / "
                           f"{m['accounting_b']['accuracy_all']:.2f}%" if None not in (
                               m['accounting_a'].get('accuracy_all'), m['accounting_b'].get('accuracy_all')) else "")
                        for m in obj["methods"] if obj.get("judged"))],
                     float_digits=2)
    prs = [[p["method_1"], p["method_2"], p["diff_a"], p["diff_b"], p["status"]] for p in obj["pairs"]]
    t2 = ResultTable(f"{stem}-reversals", f"Ranking reversals between {a} and {b} ({obj['n_reversals']} reversed pairs)",
                     scorer, ["method 1", "method 2", f"acc diff {a}", f"acc diff {b}", "status"], prs)
    series = {a: [(m["accuracy_a"], m["ci_a"]["low"], m["ci_a"]["high"]) for m in obj["methods"]],
              b: [(m["accuracy_b"], m["ci_b"]["low"], m["ci_b"]["high"]) for m in obj["methods"]]}
    names = [m["method"] for m in obj["methods"]]
    p1 = plots.plot_group_bars(names, series, plot_dir / f"{stem}-accuracy.png",
                               title=f"Accuracy per method, {a} vs {b}", scorer=scorer)
    rev = {p[k] for p in obj["pairs"] if p["status"] == "reversed" for k in ("method_1", "method_2")}
    p2 = plots.plot_rank_changes({m["method"]: m["rank_a"] for m in obj["methods"]},
                                 {m["method"]: m["rank_b"] for m in obj["methods"]},
                                 plot_dir / f"{stem}-ranks.png", labels=(a, b), scorer=scorer, reversed_methods=rev)
    return _Section(f"Comparison: {a} vs {b}", [], [t1, t2],
                    [(p1.name, f"accuracy with 95% CIs, {scorer}"), (p2.name, f"rank changes {a} → {b}")])


_CELLS = ("both_correct", "only_with", "only_without", "neither")


def _two_by_two(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    scorer = obj["scorer"]
    o = obj["overall"]
    bytype = obj.get("by_question_type") or {}
    cols = ["outcome", "count", "%"] + [f"{t} (%)" for t in bytype]
    rows = [[c.replace("_", " "), o[c], o[f"{c}_pct"], *[bytype[t][f"{c}_pct"] for t in bytype]] for c in _CELLS]
    rows.append(["n", o["n"], 100.0, *[float(bytype[t]["n"]) for t in bytype]])
    g = obj["gain"]
    t = ResultTable(stem, f"Outcomes with ({obj['with']}) vs without ({obj['without']}) retrieval", scorer, cols, rows,
                    [f"accuracy with {obj['accuracy_with']:.2f}%, without {obj['accuracy_without']:.2f}%; "
                     f"gain {g['estimate']:.2f} points, 95% CI [{g['low']:.2f}, {g['high']:.2f}]; "
                     f"exact McNemar p = {obj['mcnemar_p']:.4g}", *ungraded_note(obj)])
    png = plots.plot_group_bars([c.replace("_", " ") for c in _CELLS],
                                {"all": [(o[f"{c}_pct"],) * 3 for c in _CELLS]}, plot_dir / f"{stem}.png",
                                title="With vs without retrieval", scorer=scorer, ylabel="% of items",
                                error_bars=False)
    return _Section("With vs without retrieval (2×2)", [], [t], [(png.name, f"2×2 outcome groups, {scorer}")])


def _retrieval(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    ks = [int(k) for k in obj.get("ks", [])]
    scorer = f"kbvqa retrieval metrics (canonical URLs, de-duplicated; two_hop={obj.get('two_hop', 'any')})"
    rows, curves = [], {}
    for stage, m in obj["stages"].items():
        rec = {int(str(k).lstrip("@")): float(v) for k, v in m["recall"].items()}
        ks = ks or sorted(rec)
        rows.append([stage, *[100.0 * rec[k] for k in ks], m.get("mrr"), m.get("n_missing")])
        curves[stage] = {k: 100.0 * v for k, v in rec.items()}
    t = ResultTable(stem, "Retrieval Recall@K (%) and MRR", scorer,
                    ["stage", *[f"R@{k}" for k in ks], "MRR", "missing records"], rows, float_digits=2)
    png = plots.plot_recall_at_k(curves, plot_dir / f"{stem}.png", scorer=scorer)
    return _Section(f"Retrieval: {stem}", [], [t], [(png.name, "Recall@K per stage")])


def _augmentation_recall(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    t = recall_by_variant_table(obj["rows"], stage=obj.get("stage", "initial"))
    t.name = stem
    return _Section("Augmentation: Recall@K per variant", [], [t], [])


def _scores_table(files: list[Path]) -> ResultTable:
    rows = []
    judged = False
    for f in files:
        s = json.loads(f.read_text(encoding="utf-8"))
        scorer = s.get("scorer") or (f"infoseek-{s['mode']}" if "mode" in s else
                                     ("infoseek-official" if "final_score" in s else "unknown"))
        main, graded = s.get("accuracy", s.get("final_score")), None
        # a judge summary: accuracy over all responses and over graded verdicts, graded / invalid / error beside
        if "n_graded" in s:
            now = upgrade_judge_summary(s)  # a summary written when `accuracy` was correct / graded: renamed
            main = percent(now.get("accuracy"), fraction=True)  # the judge's are fractions
            graded = percent(now.get("accuracy_graded"), fraction=True)
        ungraded = [s.get("n_graded"), s.get("n_invalid"), s.get("n_error")] if "n_graded" in s else [None] * 3
        judged = judged or "n_graded" in s
        rows.append([f.stem, scorer, main, graded, s.get("n"), *ungraded, s.get("coverage")])
    notes = ["judge summaries: accuracy = correct / all responses (seed 001's definition; missing predictions, "
             "invalid and failed verdicts count as not correct); accuracy (graded) = correct / graded, invalid and "
             "error verdicts excluded and counted apart (kbvqa's); SimpleQA's rates over all n are in the summary "
             "file"] if judged else []
    return ResultTable("scores", "Score summaries", "per row (see the scorer column)",
                       ["file", "scorer", "accuracy / final score (%)", "accuracy (graded) (%)", "n", "graded",
                        "invalid", "error", "coverage"], rows, notes)


def _image_ablation(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    kinds, conds = obj["kinds"], obj["conditions"]
    series = {c: [tuple(obj["by_kind"][k][c]["ci"][x] for x in ("estimate", "low", "high"))
                  if obj["by_kind"][k][c]["ci"] else (float("nan"),) * 3 for k in kinds] for c in conds}
    png = plots.plot_group_bars(kinds, series, plot_dir / f"{stem}.png", title="Reader accuracy under image ablation",
                                scorer=obj["scorer"])
    return _Section("Image ablation of interleaved references", [], image_ablation_tables(obj),
                    [(png.name, f"accuracy per condition with cluster-bootstrap 95% CIs, {obj['scorer']}")])


def _ci_of(d: dict[str, Any], prefix: str = "") -> tuple[float | None, float | None]:
    """A figure's CI as an IVR-12 summary or comparison may carry it ({prefix}ci: {low, high}, or
    {prefix}ci_low / {prefix}ci_high); (None, None) where it has none."""
    ci = d.get(f"{prefix}ci")
    if isinstance(ci, dict):
        return ci.get("low"), ci.get("high")
    return d.get(f"{prefix}ci_low"), d.get(f"{prefix}ci_high")


def ivr12_plot(obj: dict[str, Any], path: Path) -> tuple[Path, str]:
    """IVR-12 per dimension from a summary (kind ivr12: one side) or a comparison (kind ivr12-compare:
    A vs B, e.g. references vs answers), with CIs where the file has them; no bar where a side has no
    mean, rule measures marked."""
    if obj.get("kind") == "ivr12-compare":
        rows = [r for r in obj["rows"] if r["level"] == "dimension"]
        a, b = obj["names"]
        dims = [(r["title"], "rule" in (r.get("measured_by_a"), r.get("measured_by_b"))) for r in rows]
        series = {a: [(r["a"], *_ci_of(r, "a_")) for r in rows], b: [(r["b"], *_ci_of(r, "b_")) for r in rows]}
        title = f"IVR-12 per dimension: {a} vs {b}"
    else:
        dims_ = obj["dimensions"]
        dims = [(d.get("title", k), d.get("measured_by") == "rule") for k, d in dims_.items()]
        series = {obj.get("source") or "predictions": [(d.get("mean"), *_ci_of(d)) for d in dims_.values()]}
        title = f"IVR-12 per dimension ({obj.get('source') or 'predictions'}, {obj.get('mode')} mode)"
    png = plots.plot_ivr12_dimensions(dims, series, path, title=title, scorer=obj["scorer"])
    return png, "IVR-12 mean per dimension (1-5); hatched bars are rule measures, n/a marks a dimension without a score"


def agent_tools_plots(obj: dict[str, Any], plot_dir: Path, stem: str) -> list[tuple[Path, str]]:
    """Tool calls per episode per tool (seed 001 Table 4 shape): by judged outcome (correct /
    non-correct) when the study had verdicts, by with/without-retrieval group when it had a baseline's,
    over all episodes otherwise."""
    tools = list(obj["calls_per_episode"])
    figs = []
    by = obj.get("calls_by_outcome") or {}
    if by:
        series = {f"{g.replace('_', ' ')} (n={v['n']})": [(v[t],) * 3 for t in tools] for g, v in by.items()}
        what = "by judged outcome"
    else:
        series = {f"all episodes (n={obj['n']})": [(v,) * 3 for v in obj["calls_per_episode"].values()]}
        what = "over all episodes (no judge verdicts)"
    png = plots.plot_group_bars(tools, series, plot_dir / f"{stem}-calls.png", title=f"Tool calls per episode {what}",
                                scorer=obj["scorer"], ylabel="calls per episode", error_bars=False)
    figs.append((png, f"tool calls per episode per tool {what}, {obj['scorer']}"))
    if obj.get("paired"):
        groups = obj["paired"]["groups"]
        series = {f"{g['label']} (n={g['n']})": [(g["calls_per_episode"][t],) * 3 for t in tools] for g in groups}
        png = plots.plot_group_bars(tools, series, plot_dir / f"{stem}-calls-2x2.png",
                                    title="Tool calls per episode by with/without-retrieval group",
                                    scorer=obj["scorer"], ylabel="calls per episode", error_bars=False)
        figs.append((png, f"tool calls per episode per with/without-retrieval group (Table 4 shape), {obj['scorer']}"))
    return figs


def is_curation_funnel(obj: Any) -> bool:
    """A curation funnel (`kbvqa curate` OUT/funnel.json): intake, a list of stages and the output."""
    return isinstance(obj, dict) and isinstance(obj.get("stages"), list) and "intake" in obj and "output" in obj


def funnel_plot(obj: dict[str, Any], path: Path) -> tuple[Path, str]:
    """The curation funnel: posts in, then the items left after each stage that saw any."""
    stages = [(st["stage"], st.get("kept", 0), sum((st.get("dropped") or {}).values()),
               sum((st.get("stopped") or {}).values())) for st in obj["stages"] if st.get("in")]
    png = plots.plot_funnel(stages, path, start=("posts in", obj["intake"].get("posts", 0)),
                            title="Curation funnel: items left after each stage (stages no item reached are left out)")
    return png, "curation funnel: posts in, items kept per stage, dropped and stopped beside each bar"


def _ivr12(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    png, cap = ivr12_plot(obj, plot_dir / f"{stem}.png")
    return _Section(f"IVR-12: {stem}", [], ivr12_tables(obj), [(png.name, cap)])


def _ivr12_compare(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    png, cap = ivr12_plot(obj, plot_dir / f"{stem}.png")
    return _Section("IVR-12: references vs model outputs", [], [ivr12_compare_table(obj)], [(png.name, cap)])


def _agent_tools(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    return _Section("Search agent: tool usage", [], agent_tools_tables(obj),
                    [(p.name, cap) for p, cap in agent_tools_plots(obj, plot_dir, stem)])


def _curation_funnel(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    png, cap = funnel_plot(obj, plot_dir / f"{stem}.png")
    return _Section("Curation funnel", [], _under(stem, [curation_funnel_table(obj)]), [(png.name, cap)])


def _agent_failures(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    return _Section("Search agent: failure categories", [], [agent_failures_table(obj)], [])


def _under(stem: str, tables: list[ResultTable]) -> list[ResultTable]:
    """Tables named after their study file (`fix-kinds-m-grounded`, `fix-kinds-m-grounded-by-type`), so
    two studies of one kind (two methods, a run and its grounded subset) never overwrite each other."""
    base = tables[0].name
    return [dataclasses.replace(t, name=stem if i == 0 else stem + t.name.removeprefix(base)
                                if t.name.startswith(base) else f"{stem}-{t.name}") for i, t in enumerate(tables)]


def _ci3(c: dict[str, float] | None) -> tuple[float, float, float]:
    return (c["estimate"], c["low"], c["high"]) if c else (float("nan"),) * 3


def _fix_kinds(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    groups = [g for g in obj["groups"] if g["n"]]
    png = plots.plot_group_bars([f"{g['kind'].replace('_', ' ')} (n={g['n']})" for g in groups],
                                {"before the fix": [_ci3(g["before"]) for g in groups],
                                 "after the fix": [_ci3(g["after"]) for g in groups]},
                                plot_dir / f"{stem}.png", title=f"Accuracy by fix kind – {obj['method']}",
                                scorer=obj["scorer"])
    where = " (grounded subset)" if obj.get("subset") else ""
    return _Section(f"Accuracy by fix kind: {obj['method']}{where}", [], _under(stem, fix_kinds_tables(obj)),
                    [(png.name, f"accuracy before and after the fix per change kind, {obj['scorer']}")])


def _grounded(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    png = plots.plot_group_bars([r["run"] for r in obj["runs"]], {"recall": [_ci3(r["recall"]) for r in obj["runs"]]},
                                plot_dir / f"{stem}.png", title="Post-retrieval recall", scorer=obj["scorer"],
                                ylabel="grounded items (%)")
    return _Section(f"Post-retrieval recall (stage {obj['stage']})", [], _under(stem, [grounded_table(obj)]),
                    [(png.name, f"share of items whose final evidence is the gold entity, {obj['scorer']}")])


def _modification_rates(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    rows = obj["rows"]
    png = plots.plot_group_bars([r["dataset"] if r["question_type"] == "all" else f"{r['dataset']} {r['question_type']}"
                                 for r in rows],
                                {"questions modified": [_ci3(r["question_pct"]) for r in rows],
                                 "answers modified": [_ci3(r["answer_pct"]) for r in rows],
                                 "dropped": [_ci3(r["dropped_pct"]) for r in rows]},
                                plot_dir / f"{stem}.png", title="Modification rates", scorer=obj["scorer"],
                                ylabel="% of items")
    return _Section("Modification rates (Table 6 shape)", [], _under(stem, [modification_rates_table(obj)]),
                    [(png.name, "questions / answers modified (% of kept items) and dropped (% of items)")])


def _variants(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    names = [v["variant"] for v in obj["variants"]]
    series = {"QA accuracy": [_ci3(v["accuracy"]) for v in obj["variants"]]}
    if obj.get("recall"):
        series["post-retrieval recall"] = [_ci3(r["recall"]) for r in obj["recall"]]
    png = plots.plot_group_bars(names, series, plot_dir / f"{stem}.png",
                                title=f"Augmentation variants – {obj['method']}", scorer=obj["scorer"],
                                ylabel="%")
    return _Section(f"Augmentation variants: {obj['method']} (Tables 3-4 shape)", [], _under(stem, variant_tables(obj)),
                    [(png.name, f"QA accuracy and post-retrieval recall per variant, {obj['scorer']}")])


def _buckets(obj: dict[str, Any], stem: str, plot_dir: Path) -> _Section:
    return _Section(f"Correctness buckets: {', '.join(obj['methods'])}", [], _under(stem, buckets_tables(obj)), [])


_BUILDERS = {"fix-kinds": _fix_kinds, "grounded": _grounded, "modification-rates": _modification_rates,
             "variant-accuracy": _variants, "correctness-buckets": _buckets, "by-group": _by_group, "compare": _compare, "retrieval-2x2": _two_by_two, "agent-tools": _agent_tools,
             "agent-failures": _agent_failures, "image-ablation": _image_ablation, "ivr12": _ivr12,
             "ivr12-compare": _ivr12_compare, "augmentation-recall": _augmentation_recall}


def _load(f: Path) -> Any:
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{f}: not valid JSON ({exc})") from None


def build_report(inputs: list[str | Path], out_dir: str | Path, *, title: str = "kbvqa results",
                 scores: list[str | Path] | None = None) -> ReportOutput:
    """Render every input into tables and plots under out_dir, plus report.md and index.html."""
    out = Path(out_dir)
    tdir, pdir = out / "tables", out / "plots"
    res = ReportOutput(out)
    sections: list[_Section] = []
    used: set[str] = set()
    for f in map(Path, inputs):
        obj = _load(f)
        stem = _slug(f.name.removesuffix(".json").removesuffix(".study").removesuffix(".retrieval"))
        while stem in used:
            stem += "-2"
        used.add(stem)
        if isinstance(obj, dict) and obj.get("kind") in _BUILDERS:
            sections.append(_BUILDERS[obj["kind"]](obj, stem, pdir))
        elif isinstance(obj, dict) and isinstance(obj.get("stages"), dict):
            sections.append(_retrieval(obj, stem, pdir))
        elif is_curation_funnel(obj):
            sections.append(_curation_funnel(obj, stem, pdir))
        else:
            res.skipped.append(f"{f}: not a kbvqa study, retrieval, IVR-12 or curation funnel JSON")
    flat = []
    for f in map(Path, scores or []):  # `score retrieval --json` is a Recall@K table, not one accuracy
        obj = _load(f)
        if isinstance(obj, dict) and isinstance(obj.get("stages"), dict):
            sections.append(_retrieval(obj, _slug(f.stem), pdir))
        elif isinstance(obj, dict):
            flat.append(f)
        else:
            res.skipped.append(f"{f}: not a kbvqa score summary")
    if flat:
        sections.append(_Section("Score summaries", [], [_scores_table(flat)], []))
    if not sections:
        raise ValueError("nothing to report: no *.study.json / *.retrieval.json inputs and no --scores"
                         + "".join(f"; {s}" for s in res.skipped))
    # untrusted text (method, split and group names from the data) never becomes live markdown
    md: list[str] = [f"# {md_escape(title)}", ""]
    blocks: list[tuple[str, Any]] = []
    for sec in sections:
        md += [f"## {md_escape(sec.heading)}", ""]
        blocks.append(("h2", sec.heading))
        for t in sec.tables:
            if len(set(t.columns)) != len(t.columns):
                raise ValueError(f"table {t.name}: duplicate column names {list(t.columns)}")
            paths = write_table(t, tdir)
            res.tables += list(paths.values())
            md.append(to_markdown(t))
            blocks.append(("table", Table([{c: t.fmt(v) for c, v in zip(t.columns, r)} for r in t.rows],
                                          list(t.columns), caption=t.caption)))
            for n in t.notes:
                blocks.append(("note", n))
            blocks.append(("note", "download: " + ", ".join(f"tables/{p.name}" for p in paths.values())))
        if sec.figures:
            figs = []
            for src, cap in sec.figures:
                res.plots.append(pdir / src)
                md.append(f"![{md_escape(cap)}](plots/{src})\n")
                figs.append(Figure(f"plots/{src}", cap))
            blocks.append(("figures", figs))
    for s in res.skipped:
        blocks.append(("note", f"skipped {s}"))
    out.mkdir(parents=True, exist_ok=True)
    res.markdown = out / "report.md"
    res.markdown.write_text("\n".join(md), encoding="utf-8")
    res.html = out / "index.html"
    res.html.write_text(render_page(title, blocks).replace("</head>", _WIDE_FIGS + "</head>", 1), encoding="utf-8")
    return res
