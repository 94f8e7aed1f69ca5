"""`kbvqa audit` commands: audit and repair a benchmark against its KB (rules backend by default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True)


def _print_summary(summary: dict, console: Console) -> None:
    table = Table(title=f"audit: {summary['total']} samples")
    table.add_column("question type")
    table.add_column("n", justify="right")
    labels = ["supported", "mismatched", "unsupported", "invalid"]
    actions = ["keep", "repair", "drop"]
    for c in labels + actions:
        table.add_column(c, justify="right")
    rows = dict(summary["by_question_type"])
    rows["all"] = {"total": summary["total"], "answer_support": summary["answer_support"],
                   "action": summary["action"]}
    for qt, v in rows.items():
        table.add_row(qt, str(v["total"]), *[str(v["answer_support"].get(x, 0)) for x in labels],
                      *[str(v["action"].get(x, 0)) for x in actions])
    console.print(table)
    if summary.get("tags"):
        console.print("tags: " + ", ".join(f"{k} {v}" for k, v in summary["tags"].items()))


@app.command("run")
def run_cmd(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Benchmark file (InfoSeek, E-VQA, ARA CSV, kbvqa JSONL)."),
    kb: Path = typer.Option(..., "--kb", exists=True, dir_okay=False, help="KB: SQLite store or wiki JSON (imported on the fly)."),
    fmt: Optional[str] = typer.Option(None, "--from", help="Input format (default: detected)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Audited JSONL (default: INPUT.audit.jsonl)."),
    config: Optional[Path] = typer.Option(None, "--config", exists=True, dir_okay=False, help="audit.toml"),
    limit: Optional[int] = typer.Option(None, "--limit", min=0),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
    resume: bool = typer.Option(True, "--resume/--no-resume"),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip malformed input rows (counted) instead of stopping."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible server URL: fills the verifier, "
                                      "repairer and checker roles with one model (needs --model)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on the --llm server."),
    llm_concurrency: Optional[int] = typer.Option(None, "--llm-concurrency", min=1,
                                                  help="Requests in flight to --llm (default: --concurrency)."),
) -> None:
    """Audit INPUT against KB: verify, derive/correct answers, tag/repair questions, check leaks.

    Rules only by default. Model roles come from [models.verifier|repairer|checker] in --config, or
    from --llm URL --model NAME (one model in all three roles); the model stages then run after the
    rules pass on what the rules leave open."""
    import asyncio

    from kbvqa.kb.store import open_kb
    from kbvqa.pipelines.audit import AuditConfig, audit_file, close_roles, load_audit_roles

    cfg = AuditConfig.from_toml(config) if config else AuditConfig()
    roles = load_audit_roles(config, llm=llm, model=model, concurrency=llm_concurrency or concurrency)
    out = out or input.with_name(input.stem + ".audit.jsonl")
    try:
        summary = audit_file(input, open_kb(kb), out, cfg, fmt=fmt, concurrency=concurrency, resume=resume,
                             limit=limit, progress=not as_json, skip_invalid=skip_invalid, roles=roles)
    finally:
        asyncio.run(close_roles(roles))
    if as_json:
        typer.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    console = Console()
    _print_summary(summary, console)
    r = summary["run"]
    console.print(f"wrote {r['out']} (ok {r['ok']}, error {r['error']}, invalid {r['invalid']}, "
                  f"skipped {r['skipped']}) and {summary['summary_path']}")


@app.command("summary")
def summary_cmd(results: Path = typer.Argument(..., exists=True, dir_okay=False, help="Audited JSONL.")) -> None:
    """Recount an audited JSONL (labels and actions by question type)."""
    from kbvqa.pipelines.audit import audit_summary
    from kbvqa.runner import read_results

    _print_summary(audit_summary(read_results(results)), Console())


def _pct_row(name: str, v: dict) -> list[str]:
    p = v["pct"]
    return [name, str(v["n"]), f"{p['question_only']:.1f}", f"{p['answer_only']:.1f}", f"{p['both']:.1f}",
            f"{p['neither']:.1f}"]


@app.command("diff")
def diff_cmd(
    a: Path = typer.Argument(..., exists=True, dir_okay=False, help="Version A (before), any input format."),
    b: Path = typer.Argument(..., exists=True, dir_okay=False, help="Version B (after), any input format."),
    fmt_a: Optional[str] = typer.Option(None, "--from-a"),
    fmt_b: Optional[str] = typer.Option(None, "--from-b"),
    examples: int = typer.Option(3, "--examples", min=0, help="Example rows per change kind."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Compare two aligned versions (joined on id): question/answer changes by type and audit tag.

    Changed = different after case/space/punctuation normalisation; answers as sets of `|` alternatives."""
    from kbvqa.pipelines.audit_tools import diff_versions

    d = diff_versions(a, b, fmt_a=fmt_a, fmt_b=fmt_b, examples=examples)
    if as_json:
        typer.echo(json.dumps(d, indent=2, ensure_ascii=False))
        return
    console = Console()
    t = Table(title=f"{a.name} → {b.name}: {d['joined']} joined on id (% of rows)")
    for c in ("slice", "n", "Q only", "A only", "both", "neither"):
        t.add_column(c, justify="left" if c == "slice" else "right")
    t.add_row(*_pct_row("all", d))
    for k, v in d["by_question_type"].items():
        t.add_row(*_pct_row(f"– {k}", v))
    for k, v in d["by_tag"].items():
        t.add_row(*_pct_row(f"tag {k}", v))
    console.print(t)
    console.print(f"only in A: {d['only_in_a']['count']}  only in B: {d['only_in_b']['count']}")
    for cat, rows in d["examples"].items():
        for r in rows:
            console.print(f"[{cat}] {r['id']}: {r['question_a']!r} → {r['question_b']!r}; "
                          f"{r['answers_a']} → {r['answers_b']}", markup=False, highlight=False)


@app.command("subset")
def subset_cmd(
    input: Path = typer.Argument(..., exists=True, dir_okay=False),
    out: Path = typer.Option(..., "--out", help="Output (kbvqa JSONL; audited records keep their audit)."),
    key: str = typer.Option("entity,question", "--key", help="Grouping key: entity, question, answer."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random pick per group (default: smallest id)."),
    fmt: Optional[str] = typer.Option(None, "--from"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Entity-unique subset: keep one sample per (entity url, normalised question)."""
    from kbvqa.pipelines.audit_tools import entity_unique_subset, load_records

    kept, stats = entity_unique_subset(load_records(input, fmt), [k.strip() for k in key.split(",") if k.strip()],
                                       seed=seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    stats["out"] = str(out)
    if as_json:
        typer.echo(json.dumps(stats, indent=2))
    else:
        typer.echo(f"kept {stats['kept']} of {stats['input']} ({stats['removed']} duplicates removed; "
                   f"{stats['groups']} groups, {stats['entities']} entities, {stats['no_entity']} without entity) "
                   f"by type {stats['by_question_type']} -> {out}")


@app.command("human-export")
def human_export_cmd(
    audited: Path = typer.Argument(..., exists=True, dir_okay=False, help="Audited JSONL."),
    out: Path = typer.Option(..., "--out", help="Sheet CSV (several annotators: OUT stem .a1, .a2, ...)."),
    fraction: float = typer.Option(0.1, "--fraction", min=0.0, max=1.0),
    seed: int = typer.Option(0, "--seed"),
    annotators: int = typer.Option(2, "--annotators", min=1),
    kb: Optional[Path] = typer.Option(None, "--kb", exists=True, dir_okay=False, help="KB for evidence text."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Stratified sample (answer_support × action × question type) as blind CSV sheets + a key file."""
    from kbvqa.pipelines.audit_tools import human_export

    kbo = None
    if kb is not None:
        from kbvqa.kb.store import open_kb
        kbo = open_kb(kb)
    res = human_export(audited, out, fraction=fraction, seed=seed, annotators=annotators, kb=kbo)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
    else:
        typer.echo(f"sampled {res['sampled']} of {res['input']} in {len(res['strata'])} strata -> "
                   f"{', '.join(res['sheets'])}; key {res['key']}")


@app.command("human-import")
def human_import_cmd(
    sheets: list[Path] = typer.Argument(..., exists=True, dir_okay=False, help="Filled sheets, one per annotator."),
    key: Optional[Path] = typer.Option(None, "--key", help="Key CSV (default: beside the sheets)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Per-annotator accuracy vs the audit's decision, mean ± std, pairwise agreement, Cohen's/Fleiss' kappa."""
    from kbvqa.pipelines.audit_tools import human_import

    res = human_import(sheets, key)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    console = Console()
    t = Table(title=f"human evaluation ({res['items_in_key']} items)")
    for c in ("annotator", "annotated", "accuracy", "judged valid", "answer accuracy"):
        t.add_column(c)
    for n, v in res["annotators"].items():
        t.add_row(n, str(v["annotated"]), str(v["accuracy"]), str(v["judged_valid"]), str(v["answer_accuracy"]))
    console.print(t)
    acc = res["accuracy"]
    if acc["mean"] is not None:
        console.print(f"accuracy {100 * acc['mean']:.1f} ± {100 * acc['std']:.1f}")
    for p, v in res["pairwise"].items():
        console.print(f"{p}: agreement {v['agreement']}, Cohen's kappa {v['cohen_kappa']} ({v['items']} items)")
    console.print(f"Fleiss' kappa {res['fleiss_kappa']} over {res['items_rated_by_all']} items")
