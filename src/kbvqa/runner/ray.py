"""The Ray executor: the same stages in a pool of async Ray actors, on this machine or a cluster.

Why it looks like this:

- **The driver stays the single writer.** Actors only turn records into (line, status) pairs with
  `run_record`; every line comes back to this process and goes through `emit`, so the journal,
  resume, compaction and manifest of `kbvqa.runner.run` are the same as with the local executor, and
  a driver crash loses only the records in flight.
- **Ray Core actors, not Ray Data.** An actor loads the pickled stage list and Context once
  (`ray.put`: one copy in the object store, one deserialisation per actor), keeps its HTTP pools
  and SQLite handles open between batches, and runs a batch with bounded concurrency on its own
  event loop. Ray Data would add pandas/Arrow conversions, its own block-level retries and output
  files, none of which the runner needs.
- **Bounded memory, streamed input.** The driver runs `actors x calls_per_actor` lanes; each pulls
  at most `batch_size` tasks from the TaskSource, waits for the batch and emits it. Nothing else is
  buffered, so a 10M-line input streams as it does locally.
- **`concurrency` is the job's total.** It is split across actors (each actor's semaphore gets its
  share), so the records in flight are the same number whichever executor runs the job.
- **Usage comes home.** Each actor's Context copy accumulates `ctx.usage` from a zero start; the
  executor returns the sum, which the runner adds to the manifest's totals.
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import Any, Sequence

from kbvqa.data.schema import Usage
from kbvqa.runner.executor import EXECUTORS, Emit, Task, TaskSource
from kbvqa.runner.stage import Context, Stage, run_record

__all__ = ["RayExecutor", "StageActor"]

INSTALL_HINT = "pip install 'kbvqa[ray]'"
#: A local cluster's environment: no usage reporting, no auth token written to ~/.ray (ray-notes.md).
LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
LOCAL_OBJECT_STORE = 256 * 2**20  # bytes; the stage list and Context are the only large objects
ACTOR_RESTARTS = 2  # a lost node or a killed worker costs a retried batch, not the run


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"the Ray executor needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


def split_concurrency(concurrency: int, actors: int) -> list[int]:
    """`concurrency` slots over `actors` as evenly as possible (every actor gets at least one)."""
    actors = max(1, min(actors, concurrency))
    base, extra = divmod(concurrency, actors)
    return [base + (1 if i < extra else 0) for i in range(actors)]


class StageActor:
    """Runs batches of records through the stages inside one Ray actor.

    Created with `max_concurrency=calls_per_actor`, so while one batch's results travel back the
    next batch is already running; all batches share one semaphore of `concurrency` records.

    The (stages, Context) object comes with every batch as a ref wrapped in a list (so Ray does not
    resolve it per call) and is fetched once, on the first batch: a constructor argument in the
    object store would make Ray warn on every run, and an actor Ray restarts after a crash loads it
    again from the retried batch."""

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.stages: list[Stage] = []
        self.ctx: Context | None = None
        self._loading: asyncio.Future | None = None
        self._sem: asyncio.Semaphore | None = None

    async def _load(self, job_ref: Any) -> None:
        self.stages, ctx = await job_ref
        ctx.usage = Usage()  # report only what this actor spent
        self.ctx = ctx
        self._sem = asyncio.Semaphore(self.concurrency)  # on the actor's event loop

    async def run_batch(self, job: list[Any], batch: list[tuple[dict[str, Any], int]]) -> list[tuple[str, str]]:
        if self._loading is None:  # no await between the check and the set: one load per actor
            self._loading = asyncio.ensure_future(self._load(job[0]))
        await self._loading

        async def one(record: dict[str, Any], attempts: int) -> tuple[str, str]:
            async with self._sem:  # type: ignore[union-attr]
                return await run_record(record, self.stages, self.ctx, attempts)  # type: ignore[arg-type]

        return list(await asyncio.gather(*(one(r, a) for r, a in batch)))

    async def finish(self) -> Usage:
        """Close the HTTP pools on the loop that opened them; return the usage this actor spent."""
        if self.ctx is None:  # never got a batch
            return Usage()
        await self.ctx.aclose()
        return self.ctx.usage


@EXECUTORS.register("ray", help="Ray actors, locally or on a cluster (the kbvqa[ray] extra)")
class RayExecutor:
    """`address`: a running cluster ("auto", "ray://host:10001", "host:6379"); else $RAY_ADDRESS;
    else a private local cluster is started for the run and stopped after it. `actors`: default one
    per cluster CPU, at most `concurrency`. `batch_size`: records per call, default the actor's
    share of `concurrency`. `init_kwargs` go to `ray.init` (e.g. runtime_env, num_cpus)."""

    name = "ray"

    def __init__(self, address: str | None = None, actors: int | None = None, calls_per_actor: int = 2,
                 batch_size: int | None = None, num_cpus_per_actor: float = 0.5,
                 init_kwargs: dict[str, Any] | None = None):
        for label, value in (("actors", actors), ("batch_size", batch_size)):
            if value is not None and value < 1:
                raise ValueError(f"{label} must be >= 1, not {value}")
        if calls_per_actor < 1:
            raise ValueError(f"calls_per_actor must be >= 1, not {calls_per_actor}")
        self._ray = _import_ray()  # fail at construction, before any file is touched
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.actors = actors
        self.calls_per_actor = calls_per_actor
        self.batch_size = batch_size
        self.num_cpus_per_actor = num_cpus_per_actor
        self.init_kwargs = dict(init_kwargs or {})

    def describe(self) -> dict[str, Any]:
        where = self.address or ("current session" if self._ray.is_initialized() else "local")
        return {"name": self.name, "address": where, "actors": self.actors or "auto",
                "calls_per_actor": self.calls_per_actor, "batch_size": self.batch_size or "auto",
                "num_cpus_per_actor": self.num_cpus_per_actor, "ray": self._ray.__version__}

    def _connect(self) -> bool:
        """Connect (or start a local cluster); True if this executor made the connection."""
        ray = self._ray
        if ray.is_initialized():  # the caller's session (a notebook, a test fixture): use it as is
            return False
        kwargs: dict[str, Any] = {"log_to_driver": False, **self.init_kwargs}
        if self.address:
            ray.init(address=self.address, **kwargs)
        else:
            for k, v in LOCAL_ENV.items():
                os.environ.setdefault(k, v)  # read by ray.init and the processes it starts
            kwargs.setdefault("include_dashboard", False)
            kwargs.setdefault("object_store_memory", LOCAL_OBJECT_STORE)
            ray.init(address="local", **kwargs)
        return True

    async def execute(self, tasks: TaskSource, stages: Sequence[Stage], ctx: Context, *, concurrency: int,
                      emit: Emit) -> Usage:
        first = await tasks.next()
        if first is None:  # everything was done already (a rerun): no cluster to start
            return Usage()
        held = [first]

        async def next_task() -> Task | None:
            return held.pop() if held else await tasks.next()

        ray = self._ray
        connected = self._connect()
        actors: list[Any] = []
        try:
            n = self.actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
            shares = split_concurrency(concurrency, n)
            batch_size = self.batch_size or max(1, math.ceil(concurrency / len(shares)))
            try:
                job = [ray.put((list(stages), ctx))]  # one pickle: objects shared by both stay shared
            except Exception as exc:
                raise TypeError(f"the Ray executor ships the stages and the Context to its actors, so they must "
                                f"pickle: {type(exc).__name__}: {exc}") from exc
            actor_cls = ray.remote(StageActor).options(
                num_cpus=self.num_cpus_per_actor, max_concurrency=self.calls_per_actor,
                max_restarts=ACTOR_RESTARTS, max_task_retries=ACTOR_RESTARTS)
            actors = [actor_cls.remote(share) for share in shares]
            ctx.log.info("ray executor: %d actors x %d calls, %s records in flight per actor, batches of %d",
                         len(actors), self.calls_per_actor, shares, batch_size)

            async def lane(actor: Any) -> None:
                while True:
                    batch: list[Task] = []
                    while len(batch) < batch_size and (task := await next_task()) is not None:
                        batch.append(task)
                    if not batch:
                        return
                    results = await actor.run_batch.remote(job, [(t.record, t.attempts) for t in batch])
                    for task, (line, status) in zip(batch, results):
                        emit(task, line, status)

            lanes = [asyncio.create_task(lane(a)) for a in actors for _ in range(self.calls_per_actor)]
            try:
                await asyncio.gather(*lanes)
            finally:
                for t in lanes:
                    t.cancel()  # no-op for finished ones; stops the rest if one lane broke
                await asyncio.gather(*lanes, return_exceptions=True)
            total = Usage()
            for used in await asyncio.gather(*(a.finish.remote() for a in actors)):
                total = total.add(used)
            return total
        finally:
            for a in actors:
                ray.kill(a, no_restart=True)
            if connected:
                ray.shutdown()  # stops a local cluster it started; only disconnects from an address
