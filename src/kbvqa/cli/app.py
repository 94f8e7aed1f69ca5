"""`kbvqa` entry point: one sub-command per job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

import typer

from kbvqa import __version__
from kbvqa.data.images import ALLOW_OUTSIDE_ROOT_ENV
from kbvqa.models.config import CACHE_ENV
from kbvqa.runner.executor import EXECUTORS, set_default_executor
from kbvqa.runner.stage import set_record_deadline
from kbvqa.cli import answer as answer_cmd
from kbvqa.cli import audit as audit_cmd
from kbvqa.cli import augment as augment_cmd
from kbvqa.cli import curate as curate_cmd
from kbvqa.cli import data as data_cmd
from kbvqa.cli import demo as demo_cmd
from kbvqa.cli import eval as eval_cmd
from kbvqa.cli import index as index_cmd
from kbvqa.cli import journal as journal_cmd
from kbvqa.cli import kb as kb_cmd
from kbvqa.cli import reference as reference_cmd
from kbvqa.cli import report as report_cmd
from kbvqa.cli import retrieve as retrieve_cmd
from kbvqa.cli import score as score_cmd
from kbvqa.cli import study as study_cmd
from kbvqa.cli import view as view_cmd



app = typer.Typer(
    name="kbvqa",
    help="Audit, repair, augment and evaluate knowledge-seeking VQA benchmarks and the MM-RAG "
         "pipelines and search agents that answer them.",
    no_args_is_help=True,
    rich_markup_mode=None,  # help texts carry [brackets] (TOML tables, extras): never read them as markup
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Registered in the order a user meets them: data and KB, audit, augment, retrieve/answer, score, study, report.
app.add_typer(data_cmd.app, name="data", help="Convert benchmark files between formats; dataset statistics.")
app.add_typer(kb_cmd.app, name="kb", help="Import a wiki JSON into the SQLite/FTS5 KB store; search it.")
app.add_typer(audit_cmd.app, name="audit",
              help="Audit and repair a benchmark against its KB (rules first, LLM roles when configured).")
app.command("augment", help="Multi-entity composite images (intra/inter/blank/double) with rewritten "
                            "questions.")(augment_cmd.augment)
app.add_typer(index_cmd.app, name="index", help="Build FAISS image indexes and dense section indexes over a KB.")
app.command("retrieve", help="Image-to-image KB retrieval: ranked, entity-deduplicated records for "
                             "Recall@K.")(retrieve_cmd.retrieve)
app.command("answer", help="Answer with a reference MM-RAG pipeline (a registered preset: --pipeline).")(
    answer_cmd.answer)
app.add_typer(score_cmd.app, name="score", help="Score predictions: InfoSeek, E-VQA, short-answer judge, retrieval.")
app.command("eval", help="Answer + score in one run: predictions as `kbvqa answer` writes them, every --metric "
                        "as `kbvqa score` scores it, one results.json.")(eval_cmd.evaluate)
app.add_typer(study_cmd.app, name="study", help="Studies: per-type bootstrap CIs, fixed-vs-unfixed comparisons and "
                                                "ranking reversals, retrieval 2x2, augmentation recall.")
app.add_typer(reference_cmd.app, name="reference", help="Interleaved reference construction from agent "
                                                        "trajectories (seed 001) and its human audit.")
app.add_typer(curate_cmd.app, name="curate", help="Curate a community-sourced visual QA benchmark from posts "
                                                  "(seed 001 §3.1): the four-step funnel and its proofreading.")
app.add_typer(report_cmd.app, name="report", help="Tables (markdown/CSV/LaTeX), plots and an HTML page from study "
                                                  "results.")
app.add_typer(journal_cmd.app, name="journal", help="Inspect or repair a job's output journal (what --resume reads).")
app.command("demo", help="End-to-end offline demo on real photographs shipped in PyPI packages.")(demo_cmd.demo)
app.command("view", help="Browse runs in a local read-only web app (or --export a static site).")(view_cmd.view)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kbvqa {__version__}")
        raise typer.Exit()


ExecutorName = Literal[tuple(EXECUTORS.names())]  # type: ignore[valid-type]


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          executor: ExecutorName = typer.Option(  # type: ignore[valid-type]
              os.environ.get("KBVQA_EXECUTOR") or "local", "--executor",
              help="Where every per-record job of the command runs: local (asyncio, this process) or ray "
                   "(actors; the kbvqa[ray] extra). Env: KBVQA_EXECUTOR."),
          ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                                    help="A running Ray cluster (default: RAY_ADDRESS, else a "
                                                         "local cluster started for the run)."),
          ray_actors: Optional[int] = typer.Option(None, "--ray-actors", min=1,
                                                   help="Ray actors (default: one per cluster CPU)."),
          fail_on_error: bool = typer.Option(False, "--fail-on-error",
                                             help="Exit 4 when any record of a job ends error or invalid (a job "
                                                  "where none ended ok always exits 3)."),
          allow_outside_root: bool = typer.Option(False, "--allow-outside-root", envvar=ALLOW_OUTSIDE_ROOT_ENV,
                                                  help="Let image references in the data name files outside the "
                                                       "image root (--images); refused by default."),
          record_deadline: Optional[float] = typer.Option(
              None, "--record-deadline", min=0.1,
              help="Cap on one record's time through all the stages of a job, seconds: a record still running "
                   "then ends error (RecordDeadline). Env: KBVQA_RECORD_DEADLINE."),
          cache: Optional[Path] = typer.Option(None, "--cache", dir_okay=False,
                                               help="Response cache file for every model role (default: "
                                                    "~/.cache/kbvqa/responses.sqlite; env KBVQA_CACHE)."),
          no_cache: bool = typer.Option(False, "--no-cache", help="Send every model call, cache nothing "
                                                                   "(KBVQA_CACHE=off).")) -> None:
    """kbvqa command line. (--fail-on-error is read by each job from this command's parameters.)"""
    if allow_outside_root:  # an environment variable reaches worker processes (Ray actors, image pools)
        os.environ[ALLOW_OUTSIDE_ROOT_ENV] = "1"
    set_record_deadline(record_deadline)
    if cache is not None and no_cache:
        raise typer.BadParameter("choose --cache PATH or --no-cache", param_hint="--cache")
    if cache is not None or no_cache:  # like the two above: an environment variable reaches every worker
        os.environ[CACHE_ENV] = "off" if no_cache else str(cache.expanduser().resolve())
    options = {k: v for k, v in (("address", ray_address), ("actors", ray_actors)) if v is not None}
    if options and executor != "ray":
        raise typer.BadParameter("--ray-address/--ray-actors need --executor ray", param_hint="--executor")
    set_default_executor(executor, **options)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
