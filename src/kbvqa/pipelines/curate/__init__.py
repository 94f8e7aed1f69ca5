"""Curating a community-sourced visual QA benchmark from posts (seed 001 §3.1): the four-step funnel.

`kbvqa curate run POSTS --out DIR` runs nineteen stages, each a registered Stage run by the runner as
its own Job with a journal in `DIR/stages/` (resume, manifest, exactly once, a status and a reason for
every post); a post goes on to the next stage only when the previous one kept it:

    step 1  type cleaning   text (keyword/length rules) · language (offline detector) · images (readable,
                            minimum size, hashed) · dedup (perceptual hash, across posts) · candidate (VLM)
                            · text_only (the vision-necessity gate) · consistency (image–text, VLM)
    step 2  quality         aesthetic (VLM) · interleaved (≥ 3 aspects) · rubric (five axes, 1–5) · topk (per
                            tag) · plausibility (a comment holds an answer)
    step 3  refinement      standardize · rewrite (answer-revealing terms out, checked) · difficulty (N runs)
                            · classify (category × intent) · balance (cells to a target size)
    step 4  auditing        translate (cross-checked by a second model) · assign (final labels); then the
                            proofreading sheet: `curate review-export` / `review-import`

Outputs in DIR: `items.jsonl` (NoteVQA layout, images copied to `images/`), `dropped.jsonl` (every
dropped post: stage, reason, detail), `stopped.jsonl` (posts a stage could not decide: needs a model,
error, invalid — `--resume` tries them again), `funnel.json` (per stage: in, kept, dropped by reason,
stopped by reason; `accounted` checks that every post read is in exactly one of the three files).

Offline (no model in a stage's role), the deterministic stages run and each post that reaches the first
model stage stops there with a reason starting "NeedsModel:". A stage can be switched off
(`[curate.<stage>] enabled = false`): it passes posts through and the funnel says so. The corpus
stages (dedup, topk, balance) are recomputed on every run over the posts that reach them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from kbvqa.data.errors import DataError, ErrorPolicy, SkipReport
from kbvqa.data.jsonl import dumps_line, read_jsonl, write_jsonl
from kbvqa.data.posts import read_posts
from kbvqa.pipelines.curate.audit import (Assign, Translate, checker_models, export_review, import_review,
                                          one_checker_warning, translation_agreement)
from kbvqa.pipelines.curate.clean import Dedup, ImageCheck, LanguageFilter, TextFilter
from kbvqa.pipelines.curate.common import CorpusStage, CurateStage
from kbvqa.pipelines.curate.funnel import StageTally, passing, read_stage, table_rows
from kbvqa.pipelines.curate.items import build_item
from kbvqa.pipelines.curate.quality import Aesthetic, InterleavedFit, Plausibility, Rubric, TopK
from kbvqa.pipelines.curate.refine import Balance, Classify, Difficulty, Rewrite, Standardize
from kbvqa.pipelines.curate.typecheck import Consistency, TextOnlyGate, VqaCandidate
from kbvqa.runner.config import load_table
from kbvqa.runner.job import Job
from kbvqa.runner.manifest import manifest_path, redact
from kbvqa.runner.options import JobOptions, ModelFlags, RunOptions, read_table
from kbvqa.runner.stage import Context

__all__ = ["STAGES", "CurateConfig", "CurateOptions", "CurateResult", "CurateSetupError", "curate_context",
           "curate_options", "curate_posts", "export_review", "import_review", "load_curate_config", "review_import",
           "run_curation", "stage_job"]

#: (key, step, stage class) in run order; the key names the config table, the journal and the funnel row.
STAGES: tuple[tuple[str, int, type[CurateStage]], ...] = (
    ("text", 1, TextFilter), ("language", 1, LanguageFilter), ("images", 1, ImageCheck), ("dedup", 1, Dedup),
    ("candidate", 1, VqaCandidate), ("text_only", 1, TextOnlyGate), ("consistency", 1, Consistency),
    ("aesthetic", 2, Aesthetic), ("interleaved", 2, InterleavedFit), ("rubric", 2, Rubric), ("topk", 2, TopK),
    ("plausibility", 2, Plausibility),
    ("standardize", 3, Standardize), ("rewrite", 3, Rewrite), ("difficulty", 3, Difficulty),
    ("classify", 3, Classify), ("balance", 3, Balance),
    ("translate", 4, Translate), ("assign", 4, Assign),
)
STAGES_DIR = "stages"
ITEMS_FILE = "items.jsonl"
DROPPED_FILE = "dropped.jsonl"
STOPPED_FILE = "stopped.jsonl"
FUNNEL_FILE = "funnel.json"
REVIEW_SHEET = "review.csv"
REVIEWED_FILE = "reviewed.jsonl"


class CurateSetupError(ValueError):
    """The funnel cannot run as configured (the message says what to change)."""


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_images: int = Field(4, ge=1, le=16)  # images per item


def stage_roles(cfg: Any) -> list[str]:
    """The model roles one stage's config names (its role, a checker or judge role, every cross-checker)."""
    out = [getattr(cfg, f) for f in ("role", "check_role", "judge_role") if f in type(cfg).model_fields]
    return [*out, *getattr(cfg, "check_roles", ())]


class _CurateBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _assign_shares_cells(self) -> "_CurateBase":
        """The final assignment uses the balancing cells unless its table names its own."""
        assign, classify = getattr(self, "assign"), getattr(self, "classify")
        for f in ("categories", "intents"):
            if f not in assign.model_fields_set:
                setattr(assign, f, list(getattr(classify, f)))
        return self

    def stage(self, key: str) -> Any:
        return getattr(self, key)

    def roles(self) -> tuple[str, ...]:
        """The model roles the enabled stages read (what `--llm/--model` fills)."""
        out: list[str] = []
        for key, _, _ in STAGES:
            cfg = self.stage(key)
            if cfg.enabled:
                out.extend(stage_roles(cfg))
        return tuple(dict.fromkeys(out))


CurateConfig = create_model(  # type: ignore[call-overload]
    "CurateConfig", __base__=_CurateBase,
    **{key: (cls.config_model, Field(default_factory=cls.config_model)) for key, _, cls in STAGES},
    output=(OutputConfig, Field(default_factory=OutputConfig)))
CurateConfig.__doc__ = "The `[curate]` table of a curate.toml: one sub-table per stage plus `[curate.output]`."


def load_curate_config(path: str | Path | None) -> Any:
    """`[curate]` of a TOML file (defaults when there is no file or no table); a bad key or value is an
    error naming the file and the dotted key."""
    return load_table(path, "curate", CurateConfig, error=CurateSetupError)


class CurateOptions(JobOptions):
    """Every setting of one `kbvqa curate run`, built once (`curate_options`: the class defaults, under
    `[curate]` of `--config`, under the flags) and handed down unchanged: each stage gets its table
    `opts.curate.<stage>` as validated, the run loop `opts.run`, the model roles `opts.models`; every
    stage's manifest and `funnel.json` record `used()`."""

    posts: Path | None = None  # JSONL, CSV or Parquet posts; required
    out: Path | None = None  # the run folder; required
    images: Path | None = None  # folder the posts' image paths are relative to (default: the posts' folder)
    fmt: str | None = None  # jsonl | csv | parquet (default: from the extension)
    mapping: dict[str, str] | None = None  # CSV/Parquet: field -> column
    sep: str = "|"  # separator of list cells given as strings
    skip_invalid: bool = False  # unreadable rows dropped (and listed) instead of stopping the run
    config: Path | None = None  # TOML: [curate.*] stage settings, [models.*] roles
    curate: CurateConfig = Field(default_factory=CurateConfig)  # type: ignore[valid-type]
    models: ModelFlags = Field(default_factory=ModelFlags)
    run: RunOptions = Field(default_factory=RunOptions)

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {"concurrency": ("run.concurrency",),
                                                        "timeout": ("models.timeout",), "image_root": ("images",)}
    FLAGS: ClassVar[Mapping[str, str]] = {"fmt": "--format"}

    @model_validator(mode="after")
    def _inputs_given(self) -> "CurateOptions":
        missing = [f"--{k}" for k in ("posts", "out") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} must be given")
        return self


def curate_options(**flags: Any) -> CurateOptions:
    """The run's options from the flags (names as `CurateOptions.flag_paths()` lists them; None: not
    given) over `[curate]` of the `config` file they name (errors name `FILE: curate.KEY`)."""
    config = flags.get("config")
    table = read_table(config, "curate")
    return CurateOptions.build({"curate": table} if table else {}, source=str(config) if config else None, **flags)


def curate_context(roles: Mapping[str, Any] | None = None, *, image_root: Path | None = None,
                   allow_outside_root: bool | None = None) -> Context:
    """The context every stage job of one run shares: the model roles and the posts' image root
    (`allow_outside_root` None: the user's global opt-in, `kbvqa --allow-outside-root`)."""
    resources: dict[str, Any] = {} if allow_outside_root is None else {"allow_outside_root": allow_outside_root}
    if image_root is not None:
        resources["image_root"] = Path(image_root).resolve()
    return Context(roles=dict(roles or {}), resources=resources)


def stage_job(key: str, config: Any, ctx: Context) -> Job:
    """The Job of one stage, by its key."""
    for k, step, cls in STAGES:
        if k == key:
            cfg = config.stage(k)
            root = ctx.resources.get("image_root")  # the posts' images, which the stage records name relatively
            return Job([cls(cfg)], ctx, description=f"curate {k}",
                       run_config={"pipeline": "curate", "stage": k, "step": step, "config": cfg.model_dump(mode="json"),
                                   **({"image_root": str(root)} if root is not None else {})})
    raise KeyError(f"no curate stage {key!r} (stages: {', '.join(k for k, _, _ in STAGES)})")


def journal_path(out: Path, key: str) -> Path:
    n = next(i for i, (k, _, _) in enumerate(STAGES, start=1) if k == key)
    return out / STAGES_DIR / f"{n:02d}_{key}.jsonl"


@dataclass
class CurateResult:
    out: Path
    intake: dict[str, Any]
    stages: list[dict[str, Any]]
    output: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    options: dict[str, Any] | None = None  # CurateOptions.used(): the settings the run used

    @property
    def accounted(self) -> bool:
        return self.intake["read"] == self.output["items"] + self.output["dropped"] + self.output["stopped"]

    def rows(self) -> list[dict[str, Any]]:
        return table_rows(self.intake, self.stages, self.output)

    def as_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "intake": self.intake, "stages": self.stages, "output": self.output,
                "accounted": self.accounted, **({"warnings": self.warnings} if self.warnings else {}),
                **({"options": self.options} if self.options is not None else {})}


class _Lines:
    """A JSONL file written line by line (drop and stop lines can be many), renamed into place at the end."""

    def __init__(self, path: Path):
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")
        self.fh = open(self.tmp, "w", encoding="utf-8")
        self.n = 0

    def append(self, obj: dict[str, Any]) -> None:
        self.fh.write(dumps_line(obj))
        self.n += 1

    def close(self, keep: bool = True) -> None:
        self.fh.close()
        if keep:
            self.tmp.replace(self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def _same_settings(journal: Path, run_config: dict[str, Any], key: str) -> None:
    """On resume, a stage's journal must have been written under the same settings: a post judged under
    other rules would be kept (ok lines are not re-run) and the funnel would mix the two."""
    mpath = manifest_path(journal)
    if not (journal.is_file() and mpath.is_file()):
        return
    try:
        prev = (json.loads(mpath.read_text(encoding="utf-8")).get("run_config") or {}).get("config")
    except (OSError, ValueError):
        return
    now = json.loads(json.dumps(redact(run_config["config"])))
    if prev is not None and prev != now:
        changed = sorted(k for k in set(prev) | set(now) if prev.get(k) != now.get(k))
        raise CurateSetupError(f"[curate.{key}] changed since {journal} was written ({', '.join(changed)}); run with "
                               "--no-resume, or another --out, so every post is judged under the same settings")


def _intake(posts: Path, fmt: str | None, mapping: dict[str, str] | None, sep: str, report: SkipReport,
            skip_invalid: bool, limit: int | None, ids: list[str], dropped: _Lines, counts: dict[str, int]
            ) -> Iterator[dict[str, Any]]:
    """Posts as records; a repeated id is dropped (the first post keeps it) with the row it came from."""
    first: dict[str, int] = {}
    for post in read_posts(posts, fmt, mapping=mapping, sep=sep,
                           policy=ErrorPolicy(skip_invalid=skip_invalid, report=report)):
        if limit is not None and counts["read"] >= limit:
            return
        counts["read"] += 1
        if post.id in first:
            counts["duplicate_id"] += 1
            dropped.append({"id": post.id, "row": post.row, "step": 0, "stage": "intake", "reason": "duplicate_id",
                            "detail": f"id already used by the post at row {first[post.id]}"})
            continue
        first[post.id] = post.row
        ids.append(post.id)
        yield post.record()


def _model_notes(config: Any, roles: Mapping[str, Any]) -> list[str]:
    missing = {}
    for key, _, _ in STAGES:
        cfg = config.stage(key)
        if cfg.enabled:
            for role in stage_roles(cfg):
                if role not in roles:
                    missing.setdefault(role, []).append(key)
    one = one_checker_warning(config.translate, roles)
    notes = [one] if one else []
    if not missing:
        return notes
    return ["no model for " + "; ".join(f"role {r!r} ({', '.join(ks)})" for r, ks in missing.items())
            + ": posts stop at the first of these stages with a NeedsModel reason (--llm URL --model NAME, or "
              "[models.<role>] in --config, then --resume); or switch a stage off with enabled = false", *notes]


def curate_posts(posts: str | Path, out: str | Path, *, config: Any = None, roles: Mapping[str, Any] | None = None,
                 image_root: Path | None = None, allow_outside_root: bool | None = None, progress: bool = False,
                 on_stage: Callable[[dict[str, Any]], None] | None = None, **settings: Any) -> CurateResult:
    """`run_curation` for a library caller: `config` (a CurateConfig: the stage tables) and `settings`
    (flag names: fmt, mapping, sep, skip_invalid, resume, concurrency, limit, ...; None: not given)
    become the run's CurateOptions through the one builder."""
    opts = CurateOptions.build({"curate": config} if config is not None else {}, posts=posts, out=out,
                               images=image_root, **settings)
    return run_curation(opts, roles=roles, allow_outside_root=allow_outside_root, progress=progress,
                        on_stage=on_stage)


def run_curation(opts: CurateOptions, *, roles: Mapping[str, Any] | None = None,
                 allow_outside_root: bool | None = None, progress: bool = False,
                 on_stage: Callable[[dict[str, Any]], None] | None = None) -> CurateResult:
    """Run the funnel over `opts.posts` into the folder `opts.out` and return (and write) the funnel.
    Images are resolved under `opts.images` (default: the posts file's folder). `on_stage` sees each
    stage's row."""
    assert opts.posts is not None and opts.out is not None  # CurateOptions._inputs_given
    posts, out, config, run = Path(opts.posts), Path(opts.out), opts.curate, opts.run
    if not posts.is_file():
        raise DataError("posts file not found", file=posts)
    roles = dict(roles or {})
    (out / STAGES_DIR).mkdir(parents=True, exist_ok=True)
    ctx = curate_context(roles, image_root=opts.images or posts.resolve().parent, allow_outside_root=allow_outside_root)
    used = opts.used()
    report = SkipReport()
    ids: list[str] = []
    counts = {"read": 0, "duplicate_id": 0}
    dropped, stopped = _Lines(out / DROPPED_FILE), _Lines(out / STOPPED_FILE)
    ok = False
    try:
        summaries: list[dict[str, Any]] = []
        passed: set[str] = set()
        prev: Path | None = None
        for n, (key, step, _) in enumerate(STAGES):
            path = journal_path(out, key)
            job = stage_job(key, config, ctx)
            stage = job.stages[0]
            decide_s = None
            if isinstance(stage, CorpusStage):
                path.unlink(missing_ok=True)  # decided over whoever reaches it now: never resumed
                manifest_path(path).unlink(missing_ok=True)
                t0 = time.perf_counter()
                ctx.resources.update(stage.resources(passing(prev, passed) if prev is not None else iter(())))
                decide_s = round(time.perf_counter() - t0, 3)
            elif run.resume:
                _same_settings(path, job.run_config, key)
            if n == 0:
                records: Any = _intake(posts, opts.fmt, opts.mapping, opts.sep, report, opts.skip_invalid, run.limit,
                                       ids, dropped, counts)
            else:
                records = passing(prev, passed) if prev is not None else iter(())
            if n == 0 or passed:
                job.run(records, out=path, resume=run.resume, concurrency=run.concurrency, progress=progress,
                        run_config={"options": used})
            if n == 0:
                for row, reason in report.skipped:  # unreadable rows: no post, but a line all the same
                    dropped.append({"id": None, "row": row, "step": 0, "stage": "intake", "reason": "bad_row",
                                    "detail": reason})
            tally = StageTally(key, step, disabled=not config.stage(key).enabled)
            entering = set(ids) if n == 0 else passed
            passed = read_stage(path, entering, tally, dropped, stopped)
            extra: dict[str, Any] = {"decide_seconds": decide_s} if decide_s is not None else {}
            if key == "translate" and config.translate.enabled:  # how many checked, and whether that is "multiple"
                one = one_checker_warning(config.translate, roles)
                extra["checkers"] = {"roles": list(config.translate.check_roles),
                                     "models": checker_models(roles, config.translate.check_roles),
                                     **({"warning": one} if one else {})}
            if key == "translate" and config.translate.enabled and path.is_file():  # the checkers' agreement over this run's items
                extra["agreement"] = translation_agreement(
                    (ln.get("curate") or {}).get("translate") or {} for _, ln in read_jsonl(path)
                    if ln.get("id") in entering and ln.get("status") == "ok")
            summaries.append({**tally.as_dict(), **extra})
            if on_stage is not None:
                on_stage(summaries[-1])
            prev = path
        items: list[dict[str, Any]] = []
        output_drops: dict[str, int] = {}
        for rec in (passing(prev, passed) if passed and prev is not None else ()):
            got = build_item(rec, out, config.output.max_images)
            if isinstance(got, str):
                output_drops[got] = output_drops.get(got, 0) + 1
                dropped.append({"id": rec["id"], "row": rec.get("row"), "step": 4, "stage": "output", "reason": got,
                                "detail": "no short answer: standardisation disabled and the post gave none"})
            else:
                items.append(got)
        write_jsonl(out / ITEMS_FILE, items)
        ok = True
    finally:
        dropped.close(keep=ok)
        stopped.close(keep=ok)
    if counts["read"] + report.count == 0:
        raise DataError("no posts in the input (an empty file?)", file=posts)
    intake = {"read": counts["read"] + report.count, "posts": len(ids), "skipped_rows": report.count,
              "duplicate_id": counts["duplicate_id"]}
    output = {"items": len(items), "dropped": dropped.n, "stopped": stopped.n, "drops": output_drops}
    result = CurateResult(out, intake, summaries, output, _model_notes(config, roles), used)
    (out / FUNNEL_FILE).write_text(json.dumps(result.as_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    return result


def review_import(out: str | Path, sheet: str | Path | None = None, target: str | Path | None = None) -> dict[str, Any]:
    """Import the proofreading sheet of a run folder: reviewed items to `reviewed.jsonl`, rejected ones
    appended to `dropped.jsonl` (stage `proofread`; an earlier import's lines are replaced) and the
    proofreading row added to `funnel.json`."""
    out = Path(out)
    res, rejected = import_review(out / ITEMS_FILE, Path(sheet or out / REVIEW_SHEET), Path(target or out / REVIEWED_FILE))
    drops = out / DROPPED_FILE
    keep = [obj for _, obj in read_jsonl(drops) if obj.get("stage") != "proofread"] if drops.is_file() else []
    write_jsonl(drops, [*keep, *rejected])
    funnel = out / FUNNEL_FILE
    if funnel.is_file():
        data = json.loads(funnel.read_text(encoding="utf-8"))
        data["proofread"] = res
        funnel.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    return res
