"""`kbvqa curate`: a community-sourced visual QA benchmark from posts (seed 001 §3.1), and its proofreading.

    kbvqa curate run POSTS --out DIR [--config curate.toml] [--llm URL --model M] [--resume/--no-resume]
    kbvqa curate review-export DIR [--out DIR/review.csv]
    kbvqa curate review-import DIR [--sheet DIR/review.csv] [--out DIR/reviewed.jsonl]

`run` prints the funnel (stage, in, kept, dropped by reason, stopped by reason), or with `--json` the
funnel as one JSON document (also in DIR/funnel.json). Exit codes follow the per-record jobs'
convention with "ok" meaning a post that became an item: 3 when posts stopped and none became an item
(an offline run ends so, after the deterministic stages), 4 under `kbvqa --fail-on-error` when some
stopped with error or invalid (needs_model is not a failure). Drops are outcomes, not failures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, end_job, fail, print_result
from kbvqa.cli.flag_groups import GROUP, ModelLimits, command, ungrouped
from kbvqa.cli.options import flags, with_defaults
from kbvqa.cli.common import job_errors

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Curate benchmark items from community posts; proofreading sheets.")


def _errors() -> tuple[type[BaseException], ...]:
    from kbvqa.runner.run import InputError

    return (*job_errors(), FileExistsError, InputError)


@command(app, "run", cls=with_defaults("kbvqa.pipelines.curate:CurateOptions"))
def run(
    posts: Path = typer.Argument(..., help="Posts: JSONL (see kbvqa.data.posts), CSV or Parquet with --mapping."),
    out: Path = typer.Option(..., "--out", help="Run folder: stages/ journals, items.jsonl, dropped.jsonl, "
                                                "stopped.jsonl, funnel.json, images/."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML with [curate.<stage>] settings and "
                                                                 "[models.*] roles."),
    llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL for every model role used."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on that server (a VLM)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env"),
    images: Optional[Path] = typer.Option(None, "--images", help="Folder the posts' image paths are relative to "
                                                                 "(default: the posts file's folder)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="jsonl | csv | parquet (default: from the extension)."),
    mapping: Optional[str] = typer.Option(None, "--mapping", help="CSV/Parquet: field=column,... (fields: id, title, "
                                                                  "text, images, comments, tags, language, category, "
                                                                  "intent, answer, platform)."),
    sep: Optional[str] = typer.Option(None, "--sep", help="Separator of list cells given as strings."),
    skip_invalid: Optional[bool] = typer.Option(None, "--skip-invalid", help="Drop unreadable rows (counted, listed "
                                                                             "in dropped.jsonl) instead of stopping."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Read at most N posts."),
    resume: Optional[bool] = typer.Option(None, "--resume/--no-resume", help="Keep what each stage decided; re-run "
                                                                             "stopped posts (needs-model, error, invalid)."),
    as_json: bool = typer.Option(False, "--json", help="Print the funnel as JSON instead of a table."),
    limits: ModelLimits = GROUP,
) -> None:
    """Run the four-step curation funnel: type cleaning, quality, refinement and balancing, auditing.
    Every stage's manifest and funnel.json record the options used."""
    from kbvqa.data.posts import parse_post_mapping
    from kbvqa.pipelines.curate import CurateOptions, curate_options, run_curation
    from kbvqa.report.tables import ResultTable

    try:
        given = {**ungrouped(locals()), "mapping": parse_post_mapping(mapping)}
        opts = curate_options(**flags(CurateOptions, given))
        roles = opts.models.roles(opts.config, fill=opts.curate.roles(), concurrency=opts.run.concurrency)
        result = run_curation(opts, roles=roles, progress=not as_json)
    except _errors() as e:
        fail(e)
    if as_json:
        emit_json(result.as_dict())
    else:
        print_result(ResultTable.from_dicts(result.rows(), name="curate_funnel", title=f"curation funnel → {out}",
                                            notes=[*(f"note: {w}" for w in result.warnings),
                                                   f"{result.output['items']} item(s) in {out / 'items.jsonl'}; "
                                                   f"{result.output['dropped']} dropped post(s) in "
                                                   f"{out / 'dropped.jsonl'}; {result.output['stopped']} stopped in "
                                                   f"{out / 'stopped.jsonl'}"]))
    stopped: dict[str, int] = {}
    for s in result.stages:
        for why, n in s["stopped"].items():
            stopped[why] = stopped.get(why, 0) + n
    end_job(result.output["items"], stopped, what="post(s)", needs_model=stopped.pop("needs_model", 0))


@app.command("review-export")
def review_export(
    run_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="A `curate run` folder."),
    out: Optional[Path] = typer.Option(None, "--out", help="Sheet CSV (default: DIR/review.csv)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing sheet (it may hold decisions)."),
) -> None:
    """Write the proofreading sheet: one row per item (flagged ones first) with decision (accept / fix /
    reject), fixed_question, fixed_answer and notes columns."""
    from kbvqa.pipelines.curate import ITEMS_FILE, REVIEW_SHEET, export_review

    try:
        res = export_review(run_dir / ITEMS_FILE, out or run_dir / REVIEW_SHEET, overwrite=overwrite)
    except _errors() as e:
        fail(e)
    emit_json(res)


@app.command("review-import")
def review_import(
    run_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="A `curate run` folder."),
    sheet: Optional[Path] = typer.Option(None, "--sheet", help="The reviewed sheet (default: DIR/review.csv)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Reviewed items, NoteVQA JSONL "
                                                           "(default: DIR/reviewed.jsonl)."),
) -> None:
    """Read the proofreading sheet: accepted and fixed items to the reviewed file, rejected ones to
    dropped.jsonl; print the counts."""
    from kbvqa.pipelines.curate import review_import as do_import

    try:
        res = do_import(run_dir, sheet, out)
    except _errors() as e:
        fail(e)
    emit_json(res)
