"""The Executor protocol: how a list of stages is applied to a stream of records.

The runner (`kbvqa.runner.run`) owns everything that must be identical whatever runs the stages:
reading and checking the input, skipping records already done, the journal, the manifest, progress
and the summary. An executor only turns pending tasks into output lines: it pulls `Task`s from a
`TaskSource` until it returns None, runs each through `run_record` (so per-record status, reasons
and the "never half-modified" rule are the same everywhere) and hands every line, with the record's
side writes (kbvqa.data.outbox), to `emit`, at most once per task. An executor never writes a file. Executors register by name (`--executor local|ray`).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from kbvqa.data.schema import Usage
from kbvqa.registry import Registry
from kbvqa.runner.stage import Context, Stage

__all__ = ["EXECUTORS", "Emit", "Executor", "ExecutorError", "ExecutorMissing", "NodeInputMissing", "Task", "TaskSource",
           "WorkersLost", "get_executor", "set_default_executor"]


class ExecutorError(RuntimeError):
    """The executor itself failed (not a record): the run stops with this message; `exit_code` is what
    the command exits with (every command: kbvqa.cli.common.fail and the root command read it)."""

    exit_code = 5


class ExecutorMissing(ExecutorError, ImportError):
    """The chosen executor's package is not installed (Ray): nothing ran."""

    exit_code = 2


class NodeInputMissing(ExecutorError, ValueError):
    """A worker cannot open a read-only input the job names (KB, index, image folder, cassette): no
    record ran there. Every node needs them at the same absolute path."""

    exit_code = 2


class WorkersLost(ExecutorError):
    """Workers died more often than they may be restarted: the records in flight were not written;
    `--resume` runs them again."""

    exit_code = 5


@dataclass(frozen=True)
class Task:
    """One record to run, and which attempt this is (1 for a record never tried before)."""

    record: dict[str, Any]
    attempts: int

    @property
    def id(self) -> str:
        return self.record["id"]


class TaskSource(Protocol):
    async def next(self) -> Task | None:
        """The next pending task, or None when there is nothing more to start."""


#: emit(task, line, status, writes=()): called once per finished task, from the event-loop thread; `writes`
#: are the record's side writes (`run_record(..., writes=[])`), which the driver applies before the line.
Emit = Callable[..., None]


class Executor(Protocol):
    name: str

    def describe(self) -> dict[str, Any]:
        """What goes in the manifest's `executor` entry (no secrets)."""

    async def execute(self, tasks: TaskSource, stages: Sequence[Stage], ctx: Context, *, concurrency: int,
                      emit: Emit) -> Usage:
        """Run every task from `tasks`; return the model usage spent outside `ctx` (remote workers),
        which the runner adds to the run's total. Raise only for failures of the executor itself."""


EXECUTORS: Registry[Callable[..., Executor]] = Registry("executor", modules=("kbvqa.runner.local",
                                                                             "kbvqa.runner.ray"))


_DEFAULT: dict[str, Any] = {"name": os.environ.get("KBVQA_EXECUTOR") or "local", "options": {}}


async def run_lanes(lanes: Sequence[asyncio.Task]) -> None:
    """Await an executor's worker tasks; when one breaks (or the run is cancelled) the others are
    cancelled and awaited too, so no worker outlives its run (the local and the Ray executor alike)."""
    try:
        await asyncio.gather(*lanes)
    finally:
        for t in lanes:
            t.cancel()  # no-op for finished ones; stops the rest if one lane broke
        await asyncio.gather(*lanes, return_exceptions=True)


def set_default_executor(name: str, **options: Any) -> None:
    """The executor every job of this process uses unless it names one: what `kbvqa --executor ray
    <job>` sets, so every per-record job — present and future — scales out without a flag of its own.
    `KBVQA_EXECUTOR` in the environment sets it too."""
    EXECUTORS.entry(name)  # an unknown name fails here, listing the known ones
    _DEFAULT.update(name=name, options=dict(options))


def get_executor(executor: str | Executor | None = None, **options: Any) -> Executor:
    """An executor instance from a registered name (options go to its constructor), the process
    default when None, or an Executor as given."""
    if executor is None:
        return EXECUTORS.get(_DEFAULT["name"])(**{**_DEFAULT["options"], **options})
    if isinstance(executor, str):
        return EXECUTORS.get(executor)(**options)
    return executor
