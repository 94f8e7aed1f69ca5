"""The stage contract every per-record job implements, and the one function that runs a record.

A stage is a name, a version, a pydantic config and `async run(record, ctx) -> record`. Records are
JSON-ready dicts with a string `id` (usually a dumped Sample or Prediction), so an executor can
stream, resume and ship them to another process without knowing their type.

Stages take only their config in the constructor: everything they touch at run time — model roles,
the KB, vector indexes, encoders, rerankers, tool backends, caches — comes from `ctx`. That is what
lets the same stage objects run in this process (the local executor) or in Ray actors (the Context
and its resources pickle; live handles such as HTTP pools and SQLite connections reopen lazily on
the other side).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

from pydantic import BaseModel, ConfigDict

from kbvqa.data import outbox
from kbvqa.data.images import resolve_image
from kbvqa.data.jsonl import dumps_line
from kbvqa.data.redact import redact
from kbvqa.data.schema import Usage
from kbvqa.models.result import Invalid
from kbvqa.runner.outbox import Writer

__all__ = ["Context", "Invalid", "NeedsModel", "RECORD_DEADLINE_ENV", "RUNNER_FIELDS", "Stage", "StageConfig",
           "default_record_deadline", "run_record", "set_record_deadline", "stage_name"]

#: The default total time one record may take through all its stages (`kbvqa --record-deadline`).
RECORD_DEADLINE_ENV = "KBVQA_RECORD_DEADLINE"
_RECORD_DEADLINE: dict[str, float | None] = {"seconds": None}


def set_record_deadline(seconds: float | None) -> None:
    """The per-record deadline every job of this process uses unless it names one (what `kbvqa
    --record-deadline` sets, like `--executor`): a record still running after it ends `error`."""
    if seconds is not None and seconds <= 0:
        raise ValueError(f"a record deadline must be > 0 seconds, not {seconds}")
    _RECORD_DEADLINE["seconds"] = seconds


def default_record_deadline() -> float | None:
    """`set_record_deadline`'s value, else KBVQA_RECORD_DEADLINE, else None (no deadline)."""
    if _RECORD_DEADLINE["seconds"] is not None:
        return _RECORD_DEADLINE["seconds"]
    env = os.environ.get(RECORD_DEADLINE_ENV, "").strip()
    try:
        return float(env) if env and float(env) > 0 else None
    except ValueError:
        raise ValueError(f"{RECORD_DEADLINE_ENV}={env!r} is not a number of seconds") from None

#: Top-level fields the runner adds to every output line.
RUNNER_FIELDS = ("status", "reason", "attempts", "stage")

_MISSING = object()


class NeedsModel(RuntimeError):
    """A stage that cannot decide this record without a model, run with none configured for its role
    (offline). The record ends `needs_model` — its own status, counted apart from `error` and
    `invalid`, never a failure of the run — with the reason "NeedsModel: …"; `--resume` runs it again
    once a model is configured."""


class StageConfig(BaseModel):
    """Base for stage configs; subclasses add typed fields. An unknown key is an error, so a
    misspelt setting in a config file is refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class Context:
    """What a stage may touch.

    `roles` maps a role name (verifier, judge, answerer, ...) to a model client (or a list of
    clients); `kb` is a KB store (kb.base.KnowledgeBase) or None; `resources` holds everything else
    a stage reads by name (`image_index`, `image_encoder`, `image_root`, `reranker`, `text_index`,
    tool backends, ...). `usage` accumulates tokens, cost and calls over a run for the manifest."""

    roles: dict[str, Any] = field(default_factory=dict)
    kb: Any = None
    resources: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("kbvqa"))
    usage: Usage = field(default_factory=Usage)

    def add_usage(self, usage: Usage | dict[str, Any] | None) -> Usage:
        """Add one call's (or one record's) usage to the run total and return the new total.

        Call it from the event-loop thread (stages and async clients do): the update is a plain
        read-modify-write with no lock, which is safe there because asyncio never switches tasks
        inside it. A dict is validated as a Usage so a typo'd field fails loudly."""
        if usage is None:
            return self.usage
        if not isinstance(usage, Usage):
            usage = Usage.model_validate(usage)
        self.usage = self.usage.add(usage)
        return self.usage

    def role(self, name: str) -> Any:
        if name not in self.roles:
            raise KeyError(f"model role {name!r} is not configured (configured: {sorted(self.roles)})")
        return self.roles[name]

    def resource(self, name: str, default: Any = _MISSING) -> Any:
        """A named resource; without a default, a missing one is an error that says what is there."""
        if name in self.resources:
            return self.resources[name]
        if default is not _MISSING:
            return default
        raise KeyError(f"this job has no {name!r} resource (it has: {', '.join(sorted(self.resources)) or 'none'})")

    def image_path(self, ref: str) -> Path:
        """A sample's image reference as a file under the `image_root` resource, by the one resolver
        (bare ids get their extension; nothing outside the root unless `allow_outside_root`)."""
        return resolve_image(ref, self.resources.get("image_root"),
                             allow_outside_root=self.resources.get("allow_outside_root"))

    def closables(self) -> list[Any]:
        """Every distinct role client and resource with an `aclose` (HTTP pools), for the job's end."""
        seen: dict[int, Any] = {}
        for v in [*self.roles.values(), *self.resources.values()]:
            for c in (v if isinstance(v, list) else [v]):
                if hasattr(c, "aclose"):
                    seen.setdefault(id(c), c)
        return list(seen.values())

    async def aclose(self) -> None:
        for c in self.closables():
            await c.aclose()


class Stage:
    """Subclass and implement `run`. `prompts` lists the registered prompts (kbvqa.models.prompts)
    the stage may send; `prompt_versions` turns them into {id: sha256} for the run manifest."""

    name: ClassVar[str] = "stage"
    version: ClassVar[str] = "1"
    config_model: ClassVar[type[StageConfig]] = StageConfig
    prompts: ClassVar[tuple[Any, ...]] = ()

    def __init__(self, config: StageConfig | None = None):
        self.config = config or self.config_model()

    def prompt_versions(self) -> dict[str, str]:
        return {p.id: p.sha256 for p in self.prompts}

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError


def stage_name(stage: Any) -> str:
    return str(getattr(stage, "name", None) or type(stage).__name__)


def error_reason(exc: BaseException) -> str:
    """"ExcType: message", secrets redacted (kbvqa.data.redact): it goes to journals and manifests."""
    msg = redact(str(exc))
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _out_line(record: dict[str, Any], status: str, reason: str, attempts: int, stage: str) -> dict[str, Any]:
    line = {k: v for k, v in record.items() if k not in RUNNER_FIELDS}
    line.update(status=status, reason=reason, attempts=attempts, stage=stage)
    return line


async def run_record(rec: dict[str, Any], stages: Sequence[Stage], ctx: Context, attempts: int, *,
                     writes: list[Any] | None = None) -> tuple[str, str]:
    """Run one record through the stages; return (JSONL line, status). Every executor calls this.

    The record's side writes (artifacts, cassette and cache entries, harvested images: whatever a
    store writes through kbvqa.data.outbox) are collected while it runs, whatever its status (a
    cassette keeps failed calls too). With `writes` they are appended there for the driver to apply
    before it journals the line (what the executors do); without it they are applied here at the end.

    Never raises except on cancellation, which must propagate so an interrupted record is not
    written as an error. A stage exception ends the record `error` ("ExcType: message"), `Invalid`
    ends it `invalid`, and a failed record is written as it came in (not half-modified). The
    `record_deadline` resource (seconds) caps the whole chain: a record still running then ends
    `error` with a `RecordDeadline` reason naming the stage it was in."""
    with outbox.collecting() as box:
        result = await _run_record(rec, stages, ctx, attempts)
    if writes is None:
        writer = Writer()
        try:
            writer.apply(box.writes)
        finally:
            writer.close()
    else:
        writes.extend(box.writes)
    return result


async def _run_record(rec: dict[str, Any], stages: Sequence[Stage], ctx: Context, attempts: int) -> tuple[str, str]:
    base = {k: v for k, v in rec.items() if k not in RUNNER_FIELDS}
    rid = base["id"]
    current: dict[str, Any] = copy.deepcopy(base)  # a failing stage must not alter what is written
    status, reason, failed = "ok", "", ""
    name = ""
    deadline = ctx.resources.get("record_deadline")
    timer = asyncio.timeout(deadline)  # None: no deadline
    try:
        async with timer:
            for stage in stages:
                name = stage_name(stage)
                try:
                    result = await stage.run(current, ctx)
                    if not isinstance(result, dict):
                        raise TypeError(f"stage {name!r} returned {type(result).__name__}, not a dict")
                    if result.get("id") != rid:
                        raise ValueError(f"stage {name!r} changed the record id from {rid!r} to {result.get('id')!r}")
                except Invalid as exc:
                    status, reason, failed = "invalid", redact(str(exc)) or "Invalid (no reason given)", name
                    ctx.log.debug("record %s invalid in stage %s: %s", rid, name, reason)
                    break
                except NeedsModel as exc:
                    status, reason, failed = "needs_model", error_reason(exc), name
                    ctx.log.debug("record %s needs a model in stage %s: %s", rid, name, reason)
                    break
                except Exception as exc:
                    status, reason, failed = "error", error_reason(exc), name
                    ctx.log.debug("record %s failed in stage %s", rid, name, exc_info=exc)
                    break
                current = result
    except TimeoutError:
        if not timer.expired():  # pragma: no cover - raised by the timer only
            raise
        status, failed = "error", name
        reason = f"RecordDeadline: the record deadline of {deadline:g} s ran out in stage {name!r}"
    try:
        return dumps_line(_out_line(current if status == "ok" else base, status, reason, attempts, failed)), status
    except (TypeError, ValueError) as exc:
        # The result (or the input) holds something JSON cannot: a datetime, NaN, a set...
        reason = f"{type(exc).__name__}: record is not JSON-serialisable: {exc}"
        failed = failed or (stage_name(stages[-1]) if stages else "")
        try:
            return dumps_line(_out_line(base, "error", reason, attempts, failed)), "error"
        except (TypeError, ValueError):
            return dumps_line(_out_line({"id": rid}, "error", reason + " (input record too; only the id is kept)",
                                        attempts, failed)), "error"
