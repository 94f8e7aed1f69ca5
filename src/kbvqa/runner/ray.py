"""The Ray executor: the same stages in a pool of async Ray actors, on this machine or a cluster.

Why it looks like this:

- **The driver owns paths and writes; workers read and return** (ARCHITECTURE.md). The runner makes
  every Path resource absolute before the job ships; actors only turn records into (line, status,
  side writes) with `run_record`. Artifacts, cassette and cache entries and harvested images come
  back with their record (kbvqa.data.outbox) and the driver writes them before the line, so nodes
  without a shared writable filesystem end with exactly the files a local run leaves.
- **Workers cannot lean on a working directory.** Each actor marks its process a worker (no store
  creates a file there) and works in a fresh private temporary folder, so a relative path can never
  silently resolve against some folder; whatever appears in that folder is reported back
  (`worker_files` in the manifest, which must stay empty).
- **Fail fast on inputs.** Before its first record an actor checks that every read-only input the
  job names (`node_inputs`: Path resources, the KB file, read-only cassettes) exists on its node, and
  loads the job; either failure stops the run with one message naming the path and node
  (NodeInputMissing, exit 2). The manifest lists those inputs: they must exist at the same absolute
  path on every node. Everything else (stages, config, image indexes, JSONL replay cassettes) is
  shipped through the object store.
- **One Ray session per process.** The first Ray job of a command starts (or connects to) the
  cluster and creates the actor pool; later jobs of the same command (every stage of `reference
  build`, `curate run`, `eval`, `demo`) reuse both. The session ends at process exit. The manifest
  records the start-up seconds (0 when reused), the actors and the batch size that really ran.
- **Bounded memory, streamed input.** The driver runs `actors x calls_per_actor` lanes; each pulls
  at most `batch_size` tasks from the TaskSource, waits for the batch and emits it. `concurrency`
  is the job's total, split across actors.
- **Usage comes home.** Each actor's Context copy accumulates `ctx.usage` from a zero start; the
  executor returns the sum, which the runner adds to the manifest's totals.
"""

from __future__ import annotations

import asyncio
import atexit
import math
import os
import socket
import tempfile
import time
import uuid
from pathlib import Path, PurePath
from typing import Any, Sequence

from kbvqa.data.outbox import mark_worker
from kbvqa.data.schema import Usage
from kbvqa.runner.executor import EXECUTORS, Emit, ExecutorError, ExecutorMissing, NodeInputMissing, Task, \
    TaskSource, WorkersLost, run_lanes
from kbvqa.runner.interrupt import keep_sigterm
from kbvqa.runner.stage import Context, Stage, run_record

__all__ = ["RayExecutor", "StageActor", "node_inputs", "shutdown_session"]

INSTALL_HINT = "pip install 'kbvqa[ray]'"
#: A local cluster's environment: no usage reporting, no auth token written to ~/.ray (ray-notes.md).
LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
LOCAL_OBJECT_STORE = 256 * 2**20  # bytes; the stage list and Context are the only large objects
ACTOR_RESTARTS = 2  # a lost node or a killed worker costs a retried batch, not the run

#: This process's Ray session and actor pool, shared by every job the command runs.
_SESSION: dict[str, Any] = {"started": False, "exit_hook": False, "pool_key": None, "pool": []}


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorMissing(f"the Ray executor needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def split_concurrency(concurrency: int, actors: int) -> list[int]:
    """`concurrency` slots over `actors` as evenly as possible (every actor gets at least one)."""
    actors = max(1, min(actors, concurrency))
    base, extra = divmod(concurrency, actors)
    return [base + (1 if i < extra else 0) for i in range(actors)]


def _objects(ctx: Context) -> list[Any]:
    """The role clients and resources of a Context, lists flattened, bound methods' owners included,
    and one level of their attributes (a Toolbox's cache, a client's cassette)."""
    top: list[Any] = [ctx.kb]
    for v in [*ctx.roles.values(), *ctx.resources.values()]:
        top.extend(v if isinstance(v, (list, tuple)) else [v])
    top += [getattr(v, "__self__", None) for v in top if callable(v)]
    nested = [a for v in top if hasattr(v, "__dict__") and not isinstance(v, type) for a in vars(v).values()]
    return [v for v in top + nested if v is not None]


def node_inputs(ctx: Context) -> dict[str, str]:
    """{absolute path: what it is} for every read-only input the job reads on whichever node runs it:
    the KB file, every existing Path resource (image folders), every object's own `node_inputs()`
    (read-only cassettes). They must exist at the same absolute path on every node."""
    found: dict[str, str] = {}
    kb_path = getattr(ctx.kb, "path", None)
    if isinstance(kb_path, (str, PurePath)) and Path(kb_path).exists():
        found[str(Path(kb_path).resolve())] = "the KB"
    for name, value in ctx.resources.items():
        if isinstance(value, PurePath) and Path(value).exists():
            found.setdefault(str(Path(value).resolve()), f"resource {name!r}")
    for obj in _objects(ctx):
        declared = getattr(obj, "node_inputs", None)
        if callable(declared) and not isinstance(obj, type):
            for path, what in declared().items():
                found.setdefault(str(path), what)
    return found


def describe_init(init_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`ray.init` options for the manifest: runtime_env variables by name only, the rest redacted."""
    from kbvqa.runner.manifest import REDACTED, redact

    shown = dict(init_kwargs)
    env = shown.get("runtime_env")
    if isinstance(env, dict):
        env = dict(env)
        if isinstance(env.get("env_vars"), dict):
            env["env_vars"] = {k: REDACTED for k in env["env_vars"]}
        shown["runtime_env"] = env
    return redact(shown)


class StageActor:
    """Runs batches of records through the stages inside one Ray actor, for any number of jobs in turn.

    Created with `max_concurrency=calls_per_actor`, so while one batch's results travel back the
    next is already running. A job comes with every batch as (job id, node inputs, this actor's share
    of `concurrency`, a ref wrapped in a list so Ray does not resolve it per call), and is loaded
    once per actor, on its first batch; an actor Ray restarts after a crash loads it again from the
    retried batch."""

    def __init__(self) -> None:
        mark_worker()  # no store creates or writes a file in this process
        self.workdir = Path(tempfile.mkdtemp(prefix="kbvqa-actor-"))
        os.chdir(self.workdir)  # private: a relative path resolves nowhere useful, and shows up at finish
        self.jobs: dict[str, tuple[list[Stage], Context, asyncio.Semaphore]] = {}
        self._loading: dict[str, asyncio.Future] = {}

    @staticmethod
    def _where() -> str:
        try:
            import ray

            return f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"
        except Exception:  # pragma: no cover - outside Ray
            return socket.gethostname()

    async def _load(self, job_id: str, inputs: dict[str, str], concurrency: int, job_ref: Any) -> None:
        missing = [f"{path} ({what})" for path, what in inputs.items() if not os.path.exists(path)]
        if missing:
            raise NodeInputMissing(f"node {self._where()} cannot read {', '.join(missing)}: the Ray executor needs "
                                   "every read-only input at the same absolute path on every node "
                                   "(docs/scale-out.md)")
        try:
            stages, ctx = await job_ref
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            raise NodeInputMissing(f"node {self._where()} could not load the job: {type(cause).__name__}: "
                                   f"{cause}") from None
        ctx.usage = Usage()  # report only what this actor spent
        self.jobs[job_id] = (stages, ctx, asyncio.Semaphore(concurrency))  # on the actor's event loop

    async def run_batch(self, job: list[Any], batch: list[tuple[dict[str, Any], int]]) -> list[tuple[str, str, list]]:
        job_id, inputs, concurrency, job_ref = job
        if job_id not in self._loading:  # no await between the check and the set: one load per job
            self._loading[job_id] = asyncio.ensure_future(self._load(job_id, inputs, concurrency, job_ref))
        await self._loading[job_id]
        stages, ctx, sem = self.jobs[job_id]

        async def one(record: dict[str, Any], attempts: int) -> tuple[str, str, list]:
            async with sem:
                writes: list[Any] = []
                line, status = await run_record(record, stages, ctx, attempts, writes=writes)
                return line, status, writes

        return list(await asyncio.gather(*(one(r, a) for r, a in batch)))

    async def finish(self, job_id: str) -> tuple[Usage, list[str], str]:
        """Close the job's HTTP pools on the loop that opened them; return the usage it spent here,
        whatever files appeared in this actor's private folder (a leak: must be none) and its node."""
        import ray

        self._loading.pop(job_id, None)
        loaded = self.jobs.pop(job_id, None)
        usage = Usage()
        if loaded is not None:
            await loaded[1].aclose()
            usage = loaded[1].usage
        stray = sorted(str(p.relative_to(self.workdir)) for p in self.workdir.rglob("*")) \
            if self.workdir.exists() else []
        return usage, [f"{self._where()}:{self.workdir}/{s}" for s in stray], ray.get_runtime_context().get_node_id()


def shutdown_session() -> None:
    """End this process's Ray session if kbvqa started it (atexit); a session the caller opened is left."""
    _SESSION["pool"], _SESSION["pool_key"] = [], None
    if _SESSION["started"]:
        _SESSION["started"] = False
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()  # stops a local cluster it started; only disconnects from an address
        except Exception:  # pragma: no cover - interpreter shutting down
            pass


@EXECUTORS.register("ray", help="Ray actors, locally or on a cluster (the kbvqa[ray] extra)")
class RayExecutor:
    """`address`: a running cluster ("auto", "ray://host:10001", "host:6379"); else $RAY_ADDRESS;
    else a private local cluster, started by the first Ray job of the process and kept for every
    later one (stopped at exit). `actors`: default one per cluster CPU, at most `concurrency`.
    `batch_size`: records per call, default the actor's share of `concurrency`. `init_kwargs` go to
    `ray.init` (e.g. runtime_env, num_cpus, namespace) and to the manifest without secrets."""

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
        self.report: dict[str, Any] = {}  # what the run found out: filled by execute

    def describe(self) -> dict[str, Any]:
        where = self.address or ("current session" if self._ray.is_initialized() else "local")
        return {"name": self.name, "address": where, "actors": self.actors or "auto",
                "calls_per_actor": self.calls_per_actor, "batch_size": self.batch_size or "auto",
                "num_cpus_per_actor": self.num_cpus_per_actor, "ray": self._ray.__version__,
                "init": describe_init(self.init_kwargs), **self.report}

    def _connect(self) -> tuple[str, float]:
        """("reused" | "connected" | "started", seconds it took): one session per process."""
        ray = self._ray
        if ray.is_initialized():  # an earlier job of this command, or the caller's session (notebook, test)
            return "reused", 0.0
        t0 = time.perf_counter()
        kwargs: dict[str, Any] = {"log_to_driver": False, **self.init_kwargs}
        if not self.address:
            for k, v in LOCAL_ENV.items():
                os.environ.setdefault(k, v)  # read by ray.init and the processes it starts
            kwargs.setdefault("include_dashboard", False)
            kwargs.setdefault("object_store_memory", LOCAL_OBJECT_STORE)
        with keep_sigterm():  # SIGTERM stays the runner's: an interruption, not Ray's sys.exit(15)
            ray.init(address=self.address or "local", **kwargs)
        _SESSION["started"] = True
        if not _SESSION["exit_hook"]:
            atexit.register(shutdown_session)
            _SESSION["exit_hook"] = True
        return ("connected" if self.address else "started"), time.perf_counter() - t0

    def _pool(self, n: int) -> list[Any]:
        """`n` actors for this job: the process's pool when it fits (same session, size and options),
        else a new one (the old one is ended so it holds no CPUs)."""
        ray = self._ray
        key = (ray.get_runtime_context().get_job_id(), n, self.calls_per_actor, self.num_cpus_per_actor)
        if _SESSION["pool_key"] == key:
            return _SESSION["pool"]
        _drop_pool(ray)
        actor_cls = ray.remote(StageActor).options(
            num_cpus=self.num_cpus_per_actor, max_concurrency=self.calls_per_actor,
            max_restarts=ACTOR_RESTARTS, max_task_retries=ACTOR_RESTARTS)
        _SESSION["pool"], _SESSION["pool_key"] = [actor_cls.remote() for _ in range(n)], key
        return _SESSION["pool"]

    async def execute(self, tasks: TaskSource, stages: Sequence[Stage], ctx: Context, *, concurrency: int,
                      emit: Emit) -> Usage:
        first = await tasks.next()
        if first is None:  # everything was done already (a rerun): no cluster to start
            return Usage()
        held = [first]

        async def next_task() -> Task | None:
            return held.pop() if held else await tasks.next()

        ray = self._ray
        session, seconds = self._connect()
        inputs = node_inputs(ctx)
        n = self.actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
        shares = split_concurrency(concurrency, n)
        batch_size = self.batch_size or max(1, math.ceil(concurrency / len(shares)))
        self.report = {"session": session, "startup_seconds": round(seconds, 3), "init_applied": session != "reused",
                       "actors": len(shares),
                       "batch_size": batch_size, "nodes": sum(1 for nd in ray.nodes() if nd.get("Alive")),
                       "node_inputs": inputs}
        try:
            ref = ray.put((list(stages), ctx))  # one pickle: objects shared by both stay shared
        except Exception as exc:
            raise TypeError(f"the Ray executor ships the stages and the Context to its actors, so they must "
                            f"pickle: {type(exc).__name__}: {exc}") from exc
        actors = self._pool(len(shares))
        job_id = uuid.uuid4().hex
        jobs = {id(a): [job_id, inputs, share, ref] for a, share in zip(actors, shares)}
        ctx.log.info("ray executor: %d actors x %d calls, %s records in flight per actor, batches of %d "
                     "(session %s, %.1f s)", len(actors), self.calls_per_actor, shares, batch_size, session, seconds)

        async def lane(actor: Any) -> None:
            while True:
                batch: list[Task] = []
                while len(batch) < batch_size and (task := await next_task()) is not None:
                    batch.append(task)
                if not batch:
                    return
                try:
                    results = await actor.run_batch.remote(jobs[id(actor)], [(t.record, t.attempts) for t in batch])
                except ray.exceptions.RayActorError as exc:
                    raise WorkersLost(
                        f"a Ray actor died more than its {ACTOR_RESTARTS} restarts allow "
                        f"({type(exc).__name__}); the {len(batch)} records of its batch and any others in flight "
                        "were not written: run the same command with --resume to finish") from None
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, ExecutorError):
                        raise type(cause)(str(cause)) from None
                    raise
                for task, (line, status, writes) in zip(batch, results):
                    emit(task, line, status, writes)

        lanes = [asyncio.create_task(lane(a)) for a in actors for _ in range(self.calls_per_actor)]
        failed = True
        try:
            await run_lanes(lanes)
            total, stray, nodes = Usage(), [], set()
            for used, files, node in await asyncio.gather(*(a.finish.remote(job_id) for a in actors)):
                total, stray = total.add(used), stray + files
                nodes.add(node)
            self.report.update(worker_files=stray, actor_nodes=len(nodes))
            if stray:
                ctx.log.warning("ray executor: files appeared in the actors' private folders (they should write "
                                "nothing): %s", ", ".join(stray[:5]))
            failed = False
            return total
        finally:
            if failed:
                _drop_pool(ray)  # a broken or half-loaded pool is not reused; the next job starts afresh


def _drop_pool(ray: Any) -> None:
    for a in _SESSION["pool"]:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # already gone
            pass
    _SESSION["pool"], _SESSION["pool_key"] = [], None
