"""`kbvqa score` commands: InfoSeek (official/strict/reward), E-VQA, short-answer judge, retrieval, and
converting published methods' outputs. Each parses its flags, calls one `kbvqa.pipelines.score`
function and prints the report; choices come from the METRICS and METHODS registries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, Optional

import typer

from kbvqa.cli.common import emit_json, end_journal_job, fail, include_dropped_option, print_result
from kbvqa.cli.flag_groups import GROUP, ModelLimits, command, flag_group, ungrouped
from kbvqa.cli.options import with_defaults
from kbvqa.evaluate import METRICS, infoseek_modes
from kbvqa.evaluate.methods import DATASETS, DUPLICATE_POLICIES, METHODS, RULES
from kbvqa.evaluate.retrieval import TWO_HOP_POLICIES, parse_ks

if TYPE_CHECKING:
    from kbvqa.pipelines.score import ScoreReport

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Score predictions: InfoSeek, E-VQA, short-answer judge, retrieval.")
app.callback()(include_dropped_option)  # --include-dropped: audited references with drop rows

# Literal types built from the registries: typer lists them in --help and refuses anything else.
InfoSeekMode = Literal[tuple(infoseek_modes())]  # type: ignore[valid-type]
MethodName = Literal[tuple(METHODS.names())]  # type: ignore[valid-type]
TwoHop = Literal[TWO_HOP_POLICIES]  # type: ignore[valid-type]
Duplicates = Literal[DUPLICATE_POLICIES]  # type: ignore[valid-type]
Dataset = Literal[DATASETS]  # type: ignore[valid-type]
Rules = Literal[RULES]  # type: ignore[valid-type]

# ScoreInputError, ConfigError, InputError and UnknownName are ValueErrors; a missing BEM is a RuntimeError;
# an unreadable file or an unwritable journal folder an OSError.
_ERRORS = (ValueError, RuntimeError, OSError)


def _show(make_report: Callable[[], ScoreReport], as_json: bool) -> ScoreReport:
    """Run the job; print its notes (stderr), then the JSON summary or the table and footer."""
    try:
        report = make_report()
    except _ERRORS as exc:
        fail(exc)
    for line in report.notes:
        typer.echo(line, err=True)
    if as_json:
        emit_json(report.summary)
        return report
    from kbvqa.report.tables import ResultTable, wrap_text

    print_result(ResultTable("score", report.title, "", report.header, report.rows))
    for line in report.footer:
        typer.echo(wrap_text(line))
    return report


_PRED = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False,
                     help="JSONL {data_id, prediction} or kbvqa Prediction {sample_id, answer}.")
_PER_ITEM = typer.Option(None, "--per-item", dir_okay=False, help="Write one JSON line per item.")
_JSON = typer.Option(False, "--json", help="Print exactly one JSON object on stdout.")
_JUDGE_URL = typer.Option(None, "--judge-base-url", help="OpenAI-compatible judge server.")
_JUDGE_MODEL = typer.Option(None, "--judge-model", help="Judge model name; PROVIDER/NAME (ollama/, vllm/, sglang/, "
                                                        "lmstudio/, openai/) needs no --judge-base-url.")
_JUDGE_REPLAY = typer.Option(None, "--judge-replay", exists=True, dir_okay=False,
                             help="Answer judge calls from a recorded cassette.")
_ROLE = typer.Option(None, "--judge-role", help="Model role used as the judge (default 'judge' with --config).")
GradedText = Literal["full", "short"]  # kbvqa.pipelines.score_options.GradedText (that module loads the runner)
# The judge jobs' settings: default None = not given (the config file's table, else the options class's
# default, applies); `with_defaults` adds the class default to their --help.
_GRADED_HELP = ("What the judge grades: full = the whole answer, image tags removed; short = only the short "
                "answer (an agent answer's first sentence; scorer simpleqa-judge[short-answer], not comparable "
                "with full).")
_GRADED = typer.Option(None, "--graded-text", help=_GRADED_HELP)
_JOB_RESUME = typer.Option(None, "--resume/--no-resume", help="Keep verdicts already in the journal; re-send only "
                                                              "failed and unusable calls (--no-resume moves it aside).")
_JOB_CONFIG = typer.Option(None, "--config", exists=True, dir_okay=False,
                           help="kbvqa.toml: the judge is its [models.<role>] entry; the command's own table "
                                "([score.judge], [score.ivr12]) sets its options (flags win).")
_CONCURRENCY = typer.Option(None, "--concurrency", min=1, help="Judge requests in flight.")


@flag_group
class JudgeServer:
    """The judge model asked directly: --judge-base-url, --judge-model, --judge-replay."""

    judge_base_url: Optional[str] = _JUDGE_URL
    judge_model: Optional[str] = _JUDGE_MODEL
    judge_replay: Optional[Path] = _JUDGE_REPLAY


@app.command("infoseek")
def infoseek(
    predictions: Path = _PRED,
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="Official InfoSeek JSONL, kbvqa JSONL, or ARA CSV."),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", exists=True, dir_okay=False,
                                          help="InfoSeek question-type JSONL {data_id, question_type}."),
    mode: InfoSeekMode = typer.Option("official", "--mode", help="; ".join(
        f"{METRICS.entry(n).info['mode']}: {METRICS.entry(n).help}" for n in METRICS.names(family="infoseek"))),
    per_item: Optional[Path] = _PER_ITEM,
    as_json: bool = _JSON,
    no_time_leniency: bool = typer.Option(False, "--no-time-leniency", help="strict mode: disable the Time extension."),
) -> None:
    """InfoSeek accuracy (official / strict / reward)."""
    from kbvqa.pipelines.score import score_infoseek_files

    _show(lambda: score_infoseek_files(predictions, references, qtypes=qtypes, mode=mode, per_item=per_item,
                                       time_leniency=not no_time_leniency), as_json)


@command(app, "evqa", cls=with_defaults("kbvqa.pipelines.score_options:EvqaOptions"))
def evqa(
    predictions: Path = _PRED,
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="E-VQA CSV with a data_id column, or kbvqa JSONL."),
    per_item: Optional[Path] = _PER_ITEM,
    as_json: bool = _JSON,
    bem_dir: Optional[Path] = typer.Option(None, "--bem-dir", help="Local BEM model directory (see evqa.load_bem)."),
    server: JudgeServer = GROUP,
    judge_concurrency: Optional[int] = typer.Option(None, "--judge-concurrency", min=1,
                                                    help="Judge requests in flight."),
    config: Optional[Path] = typer.Option(None, "--config", exists=True, dir_okay=False,
                                          help="kbvqa.toml: the judge is its [models.<role>] entry; [score.evqa] "
                                               "sets this command's options (flags win)."),
    judge_role: Optional[str] = _ROLE,
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False, help="LLM judge journal (default "
                                       "<predictions stem>.evqa-judge.jsonl); its manifest is written beside it."),
    resume: Optional[bool] = _JOB_RESUME,
    semantic: Optional[bool] = typer.Option(None, "--semantic/--no-semantic",
                                            help="EM-failure fallback: semantic-approx (all-MiniLM-L6-v2 cosine, "
                                                 "not BEM)."),
    semantic_threshold: Optional[float] = typer.Option(None, "--semantic-threshold",
                                                       help="Cosine threshold for --semantic."),
    semantic_model_dir: Optional[Path] = typer.Option(None, "--semantic-model-dir", file_okay=False,
                                                      help="Local sentence-transformers model (default MiniLM)."),
    limits: ModelLimits = GROUP,
) -> None:
    """E-VQA accuracy: exact match, then an optional equivalence backend when EM fails
    (BEM from --bem-dir, an LLM judge, or --semantic; at most one)."""
    from kbvqa.cli.options import flags
    from kbvqa.pipelines.score import judge_of, score_evqa_files
    from kbvqa.pipelines.score_options import EvqaOptions, from_config

    settings = flags(EvqaOptions, ungrouped(locals()))

    def job() -> ScoreReport:
        opts = from_config(EvqaOptions, **settings)
        return score_evqa_files(predictions, references, opts, judge=judge_of(opts), out=out, per_item=per_item,
                                progress=not as_json)

    run = (_show(job, as_json).summary.get("judge") or {}).get("run") or {}
    if run.get("out"):  # the LLM judge's calls (exact-match failures only) end by what its journal holds
        end_journal_job(run["out"], what="judge verdict(s)")


@command(app, "judge", cls=with_defaults("kbvqa.pipelines.score_options:JudgeOptions"))
def judge(
    predictions: Path = _PRED,
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="kbvqa JSONL or CSV (data_id, problem/question, answer)."),
    server: JudgeServer = GROUP,
    config: Optional[Path] = _JOB_CONFIG,
    judge_role: Optional[str] = _ROLE,
    concurrency: Optional[int] = _CONCURRENCY,
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False, help="Per-item journal (default "
                                       "<predictions stem>.judge.jsonl); its manifest is written beside it."),
    resume: Optional[bool] = _JOB_RESUME,
    per_item: Optional[Path] = _PER_ITEM,
    as_json: bool = _JSON,
    graded_text: Optional[GradedText] = _GRADED,  # type: ignore[valid-type]
    limits: ModelLimits = GROUP,
) -> None:
    """SimpleQA-style grading (correct / incorrect / not_attempted) of the whole answer, or of its short
    answer with --graded-text short; a paragraph gold (NoteVQA layout, or over 40 words) is graded on its
    conclusion (judge.paragraph). accuracy = correct / all responses (seed 001's), accuracy_graded =
    correct / graded, with invalid and error counted beside them."""
    from kbvqa.cli.options import flags
    from kbvqa.pipelines.score import judge_files, judge_of
    from kbvqa.pipelines.score_options import JudgeOptions, from_config

    settings = flags(JudgeOptions, ungrouped(locals()))

    def job() -> ScoreReport:
        opts = from_config(JudgeOptions, **settings)
        return judge_files(predictions, references, judge_of(opts), opts, out=out, per_item=per_item,
                           progress=not as_json)

    end_journal_job(_show(job, as_json).summary["out"], what="verdict(s)")  # exit 3/4 by what the journal holds


@app.command("retrieval")
def retrieval(
    records: Path = typer.Option(..., "--records", exists=True, dir_okay=False,
                                 help="JSONL {id, retrieved: [urls], stage: initial|post}."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="kbvqa JSONL (entity.url) or CSV with wikipedia_url."),
    k: str = typer.Option("1,3,5,10,20", "--k", help="Comma-separated K values."),
    two_hop: TwoHop = typer.Option("any", "--two-hop", help="Several gold urls: any one in top K, or all of them."),
    texts: Optional[Path] = typer.Option(None, "--texts", exists=True, dir_okay=False,
                                         help="JSONL {url, text}: adds answer-in-retrieved-text recall."),
    as_json: bool = _JSON,
) -> None:
    """Recall@K and MRR per retrieval stage (missing records count as misses)."""
    from kbvqa.pipelines.score import score_retrieval_files

    _show(lambda: score_retrieval_files(records, references, ks=parse_ks(k), two_hop=two_hop, texts=texts), as_json)


@app.command("convert-predictions")
def convert_predictions(
    source: Path = typer.Argument(..., exists=True, help="The method's output file or directory."),
    method: MethodName = typer.Option(..., "--method", help="Output format: " + "; ".join(
        f"{e.name}: {e.help}" for e in METHODS)),
    out: Path = typer.Option(..., "--out", "-o", dir_okay=False, help="kbvqa prediction JSONL to write."),
    references: Optional[Path] = typer.Option(None, "--references", "-r", exists=True, dir_okay=False,
                                              help="Align ids: missing/unknown counted, unknown dropped."),
    dataset: Dataset = typer.Option("infoseek", "--dataset", help="Which benchmark (IBA reads more keys for evqa)."),
    duplicates: Duplicates = typer.Option("error", "--duplicates",
                                          help="error (default), or keep the last / first line per id."),
    id_key: str = typer.Option("data_id", "--id-key", help="generic: id key (dotted path)."),
    answer_key: str = typer.Option("prediction", "--answer-key", help="generic: answer key (dotted path)."),
    extract: Optional[str] = typer.Option(None, "--extract", help="generic: 'comem' to apply CoMEM's extraction."),
    raw_outputs: Optional[Path] = typer.Option(None, "--raw-outputs", exists=True, dir_okay=False,
                                               help="wikiprf legacy: *_raw_outputs.jsonl supplying the ids."),
    allow_gt_order: bool = typer.Option(False, "--allow-gt-order",
                                        help="wikiprf legacy: assign ids by reference row order (reported)."),
    rules: Rules = typer.Option("kbvqa", "--rules", help="Where kbvqa's parsing and the ARA authors' scripts "
                                "differ (CoMEM extraction): kbvqa's, or the authors' (named in the report)."),
    as_json: bool = typer.Option(False, "--json", help="Print the conversion report as one JSON object."),
) -> None:
    """Convert a published method's outputs to kbvqa prediction lines {data_id, prediction, method, parse_rule}."""
    from kbvqa.pipelines.score import convert_predictions as convert

    _show(lambda: convert(source, method, out, references=references, dataset=dataset, duplicates=duplicates,
                          id_key=id_key, answer_key=answer_key, extract=extract, raw_outputs=raw_outputs,
                          allow_gt_order=allow_gt_order, rules=rules), as_json)


@command(app, "ivr12", cls=with_defaults("kbvqa.pipelines.score_options:IVR12Options"))
def ivr12(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False,
                                     help="Agent prediction lines (answer with image tags, meta.provenance), or the "
                                          "NoteVQA references themselves (their `reference` is judged)."),
    samples: Path = typer.Option(..., "--samples", "-s", exists=True, dir_okay=False,
                                 help="The benchmark (question, short reference, query images), e.g. NoteVQA JSONL."),
    input_kind: Optional[str] = typer.Option(None, "--source", help="What --predictions holds: auto (NoteVQA lines "
                                             "with a `reference` are references), predictions or references."),
    config: Optional[Path] = _JOB_CONFIG,
    judge_role: Optional[list[str]] = typer.Option(None, "--judge-role", help="Model role used as a judge; repeat "
                                                   "for several judges (default 'judge' with --config)."),
    judge_base_url: Optional[str] = _JUDGE_URL,
    judge_model: Optional[list[str]] = typer.Option(None, "--judge-model", help="Judge model name; repeat for "
                                                    "several judges on one --judge-base-url."),
    judge_replay: Optional[Path] = _JUDGE_REPLAY,
    repeats: Optional[int] = typer.Option(None, "--repeats", min=1,
                                          help="Calls per group per judge (agreement by Krippendorff's α)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0.0,
                                                help="Judge temperature (with --repeats > 1 and none set: 0.7, "
                                                     "kbvqa's choice)."),
    rubric: Optional[Path] = typer.Option(None, "--rubric", exists=True, dir_okay=False,
                                          help="A rubric TOML (default: the packaged IVR-12 reconstruction)."),
    image_root: Optional[Path] = typer.Option(None, "--image-root", file_okay=False,
                                              help="Folder the samples' image paths are relative to (default: the samples file's "
                                                   "folder); answer images are under the predictions' folder."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Items and judge requests in flight."),
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False, help="Per-item verdict journal (default "
                                       "<predictions stem>.ivr12.jsonl); manifest and .summary.json beside it."),
    resume: Optional[bool] = _JOB_RESUME,
    require_complete: Optional[bool] = typer.Option(None, "--require-complete/--no-require-complete",
                                                    help="Exit 1 when any item ended invalid or error."),
    as_json: bool = _JSON,
    limits: ModelLimits = GROUP,
) -> None:
    """IVR-12 rubric judge for interleaved answers: 12 dimensions (1-5) in three groups and two gates, gated
    and ungated means with their denominators; a group or overall mean only where every dimension in it
    was judged by a model. Without a judge model, only what rules can measure (tags gate, and as rule
    measures non-redundancy, visual quality, conciseness), no group or overall mean; the rest is n/a."""
    from kbvqa.cli.common import print_result
    from kbvqa.cli.options import flags
    from kbvqa.pipelines.score import ivr12_files, judges_of
    from kbvqa.pipelines.score_options import IVR12Options, from_config
    from kbvqa.report.summaries import ivr12_terminal_tables

    settings = flags(IVR12Options, {**ungrouped(locals()), "rubric": None if rubric is None else str(rubric)})
    try:
        opts = from_config(IVR12Options, **settings)
        summary = ivr12_files(predictions, samples, judges_of(opts), opts, out=out, progress=not as_json)
    except _ERRORS as exc:
        fail(exc)
    if as_json:
        for w in summary["warnings"]:  # without --json they are printed under the table
            typer.echo(f"warning: {w}", err=True)
        emit_json(summary)
    else:
        from kbvqa.report.tables import wrap_text

        for table in ivr12_terminal_tables(summary):  # the full table: --json, report build
            print_result(table)
        typer.echo(wrap_text(f"journal {summary['out']}, manifest {summary['manifest']}, summary {summary['summary']}"))
    if opts.require_complete and not summary["complete"]:
        st = summary["status"]
        fail(f"--require-complete: {st['invalid']} invalid and {st['error']} error items in {summary['out']} "
             "(run again to retry them)", code=1)
    end_journal_job(summary["out"], what="item(s)")


@app.command("ivr12-compare")
def ivr12_compare(
    a: Path = typer.Argument(..., exists=True, dir_okay=False, help="IVR-12 summary A (e.g. the references)."),
    b: Path = typer.Argument(..., exists=True, dir_okay=False, help="IVR-12 summary B (e.g. the agent's answers)."),
    names: Optional[str] = typer.Option(None, "--names", help="Labels of A and B, e.g. references,agent."),
    allow_different_rubrics: bool = typer.Option(False, "--allow-different-rubrics",
                                                 help="Compare summaries made under different rubric files."),
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False,
                                       help="Also write the comparison as JSON (kind ivr12-compare) for reports."),
    as_json: bool = _JSON,
) -> None:
    """Two IVR-12 runs side by side with per-dimension gaps A - B (seed 001 Table 3 shape): a gap only for a
    dimension measured the same way on both sides, an overall gap only when both overalls exist."""
    from kbvqa.cli.common import print_result
    from kbvqa.pipelines.score import ivr12_compare_files
    from kbvqa.report.summaries import ivr12_compare_terminal_table

    labels = [x.strip() for x in names.split(",")] if names else None
    if labels is not None and (len(labels) != 2 or not all(labels)):
        fail(f"--names takes two non-empty labels separated by a comma, got {names!r}")
    try:
        res = ivr12_compare_files(a, b, names=(labels[0], labels[1]) if labels else None,
                                  allow_different_rubrics=allow_different_rubrics, out=out)
    except _ERRORS as exc:
        fail(exc)
    if as_json:
        emit_json(res)
    else:
        print_result(ivr12_compare_terminal_table(res))  # the full table: --json / --out, report build
