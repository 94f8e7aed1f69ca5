"""`kbvqa eval`: answer a benchmark and score the predictions in one run, with one results file.

The lmms-eval / VLMEvalKit / inspect_ai habit — one command, one results JSON — on top of the two jobs
kbvqa already has, kept separable:

1. **answer**: the same job `kbvqa answer` runs (`kbvqa.pipelines.answer.build_answer_job`, the same
   settings, roles, resume and manifest), writing `DIR/predictions.jsonl` and
   `DIR/predictions.retrieval.jsonl` exactly as `kbvqa answer --out DIR/predictions.jsonl` does;
2. **score**: every requested metric through the code `kbvqa score ...` runs (`kbvqa.pipelines.score`)
   or, for study scorers, the `SCORERS` registry (`kbvqa.evaluate.studies.score_items`) — no second
   implementation. Per-item verdicts go beside the predictions (`DIR/predictions.<metric>.jsonl`, the
   judge's journal `DIR/predictions.judge.jsonl`), where `kbvqa view DIR` finds them. The judge grades
   the whole answer, image tags removed, unless `--graded-text short` (scorer `simpleqa-judge[short-answer]`);
   every judge-based figure is given as `accuracy` (correct / all responses, seed 001's) and
   `accuracy_graded` (correct / graded) with n graded, n invalid and n error beside them
   (kbvqa.evaluate.judge);
3. **results**: `DIR/results.json` (kind `kbvqa-eval`): the config (keys redacted), the kbvqa version and
   git commit, the answer run (manifest, counts by status, usage) and per metric the scorer that produced
   it (name, detail, options, judge model), its values, its counts (n, missing, error / invalid
   predictions) and the scorer's own summary — the `kbvqa score ... --json` document.

Everything that can be checked is checked before anything runs (`prepare_eval`): metric names, the judge
a judge metric needs, the references every metric reads (loaded and dry-run through the scorer) and the
answer job itself. `run_eval` then answers, scores and writes the results file. No typer here: the
command line (`kbvqa.cli.eval`) only turns flags into an `EvalOptions` (the answer run's AnswerOptions
and the judge's JudgeOptions, each built by its own builder, nested as they are) and prints.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

from pydantic import Field

from kbvqa.evaluate.retrieval import DEFAULT_KS, TWO_HOP_POLICIES
from kbvqa.pipelines.answer.run import (
    AnswerOptions,
    PreparedAnswer,
    prepare_answer,
    run_answer,
)
from kbvqa.pipelines.score_options import JudgeOptions
from kbvqa.runner.options import JobOptions

__all__ = ["AnswerOptions", "JudgeOptions", "EvalOptions", "EvalPlan", "EvalOutcome", "eval_metrics", "prepare_answer",
           "run_answer", "eval_judge_options", "prepare_eval", "run_eval", "evaluate", "RESULTS_KIND", "RESULTS_FILE", "PREDICTIONS_FILE"]

RESULTS_KIND = "kbvqa-eval"
RESULTS_SCHEMA = 1
RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"

#: metric -> the families of names `eval_metrics` offers besides the registries' own
JUDGE = "judge"
JUDGE_VERDICTS = "judge-verdicts"
RETRIEVAL = "retrieval"


# --------------------------------------------------------------------------------------------------
# the request and the metrics


class EvalOptions(JobOptions):
    """One eval's settings: the answer run's AnswerOptions and the judge's JudgeOptions as they are
    (each built once by its own builder from the flags and --config), and the scoring settings. Checked
    once here and in `prepare_eval`; results.json records `used()`."""

    answer: AnswerOptions
    out: Path  # the results folder
    metrics: tuple[str, ...]
    references: Path | None = None  # default: the samples file
    qtypes: Path | None = None  # InfoSeek question-type file (official InfoSeek references)
    recall_ks: tuple[int, ...] = tuple(DEFAULT_KS)
    two_hop: str = "any"
    judge: JudgeOptions = Field(default_factory=JudgeOptions)

    @property
    def references_path(self) -> Path:
        path = self.references or self.answer.samples
        if path is None:
            raise ValueError("an eval needs its samples (--samples)")
        return path


def _infoseek_modes() -> list[str]:
    from kbvqa.evaluate import METRICS

    return METRICS.names(family="infoseek")


def eval_metrics() -> dict[str, str]:
    """Every metric `kbvqa eval --metric` takes, with its help: the InfoSeek modes of METRICS, the
    study scorers of SCORERS, the SimpleQA-style `judge` and `retrieval` (Recall@K from the predictions'
    retrieval records)."""
    from kbvqa.evaluate import METRICS
    from kbvqa.evaluate.scorers import SCORERS

    out = {n: METRICS.entry(n).help for n in _infoseek_modes()}
    for e in SCORERS:  # a study scorer that reads its own kind of file (judge verdicts) has no place here,
        if e.name not in out and e.obj.read is None and not e.obj.bem:  # nor one needing --bem-dir (eval has none)
            out[e.name] = e.help
    out[JUDGE] = METRICS.entry("simpleqa-judge").help + " (needs a judge model)"
    out[JUDGE_VERDICTS] = ("SCORERS' judge-verdicts: accuracy over the `judge` run's graded verdicts, invalid and "
                           "error counted apart, no verdict = wrong (needs a judge model)")
    out[RETRIEVAL] = METRICS.entry("retrieval").help + " (from the predictions' retrieval records)"
    return out


def _needs_judge(metric: str) -> bool:
    return metric in (JUDGE, JUDGE_VERDICTS)


@dataclass
class EvalPlan:
    """A checked request: the answer Job built, the judge client (when a metric needs one) and, per
    metric, what the up-front reference check kept."""

    request: EvalOptions
    answer: PreparedAnswer
    metrics: list[str]
    judge: Any = None
    reference_ids: dict[str, set[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def predictions(self) -> Path:
        return self.request.out / PREDICTIONS_FILE

    @property
    def results_path(self) -> Path:
        return self.request.out / RESULTS_FILE


class EvalJudgeOptions(JudgeOptions):
    """JudgeOptions as `kbvqa eval` spells its flags (`--judge-concurrency`: `--concurrency` is the answer run's)."""

    FLAGS: ClassVar[Mapping[str, str]] = {"concurrency": "--judge-concurrency"}


def eval_judge_options(answer: AnswerOptions, **flags: Any) -> JudgeOptions:
    """The eval's JudgeOptions: `[score.judge]` of the answer run's --config under the judge flags
    (flag names as JudgeOptions takes them: judge_role, judge_base_url, concurrency, graded_text, ...).
    The --config file is shared with the answer roles, so it names the judge only when no direct judge
    flag (--judge-base-url / --judge-model / --judge-replay) is given; the answer run's call limits
    (--timeout, --max-retries, ...) apply to the judge too."""
    from kbvqa.runner.options import read_table

    direct = any(flags.get(k) is not None for k in ("judge_base_url", "judge_model", "judge_replay"))
    limits = {k: flags.pop(k, None) or v for k, v in answer.models.limits().items()}
    return EvalJudgeOptions.build(read_table(answer.config, "score.judge"),
                              source=f"{answer.config} [score.judge]" if answer.config else None,
                              config=None if direct else answer.config, **limits, **flags)


NO_JUDGE = ("metric {metric!r} needs a judge model: give --config with a [models.judge] role (or --judge-role), "
            "--judge-base-url and --judge-model, or --judge-replay")


def _check_references(metric: str, req: EvalOptions) -> set[str] | None:
    """Load the references `metric` reads and dry-run its scorer on no predictions, so a reference
    problem (a Numerical answer without a number, a file without entity URLs) stops the command
    before the answer run. Returns the reference ids where the results need them."""
    refs_path, qtypes = req.references_path, req.qtypes
    if metric in _infoseek_modes():
        from kbvqa.evaluate import METRICS
        from kbvqa.evaluate.io import load_infoseek_references

        entry = METRICS.entry(metric)
        refs = load_infoseek_references(refs_path, qtypes_path=qtypes, keep_raw=bool(entry.info.get("raw_aliases")))
        entry.obj([], refs)
        return set(refs)
    if metric == JUDGE:
        from kbvqa.evaluate.judge import load_judge_references

        return set(load_judge_references(refs_path))
    if metric == RETRIEVAL:
        from kbvqa.evaluate.retrieval import load_retrieval_references

        return set(load_retrieval_references(refs_path))
    from kbvqa.evaluate.scorers import SCORERS

    refs = SCORERS.get(metric).load(refs_path, qtypes)
    if metric in ("evqa", "evqa-semantic"):
        from kbvqa.evaluate.evqa import score_evqa

        score_evqa([], refs)
    return set(refs)


def prepare_eval(req: EvalOptions) -> EvalPlan:
    """Check everything before anything runs; every problem is a ValueError (or an OSError for a file)
    naming what is wrong. Builds the answer Job and, when a metric needs it, the judge client."""
    known = eval_metrics()
    metrics = list(dict.fromkeys(req.metrics))
    if not metrics:
        raise ValueError("give at least one --metric (" + ", ".join(known) + ")")
    unknown = [m for m in metrics if m not in known]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r} (known: {', '.join(known)})")
    if req.two_hop not in TWO_HOP_POLICIES:
        raise ValueError(f"two_hop must be one of {', '.join(TWO_HOP_POLICIES)}, not {req.two_hop!r}")
    if any(int(k) < 1 for k in req.recall_ks) or not req.recall_ks:
        raise ValueError(f"Recall@K values must be positive integers, got {list(req.recall_ks)}")
    if req.out.exists() and not req.out.is_dir():
        raise ValueError(f"--out {req.out} is a file; eval writes a folder (predictions, results.json)")
    judge = None
    judged = [m for m in metrics if _needs_judge(m)]
    j = req.judge
    if not judged and j.flags_under("models"):
        raise ValueError(f"the judge flags are for the metrics that need a judge ({JUDGE}, {JUDGE_VERDICTS}); "
                         "no --metric here uses one")
    if not judged and j.flags_under("graded_text"):
        raise ValueError(f"--graded-text is for the metrics that need a judge ({JUDGE}, {JUDGE_VERDICTS})")
    if judged:
        from kbvqa.pipelines.score import judge_of

        judge = judge_of(j)
        if judge is None:
            raise ValueError(NO_JUDGE.format(metric=judged[0]))
    ref_ids = {m: ids for m in metrics if (ids := _check_references(m, req)) is not None}
    answer = prepare_answer(req.answer)
    warnings = []
    if req.answer.run.limit is not None:
        warnings.append(f"--limit {req.answer.run.limit}: only the first {req.answer.run.limit} samples are answered; "
                        "the scorers count every other reference as missing")
    if judge is not None:
        jm = getattr(getattr(judge, "provenance", None), "model", None)
        models = {getattr(getattr(c, "provenance", None), "model", None)
                  for c in answer.roles.values() if not isinstance(c, list)}
        if jm and jm in models:
            warnings.append(f"the judge model {jm!r} is also a model under test")
    return EvalPlan(req, answer, metrics, judge, ref_ids, warnings)


# --------------------------------------------------------------------------------------------------
# scoring: one function per kind of metric, each calling the code `kbvqa score` runs


@dataclass
class _Scoring:
    """What the metric functions share: the plan, the answer run, the judge run once it ran."""

    plan: EvalPlan
    answer_counts: dict[str, int]
    progress: bool
    judge_report: Any = None
    judge_notes: list[str] = field(default_factory=list)

    @property
    def req(self) -> EvalOptions:
        return self.plan.request

    def per_item(self, metric: str) -> Path:
        return self.plan.request.out / f"{Path(PREDICTIONS_FILE).stem}.{metric}.jsonl"


def _pred_counts(s: Mapping[str, Any]) -> dict[str, int]:
    """The prediction-line counts every `kbvqa score` summary carries (kbvqa.evaluate.io.prediction_status_counts)."""
    return {"error": int(s.get("n_error_lines", 0)), "invalid": int(s.get("n_invalid_lines", 0)),
            "abstained": int(s.get("n_abstained", 0))}


def _entry(scorer: dict[str, Any], values: dict[str, Any], headline: list[str], counts: dict[str, Any],
           summary: Mapping[str, Any], *, files: dict[str, str] | None = None, notes: Sequence[str] = ()) -> dict[str, Any]:
    return {"scorer": scorer, "values": values, "headline": headline, "counts": counts, "summary": dict(summary),
            "files": files or {}, "notes": [n for n in notes if n], "status": "ok"}


def _score_infoseek(sc: _Scoring, metric: str) -> dict[str, Any]:
    from kbvqa.evaluate import METRICS
    from kbvqa.evaluate.io import load_predictions
    from kbvqa.pipelines.score import score_infoseek_files

    mode = METRICS.entry(metric).info["mode"]
    per_item = sc.per_item(metric)
    rep = score_infoseek_files(sc.plan.predictions, sc.req.references_path, qtypes=sc.req.qtypes, mode=mode,
                               per_item=per_item)
    s = rep.summary
    scorer = {"name": metric, "detail": METRICS.entry(metric).help, "options": {}}
    if mode == "reward":
        values = {"accuracy": s["accuracy"], "coverage": s["coverage"],
                  **{f"accuracy {qt}": v["accuracy"] for qt, v in s["by_question_type"].items()}}
        counts = {"n": s["n"], "missing": s["n_missing"], **_pred_counts(s)}
        return _entry(scorer, values, ["accuracy"], counts, s, files={"per_item": str(per_item)}, notes=rep.notes)
    values = {"final_score": s["final_score"], "unseen_question": s["unseen_question_score"]["score"],
              "unseen_entity": s["unseen_entity_score"]["score"]}
    if mode == "strict":
        scorer["options"] = {"time_leniency": s["extensions"]["time_leniency"]["enabled"]}
        values["coverage"] = s["coverage"]
        counts = {"n": s["n"], "missing": s["n_missing"], **_pred_counts(s)}
    else:  # official: the summary keeps the official shape, so the counts come from the lines themselves
        ids = sc.plan.reference_ids[metric]
        preds = load_predictions(sc.plan.predictions)
        known = [p for p in preds if p.data_id in ids]
        counts = {"n": len(known), "missing": len(ids - {p.data_id for p in known}),
                  "error": sum(p.status == "error" for p in known), "invalid": sum(p.status == "invalid" for p in known),
                  "abstained": sum(p.status not in ("error", "invalid") and p.prediction is None for p in known),
                  "n_references": len(ids), "unknown_ids": len(preds) - len(known)}
    return _entry(scorer, values, ["final_score"], counts, s, files={"per_item": str(per_item)}, notes=rep.notes)


def _score_evqa(sc: _Scoring, metric: str) -> dict[str, Any]:
    from kbvqa.evaluate.scorers import SCORERS
    from kbvqa.pipelines.score import score_evqa_files

    per_item = sc.per_item(metric)
    rep = score_evqa_files(sc.plan.predictions, sc.req.references_path, semantic=metric == "evqa-semantic",
                           per_item=per_item)
    s = rep.summary
    scorer = {"name": s["scorer"], "detail": SCORERS.entry(metric).help, "options": {}}
    values = {"accuracy": s["accuracy"], "accuracy_excluding_2_hop": s["accuracy_excluding_2_hop"],
              "coverage": s["coverage"]}
    counts = {"n": s["n"], "missing": s["n_missing"], **_pred_counts(s)}
    return _entry(scorer, values, ["accuracy"], counts, s, files={"per_item": str(per_item)},
                  notes=[*rep.notes, *rep.footer])


def _judge_provenance(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (s.get("judge_provenance") or {}).items() if v is not None}


def _run_judge(sc: _Scoring) -> Any:
    """`kbvqa score judge` on the predictions (journal DIR/predictions.judge.jsonl), once per eval.

    On --resume, a verdict is reused only for the prediction it graded; when the answer run has
    changed predictions since (an error answered on resume), the judge's journal is refused by its
    resume check and the judge runs again from scratch (the old journal moved aside by the runner)."""
    from kbvqa.evaluate.io import ScoreInputError
    from kbvqa.pipelines.score import judge_files

    if sc.judge_report is not None:
        return sc.judge_report
    journal = sc.per_item(JUDGE)
    opts = sc.req.judge
    try:
        sc.judge_report = judge_files(sc.plan.predictions, sc.req.references_path, sc.plan.judge, opts, out=journal,
                                      progress=sc.progress)
    except ScoreInputError as exc:
        if not opts.resume or exc.path != str(journal):
            raise
        sc.judge_notes.append(f"note: the judge journal graded other predictions ({exc}); judged again from "
                              "scratch, the old journal moved aside")
        sc.judge_report = judge_files(sc.plan.predictions, sc.req.references_path, sc.plan.judge,
                                      opts.model_copy(update={"resume": False}), out=journal, progress=sc.progress)
    return sc.judge_report


def _score_judge(sc: _Scoring, metric: str) -> dict[str, Any]:
    from kbvqa.evaluate import METRICS

    rep = _run_judge(sc)
    s = rep.summary
    scorer = _judge_scorer(s, METRICS.entry("simpleqa-judge").help)
    values = {k: s[k] for k in ("accuracy", "accuracy_graded", "correct", "accuracy_given_attempted", "f1",
                                "incorrect", "not_attempted")}
    counts = {"n": s["n"], "graded": s["n_graded"], "missing": s["n_missing"], **_pred_counts(s),
              "judge_error": s["n_error"], "judge_invalid": s["n_invalid"], "empty": s["n_empty"]}
    return _entry(scorer, values, ["accuracy", "accuracy_graded", "accuracy_given_attempted"], counts, s,
                  files={"journal": s["out"], "manifest": s["manifest"]}, notes=[*sc.judge_notes, *rep.footer])


def _judge_scorer(s: Mapping[str, Any], detail: str) -> dict[str, Any]:
    """A judge-based metric's scorer entry: its name says what text was graded (`simpleqa-judge` or
    `simpleqa-judge[short-answer]`), with the prompt, the judge model and what each figure is."""
    return {"name": s["scorer"], "detail": detail, "options": {"graded_text": s["graded_text"]},
            "prompt_version": s["prompt_version"], "prompt_versions": dict(s.get("prompt_versions") or {}),
            "judge": _judge_provenance(s),
            "definitions": dict(s.get("definitions") or {})}


def _study_summary(items: Any) -> dict[str, Any]:
    """A study scorer's per-item verdicts (kbvqa.evaluate.studies.ItemScores) as a summary: accuracy
    over the graded items (every item, for a scorer that reads predictions; without invalid and error
    verdicts for judge-verdicts), the counts beside it in `accounting`."""
    acc = items.accuracy
    out = {"scorer": items.scorer, "accuracy": None if acc is None else round(acc, 2),
           "correct": int(items.correct.sum()), **items.accounting()}
    if items.judged:  # judge verdicts: seed 001's accuracy over all responses, kbvqa's over graded beside it
        out.update(accuracy=round(100 * out["correct"] / items.n, 2) if items.n else None, accuracy_graded=out["accuracy"])
    return out


def _score_study(sc: _Scoring, metric: str) -> dict[str, Any]:
    """A SCORERS entry through `kbvqa.evaluate.studies.score_items` (what `kbvqa study` runs); for
    judge-verdicts its input is the judge run's journal."""
    from kbvqa.evaluate.scorers import SCORERS, semantic_backend
    from kbvqa.evaluate.studies import load_references, score_items

    notes: list[str] = []
    scorer: dict[str, Any] = {"name": metric, "detail": SCORERS.entry(metric).help, "options": {}}
    source: Path = sc.plan.predictions
    if metric == JUDGE_VERDICTS:
        js = _run_judge(sc).summary
        source = Path(js["out"])
        scorer = _judge_scorer(js, scorer["detail"])
        notes += sc.judge_notes
    refs = load_references(sc.req.references_path, metric, qtypes=sc.req.qtypes)
    items = score_items(source, refs, metric, semantic_backend=semantic_backend(metric))
    s = _study_summary(items)
    # judge-verdicts keeps the judge's name, which says what text it graded
    scorer["name"] = s["scorer"] if metric != JUDGE_VERDICTS else f"{JUDGE_VERDICTS} ({scorer['name']})"
    counts = {"n": s["n"], "missing": s["n_missing"], "error": sc.answer_counts.get("error", 0),
              "invalid": sc.answer_counts.get("invalid", 0)}
    values, headline = {"accuracy": s["accuracy"]}, ["accuracy"]
    if items.judged:
        counts.update(graded=s["n_graded"], judge_invalid=s["n_invalid"], judge_error=s["n_error"])
        values["accuracy_graded"] = s["accuracy_graded"]
        headline.append("accuracy_graded")
    return _entry(scorer, values, headline, counts, s,
                  files={"input": str(source)}, notes=notes)


def _score_retrieval(sc: _Scoring, metric: str) -> dict[str, Any]:
    from kbvqa.evaluate import METRICS
    from kbvqa.pipelines.score import score_retrieval_files

    from kbvqa.runner.lock import side_path

    records = side_path(sc.plan.predictions, ".retrieval.jsonl")
    rep = score_retrieval_files(records, sc.req.references_path, ks=list(sc.req.recall_ks), two_hop=sc.req.two_hop)
    s = rep.summary
    scorer = {"name": RETRIEVAL, "detail": METRICS.entry("retrieval").help, "options": {"two_hop": s["two_hop"]}}
    values: dict[str, Any] = {}
    for stage, m in s["stages"].items():
        values.update({f"{stage} R@{k}": m["recall"][f"@{k}"] for k in s["ks"]})
        values[f"{stage} MRR"] = m["mrr"]
    shown = [k for k in (1, 5) if k in s["ks"]] or s["ks"][:1]
    headline = [f"{stage} R@{k}" for stage in s["stages"] for k in shown]
    counts = {"n": s["n_references"], "missing": max((m["n_missing"] for m in s["stages"].values()), default=0),
              "error": sc.answer_counts.get("error", 0), "invalid": sc.answer_counts.get("invalid", 0)}
    notes = [] if s["stages"] else ["no retrieval records: the pipeline wrote none"]
    return _entry(scorer, values, headline, counts, s, files={"records": str(records)}, notes=notes)


def _scorer_for(metric: str) -> Callable[[_Scoring, str], dict[str, Any]]:
    if metric in _infoseek_modes():
        return _score_infoseek
    if metric in ("evqa", "evqa-semantic"):
        return _score_evqa
    if metric == JUDGE:
        return _score_judge
    if metric == RETRIEVAL:
        return _score_retrieval
    return _score_study


# --------------------------------------------------------------------------------------------------
# the run


@dataclass
class EvalOutcome:
    """A finished eval: the results document (also in `path`), the answer RunSummary, the notes for
    stderr, and the record counts the exit code is decided on (this run's, as `kbvqa answer` and
    `kbvqa score judge` decide theirs)."""

    results: dict[str, Any]
    path: Path
    answer: Any
    notes: list[str]
    failed: dict[str, int]
    metric_errors: dict[str, str]


def _sha256(path: Path) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    return value


def _config(req: EvalOptions, plan: EvalPlan) -> dict[str, Any]:
    from kbvqa.runner.manifest import redact

    answer = plan.answer.job.run_config.get("options") or req.answer.used()  # as used (the agent fills its date)
    judge = req.judge.used() if plan.judge is not None else None
    return redact(_jsonable({"out": req.out, "metrics": plan.metrics, "references": req.references_path,
                             "qtypes": req.qtypes, "recall_ks": list(req.recall_ks), "two_hop": req.two_hop,
                             "answer": answer, "judge": judge}))


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run_eval(plan: EvalPlan, *, progress: bool = False) -> EvalOutcome:
    """Answer (resumable), score every metric, write DIR/results.json. A metric whose scorer fails
    after the answer run is recorded with status `error` and its reason (the others are kept)."""
    import time

    from kbvqa.runner.manifest import describe_roles, git_info, kbvqa_version, now_iso

    req = plan.request
    started, t0 = now_iso(), time.monotonic()
    req.out.mkdir(parents=True, exist_ok=True)
    summary, records = run_answer(plan.answer, req.answer, plan.predictions, progress=progress)
    counts = {k: int(summary.output_counts.get(k, 0)) for k in ("ok", "error", "invalid")}
    counts.update({k: int(v) for k, v in summary.output_counts.items() if k not in counts})
    sc = _Scoring(plan, counts, progress)
    metrics: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for m in plan.metrics:
        try:
            metrics[m] = _scorer_for(m)(sc, m)
        except (ValueError, RuntimeError, OSError, KeyError) as exc:
            errors[m] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
            metrics[m] = {"status": "error", "reason": errors[m]}
    failed = {"answer error": summary.error, "answer invalid": summary.invalid}
    if sc.judge_report is not None:
        run = sc.judge_report.summary["run"]
        failed.update({"judge error": run["error"], "judge invalid": run["invalid"]})
    job = plan.answer.job
    results = {
        "kind": RESULTS_KIND, "schema": RESULTS_SCHEMA,
        "kbvqa_version": kbvqa_version(), "git": git_info(),
        "started": started, "finished": now_iso(), "wall_seconds": round(time.monotonic() - t0, 3),
        "config": _config(req, plan),
        "samples": {"path": str(req.answer.samples), "sha256": _sha256(req.answer.samples)},
        "references": {"path": str(req.references_path), "sha256": _sha256(req.references_path),
                       "qtypes": str(req.qtypes) if req.qtypes else None},
        "answer": {"pipeline": req.answer.pipeline, "stages": list(job.stage_names),
                   "models": describe_roles(plan.answer.roles),
                   "predictions": str(plan.predictions), "manifest": str(summary.manifest),
                   "retrieval_records": str(records), "counts": counts,
                   "this_run": {k: v for k, v in summary.as_dict().items() if k not in ("out", "manifest", "usage")},
                   "usage": summary.usage.model_dump(),
                   "previous_output": str(summary.previous_output) if summary.previous_output else None},
        "metrics": metrics,
        "warnings": list(plan.warnings),
    }
    path = plan.results_path
    _write_json(path, results)
    notes = [*plan.answer.notes, *(f"warning: {w}" for w in plan.warnings)]
    for m, e in metrics.items():
        notes += [f"{m}: {n}" for n in e.get("notes", [])]
    return EvalOutcome(results, path, summary, notes, failed, errors)


def evaluate(req: EvalOptions, *, progress: bool = False) -> EvalOutcome:
    """`prepare_eval` then `run_eval`: the whole `kbvqa eval` for Python callers."""
    return run_eval(prepare_eval(req), progress=progress)
