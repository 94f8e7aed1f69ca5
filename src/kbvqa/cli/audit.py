"""`kbvqa audit` commands: audit and repair a benchmark against its KB (rules backend by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, emit_result, end_job, fail, journal_reasons, print_result
from kbvqa.cli.flag_groups import GROUP, ModelLimits, command, ungrouped
from kbvqa.cli.options import flags, option
from kbvqa.pipelines.audit import AuditOptions as O

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)


def _input_errors() -> tuple[type[BaseException], ...]:
    """What a bad input, config or KB raises (each names the file, row or key): one error line."""
    from kbvqa.data.errors import DataError
    from kbvqa.kb.store import KBError

    return (DataError, KBError, ValueError, OSError)


@command(app, "run")
def run_cmd(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Benchmark file (InfoSeek, E-VQA, ARA CSV, kbvqa JSONL)."),
    kb: Path = typer.Option(..., "--kb", exists=True, dir_okay=False, help="KB: SQLite store or wiki JSON (imported on the fly)."),
    fmt: Optional[str] = option(O, "fmt", "--from", help="Input format (default: detected)."),
    out: Optional[Path] = option(O, "out", help="Audited JSONL (default: INPUT.audit.jsonl)."),
    config: Optional[Path] = option(O, "config", exists=True, dir_okay=False,
                                    help="audit.toml: stage tables and run settings in [audit] (or the older "
                                         "top-level [verify], [derive] ...; flags win), model roles in [models.*]."),
    limit: Optional[int] = option(O, "limit", min=0),
    concurrency: Optional[int] = option(O, "concurrency", min=1),
    resume: Optional[bool] = option(O, "resume", "--resume/--no-resume"),
    skip_invalid: Optional[bool] = option(O, "skip_invalid", "--skip-invalid",
                                          help="Skip malformed input rows (counted) instead of stopping."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    allow_empty: Optional[bool] = option(O, "allow_empty", "--allow-empty",
                                         help="Run on an input with no samples (otherwise an error)."),
    llm: Optional[str] = option(O, "llm", help="OpenAI-compatible server URL: fills the verifier, repairer and "
                                               "checker roles with one model (needs --model)."),
    model: Optional[list[str]] = option(O, "model", help="Model name on the --llm server; give it twice "
                                                         "(--model A --model B) for two independent verifiers, "
                                                         "as the paper (the first also repairs and checks).",
                                  metavar="NAME"),
    api_key_env: Optional[str] = option(O, "api_key_env", help="Environment variable holding the --llm key."),
    llm_concurrency: Optional[int] = option(O, "llm_concurrency", min=1,
                                            help="Requests in flight to --llm (default: --concurrency)."),
    limits: ModelLimits = GROUP,
    fixed_out: Optional[Path] = typer.Option(None, "--fixed-out", dir_okay=False,
                                             help="Also write the fixed split here (as `kbvqa audit split`)."),
    unfixed_out: Optional[Path] = typer.Option(None, "--unfixed-out", dir_okay=False,
                                               help="Also write the unfixed split here (the same ids as they were)."),
) -> None:
    """Audit INPUT against KB: verify, derive/correct answers, tag/repair questions, check leaks.

    Rules only by default (kbvqa's offline stand-in, said in the summary). Model roles come from
    [models.verifier|repairer|checker] in --config, or from --llm URL --model NAME (one model in all
    three roles; --model A --model B: two verifiers, as the paper). With model verifiers a sample is
    removed only when every one of them finds it unsupported; the rules settle only a verbatim answer. Every setting is one AuditOptions (the defaults, under
    --config, under the flags); the run's manifest records it as used."""
    from kbvqa.pipelines.audit import audit_options, run_audit
    from kbvqa.report.summaries import audit_summary_table

    given = {**ungrouped(locals()), "model": model[0] if model else None, "verifier_models": model if model and len(model) > 1 else None}
    try:
        summary = run_audit(audit_options(**flags(O, given)), progress=not as_json)
    except _input_errors() as exc:
        fail(exc)
    notice = (summary.get("verification") or {}).get("notice")
    if notice:
        typer.echo(f"note: {notice}", err=True)
    r = summary["run"]
    if fixed_out is not None or unfixed_out is not None:
        from kbvqa.pipelines.audit_split import write_split

        try:
            summary["split"] = write_split(r["out"], fixed_out, unfixed_out)
        except _input_errors() as exc:
            fail(exc)
    if as_json:
        emit_json(summary)
    else:
        print_result(audit_summary_table(summary))
        typer.echo(f"wrote {r['out']} (ok {r['ok']}, error {r['error']}, invalid {r['invalid']}, "
                   f"skipped {r['skipped']}) and {summary['summary_path']}")
        if "split" in summary:
            _print_split(summary["split"])
    end_job(r["ok"], {"error": r["error"], "invalid": r["invalid"]}, skipped=r["skipped"], what="sample(s)",
            reasons=journal_reasons(r["out"]) if r["error"] or r["invalid"] else None)


@app.command("summary")
def summary_cmd(results: Path = typer.Argument(..., exists=True, dir_okay=False, help="Audited JSONL.")) -> None:
    """Recount an audited JSONL (labels and actions by question type)."""
    from kbvqa.pipelines.audit import audit_summary
    from kbvqa.report.summaries import audit_summary_table
    from kbvqa.runner import read_results

    try:
        summary = audit_summary(read_results(results))
    except _input_errors() as exc:
        fail(exc)
    print_result(audit_summary_table(summary))


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
    from kbvqa.report.summaries import audit_diff_table

    try:
        d = diff_versions(a, b, fmt_a=fmt_a, fmt_b=fmt_b, examples=examples)
    except _input_errors() as exc:
        fail(exc)
    emit_result(d, as_json, audit_diff_table)


@app.command("split")
def split_cmd(
    audited: Path = typer.Argument(..., exists=True, dir_okay=False, help="Audited JSONL (`kbvqa audit run`)."),
    fixed: Optional[Path] = typer.Option(None, "--fixed", dir_okay=False,
                                         help="The fixed split: retained rows (keep, repair) with their repairs."),
    unfixed: Optional[Path] = typer.Option(None, "--unfixed", dir_okay=False,
                                           help="The unfixed split: the same ids with their content before the audit."),
    fmt: Optional[str] = typer.Option(None, "--to", help="Output format (default: the input's: infoseek, evqa, ara, "
                                                         "notevqa or kbvqa)."),
    summary: Optional[Path] = typer.Option(None, "--summary", dir_okay=False,
                                           help="Counts as JSON (default: FIXED stem + .split.json beside it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """The fixed and unfixed splits of an audited file, aligned on the same ids (seed 000 §6).

    Dropped rows and rows the audit did not finish are in neither file; kept / repaired / dropped and
    why are printed and written beside. InfoSeek splits come with their `<stem>_qtype.jsonl`."""
    from kbvqa.pipelines.audit_split import write_split

    try:
        res = write_split(audited, fixed, unfixed, fmt=fmt, summary=summary)
    except _input_errors() as exc:
        fail(exc)
    if as_json:
        emit_json(res)
    else:
        _print_split(res)


def _print_split(res: dict) -> None:
    """What `write_split` did, for `audit split` and `audit run --fixed-out`: the counts and their
    reasons, the change kinds, the files; rows the audit did not finish on stderr."""
    def why(c: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in c.items()) or "-"

    typer.echo(f"{res['records']} audited rows: kept {res['kept']}, repaired {res['repaired']} "
               f"({why(res['repair_reasons'])}), dropped {res['dropped']} ({why(res['drop_reasons'])}"
               + (f"; flags {why(res['drop_flags'])}" if res["drop_flags"] else "") + f"), "
               f"not finished {res['not_finished']}" + (f" ({why(res['not_finished_reasons'])})"
                                                         if res["not_finished"] else ""))
    typer.echo("changed: " + why(res["changes"]))
    for side in ("fixed", "unfixed"):
        if side in res:
            w = res[side]
            typer.echo(f"wrote {side} {w['path']} ({w['rows']} rows, {res['format']})"
                       + (f" + {w['qtypes']}" if w.get("qtypes") else "")
                       + (f"; {w['qtypes_note']}" if w.get("qtypes_note") else ""))
    if res.get("format_note"):
        typer.echo(res["format_note"], err=True)
    if res.get("summary_path"):
        typer.echo(f"counts: {res['summary_path']}")
    if res["not_finished"]:
        typer.echo(f"{res['not_finished']} row(s) the audit did not finish are in neither split: "
                   "`kbvqa audit run ... --resume` re-runs them", err=True)


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
    from kbvqa.pipelines.audit_tools import subset_file

    try:
        stats = subset_file(input, out, [k.strip() for k in key.split(",") if k.strip()], seed=seed, fmt=fmt)
    except _input_errors() as exc:
        fail(exc)
    if as_json:
        emit_json(stats)
    else:
        typer.echo(f"kept {stats['kept']} of {stats['input']} ({stats['removed']} duplicates removed; "
                   f"{stats['groups']} groups, {stats['entities']} entities, {stats['no_entity']} without entity) "
                   f"by type {stats['by_question_type']} -> {out}")


@app.command("human-export")
def human_export_cmd(
    audited: Path = typer.Argument(..., exists=True, dir_okay=False,
                                    help="Audited JSONL, a fixed split, or an augmented samples.jsonl."),
    out: Path = typer.Option(..., "--out", help="Sheet CSV (several annotators: OUT stem .a1, .a2, ...)."),
    fraction: float = typer.Option(0.1, "--fraction", min=0.0, max=1.0,
                                   help="Share of each stratum (the paper: 10% of the fixed split)."),
    per_variant: int = typer.Option(100, "--per-variant", min=1,
                                    help="Augmented input: intra and inter items each (the paper: 100)."),
    fixed_only: bool = typer.Option(False, "--fixed-only",
                                    help="Audited input: the retained rows only (no dropped rows to check the "
                                         "keep/drop decision against)."),
    seed: int = typer.Option(0, "--seed"),
    annotators: int = typer.Option(2, "--annotators", min=1),
    kb: Optional[Path] = typer.Option(None, "--kb", exists=True, dir_okay=False, help="KB for evidence text."),
    images: Optional[Path] = typer.Option(None, "--images", exists=True, file_okay=False,
                                          help="Image root: the sheet shows resolved image paths."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing sheets (they may hold answers)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Sheets where annotators answer from the question, image and evidence (never the answer or the
    audit's decision), a key and the sampled references."""
    from kbvqa.pipelines.human_eval import human_export

    try:
        res = human_export(audited, out, fraction=fraction, seed=seed, annotators=annotators, kb=kb,
                           fixed_only=fixed_only, per_variant=per_variant, images_root=images, overwrite=overwrite)
    except (*_input_errors(), FileExistsError) as exc:
        fail(exc)
    if as_json:
        emit_json(res)
    else:
        typer.echo(f"sampled {res['sampled']} of {res['input']} in {len(res['strata'])} strata "
                   f"({', '.join(f'{k} {v}' for k, v in res['by_split'].items())}) -> "
                   f"{', '.join(res['sheets'])}; key {res['key']}")
        if res["without_evidence"]:
            typer.echo(f"warning: {res['without_evidence']} item(s) have no evidence to show (the samples carry "
                       "none; pass --kb KB for the entity's article)", err=True)


@app.command("human-import")
def human_import_cmd(
    sheets: list[Path] = typer.Argument(..., exists=True, dir_okay=False, help="Filled sheets, one per annotator."),
    key: Optional[Path] = typer.Option(None, "--key", help="Key CSV (default: beside the sheets)."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="Study scorer for the answers (default: the "
                                         "benchmark's: infoseek-official; E-VQA evqa-bem with --bem-dir, else "
                                         "evqa exact match, named as not BEM)."),
    bem_dir: Optional[Path] = typer.Option(None, "--bem-dir", exists=True, file_okay=False,
                                           help="Local BEM model directory: E-VQA answers scored by BEM."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Annotator answer accuracy against the fixed reference per split, mean ± std across annotators
    (the paper's figure); agreement with the audit's keep/drop decision, Cohen's/Fleiss' kappa and the
    flaw reports second."""
    from kbvqa.pipelines.human_eval import human_import
    from kbvqa.report.human_eval import human_eval_tables

    try:
        res = human_import(sheets, key, scorer=scorer, bem_dir=bem_dir)
    except _input_errors() as exc:
        fail(exc)
    emit_result(res, as_json, human_eval_tables)
