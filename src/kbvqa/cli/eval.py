"""`kbvqa eval`: answer + score in one command, one results file (`kbvqa.pipelines.evaluation`).

The answer flags are `kbvqa answer`'s own: this command's signature is built from `answer`'s (every
parameter but `--out`, which here is the results folder, and `--resume`, which here covers the judge's
journal too), so the two can never drift apart, and they reach the pipeline as one `AnswerOptions`,
built by the same `answer_options` (defaults, `[answer]` of --config, flags). The judge flags are
`kbvqa score judge`'s.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from kbvqa.cli import answer as answer_cmd
from kbvqa.cli.common import emit_json, end_job, fail, journal_outcome, journal_reasons, print_result
from kbvqa.cli.options import default_of, flags, option
from kbvqa.cli.common import job_errors
from kbvqa.cli.score import _GRADED_HELP, _JUDGE_MODEL, _JUDGE_REPLAY, _JUDGE_URL, _ROLE, GradedText, TwoHop
from kbvqa.evaluate.retrieval import DEFAULT_KS
from kbvqa.pipelines.evaluation import EvalOptions, JudgeOptions

#: `kbvqa answer`'s flags that eval takes as they are (its --out is the predictions file; eval's is a folder;
#: its --json prints the answer summary, eval's own the results document)
_NOT_SHARED = ("out", "as_json")


def answer_parameters() -> list[inspect.Parameter]:
    """`kbvqa answer`'s parameters (typer options as defaults, annotations resolved) minus --out."""
    sig = inspect.signature(answer_cmd.answer, eval_str=True)
    return [p for name, p in sig.parameters.items() if name not in _NOT_SHARED]


def _with_answer_flags(fn: Callable[..., None]) -> Callable[..., None]:
    """Give `fn` (own parameters + `**answer_flags`) a signature that typer reads as answer's flags
    after its own; one of its own parameters with the same name as an answer flag replaces it."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD]
    names = {p.name for p in own}
    params = own + [p for p in answer_parameters() if p.name not in names]
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


def _metric_help() -> str:
    from kbvqa.pipelines.evaluation import eval_metrics

    return "Metric to score (repeat). " + "; ".join(f"{k}: {v}" for k, v in eval_metrics().items())


@_with_answer_flags
def evaluate(
    out: Path = typer.Option(..., "--out", file_okay=False,
                             help="Results folder: predictions.jsonl (as `kbvqa answer` writes it), its manifest and "
                                  "retrieval records, per-metric files, results.json."),
    metric: list[str] = typer.Option(..., "--metric", "-m", help=_metric_help()),
    references: Optional[Path] = typer.Option(None, "--references", "-r", exists=True, dir_okay=False,
                                              help="Reference file the scorers read (default: --samples)."),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", exists=True, dir_okay=False,
                                          help="InfoSeek question-type JSONL {data_id, question_type}."),
    recall_k: Optional[str] = typer.Option(None, "--recall-k", help="retrieval: comma-separated K values. Default "
                                                                    f"{','.join(map(str, DEFAULT_KS))}."),
    two_hop: Optional[TwoHop] = typer.Option(None, "--two-hop",  # type: ignore[valid-type]
                                             help="retrieval: several gold urls, any one in top K, or all of "
                                                  f"them. Default {default_of(EvalOptions, 'two_hop')}."),
    judge_base_url: Optional[str] = _JUDGE_URL,
    judge_model: Optional[str] = _JUDGE_MODEL,
    judge_replay: Optional[Path] = _JUDGE_REPLAY,
    judge_role: Optional[str] = _ROLE,
    judge_concurrency: Optional[int] = option(JudgeOptions, "concurrency", "--judge-concurrency", min=1,
                                              help="Judge requests in flight."),
    graded_text: Optional[GradedText] = option(JudgeOptions, "graded_text", "--graded-text",  # type: ignore[valid-type]
                                               help=_GRADED_HELP),
    resume: Optional[bool] = option(answer_cmd.AnswerOptions, "resume", "--resume/--no-resume",
                                    help="Keep what DIR holds: samples answered ok and verdicts of unchanged "
                                         "predictions; re-run errored and invalid ones (--no-resume moves the old "
                                         "files aside)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results document (results.json) on stdout."),
    **answer_flags: Any,
) -> None:
    """Answer a benchmark and score it in one run: predictions exactly as `kbvqa answer` writes them,
    every --metric through the code `kbvqa score` runs, and DIR/results.json with the config, the kbvqa
    version and commit, the answer run's counts and, per metric, its scorer, values and counts."""
    from rich.console import Console

    from kbvqa.evaluate.retrieval import parse_ks
    from kbvqa.pipelines.answer import AnswerOptions, answer_options
    from kbvqa.pipelines.evaluation import eval_judge_options, prepare_eval, run_eval
    from kbvqa.report.compare import results_table

    console = Console(stderr=True)
    try:
        spec = answer_options(**flags(AnswerOptions, {**answer_flags, "resume": resume}))
        judge = eval_judge_options(spec, judge_base_url=judge_base_url, judge_model=judge_model,
                                   judge_replay=judge_replay, judge_role=judge_role, concurrency=judge_concurrency,
                                   graded_text=graded_text, resume=resume)
        scoring = {"recall_ks": parse_ks(recall_k) if recall_k is not None else None, "two_hop": two_hop,
                   "references": references, "qtypes": qtypes}
        req = EvalOptions(answer=spec, judge=judge, out=out, metrics=tuple(metric),
                          **{k: v for k, v in scoring.items() if v is not None})
        plan = prepare_eval(req)
    except job_errors() as exc:
        fail(exc)
    try:
        res = run_eval(plan, progress=console.is_terminal and not as_json)
    except job_errors() as exc:
        fail(exc)
    for line in res.notes:
        typer.echo(line, err=True)
    if as_json:
        emit_json(res.results)
    else:
        print_result(results_table(res.results))
        typer.echo(f"results {res.path}")
    for m, reason in res.metric_errors.items():
        typer.echo(f"error: metric {m}: {reason}", err=True)
    if res.metric_errors:
        fail(f"{len(res.metric_errors)} metric(s) could not be scored (recorded in {res.path}); the predictions are "
             f"kept: run again with --resume to score them without answering again")
    a = res.answer
    reasons = journal_reasons(a.out) if a.error or a.invalid else []
    ok, skipped = a.ok, a.skipped
    for entry in res.results["metrics"].values():  # a judge metric: its journal's failures count too
        journal = (entry.get("files") or {}).get("journal") if isinstance(entry, dict) else None
        if journal:
            judged, _failed, _needs_model, why = journal_outcome(journal)
            reasons += why
            if judged == 0 and why:  # not one verdict: the run produced no score
                ok = skipped = 0
    end_job(ok, res.failed, skipped=skipped, what="record(s)", reasons=reasons)
