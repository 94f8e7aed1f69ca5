"""The `kbvqa score` jobs: read the files, run the registered scorer, return what to show.

Each function is one command. It loads and checks the inputs (errors name file, line and field),
runs the scorer — the short-answer judge and the E-VQA LLM fallback as runner jobs with a journal,
resume and a manifest — and returns a `ScoreReport`: the summary (the command's `--json` document)
plus the table, the notes for stderr and the lines after the table. The command line only prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kbvqa.data.jsonl import gc_paused, write_jsonl
from kbvqa.evaluate import METRICS
from kbvqa.evaluate import methods as mt
from kbvqa.evaluate import retrieval as rt
from kbvqa.evaluate.io import (last_prediction_per_id, load_infoseek_references, load_predictions,
                               prediction_status_counts)

if TYPE_CHECKING:
    from kbvqa.pipelines.score_options import (AgentFailureOptions, AgentToolsOptions, EvqaOptions, IVR12Options,
                                               JudgeOptions)
    from kbvqa.runner.options import JobOptions

__all__ = ["ScoreReport", "agent_failures", "agent_tools", "judge_client", "judge_of", "judges_of", "score_infoseek_files",
           "score_evqa_files", "judge_files", "score_retrieval_files", "convert_predictions", "ivr12_files",
           "JudgeOptions", "EvqaOptions", "IVR12Options", "AgentFailureOptions", "AgentToolsOptions"]

_OPTIONS = ("JudgeOptions", "EvqaOptions", "IVR12Options", "AgentFailureOptions", "AgentToolsOptions")
O = TypeVar("O", bound="JobOptions")


def __getattr__(name: str) -> Any:
    """The judge jobs' options classes (kbvqa.pipelines.score_options), imported on first use so that
    `kbvqa score infoseek` starts without the runner and the judge stages."""
    if name in _OPTIONS:
        from kbvqa.pipelines import score_options

        return getattr(score_options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _options(cls: type[O], opts: O | None, settings: dict[str, Any]) -> O:
    """`opts` as given, or built from a library caller's keywords (flag names) by the class's one builder."""
    if opts is None:
        return cls.build(**settings)
    if settings:
        raise TypeError(f"give the options object or its settings ({', '.join(settings)}), not both")
    return opts


@dataclass
class ScoreReport:
    summary: dict[str, Any]  # the --json document
    title: str
    header: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    notes: list[str] = field(default_factory=list)  # stderr, always (accounting, warnings)
    footer: list[str] = field(default_factory=list)  # stdout after the table (not with --json)


def judge_client(*, config: Path | None = None, role: str | None = None, base_url: str | None = None,
                 model: str | None = None, replay: Path | None = None, concurrency: int | None = None,
                 limits: dict[str, Any] | None = None) -> Any:
    """The judge model, or None when none is asked for (`concurrency` None: JUDGE_CONCURRENCY).

    Either a model role from kbvqa.toml / KBVQA_<ROLE>_* (`config`, `role`; default role "judge"),
    or the direct flags (`base_url` + `model`, or a `replay` cassette) — mixing them is an error, so
    it is always clear which model judged. Built by `roles_from_flags`: the flags' client gets
    `concurrency` slots, so the job's --concurrency is what reaches the server (a role from the file
    keeps the `concurrency` written there)."""
    from kbvqa.evaluate.judge import JUDGE_CONCURRENCY
    from kbvqa.models.config import ConfigError, one_role, roles_from_flags, split_shorthand

    concurrency = JUDGE_CONCURRENCY if concurrency is None else concurrency
    flags = bool(base_url or model or replay is not None)
    if config is not None or role is not None:
        if flags:
            raise ConfigError("choose either --config/--judge-role or --judge-base-url/--judge-model/--judge-replay")
        return one_role(roles_from_flags(config, **(limits or {})), role or "judge",
                        where=str(config) if config is not None else "the environment")
    if not flags:
        return None
    if replay is not None and (base_url or model):
        raise ConfigError("choose either --judge-replay or --judge-base-url/--judge-model")
    if (base_url or model) and not (base_url and model) and not (model and split_shorthand(model)):
        raise ConfigError("an LLM judge needs both --judge-base-url and --judge-model (or --judge-model "
                          "PROVIDER/NAME, e.g. ollama/qwen2.5:7b, for a provider's default local URL)")
    roles = roles_from_flags(None, llm=base_url, model=model, replay=replay, fill=("judge",), concurrency=concurrency,
                             **(limits or {}))
    return one_role(roles, "judge")


def judge_of(opts: JudgeOptions | EvqaOptions | AgentFailureOptions | AgentToolsOptions) -> Any:
    """The judge a judge job's options name (`judge_client`; None when they name none): its
    concurrency reaches the server, its call limits apply."""
    m = opts.models
    return judge_client(config=opts.config, role=m.role, base_url=m.base_url, model=m.model, replay=m.replay,
                        concurrency=opts.concurrency, limits=m.limits())


def judges_of(opts: IVR12Options) -> list[Any]:
    """IVR-12's judges as its options name them (`judge_clients`; [] = rules mode)."""
    j = opts.judges
    return judge_clients(config=opts.config, roles=list(j.roles), base_url=j.base_url, models=list(j.models),
                         replay=j.replay, concurrency=opts.concurrency, limits=j.limits())


def _abs(path: str | Path) -> str:
    """A file a manifest names, absolute: the viewer reads a relative one against the manifest's folder."""
    return str(Path(path).resolve())


def _write_items(path: Path | None, items: list[dict[str, Any]]) -> None:
    if path is not None:
        write_jsonl(path, items)


def _predictions(path: Path, refs: Any, graded_text: str = "short") -> list[Any]:
    """The prediction lines (`graded_text`: which text of a kbvqa Prediction, see
    `load_predictions`), refused when not one of them names a reference id (the wrong file, or ids
    in another convention): a score of 0 would look like a result."""
    preds = load_predictions(path, graded_text)
    if preds and not any(p.data_id in refs for p in preds):
        raise ValueError(f"{path}: none of its {len(preds)} prediction ids is a reference id (first: "
                         f"{preds[0].data_id!r}); are the predictions and references from the same benchmark?")
    return preds


def _status_note(summary: dict[str, Any]) -> str:
    parts = [f"{summary[k]} {label}" for k, label in (("n_error_lines", "error lines"),
                                                      ("n_invalid_lines", "invalid lines"),
                                                      ("n_abstained", "abstentions")) if summary.get(k)]
    return ("predictions: " + ", ".join(parts) + " (scored as no answer)") if parts else ""


def _beside(predictions: Path, suffix: str) -> Path:
    return predictions.with_name(f"{predictions.stem}.{suffix}.jsonl")


# --------------------------------------------------------------------------------------------------
# InfoSeek


@gc_paused()  # rules only: loading and scoring build no reference cycles
def score_infoseek_files(predictions: Path, references: Path, *, qtypes: Path | None = None, mode: str = "official",
                         per_item: Path | None = None, time_leniency: bool = True) -> ScoreReport:
    """InfoSeek accuracy with the registered mode `infoseek-<mode>`."""
    entry = METRICS.entry(f"infoseek-{mode}")
    refs = load_infoseek_references(references, qtypes_path=qtypes, keep_raw=bool(entry.info.get("raw_aliases")))
    options = {"time_leniency": time_leniency} if mode == "strict" else {}
    preds = _predictions(predictions, refs)
    res = entry.obj(preds, refs, per_item=per_item is not None, **options)
    _write_items(per_item, res.items)
    counts = prediction_status_counts(preds)
    # the official summary keeps the official scorer's exact shape; the counts go to stderr there
    s = res.summary if mode == "official" else {**res.summary, **counts}
    notes: list[str] = [_status_note(counts)] if _status_note(counts) else []
    if mode == "official":
        c = res.counts
        note = (f"kbvqa: official rules: {c['n_scored']} predictions scored; "
                f"{c['n_references_without_prediction']} references without a prediction (not counted); "
                f"{c['n_unknown_ids']} predictions with unknown ids ignored; "
                f"{c['n_duplicate_predictions']} duplicate predictions counted again")
        if c["n_references_without_split"]:
            note += f"; {c['n_references_without_split']} references have no data_split (scored as unseen_entity)"
        notes.append(note)
    if mode == "reward":
        rows = [(qt, v["accuracy"], v["correct"], v["n"]) for qt, v in s["by_question_type"].items()]
        rows.append(("all", s["accuracy"], s["correct"], s["n"]))
        return ScoreReport(s, f"InfoSeek reward accuracy (coverage {s['coverage']:.2%})",
                           ("type", "accuracy (%)", "correct", "n"), rows, notes + [f"warning: {w}" for w in s["warnings"]])
    rows = [(name, s[f"{name}_score"]["score"], s[f"{name}_score"]["score_string"], s[f"{name}_score"]["score_num"],
             s[f"{name}_score"]["score_time"]) for name in ("unseen_question", "unseen_entity")]
    footer = []
    if mode == "strict":
        footer.append(f"coverage {s['coverage']:.2%} ({s['n_predicted']}/{s['n']}); time leniency rescued "
                      f"{s['extensions']['time_leniency']['n_rescued']} items (kbvqa extension)")
    title = f"InfoSeek {mode}: final {s['final_score']}"
    if s.get("final_score_basis") == "all_items_no_split":
        title += " (no data_split in the references: the all-items score, not the harmonic mean of splits)"
    return ScoreReport(s, title,
                       ("split", "score (%)", "string (%)", "numerical (%)", "time (%)"), rows, notes, footer)


# --------------------------------------------------------------------------------------------------
# E-VQA


def _evqa_backend(judge: Any, opts: EvqaOptions, *, out: Path | None, progress: bool) -> Any:
    from kbvqa.evaluate import evqa as ev

    chosen = [n for n, on in (("--bem-dir", opts.bem_dir is not None), ("an LLM judge", judge is not None),
                              ("--semantic", opts.semantic)) if on]
    if len(chosen) > 1:
        raise ValueError(f"choose one equivalence backend, got {' and '.join(chosen)}")
    if opts.bem_dir is not None:
        return ev.load_bem(opts.bem_dir)
    if judge is not None:
        return ev.LLMJudgeBackend(judge, concurrency=opts.concurrency, out=out, resume=opts.resume,
                                  progress=progress, config=opts.stage, run_config={"options": opts.used()})
    if opts.semantic:
        from kbvqa.evaluate.semantic import SemanticBackend  # numpy and the embedder only when asked for

        return SemanticBackend(opts.semantic_model_dir, threshold=opts.semantic_threshold)
    return None


def score_evqa_files(predictions: Path, references: Path, opts: EvqaOptions | None = None, *, judge: Any = None,
                     out: Path | None = None, per_item: Path | None = None, progress: bool = False,
                     **settings: Any) -> ScoreReport:
    """E-VQA accuracy: exact match, then at most one equivalence backend on the EM failures, as the
    options `opts` say (or, for a library caller, its `settings` by flag name: semantic, bem_dir,
    semantic_threshold, ...); `judge` is the client `judge_of(opts)` made.

    With an LLM judge the fallback is a runner job whose journal is `out` (default
    `<predictions stem>.evqa-judge.jsonl`) and whose manifest records the options as used; BEM and
    --semantic run in-process, batched."""
    from kbvqa.evaluate import evqa as ev
    from kbvqa.pipelines.score_options import EvqaOptions

    opts = _options(EvqaOptions, opts, settings)
    stray = [f for f in ("semantic_threshold", "semantic_model_dir") if opts.flags_under(f)] if not opts.semantic \
        else []
    if stray:
        raise ValueError(f"{' and '.join(EvqaOptions.flag_for(f) for f in stray)}: only for the --semantic "
                         "fallback (add --semantic)")
    if out is not None and judge is None:
        raise ValueError("--out is the LLM judge's journal; it needs a judge (--judge-base-url/--judge-model, "
                         "--judge-replay or --config)")
    if judge is not None and out is None:
        out = _beside(predictions, "evqa-judge")
    backend = _evqa_backend(judge, opts, out=out, progress=progress)
    refs = ev.load_evqa_references(references)
    preds = _predictions(predictions, refs)
    res = ev.score_evqa(preds, refs, backend=backend, per_item=per_item is not None)
    _write_items(per_item, res.items)
    s = {**res.summary, **prediction_status_counts(preds)}
    rows = [(k, v["accuracy"], v["correct"], v["n"], v["n_predicted"]) for k, v in s["by_question_type"].items()]
    rows.append(("all", s["accuracy"], s["correct"], s["n"], s["n_predicted"]))
    run = (s.get("judge") or {}).get("run") or {}
    footer = ([_run_line(run)] if run.get("out") else []) + ([s["not_bem"]] if "not_bem" in s else [])
    return ScoreReport(s, f"E-VQA accuracy, scorer {s['scorer']}, coverage {s['coverage']:.2%}",
                       ("question_type", "accuracy (%)", "correct", "n", "predicted"), rows, footer=footer)


def _run_line(run: dict[str, Any]) -> str:
    return (f"judge journal {run['out']} (ok {run['ok']}, error {run['error']}, invalid {run['invalid']}, "
            f"skipped {run['skipped']}; {run['calls']} requests), manifest {run['manifest']}")


# --------------------------------------------------------------------------------------------------
# short-answer judge


def judge_files(predictions: Path, references: Path, judge: Any, opts: JudgeOptions | None = None, *,
                out: Path | None = None, per_item: Path | None = None, progress: bool = False,
                **settings: Any) -> ScoreReport:
    """SimpleQA-style grading of every reference id as a runner job (journal `out`, default
    `<predictions stem>.judge.jsonl`) with the options `opts` (or, for a library caller, its
    `settings` by flag name: concurrency, resume, graded_text, ...). `graded_text` "full" grades the
    whole answer, image tags removed; "short" only its short answer (scorer
    `simpleqa-judge[short-answer]`); the choice is in the scorer's name, the manifest's run_config
    and every journal line. A missing or empty prediction is not_attempted without a call; the
    summary is computed from the journal, so a resumed run reports every id. Accuracy is over graded
    verdicts, with invalid and error beside it (kbvqa.evaluate.judge)."""
    from kbvqa.evaluate import judge as jd
    from kbvqa.pipelines.score_options import JudgeOptions

    opts = _options(JudgeOptions, opts, settings)
    graded_text = opts.graded_text
    if judge is None:
        raise ValueError("no judge configured: pass --config/--judge-role, --judge-base-url and --judge-model, "
                         "or --judge-replay")
    refs = jd.read_judge_references(references)
    preds = _predictions(predictions, refs, graded_text)
    by_id, unknown, dup = last_prediction_per_id(preds, refs)
    records = [{"id": did, "question": r.question, "target": r.target, "prediction": by_id.get(did),
                "missing": did not in by_id, "graded_text": graded_text, **({"gold_layout": r.layout} if r.layout else {})}
               for did, r in refs.items()]
    rubrics = jd.rubric_counts(records, opts.stage)  # prompt id -> records it grades (short / paragraph golds)
    scorer = jd.scorer_name(graded_text, jd.rubric_of(rubrics))
    out = out or _beside(predictions, "judge")
    got = jd.run_judge(records, judge, out=out, resume=opts.resume, concurrency=opts.concurrency, progress=progress,
                       config=opts.stage,
                       run_config={"task": "simpleqa-judge", "scorer": scorer, "graded_text": graded_text,
                                   "prompts": rubrics,
                                   "predictions": _abs(predictions), "references": _abs(references),
                                   "options": opts.used()})
    prov = getattr(judge, "provenance", None)
    summary: dict[str, Any] = {"scorer": scorer, "graded_text": graded_text, "prompt_version": jd.prompt_label(rubrics),
                               "prompt_versions": rubrics,
                               **jd.simpleqa_metrics(got.verdicts.values()), "definitions": dict(jd.FIGURES),
                               "n_missing": sum(1 for r in records if r["missing"]),
                               "n_empty": sum(1 for r in records if not r["missing"] and not r["prediction"]),
                               "n_unknown_ids": unknown, "n_duplicate_predictions": dup,
                               **prediction_status_counts(preds),
                               "judge": getattr(prov, "model", None),
                               "judge_provenance": {k: getattr(prov, k, None)
                                                    for k in ("backend", "model", "base_url")},
                               "out": str(out), "manifest": str(got.run.manifest), "run": got.run_info()}
    if per_item is not None:
        _write_items(per_item, [{"data_id": r["id"], "prediction": r["prediction"], "missing": r["missing"],
                                 "label": got.verdicts[r["id"]].label, "rationale": got.verdicts[r["id"]].rationale}
                                for r in records])
    return ScoreReport(summary, f"SimpleQA-style judge, {scorer} ({summary['n']} items)", ("figure", "value"),
                       judge_rows(summary), footer=[_run_line(summary["run"])])


def judge_rows(s: dict[str, Any]) -> list[tuple[str, Any]]:
    """The judge table: accuracy over all responses (seed 001's) and over graded verdicts, with n /
    graded / invalid / error beside them, then
    SimpleQA's own aggregates, labelled as rates over all n (kbvqa.evaluate.judge.FIGURES). The
    summary keeps SimpleQA's fractions; the table shows percentages (kbvqa.units)."""
    from kbvqa.units import percent

    def pct(key: str) -> Any:
        return "n/a" if s.get(key) is None else percent(s[key], fraction=True)

    rows: list[tuple[str, Any]] = [
        ("accuracy (correct / all responses, seed 001's) (%)", pct("accuracy")),
        ("accuracy_graded (correct / graded) (%)", pct("accuracy_graded")),
        ("n responses (missing predictions included, not correct)", s["n"]), ("n correct", s["n_correct"]),
        ("n graded", s["n_graded"]), ("n invalid", s["n_invalid"]), ("n error", s["n_error"])]
    rows += [(f"SimpleQA {k} (over all n) (%)", percent(s[k], fraction=True))
             for k in ("correct", "incorrect", "not_attempted", "invalid", "error", "accuracy_given_attempted", "f1")]
    return rows


# --------------------------------------------------------------------------------------------------
# retrieval


@gc_paused()
def score_retrieval_files(records: Path, references: Path, *, ks: list[int] | tuple[int, ...] = rt.DEFAULT_KS,
                          two_hop: str = "any", texts: Path | None = None) -> ScoreReport:
    """Recall@K and MRR per stage; with `texts`, answer-in-retrieved-text recall too."""
    refs = rt.load_retrieval_references(references)
    recs, dup = rt.load_retrieval_records(records)
    out = rt.retrieval_metrics(recs, refs, ks=ks, two_hop=two_hop)
    out["n_duplicate_records"] = dup
    if texts is not None:
        table = rt.load_answer_texts(texts)
        out["answer_in_text"] = {stage: rt.answer_in_text_recall(r, refs, table.get, ks=ks)
                                 for stage, r in recs.items()}
    rows = [(stage, *[round(100 * m["recall"][f"@{k}"], 2) for k in out["ks"]], float(m["mrr"]), m["n_missing"])
            for stage, m in out["stages"].items()]
    return ScoreReport(out, f"Retrieval ({out['n_references']} references, two_hop={two_hop}; MRR in [0, 1])",
                       ("stage", *[f"R@{k} (%)" for k in out["ks"]], "MRR", "missing"), rows)


# --------------------------------------------------------------------------------------------------
# published methods' outputs


def convert_predictions(source: Path, method: str, out: Path, *, references: Path | None = None,
                        **options: Any) -> ScoreReport:
    """Convert a method's outputs (registered format `method`, see `kbvqa.evaluate.methods.METHODS`)
    to prediction lines in `out`, with the id-alignment report. `options` go to `methods.convert`."""
    res = mt.convert(method, source, references=references, **options)
    n = mt.write_predictions(out, res.predictions)
    a = res.alignment
    rows: list[tuple[Any, ...]] = [("lines read", a.n_input), ("written", n),
                                   ("duplicate ids", f"{len(a.duplicates)} ({a.duplicate_policy})"),
                                   ("null predictions", a.n_null_predictions)]
    if a.n_references is not None:
        rows += [("references", a.n_references), ("missing ids", a.n_missing), ("unknown ids (dropped)", a.n_unknown)]
    rows += [(f"rule {k}", v) for k, v in res.parse_rules.items()]
    return ScoreReport({**res.summary(), "out": str(out), "n_written": n}, f"{method} -> {out}", ("", "count"), rows,
                       notes=[f"warning: {w}" for w in res.warnings])


def agent_failures(predictions: Path, references: Path, verdicts: Path, judge: Any,
                   opts: AgentFailureOptions | None = None, *, out: Path | None = None, progress: bool = False,
                   **settings: Any) -> dict[str, Any]:
    """`kbvqa study agent-failures`: the judge categorises every non-correct agent episode —
    graded incorrect or not_attempted, or with no answer — as seed 001 Table 5 does, as a runner job
    with a journal, resume and a manifest (options `opts`, or their `settings` by flag name).
    Episodes with an invalid or failed verdict, without one, or whose record failed are counted apart
    (`kbvqa.evaluate.agent.episode_outcome`)."""
    from collections import Counter

    from kbvqa.pipelines.score_options import AgentFailureOptions

    from kbvqa.evaluate.agent import (FailureCategory, failure_records, failure_table, read_verdicts,
                                      sample_answers)
    from kbvqa.runner import read_results
    from kbvqa.runner.job import Job
    from kbvqa.runner.stage import Context

    opts = _options(AgentFailureOptions, opts, settings)
    if judge is None:
        raise ValueError("no judge configured: pass --config/--judge-role, --judge-base-url and --judge-model, "
                         "or --judge-replay")
    refs = {k: (q, " | ".join(a)) for k, (q, a) in sample_answers(references).items()}
    out = out or _beside(predictions, "failures")
    outcomes: Counter[str] = Counter()
    records = list(failure_records(read_results(predictions), refs, read_verdicts(verdicts), outcomes))
    job = Job([FailureCategory(opts.stage)], Context(roles={opts.stage.role: judge}),
              description="agent failure categories")
    summary = job.run(records, out=out, resume=opts.resume, concurrency=opts.concurrency, progress=progress,
                      run_config={"task": "agent-failures", "predictions": _abs(predictions),
                                  "references": _abs(references), "verdicts": _abs(verdicts), "options": opts.used()})
    table = failure_table(read_results(out), outcomes, ids=[r["id"] for r in records])
    prov = getattr(judge, "provenance", None)
    return {"kind": "agent-failures", "predictions": str(predictions), "verdicts": str(verdicts), "out": str(out),
            "manifest": str(summary.manifest),
            "judge": f"{prov.backend}:{prov.model}" if prov is not None else type(judge).__name__, **table}


def agent_tools(predictions: Path, references: Path, verdicts: Path | None = None,
                baseline_verdicts: Path | None = None, judge: Any = None, opts: AgentToolsOptions | None = None, *,
                out: Path | None = None, progress: bool = False, **settings: Any) -> dict[str, Any]:
    """`kbvqa study agent-tools`: tool usage (kbvqa.evaluate.agent.agent_tools_study); with a `judge`, the
    useful-evidence judge first reads every search / visit call that returned text, as a runner job with
    a journal (`out`, default PREDICTIONS.evidence.jsonl), resume and a manifest, and the hit rates are
    its verdicts. Without one, the offline rule measure."""
    from collections import Counter

    from kbvqa.pipelines.score_options import AgentToolsOptions

    from kbvqa.evaluate.agent import agent_tools_study, sample_answers
    from kbvqa.evaluate.agent_evidence import EvidenceJudge, evidence_calls, judge_records, read_evidence_verdicts
    from kbvqa.runner import read_results
    from kbvqa.runner.job import Job
    from kbvqa.runner.stage import Context

    opts = _options(AgentToolsOptions, opts, settings)
    chars = opts.stage.evidence_chars
    if judge is None:
        return agent_tools_study(predictions, references, verdicts, baseline_verdicts, evidence_chars=chars)
    refs = {k: (q, " | ".join(a)) for k, (q, a) in sample_answers(references).items()}
    out = out or _beside(predictions, "evidence")
    records = judge_records(evidence_calls(read_results(predictions), Path(predictions).parent, chars), refs)
    job = Job([EvidenceJudge(opts.stage)], Context(roles={opts.stage.role: judge}), description="useful evidence")
    summary = job.run(records, out=out, resume=opts.resume, concurrency=opts.concurrency, progress=progress,
                      run_config={"task": "agent-evidence", "predictions": _abs(predictions),
                                  "references": _abs(references), "options": opts.used()})
    wanted = {r["id"] for r in records}
    found = read_evidence_verdicts(line for line in read_results(out) if str(line.get("id")) in wanted)
    res = agent_tools_study(predictions, references, verdicts, baseline_verdicts, evidence=found,
                            evidence_judge=_client_label(judge), evidence_chars=chars)
    asked = Counter("ok" if v in ("hit", "miss") else v for v in found.values())
    return {**res, "evidence_journal": str(out), "evidence_manifest": str(summary.manifest),
            "evidence_requests": {"calls": len(records), "ok": asked["ok"], "invalid": asked["invalid"],
                                  "error": asked["error"], "unjudged": len(records) - len(found)}}


# --------------------------------------------------------------------------------------------------
# IVR-12 rubric judge (seed 001 §3.3)


def judge_clients(*, config: Path | None = None, roles: list[str] | None = None, base_url: str | None = None,
                  models: list[str] | None = None, replay: Path | None = None, concurrency: int | None = None,
                  limits: dict[str, Any] | None = None) -> list[Any]:
    """Several judges, or none (an empty list: the embedded rules default).

    `--judge-role` may be repeated (each a role of kbvqa.toml / KBVQA_<ROLE>_*; a role that lists
    several models — `[[models.verifier]]` — gives all of them), and `--judge-model` may be repeated
    with one `--judge-base-url` (one client each, each with `concurrency` slots). Mixing the two
    ways is an error, as in `judge_client`."""
    from kbvqa.models.config import ConfigError, one_role, roles_from_flags

    models = list(models or [])
    if config is not None or roles:
        if base_url or models or replay is not None:
            raise ConfigError("choose either --config/--judge-role or --judge-base-url/--judge-model/--judge-replay")
        built = roles_from_flags(config, **(limits or {}))
        out: list[Any] = []
        for role in roles or ["judge"]:
            if role not in built:
                one_role(built, role, where=str(config) if config is not None else "the environment")  # raises
            c = built[role]
            out.extend(c if isinstance(c, list) else [c])
        return out
    if replay is not None:
        return [judge_client(replay=replay, concurrency=concurrency, limits=limits)]
    if base_url and not models:
        raise ConfigError("an LLM judge needs both --judge-base-url and --judge-model")
    if len(set(models)) != len(models):
        raise ConfigError(f"--judge-model names a model twice: {models}")
    return [judge_client(base_url=base_url, model=m, concurrency=concurrency, limits=limits) for m in models]


def _client_label(client: Any) -> str:
    prov = getattr(client, "provenance", None)
    return f"{prov.backend}:{prov.model}" if prov is not None and prov.model else type(client).__name__


def ivr12_files(predictions: Path, samples: Path, judges: list[Any], opts: IVR12Options | None = None, *,
                out: Path | None = None, progress: bool = False, **settings: Any) -> dict[str, Any]:
    """`kbvqa score ivr12`: every sample's answer (or reference) judged on the IVR-12 rubric as a runner
    job (journal `out`, default `<predictions stem>.ivr12.jsonl`; manifest beside it), then the summary
    (kbvqa.evaluate.ivr12.summarize) written to `<out stem>.summary.json` and returned.

    `opts` (or, for a library caller, its `settings` by flag name: repeats, rubric, image_root, ...);
    the stage runs with `opts.stage` as it is. No judges: rules mode."""
    import json

    from kbvqa.data.formats import read_samples
    from kbvqa.evaluate import ivr12 as iv
    from kbvqa.pipelines.score_options import IVR12Options
    from kbvqa.runner import read_results
    from kbvqa.runner.lock import side_path

    opts = _options(IVR12Options, opts, settings)
    stage = opts.stage
    repeats, temperature, image_root = stage.repeats, stage.temperature, opts.image_root
    if repeats > 1 and not judges:
        raise ValueError("--repeats needs a judge model (rules are deterministic)")
    rb = iv.load_rubric(stage.rubric)
    inputs = iv.build_records(predictions, read_samples(samples), source=opts.input_kind, samples_path=samples,
                              image_root=image_root)
    labels = [_client_label(c) for c in judges]
    mode = "judge" if judges else "rules"
    settings = {"rubric": rb.sha256, "judges": labels, "repeats": repeats, "temperature": temperature, "mode": mode}
    for rec in inputs.records:
        rec["ivr12_input"] = iv.input_hash(rec, settings)
    out = out or _beside(predictions, "ivr12")
    if opts.resume:
        iv.check_resumable(out, inputs.records)
    warnings = iv.self_judging_warnings([getattr(getattr(c, "provenance", None), "model", None) or ""
                                         for c in judges], inputs.producers)
    if repeats > 1 and temperature == 0:
        warnings.append("--repeats > 1 at temperature 0: the repeats only measure server nondeterminism")
    run_summary = iv.ivr12_job(judges, stage).run(
        inputs.records, out=out, resume=opts.resume, concurrency=opts.concurrency, progress=progress,
        # absolute, with the roots of the absolute image paths its records hold, so the viewer shows them
        run_config={"task": "ivr12", "predictions": _abs(predictions), "samples": _abs(samples),
                    "query_image_root": str(Path(image_root or Path(samples).parent).resolve()),
                    "answer_image_root": str(Path(predictions).resolve().parent), "source": inputs.source,
                    "rubric": rb.describe(), "mode": mode, "judges": labels, "repeats": repeats,
                    "temperature": temperature, "warnings": warnings, "options": opts.used()})
    wanted = {r["id"] for r in inputs.records}
    lines = [x for x in read_results(out) if x["id"] in wanted]
    summary = iv.summarize(lines, rb, judges=labels, mode=mode)
    summary.update({
        "source": inputs.source, "predictions": str(predictions), "samples": str(samples), "judges": labels,
        "repeats": repeats, "temperature": temperature if judges else None, "warnings": warnings,
        "n_unknown_ids": inputs.n_unknown_ids, "n_duplicate_ids": inputs.n_duplicate_ids,
        "out": str(out), "manifest": str(run_summary.manifest),
        "run": {"ok": run_summary.ok, "error": run_summary.error, "invalid": run_summary.invalid,
                "skipped": run_summary.skipped, "calls": run_summary.usage.calls}})
    summary_path = side_path(out, ".summary.json")
    summary["summary"] = str(summary_path)
    summary_path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return summary


def ivr12_compare_files(a: Path, b: Path, *, names: tuple[str, str] | None = None,
                        allow_different_rubrics: bool = False, out: Path | None = None) -> dict[str, Any]:
    """`kbvqa score ivr12-compare A.summary.json B.summary.json`: Table 3 of seed 001 (A − B gaps),
    written to `out` as JSON too when given."""
    import json

    from kbvqa.evaluate.io import ScoreInputError
    from kbvqa.evaluate.ivr12 import compare_summaries

    docs = []
    for p in (a, b):
        try:
            docs.append(json.loads(Path(p).read_text(encoding="utf-8")))
        except ValueError as exc:
            raise ScoreInputError(p, None, None, f"not a JSON summary: {exc}") from None
    names = names or (Path(a).name.removesuffix(".summary.json"), Path(b).name.removesuffix(".summary.json"))
    res = compare_summaries(docs[0], docs[1], names, allow_different_rubrics=allow_different_rubrics)
    res["files"] = [str(a), str(b)]
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return res
