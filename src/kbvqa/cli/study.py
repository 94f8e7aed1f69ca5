"""`kbvqa study ...`: grouped accuracy with CIs, unfixed-vs-fixed comparisons, with/without retrieval,
Recall@K per augmentation variant.

Each command prints a table (or one JSON object with --json) and, with --out DIR, writes
DIR/<kind>.study.json and renders the results folder (tables, plots, index.html) unless --no-report.
Predictions are kbvqa JSONL ({data_id, prediction} or {sample_id, answer}); convert method outputs
first with `kbvqa score convert-predictions`. The studies themselves are kbvqa.evaluate.studies and
kbvqa.pipelines.augment.study (retrieve, then kbvqa.evaluate.augmentation); the tables are
kbvqa.report.summaries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Literal, Optional

import typer

from kbvqa.cli.common import (emit_json, emit_result, end_job, fail, include_dropped_option, journal_reasons,
                              print_result, run_or_fail)
from kbvqa.cli.flag_groups import GROUP, ModelLimits, command, flag_group, make_flag_group, ungrouped
from kbvqa.cli.options import default_from, with_defaults
from kbvqa.evaluate.scorers import SCORERS, paper_scorer

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Studies: accuracy by group with bootstrap CIs, split comparisons and ranking "
                       "reversals, with/without-retrieval 2x2.")
app.callback()(include_dropped_option)  # --include-dropped: audited references with drop rows

#: What a study's inputs can get wrong: a bad file (ScoreInputError is a ValueError), a bad flag value.
_INPUT_ERRORS = (ValueError, FileNotFoundError)


# The --scorer choices are the registry's names: typer lists them in --help and refuses anything else.
ScorerName = Literal[tuple(SCORERS.names())]  # type: ignore[valid-type]
_SCORER = typer.Option(None, "--scorer", help="Per-item scorer (default: seed 000's metric for the references' "
                       "benchmark: infoseek-official for InfoSeek, evqa-bem for E-VQA, which needs --bem-dir): "
                       + "; ".join(f"{e.name}: {e.help}" for e in SCORERS))
_BEM_DIR = typer.Option(None, "--bem-dir", exists=True, file_okay=False,
                        help="evqa-bem: a local BEM model directory (transformers BertForSequenceClassification).")


def _scorer_for(scorer: Optional[str], references: Path) -> str:
    """The scorer asked for, or the paper's for these references (said on stderr, and named in every table)."""
    if scorer is not None:
        return scorer
    chosen = paper_scorer(references)
    typer.echo(f"scorer: {chosen} (seed 000's metric for these references; --scorer chooses another)", err=True)
    return chosen
# The studies' defaults are written once, in modules that load numpy: read when the flag is left out, shown in
# --help by the commands' `cls=_DEFAULTS`.
_RESAMPLES_FROM = "kbvqa.evaluate.studies:DEFAULT_RESAMPLES"
_THRESHOLD_FROM = "kbvqa.evaluate.semantic:DEFAULT_THRESHOLD"
_DEFAULTS = with_defaults(resamples=_RESAMPLES_FROM, semantic_threshold=_THRESHOLD_FROM)
_RESAMPLES = typer.Option(None, "--resamples", min=1, callback=default_from(_RESAMPLES_FROM),
                          help="Bootstrap resamples.")
_SEED = typer.Option(0, "--seed", help="Bootstrap seed (same seed, same intervals).")
_THRESHOLD = typer.Option(None, "--semantic-threshold", callback=default_from(_THRESHOLD_FROM),
                          help="evqa-semantic: similarity threshold.")
_QTYPES = typer.Option(None, "--qtypes", exists=True, dir_okay=False,
                       help="InfoSeek question-type JSONL (official references).")
_OUT = typer.Option(None, "--out", file_okay=False, help="Results folder.")
_NO_REPORT = typer.Option(False, "--no-report", help="With --out: write only the JSON.")
_JSON = typer.Option(False, "--json", help="Print the result as one JSON object.")


def _finish(res: dict[str, Any], out: Optional[Path], report: bool, as_json: bool) -> None:
    """Save (with --out), render the folder's report (unless --no-report), print the result."""
    from kbvqa.evaluate.studies import save_study
    from kbvqa.report.summaries import study_table

    if out is not None:
        typer.echo(f"wrote {save_study(out, res)}", err=True)
        if report:
            from kbvqa.report.results import build_report, collect_inputs

            built = build_report(collect_inputs(out), out, title=f"kbvqa study: {out.name}")
            typer.echo(f"report: {built.html} ({len(built.tables)} table files, {len(built.plots)} plots)", err=True)
    emit_result(res, as_json, study_table)


_GROUNDED = typer.Option(None, "--grounded", help="Restrict to the grounded subset: items whose final evidence in "
                                                  "these predictions is the gold entity (PATH or NAME=PATH; repeat "
                                                  "for the subset grounded in every run).")
_GROUNDED_STAGE = typer.Option("post", "--grounded-stage", help="Final evidence: post (reranked), initial, any stage "
                                                                "of the retrieval trail, or pool (the evidence_used "
                                                                "sections the answer read).")
#: --grounded-k's and --k's help: which of a retrieval stage's ranks count.
_K_HELP = ("Top-k of a retrieval stage that counts (default: 1, or the whole stage when it is an aggregated pool, "
           "as Wiki-PRF post stage; not for pool).")
_GROUNDED_K = typer.Option(None, "--grounded-k", min=1, help=_K_HELP)
_GROUNDED_REFS = typer.Option(None, "--grounded-references", exists=True, dir_okay=False,
                              help="Gold entities for --grounded (default: the study's (fixed) references).")
_EXAMPLES = typer.Option(5, "--examples", min=0, help="Example ids per row.")


# The flag groups the study commands share (kbvqa.cli.flag_groups): a command names each as one parameter.

@flag_group
class Bootstrap:
    """--resamples and --seed of the seeded bootstrap CIs."""

    resamples: int = _RESAMPLES
    seed: int = _SEED

    def kwargs(self) -> dict[str, Any]:
        return {"n_resamples": self.resamples, "seed": self.seed}


@flag_group
class ScorerTuning:
    """The settings of the scorers that need one (evqa-semantic's threshold, evqa-bem's model)."""

    semantic_threshold: float = _THRESHOLD
    bem_dir: Optional[Path] = _BEM_DIR

    def kwargs(self) -> dict[str, Any]:
        return {"semantic_threshold": self.semantic_threshold, "bem_dir": self.bem_dir}


@flag_group
class Output:
    """--out (results folder), --no-report, --json."""

    out: Optional[Path] = _OUT
    no_report: bool = _NO_REPORT
    as_json: bool = _JSON


@flag_group
class Grounded:
    """--grounded and its settings: restrict a study to the items grounded in some runs."""

    grounded: Optional[list[str]] = _GROUNDED
    grounded_stage: str = _GROUNDED_STAGE
    grounded_k: Optional[int] = _GROUNDED_K
    grounded_references: Optional[Path] = _GROUNDED_REFS

    def subset(self, references: Optional[Path]) -> Any:
        """The grounded subset --grounded asks for (None without it); gold entities from
        --grounded-references, else `references`."""
        if not self.grounded:
            return None
        from kbvqa.evaluate.analyses import grounded_subset

        return grounded_subset(self.grounded, self.grounded_references or references, stage=self.grounded_stage,
                               k=self.grounded_k)


def _judge_flags(table: str, judge: str, role_help: str) -> type:
    """The flags naming a study's judge: --config (its [models.<role>] and the [`table`] of options), --judge-*."""
    return make_flag_group(f"JudgeFlags[{table}]", [
        ("config", Optional[Path], typer.Option(None, "--config", exists=True, dir_okay=False,
                                                help=f"kbvqa.toml: {judge} is its [models.<role>]; [{table}] sets "
                                                     "this command's options (flags win).")),
        ("judge_role", Optional[str], typer.Option(None, "--judge-role", help=role_help)),
        ("judge_base_url", Optional[str], typer.Option(None, "--judge-base-url",
                                                       help="OpenAI-compatible judge server.")),
        ("judge_model", Optional[str], typer.Option(None, "--judge-model")),
        ("judge_replay", Optional[Path], typer.Option(None, "--judge-replay", exists=True, dir_okay=False))])


def _journal_flags(journal_help: str, kept: str) -> type:
    """A judging study's --concurrency, --journal (`journal_help`) and --resume (keeping the journal's `kept`)."""
    return make_flag_group("JournalFlags", [
        ("concurrency", Optional[int], typer.Option(None, "--concurrency", min=1, help="Judge requests in flight.")),
        ("journal", Optional[Path], typer.Option(None, "--journal", dir_okay=False, help=journal_help)),
        ("resume", Optional[bool], typer.Option(None, "--resume/--no-resume",
                                                help=f"Keep the journal's {kept}; re-send failed and unusable "
                                                     "calls (--no-resume moves it aside)."))])


_TOOLS_JUDGE = _judge_flags("study.agent-tools", "the evidence judge", "Role that judges useful evidence.")
_TOOLS_JOURNAL = _journal_flags("Per-call evidence verdicts (default PREDICTIONS.evidence.jsonl).", "verdicts")
_FAILURES_JUDGE = _judge_flags("study.agent-failures", "the judge", "Role that judges (default judge).")
_FAILURES_JOURNAL = _journal_flags("Per-episode verdicts (default PREDICTIONS.failures.jsonl).", "categories")


def _run(study: Callable[[], dict[str, Any]], output: Output, errors: tuple[type[Exception], ...] = _INPUT_ERRORS
         ) -> dict[str, Any]:
    """Every study's sequence: run it (a bad input is one error line, exit 2), then `_finish`."""
    res = run_or_fail(study, errors)
    _finish(res, output.out, not output.no_report, output.as_json)
    return res


@command(app, "by-type", cls=_DEFAULTS)
def by_type(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False),
    by: str = typer.Option("question_type", "--by", help="Reference field, CSV column or meta key (meta.KEY)."),
    scorer: Optional[ScorerName] = _SCORER,  # type: ignore[valid-type]
    qtypes: Optional[Path] = _QTYPES,
    name: str = typer.Option("", "--name", help="Method name shown in tables (default: the file stem)."),
    grounded: Grounded = GROUP,
    bootstrap: Bootstrap = GROUP,
    tuning: ScorerTuning = GROUP,
    output: Output = GROUP,
) -> None:
    """Accuracy per question type (or any reference field) with seeded bootstrap 95% CIs."""
    from kbvqa.evaluate.studies import by_type_study

    _run(lambda: by_type_study(predictions, references, subset=grounded.subset(references),
                               scorer=_scorer_for(scorer, references), by=by, qtypes=qtypes, label=name,
                               **bootstrap.kwargs(), **tuning.kwargs()), output)


@command(app, "compare", cls=_DEFAULTS)
def compare(
    references_a: Path = typer.Option(..., "--references-a", exists=True, dir_okay=False, help="e.g. unfixed."),
    references_b: Path = typer.Option(..., "--references-b", exists=True, dir_okay=False, help="e.g. fixed."),
    method: list[str] = typer.Option(..., "--method", help="NAME=PRED.jsonl (scored on both splits) or "
                                                           "NAME=PRED_A.jsonl,PRED_B.jsonl; repeat per method."),
    scorer: Optional[ScorerName] = _SCORER,  # type: ignore[valid-type]
    names: str = typer.Option("A,B", "--split-names", help="Labels of the two splits, e.g. unfixed,fixed."),
    qtypes: Optional[Path] = _QTYPES,
    allow_partial: bool = typer.Option(False, "--allow-partial",
                                       help="Pair on the common ids when the splits differ (counts reported)."),
    grounded: Grounded = GROUP,
    bootstrap: Bootstrap = GROUP,
    tuning: ScorerTuning = GROUP,
    output: Output = GROUP,
) -> None:
    """Per-method accuracy on two aligned splits, paired deltas with CIs, and ranking reversals."""
    from kbvqa.evaluate.studies import compare_study, parse_method_specs

    split_names = tuple(x.strip() for x in names.split(","))
    _run(lambda: compare_study(references_a, references_b, parse_method_specs(method),
                               subset=grounded.subset(references_b), scorer=_scorer_for(scorer, references_a),
                               split_names=split_names, qtypes=qtypes, allow_partial=allow_partial,  # type: ignore[arg-type]
                               **bootstrap.kwargs(), **tuning.kwargs()), output)


@command(app, "retrieval-2x2", cls=_DEFAULTS)
def retrieval_2x2(
    with_pred: Path = typer.Option(..., "--with", exists=True, dir_okay=False, help="Run with retrieval."),
    without_pred: Path = typer.Option(..., "--without", exists=True, dir_okay=False, help="Run without retrieval."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False),
    scorer: Optional[ScorerName] = _SCORER,  # type: ignore[valid-type]
    qtypes: Optional[Path] = _QTYPES,
    bootstrap: Bootstrap = GROUP,
    tuning: ScorerTuning = GROUP,
    output: Output = GROUP,
) -> None:
    """Both correct / only with retrieval / only without / neither, for two runs of one model."""
    from kbvqa.evaluate.studies import retrieval_2x2_study

    _run(lambda: retrieval_2x2_study(with_pred, without_pred, references, _scorer_for(scorer, references),
                                     qtypes=qtypes, **bootstrap.kwargs(), **tuning.kwargs()), output)


@app.command("augmentation-recall")
def augmentation_recall(
    samples: Optional[Path] = typer.Option(None, "--samples", help="Augmented samples (`kbvqa augment` OUT/"
                                                                   "samples.jsonl): retrieve with --index, in one go."),
    index: Optional[Path] = typer.Option(None, "--index", help="Image index (`kbvqa index images`) to retrieve with."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The index encoder's local model dir."),
    records: Optional[list[Path]] = typer.Option(None, "--records", help="Or: retrieval records already made, "
                                                                         "ids suffixed __anchor/__intra/__inter/"
                                                                         "__blank/__double (one or more files)."),
    references: Optional[Path] = typer.Option(None, "--references", help="Gold urls: kbvqa JSONL or CSV with "
                                                                          "wikipedia_url (default: --samples)."),
    ks: str = typer.Option("1,3,5,10,20", "--ks", help="Comma-separated K values (Table 2's; an item without a "
                                                       "record is a miss)."),
    stage: str = typer.Option("initial", "--stage", help="Which retrieval stage to tabulate."),
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False,
                                       help="Also write the study JSON here, e.g. study/augmentation-recall.study.json "
                                            "for `kbvqa report build study/` (and, when this command retrieved, "
                                            "the records beside it)."),
    as_json: bool = _JSON,
) -> None:
    """Augmentation study (seed 000's Table 2): Recall@K per variant side by side, deltas against the anchor."""
    from kbvqa.pipelines.augment.study import augmentation_recall as recall_study
    from kbvqa.report.summaries import recall_by_variant_table
    from kbvqa.report.tables import to_markdown

    try:
        k_values = [int(x) for x in ks.split(",") if x.strip()]
        rows = recall_study(records=records or (), samples=samples, index=index, references=references,
                            model_dir=model_dir, ks=k_values, stage=stage,
                            records_out=out.with_name(out.stem + ".records.jsonl") if out else None)
    except (OSError, ValueError, KeyError) as exc:
        fail(exc)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        study = {"kind": "augmentation-recall", "scorer": "kbvqa retrieval metrics (canonical URLs, de-duplicated)",
                 "stage": stage, "ks": k_values, "rows": rows}
        out.write_text(json.dumps(study, indent=2), encoding="utf-8")
    if as_json:
        emit_json(rows)
    else:
        typer.echo(to_markdown(recall_by_variant_table(rows, stage=stage)), nl=False)


@command(app, "agent-tools", cls=with_defaults("kbvqa.pipelines.score_options:AgentToolsOptions"))
def agent_tools(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False,
                                     help="Agent predictions (`kbvqa answer --pipeline agent`)."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                     help="The benchmark (answers and aliases for the evidence hit rate)."),
    verdicts: Optional[Path] = typer.Option(None, "--verdicts", exists=True, dir_okay=False,
                                            help="`kbvqa score judge` output for these predictions: splits tool use "
                                                 "by correct / non-correct (incorrect, not attempted, no answer)."),
    baseline_verdicts: Optional[Path] = typer.Option(
        None, "--baseline-verdicts", exists=True, dir_okay=False,
        help="`kbvqa score judge` output for a single-pass run of the same model (`--pipeline direct`): tool use "
             "per with/without-retrieval group (both correct, search helps, search hurts, both wrong; needs "
             "--verdicts)."),
    judge: _TOOLS_JUDGE = GROUP,  # type: ignore[valid-type]
    evidence_chars: Optional[int] = typer.Option(None, "--evidence-chars", min=1,
                                                 help="Characters of each observation checked for evidence."),
    judging: _TOOLS_JOURNAL = GROUP,  # type: ignore[valid-type]
    output: Output = GROUP,
    limits: ModelLimits = GROUP,
) -> None:
    """Search-agent tool usage (seed 001 Table 4 shape): calls per tool (repeated and over-quota calls
    counted and shown) — per outcome group of the with/without-retrieval 2x2 given --baseline-verdicts —
    useful-evidence hit rates over every call and over ok calls (a judge's with --judge-*, else the
    offline verbatim rule, which says "needs a model" on paragraph references), how many episodes each
    termination ended, image-tag validity, leakage flags."""
    from kbvqa.cli.options import flags
    from kbvqa.pipelines.score import agent_tools as run_tools
    from kbvqa.pipelines.score import judge_of
    from kbvqa.pipelines.score_options import AgentToolsOptions, from_config

    settings = flags(AgentToolsOptions, ungrouped(locals()))

    def study() -> dict[str, Any]:
        opts = from_config(AgentToolsOptions, **settings)
        return run_tools(predictions, references, verdicts, baseline_verdicts, judge_of(opts), opts,
                         out=judging.journal)

    res = _run(study, output)
    asked = res.get("evidence_requests")
    if asked and asked["calls"]:  # the evidence judge ran: its failures in the exit code, as every judge job
        end_job(asked["ok"], {"error": asked["error"], "invalid": asked["invalid"]}, what="call(s) to judge",
                reasons=journal_reasons(res["evidence_journal"]) if asked["error"] or asked["invalid"] else None)


@command(app, "agent-failures", cls=with_defaults("kbvqa.pipelines.score_options:AgentFailureOptions"))
def agent_failures(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False),
    verdicts: Path = typer.Option(..., "--verdicts", exists=True, dir_okay=False,
                                  help="`kbvqa score judge` output: every non-correct episode (incorrect, not "
                                       "attempted, no answer) is categorised; invalid or failed verdicts are counted "
                                       "apart."),
    judge: _FAILURES_JUDGE = GROUP,  # type: ignore[valid-type]
    judging: _FAILURES_JOURNAL = GROUP,  # type: ignore[valid-type]
    output: Output = GROUP,
    limits: ModelLimits = GROUP,
) -> None:
    """Failure categories of every non-correct agent episode by a judge role (seed 001 Table 5 shape):
    T1-T4 tool-related, N1-N2 not (seed 001 names only T3; the other wordings are kbvqa's). Unusable
    category replies are counted as invalid; episodes with invalid or failed verdicts, or whose record
    failed, are counted apart."""
    from kbvqa.cli.options import flags
    from kbvqa.pipelines.score import agent_failures as run_failures
    from kbvqa.pipelines.score import judge_of
    from kbvqa.pipelines.score_options import AgentFailureOptions, from_config

    settings = flags(AgentFailureOptions, ungrouped(locals()))

    def study() -> dict[str, Any]:
        opts = from_config(AgentFailureOptions, **settings)
        return run_failures(predictions, references, verdicts, judge_of(opts), opts, out=judging.journal)

    res = _run(study, output)
    # the table's counts (its episodes only: a journal line of an episode since graded correct is not one)
    end_job(res["categorised"], {"error": res["error"], "invalid": res["invalid"]}, what="episode(s) to categorise",
            reasons=journal_reasons(res["out"]) if res["error"] or res["invalid"] else None)


@command(app, "image-ablation", cls=with_defaults("kbvqa.pipelines.ablation:AblationOptions"))
def image_ablation(
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="NoteVQA-style JSONL whose reference.text cites reference.images with "
                                         "<image>{\"candidate_images\": N}</image> tags (paths relative to the file)."),
    out: Path = typer.Option(..., "--out", file_okay=False,
                             help="Results folder: one journal + manifest per model step, probes.jsonl and "
                                  "image-ablation.study.json."),
    config: Optional[Path] = typer.Option(None, "--config", exists=True, dir_okay=False,
                                          help="kbvqa.toml: the three parts are its models.<role> tables; its "
                                               "[study.image-ablation] table sets this command's options (flags win)."),
    generator_role: Optional[str] = typer.Option(None, "--generator-role",
                                                 help="Multimodal role that writes the probes."),
    reader_role: Optional[str] = typer.Option(None, "--reader-role", help="Multimodal role that answers them."),
    judge_role: Optional[str] = typer.Option(None, "--judge-role", help="Role that grades the answers (text only)."),
    reader_temperature: Optional[float] = typer.Option(None, "--reader-temperature", min=0,
                                                       help="The reader's sampling temperature (over the role's); "
                                                            "0 makes the full condition repeat the control."),
    reader_seed: Optional[int] = typer.Option(None, "--reader-seed",
                                              help="Base of the reader's per-request seeds: the control and the "
                                                   "conditions of a probe send different ones."),
    llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible server for all three parts."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on --llm."),
    probes_per_kind: Optional[int] = typer.Option(None, "--probes-per-kind", min=1,
                                                  help="Image-critical and text-answerable probes per reference "
                                                       "(each)."),
    resamples: Optional[int] = typer.Option(None, "--resamples", min=1, help="Bootstrap resamples."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Bootstrap seed (same seed, same intervals)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Requests in flight per step."),
    resume: Optional[bool] = typer.Option(None, "--resume/--no-resume", help="Send again only what failed or is new."),
    no_report: bool = _NO_REPORT,
    as_json: bool = _JSON,
    limits: ModelLimits = GROUP,
) -> None:
    """Image ablation of interleaved references (seed 001 §4.3, Tables 6-7 shape): probes written from
    each reference, a positive control, the reader with image tags removed / replaced by "image N"
    placeholders / images inline (read again, with another seed than the control's), a text-only judge;
    accuracy with cluster-bootstrap CIs and paired differences."""
    from kbvqa.cli.options import flags
    from kbvqa.data.errors import DataError
    from kbvqa.pipelines.ablation import AblationOptions, ablation_models, image_ablation_study
    from kbvqa.report.summaries import image_ablation_tables
    from kbvqa.runner.options import read_table

    try:
        opts = AblationOptions.build(read_table(config, "study.image-ablation"), source=str(config),
                                     **flags(AblationOptions, ungrouped(locals())))
        res = image_ablation_study(references, out, ablation_models(opts), opts, progress=not as_json)
    except (*_INPUT_ERRORS, DataError) as exc:
        fail(exc)
    if as_json:  # the table's notes carry them otherwise
        for w in res["warnings"]:
            typer.echo(f"warning: {w}", err=True)
    _finish(res, out, not no_report, as_json)
    if not as_json:
        for table in image_ablation_tables(res)[1:]:
            print_result(table)
    g = res["counts"]["generation"]  # no probe generated: the study ran and measured nothing (exit 3)
    end_job(g.get("ok", 0), {s: g.get(s, 0) for s in ("error", "invalid")}, what="probe generation(s)",
            reasons=[f.get("reason", "") for f in res.get("generation_failures", [])],
            hint="listed under generation_failures in the study JSON; --resume asks again")


# ---------------------------------------------------- seed 000's analyses (kbvqa.evaluate.analyses)

@command(app, "fix-kinds", cls=_DEFAULTS)
def fix_kinds(
    unfixed: Path = typer.Option(..., "--unfixed", exists=True, dir_okay=False, help="Predictions on the unfixed split."),
    fixed: Path = typer.Option(..., "--fixed", exists=True, dir_okay=False, help="The same method on the fixed split."),
    references_a: Path = typer.Option(..., "--references-a", exists=True, dir_okay=False, help="Unfixed references."),
    references_b: Path = typer.Option(..., "--references-b", exists=True, dir_okay=False, help="Fixed references."),
    audited: Optional[Path] = typer.Option(None, "--audited", exists=True, dir_okay=False,
                                           help="`kbvqa audit run` output: change kinds from its question_before / "
                                                "answers_before (default: the diff of the two reference files)."),
    scorer: Optional[ScorerName] = _SCORER,  # type: ignore[valid-type]
    qtypes: Optional[Path] = _QTYPES,
    name: str = typer.Option("", "--name", help="Method name shown in tables (default: the fixed file's stem)."),
    grounded: Grounded = GROUP,
    examples: int = typer.Option(3, "--examples", min=0, help="Example ids gained / lost per fix kind."),
    bootstrap: Bootstrap = GROUP,
    tuning: ScorerTuning = GROUP,
    output: Output = GROUP,
) -> None:
    """Accuracy before -> after the fix by what the audit changed (question only / answer only / both /
    nothing), paired on the same ids, with CIs (seed 000 §6.2, Appendix 0.D)."""
    from kbvqa.evaluate.analyses import fix_kinds_study

    _run(lambda: fix_kinds_study(unfixed, fixed, references_a, references_b, audited=audited,
                                 subset=grounded.subset(references_b), scorer=_scorer_for(scorer, references_a),
                                 qtypes=qtypes, label=name, examples=examples, **bootstrap.kwargs(),
                                 **tuning.kwargs()), output)


@command(app, "grounded", cls=_DEFAULTS)
def grounded_cmd(
    predictions: list[str] = typer.Option(..., "--predictions", "-p",
                                          help="PATH or NAME=PATH; repeat per run. kbvqa runs, converted files, or a "
                                               "method's file as released (EchoSight reranker JSON, IBA metadata/"
                                               "answers JSONL, Wiki-PRF generation/recall details JSONL)."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="Gold entities: kbvqa JSONL (entity.url) or CSV with wikipedia_url (the "
                                         "ARA augmented CSV too)."),
    stage: str = typer.Option("post", "--stage", help="post (the evidence the answer read: kbvqa rerank, EchoSight "
                                                      "reranked_entries, IBA selected_url, Wiki-PRF aggregated "
                                                      "pool), initial, any other stage, or pool (evidence_used); a "
                                                      "run without it is refused, naming the fields looked for."),
    k: Optional[int] = typer.Option(None, "--k", min=1, help=_K_HELP),
    ids_out: Optional[Path] = typer.Option(None, "--ids-out", dir_okay=False,
                                           help="Write the ids grounded in every run here, one per line."),
    bootstrap: Bootstrap = GROUP,
    output: Output = GROUP,
) -> None:
    """Post-retrieval recall per run (seed 000 Table 3): items whose final evidence is the gold entity,
    and the size of the subset grounded in every run."""
    from kbvqa.evaluate.analyses import grounded_study, grounded_subset

    def study() -> dict[str, Any]:
        res = grounded_study(predictions, references, stage=stage, k=k, **bootstrap.kwargs())
        if ids_out is not None:
            ids = sorted(grounded_subset(predictions, references, stage=stage, k=k).ids)
            ids_out.write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
            typer.echo(f"wrote {len(ids)} ids to {ids_out}", err=True)
        return res

    _run(study, output)


@command(app, "modification-rates", cls=_DEFAULTS)
def modification_rates(
    a: Path = typer.Argument(..., exists=True, dir_okay=False, help="Version A (before), any input format; or one "
                                                                    "audited file (its question_before / "
                                                                    "answers_before) without B."),
    b: Optional[Path] = typer.Argument(None, exists=True, dir_okay=False, help="Version B (after): the fixed split "
                                                                               "or the audited file."),
    fmt_a: Optional[str] = typer.Option(None, "--from-a"),
    fmt_b: Optional[str] = typer.Option(None, "--from-b"),
    tag_field: Optional[str] = typer.Option(None, "--tag-field", help="Tags from this meta key (e.g. "
                                                                      "meta.final_check_tag) instead of audit.tags."),
    bootstrap: Bootstrap = GROUP,
    output: Output = GROUP,
) -> None:
    """Share of questions and answers modified and of items dropped, per dataset and question type, with
    tags (seed 000 Table 6 shape); the same comparison as `kbvqa audit diff`."""
    from kbvqa.data.errors import DataError
    from kbvqa.evaluate.analyses import modification_rates_study

    _run(lambda: modification_rates_study(a, b, fmt_a=fmt_a, fmt_b=fmt_b, tag_field=tag_field,
                                          **bootstrap.kwargs()), output, (*_INPUT_ERRORS, DataError))


@command(app, "variants", cls=_DEFAULTS)
def variants(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False,
                                     help="Predictions on the augmented samples (ids __anchor, __intra, ...)."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="The augmented samples (`kbvqa augment` OUT/samples.jsonl), or the ARA "
                                         "augmented CSV as released (anchor / intra / inter per row)."),
    scorer: Optional[ScorerName] = _SCORER,  # type: ignore[valid-type]
    stage: str = typer.Option("post", "--stage", help="Post-retrieval recall from this stage of the predictions' "
                                                      "trails or the methods' own fields (post, initial, ..., "
                                                      "pool), or none (predictions without it are refused)."),
    k: Optional[int] = typer.Option(None, "--k", min=1, help=_K_HELP),
    by_type: Optional[bool] = typer.Option(None, "--by-type/--no-by-type",
                                           help="Columns per question type (default: for InfoSeek's types)."),
    qtypes: Optional[Path] = _QTYPES,
    name: str = typer.Option("", "--name", help="Method name shown in tables (default: the file stem)."),
    bootstrap: Bootstrap = GROUP,
    tuning: ScorerTuning = GROUP,
    output: Output = GROUP,
) -> None:
    """QA accuracy per augmentation variant by question type with the change against the anchor (seed
    000 Table 4), and post-retrieval recall per variant (Table 3), with CIs."""
    from kbvqa.evaluate.analyses import variants_study
    from kbvqa.report.summaries import variant_tables

    res = _run(lambda: variants_study(predictions, references, _scorer_for(scorer, references),
                                      stage=None if stage == "none" else stage, k=k, qtypes=qtypes, label=name,
                                      by_type=by_type, **bootstrap.kwargs(), **tuning.kwargs()), output)
    if not output.as_json:
        for table in variant_tables(res)[1:]:
            print_result(table)


@command(app, "buckets", cls=_DEFAULTS)
def buckets(
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False),
    method: list[str] = typer.Option(..., "--method", help="NAME=PRED.jsonl, or NAME=PRED_A.jsonl,PRED_B.jsonl with "
                                                           "--references-b; repeat per method."),
    scorer: Optional[ScorerName] = _SCORER,  # type: ignore[valid-type]
    references_b: Optional[Path] = typer.Option(None, "--references-b", exists=True, dir_okay=False,
                                                help="A second split (e.g. fixed): its patterns and the items whose "
                                                     "pattern changed."),
    names: str = typer.Option("A,B", "--split-names", help="Labels of the two splits, e.g. unfixed,fixed."),
    by_variant: bool = typer.Option(False, "--by-variant", help="The references are augmented samples: each "
                                                                "method's variants are the runs compared."),
    qtypes: Optional[Path] = _QTYPES,
    grounded: Grounded = GROUP,
    examples: int = _EXAMPLES,
    bootstrap: Bootstrap = GROUP,
    tuning: ScorerTuning = GROUP,
    output: Output = GROUP,
) -> None:
    """Correctness buckets: the 2^N patterns of which methods answer each item correctly, with counts and
    example ids; with --references-b, where the fix changed the pattern."""
    from kbvqa.evaluate.analyses import buckets_study
    from kbvqa.evaluate.studies import parse_method_specs
    from kbvqa.report.summaries import buckets_tables

    split_names = tuple(x.strip() for x in names.split(","))

    def study() -> dict[str, Any]:
        if len(split_names) != 2 or not all(split_names):
            raise ValueError(f"--split-names needs two non-empty names, got {names!r}")
        sub = grounded.subset(references_b or references)
        return buckets_study(references, parse_method_specs(method), _scorer_for(scorer, references),
                             references_b=references_b, split_names=split_names, by_variant=by_variant,  # type: ignore[arg-type]
                             subset=sub, qtypes=qtypes, examples=examples, **bootstrap.kwargs(), **tuning.kwargs())

    res = _run(study, output)
    if not output.as_json:
        for table in buckets_tables(res)[1:]:
            print_result(table)
