"""`kbvqa reference`: build interleaved references from agent trajectories (seed 001 §3.2) and audit them.

    kbvqa reference build --samples S.jsonl --trajectories P.jsonl --out DIR --kb KB --kb-images IMGS \\
        [--llm URL --model M] [--config kbvqa.toml] [--tools local|web] [--resume/--no-resume]
    kbvqa reference audit-export DIR [--out DIR/audit.csv]
    kbvqa reference audit-import DIR [--sheet DIR/audit.csv] [--out DIR/references.jsonl]

`build` prints a short summary (items in, ok and stopped per stage, and why, the warnings once) and
writes the whole funnel to DIR/funnel.json; `--json` prints that document instead. The stages that
need a model end each item that reaches them with a `NeedsModel` reason when none is configured.
Exit codes follow the per-record jobs' convention with "ok" meaning an item that got a draft: 3
when no item did (an offline build always ends so, after the deterministic stages), 4 under
`kbvqa --fail-on-error` when some item stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from kbvqa.cli.common import emit_json, end_job, fail, print_table
from kbvqa.cli.flag_groups import GROUP, ModelLimits, command, ungrouped
from kbvqa.cli.options import flags, with_defaults
from kbvqa.cli.common import job_errors

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Interleaved reference construction and its human audit.")


def _errors() -> tuple[type[BaseException], ...]:
    return (*job_errors(), FileExistsError)


@command(app, "build", cls=with_defaults("kbvqa.pipelines.reference:ReferenceOptions"))
def build(
    samples: Path = typer.Option(..., "--samples", exists=True, dir_okay=False, help="Benchmark file (NoteVQA-style JSONL or any kbvqa format)."),
    trajectories: Path = typer.Option(..., "--trajectories", help="Agent predictions with trajectories "
                                                                   "(`kbvqa answer --pipeline agent`)."),
    out: Path = typer.Option(..., "--out", help="Build folder: stage journals, images/, funnel.json."),
    kb: Optional[Path] = typer.Option(None, "--kb", help="KB (SQLite or wiki JSON); --tools local harvests its "
                                                         "images."),
    kb_images: Optional[Path] = typer.Option(None, "--kb-images", exists=True, file_okay=False,
                                             help="Folder holding the KB's image files (must exist)."),
    images: Optional[Path] = typer.Option(None, "--images", help="Folder the samples' images are relative to "
                                                                 "(default: the samples file's folder)."),
    tools: Optional[str] = typer.Option(
        None, "--tools", help="How pages are harvested: local (KB images, offline) or web (guarded downloads). "
                              "When neither this nor [reference.harvest] backend sets it: the one backend the "
                              "trajectories name, if they name one."),
    llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL for the model roles."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on that server (a VLM)."),
    config: Optional[Path] = typer.Option(None, "--config", help="kbvqa.toml: [models.*] roles and "
                                                                 "[reference.*] stage settings."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env"),
    fmt: Optional[str] = typer.Option(None, "--format", help="Samples format (default: detected)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1),
    limit: Optional[int] = typer.Option(None, "--limit", min=1),
    resume: Optional[bool] = typer.Option(None, "--resume/--no-resume", help="Keep items already ok in each stage; "
                                                                             "re-run errored, invalid and needs-model ones."),
    limits: ModelLimits = GROUP,
    as_json: bool = typer.Option(False, "--json", help="Print the whole funnel (DIR/funnel.json) as one JSON "
                                                       "object instead of the short summary."),
) -> None:
    """Build draft interleaved references: URL scoring, image harvesting, candidate scoring, the entity
    image search, synthesis, the five-rule filter on each tag, de-duplication and the consistency check
    (filter and de-duplication before synthesis with [reference] filter_placement = "before_synthesis"),
    each a resumable runner job. Every stage's manifest and funnel.json record the options used."""
    from kbvqa.pipelines.reference import ReferenceOptions, build_references, reference_options
    from kbvqa.tools.config import web_tool_options

    console = Console(stderr=True)
    try:
        opts = reference_options(**flags(ReferenceOptions, ungrouped(locals())))
        roles = opts.models.roles(opts.config, fill=opts.reference.roles(), concurrency=opts.run.concurrency)
        result = build_references(opts, roles=roles, progress=console.is_terminal,
                                  web_tools=web_tool_options(opts.config))
    except _errors() as e:
        fail(e)
    if as_json:
        emit_json(result.as_dict())
    else:
        print_funnel(result, out)
    stopped: dict[str, int] = {}
    for s in result.stages:
        for why, n in s["stopped"].items():
            stopped[why] = stopped.get(why, 0) + n
    end_job(result.stages[-1]["ok"], stopped, what="item(s)",  # ok = items with a draft
            needs_model=stopped.pop("needs_model", 0))


@app.command("audit-export")
def audit_export(
    build_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="A `reference build` folder."),
    out: Optional[Path] = typer.Option(None, "--out", help="Sheet CSV (default: BUILD/audit.csv)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing sheet (it may hold decisions)."),
) -> None:
    """Write the reviewers' sheet: one row per draft with decision (accept / minor fix / reject) and
    corrected_text columns."""
    from kbvqa.pipelines.reference import IMAGES_DIR, FINAL_JOURNAL, export_sheet

    try:
        res = export_sheet(build_dir / FINAL_JOURNAL, out or build_dir / "audit.csv",
                           image_dir=IMAGES_DIR, overwrite=overwrite)
    except _errors() as e:
        fail(e)
    emit_json(res)


@app.command("audit-import")
def audit_import(
    build_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="A `reference build` folder."),
    sheet: Optional[Path] = typer.Option(None, "--sheet", help="The reviewed sheet (default: BUILD/audit.csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="References, NoteVQA JSONL "
                                                           "(default: BUILD/references.jsonl)."),
) -> None:
    """Read the reviewed sheet; write accepted and fixed items as NoteVQA references; print the counts."""
    from kbvqa.pipelines.reference import FUNNEL_FILE, IMAGES_DIR, FINAL_JOURNAL, import_sheet

    try:
        res = import_sheet(build_dir / FINAL_JOURNAL, sheet or build_dir / "audit.csv",
                           out or build_dir / "references.jsonl", image_store=build_dir / IMAGES_DIR)
        funnel = build_dir / FUNNEL_FILE
        if funnel.is_file():  # the audit is the funnel's last step
            data = json.loads(funnel.read_text(encoding="utf-8"))
            data["audit"] = res
            funnel.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    except _errors() as e:
        fail(e)
    emit_json(res)


def print_funnel(result: Any, out: Path) -> None:
    """The build's short summary on stdout: one row per stage (items in, ok, stopped and why), each
    warning once, and where the whole funnel is."""
    from kbvqa.report.tables import prose, wrap_text

    print_table(f"reference build: {out}", ["stage", "in", "ok", "stopped"],
                [[s["stage"], s["in"], s["ok"], prose(s["stopped"]) if s["stopped"] else "-"] for s in result.stages])
    last = result.stages[-1] if result.stages else {"ok": 0}
    typer.echo(wrap_text(f"drafts: {last['ok']}; the whole funnel (units, examples, options): "
                         f"{out / 'funnel.json'} (--json prints it)"))
    for w in dict.fromkeys(result.warnings):
        typer.echo(wrap_text(f"note: {w}"))
