"""`kbvqa study image-ablation` (seed 001 §4.3): probes from interleaved references, a positive
control, the reader under three conditions, the judge, and the tables.

Every model step is a runner job with its own journal and manifest in the output folder, so
`--resume` sends again exactly what failed, step by step:

    generate.jsonl        one line per reference with at least one image: its probes (ablation-probes)
    control.read.jsonl    one line per generated probe: the reader's answer with the full reference
                          (the control reading's seed)
    control.judge.jsonl   the judge's verdict on it; a probe is kept when it is `correct`
    read.jsonl            one line per kept probe and condition (`<probe id>@<condition>`; the
                          conditions reading's seed, so `full` is a request of its own)
    judge.jsonl           the judge's verdict on each of those

`probes.jsonl` then holds every generated probe with its control and its three outcomes, and the
study result (`image-ablation.study.json`, written by the command) the tables and the counts.
Nothing is dropped without a count: a reference whose generation was invalid or failed counts its
planned probes as not generated; a probe whose control read or grading failed is counted as such,
not as failing the control; a kept probe with an error or invalid reply in any condition is left out
of every condition's denominator (so the conditions stay paired) and counted as incomplete.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pydantic import Field

from kbvqa.data.errors import DataError
from kbvqa.data.images import ImageRefError, resolve_image
from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.data.notevqa import sample_from_notevqa
from kbvqa.evaluate import judge as jd
from kbvqa.evaluate.ablation import (CONDITIONS, DIFFERENCES, GRADED, KINDS, PassageReader, ProbeConfig,
                                     ProbeGeneration, ReaderConfig, ablation_statistics, full_repeats_control,
                                     reading_seed, reference_tags)
from kbvqa.evaluate.studies import DEFAULT_RESAMPLES
from kbvqa.models.config import ConfigError, one_role
from kbvqa.runner import Context, RunSummary, read_results
from kbvqa.runner.job import Job
from kbvqa.runner.options import JobOptions, ModelFlags

__all__ = ["PARTS", "AblationModels", "AblationOptions", "ablation_models", "load_ablation_references",
           "image_ablation_study"]

JOURNALS = {"generate": "generate.jsonl", "control": "control.read.jsonl", "control_judge": "control.judge.jsonl",
            "read": "read.jsonl", "judge": "judge.jsonl"}

DENOMINATORS = ("accuracy per kind and condition is over the kept probes graded in all three conditions "
                "(complete), the same probes for every condition, so differences are paired; a kept probe with a "
                "reader or judge error or invalid reply in any condition is counted as incomplete and left out "
                "of all three; probes whose control failed to run are counted apart from probes that failed "
                "the control; not_attempted counts as not correct")


# --------------------------------------------------------------------------------------------------
# options

#: The study's three model parts, in the order they run.
PARTS = ("generator", "reader", "judge")


class AblationOptions(JobOptions):
    """Every setting of the image-ablation study and its only default, built once by the command
    (class defaults < the `[study.image-ablation]` table of `--config` < the flags). The three stage
    configs are nested as they are: the probe generator, the reader and the judge receive exactly
    `opts.generate`, `opts.read` and `opts.judge`, and their `role` fields name the model roles the
    parts are filled from. Every step's manifest and the study result record `used()`. The paper
    does not say how many probes per reference, how the bootstrap is drawn, nor the reader's
    temperature and seeds: those are kbvqa's (the reader samples by default, so that the full
    condition is a reading of its own and not the positive control's answer again)."""

    #: the role flags, --probes-per-kind and the reader's sampling flags set the stage configs' fields
    ALIASES = {"generator_role": ("generate.role",), "reader_role": ("read.role",), "judge_role": ("judge.role",),
               "probes_per_kind": ("generate.per_kind",), "reader_temperature": ("read.temperature",),
               "reader_seed": ("read.sampling_seed",)}

    config: Path | None = None  # kbvqa.toml: the parts' [models.<role>] and this study's table
    generate: ProbeConfig = Field(default_factory=ProbeConfig)  # the multimodal model writing the probes
    read: ReaderConfig = Field(default_factory=ReaderConfig)  # the multimodal reader: control and conditions
    judge: jd.JudgeConfig = Field(default_factory=jd.JudgeConfig)  # the text-only judge of every answer
    resamples: int = Field(DEFAULT_RESAMPLES, ge=1)  # cluster-bootstrap resamples
    seed: int = 0  # bootstrap seed: the same seed gives the same intervals
    concurrency: int = Field(16, ge=1)  # records in flight in each model step
    resume: bool = True  # send again only what failed or is new
    models: ModelFlags = Field(default_factory=ModelFlags)  # --llm/--model for all three parts, call limits

    def roles(self) -> dict[str, str]:
        """Part -> the model role that plays it (as the stage configs name it)."""
        return {"generator": self.generate.role, "reader": self.read.role, "judge": self.judge.role}


# --------------------------------------------------------------------------------------------------
# models


@dataclass
class AblationModels:
    """The three model clients and the role names they fill (shown in the manifests)."""

    generator: Any
    reader: Any
    judge: Any
    roles: dict[str, str]  # part -> role (AblationOptions.roles())

    def describe(self) -> dict[str, str]:
        out = {}
        for part in PARTS:
            prov = getattr(getattr(self, part), "provenance", None)
            model = f"{prov.backend}:{prov.model}" if prov is not None else type(getattr(self, part)).__name__
            out[part] = f"{model} (role {self.roles[part]})"
        return out


def ablation_models(opts: AblationOptions) -> AblationModels:
    """The generator, reader and judge from kbvqa.toml / KBVQA_<ROLE>_* (`opts.config`) or one server for
    all three (`--llm` + `--model`, which replace those roles from the file), in the roles the stage
    configs name. There is no embedded default for any of them: a missing role, or one filled by the
    rules backend, is a ConfigError that says what to pass."""
    roles = opts.roles()
    found = opts.models.roles(opts.config, fill=tuple(dict.fromkeys(roles.values())), concurrency=opts.concurrency)
    missing = [f"{part} (role {r!r})" for part, r in roles.items() if r not in found]
    if missing:
        raise ConfigError(
            "the image-ablation study needs a generator, a reader and a judge model (multimodal generator and "
            f"reader); not configured: {', '.join(missing)}. Pass --llm URL --model NAME for one server in all "
            "three parts, or --config kbvqa.toml with a [models.<role>] table for each "
            "(roles chosen by --generator-role, --reader-role, --judge-role)")
    where = str(opts.config) if opts.config is not None else "the environment"
    clients = {part: one_role(found, r, where=where) for part, r in roles.items()}
    for part, c in clients.items():
        if getattr(getattr(c, "provenance", None), "backend", "") == "rules":
            raise ConfigError(f"the {part} (role {roles[part]!r}) is the rules backend; the image-ablation study "
                              "needs a model there")
    return AblationModels(**clients, roles=roles)


# --------------------------------------------------------------------------------------------------
# references


def load_ablation_references(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The study's input records — references with at least one image tag — and counts of what the
    file holds. NoteVQA-style lines (kbvqa.data.notevqa); a malformed tag, a tag past the image
    list, a cited image that does not resolve under the file's folder or a duplicate id is a
    DataError naming file, row and field, before any model is called."""
    path = Path(path)
    root = path.resolve().parent
    counts = {"rows": 0, "with_reference": 0, "with_images": 0, "without_images": 0}
    records: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for row, obj in read_jsonl(path):
        s = sample_from_notevqa(obj, file=path, row=row)
        counts["rows"] += 1
        if s.id in seen:
            raise DataError(f"duplicate id {s.id!r} (first at row {seen[s.id]})", file=path, row=row, field="id")
        seen[s.id] = row
        ref = s.meta.get("reference")
        if not ref or not str(ref.get("text") or "").strip():
            continue
        counts["with_reference"] += 1
        images = [im.get("path") if isinstance(im, dict) else im for im in ref.get("images") or []]
        try:
            tags = reference_tags(ref["text"], len(images))
        except ValueError as exc:
            raise DataError(str(exc), file=path, row=row, field="reference.text") from None
        if not tags:
            counts["without_images"] += 1
            continue
        for i in sorted({t.index - 1 for t in tags}):
            where = f"reference.images[{i}].path"
            if not isinstance(images[i], str) or not images[i]:
                raise DataError(f"must be an image path, got {images[i]!r}", file=path, row=row, field=where)
            try:
                resolve_image(images[i], root)
            except (FileNotFoundError, ImageRefError) as exc:
                raise DataError(str(exc), file=path, row=row, field=where) from None
        counts["with_images"] += 1
        records.append({"id": s.id, "intent": s.meta.get("intent"), "category": s.meta.get("category"),
                        "reference": {"text": ref["text"], "images": images}})
    return records, counts


# --------------------------------------------------------------------------------------------------
# the steps


def _check_journal(journal: Path, records: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> None:
    """A resumed step reuses an `ok` line only if it was made from the same input: a journal written
    for another references file or other probes is refused (file, id, field), not silently reused."""
    if not journal.is_file():
        return
    wanted = {r["id"]: r for r in records}
    for line in read_results(journal):
        rec = wanted.get(line["id"])
        if rec is None or line.get("status") != "ok":
            continue
        for f in fields:
            if line.get(f) != rec.get(f):
                raise ValueError(f"{journal}: id {line['id']!r} was made from a different {f!r} than this run's "
                                 "input; run with --no-resume (the old journals are moved aside) or choose "
                                 "another --out")


def _run_step(stage: Any, role: str, client: Any, records: list[dict[str, Any]], journal: Path, *,
              fields: Sequence[str], image_root: Path, resume: bool, concurrency: int, progress: bool, description: str,
              run_config: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """One model step as a runner job; returns this run's journal lines by id and the run's counts."""
    if resume:
        _check_journal(journal, records, fields)
    summary = Job([stage], Context(roles={role: client}, resources={"image_root": image_root}),
                  description=description).run(records, out=journal, resume=resume, concurrency=concurrency,
                                               progress=progress, run_config=run_config)
    return _lines(journal, records), _run_info(summary)


def _lines(journal: Path, records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    wanted = {r["id"] for r in records}
    lines = {line["id"]: line for line in read_results(journal) if line["id"] in wanted}
    lost = wanted - set(lines)
    if lost:  # the runner writes a line for every record it reads; this would be a runner bug
        raise RuntimeError(f"{journal}: no journal line for {len(lost)} ids, e.g. {sorted(lost)[:5]}")
    return lines


def _run_info(s: RunSummary) -> dict[str, Any]:
    return {"out": str(s.out), "manifest": str(s.manifest), "ok": s.ok, "error": s.error, "invalid": s.invalid,
            "skipped": s.skipped, "calls": s.usage.calls}


def _outcome(read: Mapping[str, Any], verdict: Any) -> dict[str, Any]:
    """What became of one reader call: a judge label, or which step failed and why."""
    if read["status"] != "ok":
        return {"outcome": f"reader_{read['status']}", "reason": read.get("reason", "")}
    out = {"response": read["response"]}
    if verdict.label is None:
        return {**out, "outcome": "judge_error", "reason": verdict.rationale}
    if verdict.label == "invalid":
        return {**out, "outcome": "judge_invalid", "reason": verdict.rationale}
    return {**out, "outcome": verdict.label, "rationale": verdict.rationale}


def _judge(reads: Mapping[str, Mapping[str, Any]], probes: Mapping[str, Mapping[str, Any]], models: AblationModels,
           journal: Path, opts: AblationOptions, *, progress: bool, step: str,
           run_config: Mapping[str, Any]) -> tuple[dict[str, Any], dict]:
    """Grade every answer the reader gave (text-only: question, the probe's answer, the response)."""
    records = [{"id": rid, "question": probes[line["probe_id"]]["question"],
                "target": probes[line["probe_id"]]["answer"], "prediction": line["response"]}
               for rid, line in reads.items() if line["status"] == "ok"]
    got = jd.run_judge(records, models.judge, out=journal, resume=opts.resume, concurrency=opts.concurrency,
                       progress=progress, config=opts.judge,
                       run_config={**run_config, "task": f"image-ablation/{step}"})
    return got.verdicts, got.run_info()


def _read_records(probes: Iterable[Mapping[str, Any]], refs: Mapping[str, Mapping[str, Any]],
                  conditions: Sequence[str], *, reading: str, sampling_seed: int | None) -> list[dict[str, Any]]:
    """The reader's records for one reading (the control, or the conditions: ids `<probe>@<condition>`),
    each with the seed its request sends (evaluate.ablation.reading_seed)."""
    suffix = reading == "conditions"
    return [{"id": f"{p['id']}@{c}" if suffix else p["id"], "probe_id": p["id"], "ref_id": p["ref_id"],
             "kind": p["kind"], "condition": c, "question": p["question"], "reference": refs[p["ref_id"]]["reference"],
             "reading": reading, "seed": reading_seed(sampling_seed, p["id"], reading)}
            for p in probes for c in conditions]


# --------------------------------------------------------------------------------------------------
# the study


def image_ablation_study(references: str | Path, out: str | Path, models: AblationModels,
                         opts: AblationOptions | None = None, *, progress: bool = False) -> dict[str, Any]:
    """Run (or resume) every step into `out` with the settings `opts` (None: AblationOptions' defaults;
    `models` are those its roles name: ablation_models(opts)) and return the study result (kind
    `image-ablation`)."""
    opts = opts if opts is not None else AblationOptions.build()
    if models.roles != opts.roles():
        raise ValueError(f"the models fill the roles {models.roles}, the options name {opts.roles()}: build both "
                         "from the same options (ablation_models(opts))")
    references, out = Path(references), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    refs, ref_counts = load_ablation_references(references)
    by_ref = {r["id"]: r for r in refs}
    root = references.resolve().parent
    per_kind = opts.generate.per_kind
    n_resamples = opts.resamples
    common = {"image_root": root, "resume": opts.resume, "concurrency": opts.concurrency, "progress": progress}
    run_config = {"references": str(Path(references).resolve()), "probes_per_kind": per_kind, "options": opts.used()}
    runs: dict[str, Any] = {}

    # 1. probes
    gen, runs["generate"] = _run_step(
        ProbeGeneration(opts.generate), opts.generate.role, models.generator, refs, out / JOURNALS["generate"],
        fields=("reference",), description="image ablation: probes",
        run_config={**run_config, "task": "image-ablation/generate"}, **common)
    probes: dict[str, dict[str, Any]] = {}
    for r in refs:
        line = gen[r["id"]]
        if line["status"] != "ok":
            continue
        if Counter(p["kind"] for p in line["probes"]) != Counter({k: per_kind for k in KINDS}):
            raise ValueError(f"{out / JOURNALS['generate']}: id {r['id']!r} holds probes generated with another "
                             f"--probes-per-kind than {per_kind}; run with --no-resume or choose another --out")
        for p in line["probes"]:
            probes[p["id"]] = {**p, "ref_id": r["id"], "intent": r.get("intent"), "category": r.get("category")}

    # 2. positive control: the reader with the full reference, graded by the judge
    reader_fields = ("condition", "question", "reference", "seed")
    sampling_seed = opts.read.sampling_seed
    control, runs["control"] = _run_step(
        PassageReader(opts.read), opts.read.role, models.reader,
        _read_records(probes.values(), by_ref, ("full",), reading="control", sampling_seed=sampling_seed),
        out / JOURNALS["control"],
        fields=reader_fields, description="image ablation: positive control",
        run_config={**run_config, "task": "image-ablation/control"}, **common)
    verdicts, runs["control_judge"] = _judge(control, probes, models, out / JOURNALS["control_judge"], opts,
                                             progress=progress, step="control-judge", run_config=run_config)
    for pid, p in probes.items():
        p["control"] = _outcome(control[pid], verdicts.get(pid))
    kept = [p for p in probes.values() if p["control"]["outcome"] == "correct"]

    # 3. the three conditions: full is read again, with the conditions' seed (its own request, not the control's)
    reads, runs["read"] = _run_step(
        PassageReader(opts.read), opts.read.role, models.reader,
        _read_records(kept, by_ref, CONDITIONS, reading="conditions", sampling_seed=sampling_seed),
        out / JOURNALS["read"], fields=reader_fields, description="image ablation: reader, three conditions",
        run_config={**run_config, "task": "image-ablation/read"}, **common)
    verdicts, runs["judge"] = _judge(reads, probes, models, out / JOURNALS["judge"], opts, progress=progress,
                                     step="judge", run_config=run_config)
    for p in kept:
        p["conditions"] = {c: _outcome(reads[f"{p['id']}@{c}"], verdicts.get(f"{p['id']}@{c}")) for c in CONDITIONS}

    repeats = full_repeats_control(opts.read)
    stats = ablation_statistics(kept, n_resamples=n_resamples, seed=opts.seed, full_repeats=repeats)
    probes_file = out / "probes.jsonl"
    write_jsonl(probes_file, ({**p, "kept": p["control"]["outcome"] == "correct"} for p in probes.values()))
    counts = _counts(ref_counts, gen, probes, stats, per_kind)
    return {
        "kind": "image-ablation", "scorer": f"{jd.METRIC} ({jd.PROMPT_VERSION})", "references": str(references),
        "out": str(out), "probes_file": str(probes_file), "probes_per_kind": per_kind,
        "models": models.describe(), "kinds": list(KINDS), "conditions": list(CONDITIONS),
        "differences": [f"{a}-{b}" for a, b in DIFFERENCES], "counts": counts,
        "full_condition": _full_condition(opts.read, repeats),
        **{k: stats[k] for k in ("by_kind", "by_intent", "ungraded_by_condition", "missing_information")},
        "generation_failures": [{"id": rid, "status": line["status"], "reason": line.get("reason", "")}
                                for rid, line in gen.items() if line["status"] != "ok"],
        "denominators": DENOMINATORS, "runs": runs, "warnings": _warnings(models, counts, repeats),
        "bootstrap": {"method": "cluster percentile bootstrap, 95%", "cluster": "reference item",
                      "n_resamples": n_resamples, "seed": opts.seed, "unit": "accuracy in percent"},
        "options": opts.used(),
    }


def _counts(ref_counts: Mapping[str, int], gen: Mapping[str, Mapping[str, Any]], probes: Mapping[str, Any],
            stats: Mapping[str, Any], per_kind: int) -> dict[str, Any]:
    """The funnel, per probe kind: planned = generated + not generated; generated = kept + failed
    the control + control not graded (its read or grading failed); kept = complete + incomplete."""
    gen_status = Counter(line["status"] for line in gen.values())
    funnel = {}
    for k in KINDS:
        mine = [p for p in probes.values() if p["kind"] == k]
        control = Counter(p["control"]["outcome"] for p in mine)
        funnel[k] = {"planned": per_kind * ref_counts["with_images"], "generated": len(mine),
                     "not_generated": per_kind * (len(gen) - gen_status["ok"]),
                     "failed_control": control["incorrect"] + control["not_attempted"],
                     "control_not_graded": sum(v for o, v in control.items() if o not in GRADED),
                     "control_ungraded_by_outcome": {o: v for o, v in sorted(control.items()) if o not in GRADED},
                     "kept": stats["kept"][k], "complete": stats["complete"][k],
                     "incomplete": stats["incomplete"][k]}
    return {"references": dict(ref_counts),
            "generation": {s: gen_status[s] for s in ("ok", "invalid", "error")},
            "probes": funnel}


def _full_condition(read: ReaderConfig, repeats: str | None) -> dict[str, Any]:
    """How the full condition was read: its own sample (seeds differ from the control's) or not."""
    how = (f"reader at temperature {read.temperature:g}, seeds from sampling seed {read.sampling_seed}: each "
           "probe's control and conditions reads send different seeds (the three conditions share one)"
           if read.sampling_seed is not None else f"reader at temperature {read.temperature:g}, no seed sent")
    return {"independent": repeats is None, "sampling": how, "temperature": read.temperature,
            "sampling_seed": read.sampling_seed, **({"not_independent": repeats} if repeats else {})}


def _warnings(models: AblationModels, counts: Mapping[str, Any], repeats: str | None = None) -> list[str]:
    out = []
    if repeats:
        out.append(f"y_full {repeats}; it has no CI, nor have the differences with full (set --reader-temperature "
                   "above 0 and keep --reader-seed for a measurement)")
    rp, jp = getattr(models.reader, "provenance", None), getattr(models.judge, "provenance", None)
    if rp is not None and jp is not None and (rp.backend, rp.model, rp.base_url) == (jp.backend, jp.model, jp.base_url):
        out.append(f"the judge is the reader model ({jp.backend}:{jp.model}): it grades its own answers")
    g = counts["generation"]
    if g["invalid"] or g["error"]:
        out.append(f"{g['invalid']} invalid and {g['error']} failed probe generations; --resume asks again")
    for k, f in counts["probes"].items():
        if f["control_not_graded"] or f["incomplete"]:
            out.append(f"{k}: {f['control_not_graded']} probes without a graded control and {f['incomplete']} kept "
                       "probes without a grade in every condition (errors or invalid replies); --resume retries them")
        if not f["complete"]:
            out.append(f"{k}: no probe was graded in all three conditions; no accuracy for this kind")
    return out
