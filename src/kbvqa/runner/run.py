"""Run stages over records: the input, the journal, resume, the manifest, progress and the summary.

Why it looks like this:

- **One place for what must not differ between executors.** This module reads and checks the input,
  decides what is pending, journals every finished record, writes the manifest and the summary; an
  executor (`local`: asyncio in this process, `ray`: actors on a cluster) only runs pending records
  through the stages (`kbvqa.runner.executor`).
- **Streaming.** Records are pulled from the input as executors ask for them, so a 10M-line input
  never sits in memory. Memory grows only with the number of ids (input order, the resume index).
- **Nothing dropped.** Every record pulled ends as one output line with `status` ok / error /
  invalid / needs_model (`run_record`), or is counted as skipped because an earlier run finished it.
- **Crash-safe resume.** Lines are appended and flushed as records finish (fsync every N lines), so
  SIGKILL loses only in-flight records. The next run skips ids whose last line is `ok` and runs
  `error`/`invalid` ones again with `attempts` incremented. At the end the journal is compacted to
  one line per id, in input order: exactly once, whichever executor ran it.
- **Input errors are loud.** A record that is not a dict, has no string `id`, or repeats an id
  raises `InputError` naming the position. For a sequence, or an input that lists its ids in
  advance (a counted file: kbvqa.data.formats.SampleRecords), this is checked before anything runs;
  for a generator it is found as the record is pulled: no new records start, the in-flight ones
  finish and are journaled (so a fixed input resumes), and then it raises. A record over a size cap
  (kbvqa.runner.caps) ends `error` before any stage sees it.
- **Stopping is an interruption.** Ctrl-C and SIGTERM (kbvqa.runner.interrupt) cancel the run: the
  finished records stay journaled and the manifest says `interrupted` with its counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
import unicodedata
from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePath
from typing import Any

from kbvqa.data.jsonl import dumps_line
from kbvqa.data.schema import Usage
from kbvqa.progress import ProgressBar
from kbvqa.runner import manifest as mf
from kbvqa.runner.caps import SizeCaps
from kbvqa.runner.executor import Executor, Task, get_executor
from kbvqa.runner.fingerprint import check_resume
from kbvqa.runner.interrupt import Terminated, sigterm_cancels
from kbvqa.runner.lock import OutputLock, side_path
from kbvqa.runner.outbox import Writer
from kbvqa.runner.sinks import JournalEntry, JsonlJournal, compact_journal, scan_journal, write_parquet
from kbvqa.runner.stage import Context, Stage, _out_line, default_record_deadline, error_reason
from kbvqa.runner.write_errors import as_write_failure

log = logging.getLogger("kbvqa.runner")

FORMATS = ("jsonl", "parquet")
STATUSES = ("ok", "error", "invalid", "needs_model")  # needs_model: kbvqa.runner.stage.NeedsModel


MANIFEST_RESERVE = 8192  # bytes of spaces after the running manifest (kbvqa.runner.manifest.write_manifest)

#: outputs whose run was interrupted in this process (the CLI's "rerun with --resume" line names them)
INTERRUPTED: list[Path] = []


class InputError(ValueError):
    """The input itself is unusable: a record without a string id, a non-dict, or a duplicate id."""


@dataclass
class RunSummary:
    """Counts are for this run's input: total = ok + error + invalid + needs_model + skipped, where
    skipped means already ok in the output from a previous run."""

    total: int
    ok: int
    error: int
    invalid: int
    skipped: int
    seconds: float
    usage: Usage
    out: Path
    manifest: Path
    parquet: Path | None = None
    previous_output: Path | None = None  # where resume=False moved an existing output
    output_counts: dict[str, int] = field(default_factory=dict)  # statuses in the whole output file
    needs_model: int = 0  # records a stage could not decide without a model (not failures; --resume)

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "ok": self.ok, "error": self.error, "invalid": self.invalid,
                "needs_model": self.needs_model, "skipped": self.skipped, "seconds": round(self.seconds, 3),
                "usage": self.usage.model_dump(),
                "out": str(self.out), "manifest": str(self.manifest),
                **({"parquet": str(self.parquet)} if self.parquet else {})}


def record_id(rec: Any, pos: int) -> str:
    """The id of input record #`pos`, or InputError: not a dict, no id, not a non-empty string."""
    if not isinstance(rec, dict):
        raise InputError(f"input record #{pos} (0-based) is a {type(rec).__name__}, not a dict")
    if "id" not in rec:
        raise InputError(f"input record #{pos} (0-based) has no 'id' field")
    rid = rec["id"]
    if not isinstance(rid, str) or not rid.strip():
        raise InputError(f"input record #{pos} (0-based) has id {rid!r}; ids must be non-empty strings")
    return rid


def check_record(rec: Any, pos: int, seen: dict[str, int]) -> str:
    rid = record_id(rec, pos)
    if rid in seen:
        raise InputError(f"duplicate id {rid!r} at input records #{seen[rid]} and #{pos} (0-based)")
    return rid


class IdCheck:
    """Every id of an input, checked before any record runs: all duplicates named at once, and ids
    that differ only by Unicode normalisation (NFKC) or surrounding spaces warned about (they are two
    records to kbvqa, and almost always one sample written twice)."""

    SHOWN = 5  # duplicates named in the error; the rest are counted

    def __init__(self, log: logging.Logger = log):
        self.log = log
        self.seen: dict[str, int] = {}
        self.alike: dict[str, str] = {}
        self.duplicates: list[tuple[str, int, int]] = []
        self.warned = 0

    def add(self, rid: str, pos: int) -> None:
        if rid in self.seen:
            self.duplicates.append((rid, self.seen[rid], pos))
            return
        self.seen[rid] = pos
        key = unicodedata.normalize("NFKC", rid).strip()
        other = self.alike.setdefault(key, rid)
        if other != rid:
            self.warned += 1
            if self.warned <= self.SHOWN:
                self.log.warning("input ids %r (record #%d) and %r (record #%d, 0-based) differ only by Unicode "
                                 "normalisation or surrounding spaces: kbvqa keeps them as two records",
                                 other, self.seen[other], rid, pos)

    def check(self) -> None:
        """Raise InputError naming the duplicates, if any; say how many near-duplicates were warned."""
        if self.warned > self.SHOWN:
            self.log.warning("%d input ids in all differ from another only by normalisation or spaces", self.warned)
        if not self.duplicates:
            return
        named = "; ".join(f"{rid!r} at input records #{a} and #{b}" for rid, a, b in self.duplicates[:self.SHOWN])
        more = len(self.duplicates) - self.SHOWN
        raise InputError(f"duplicate id{'s' if len(self.duplicates) > 1 else ''} {named} (0-based)"
                         + (f" and {more} more" if more > 0 else "")
                         + ", found before any record ran; every id must be unique")


def precheck_ids(records: Any, limit: int | None) -> bool:
    """Check the ids of an input whose ids are known before it streams — a sequence, or a reader
    that already listed them in its counting pre-pass (an `ids` list, kbvqa.data.formats.SampleRecords)
    — so a duplicate at record 200 is refused before record 0 spends a model call."""
    ids = getattr(records, "ids", None)
    check = IdCheck()
    if isinstance(records, Sequence) and not isinstance(records, (str, bytes)):
        for pos, rec in enumerate(itertools.islice(records, limit)):
            check.add(record_id(rec, pos), pos)
    elif isinstance(ids, Sequence) and not isinstance(ids, (str, bytes)):
        for pos, rid in enumerate(itertools.islice(ids, limit)):
            if isinstance(rid, str):
                check.add(rid, pos)
    else:
        return False  # a stream: checked as records are pulled (_Pending)
    check.check()
    return True


class _Pending:
    """The shared task source: pulls input records, applies `limit`, checks ids, remembers input
    order, and skips ids an earlier run finished (`previous`).

    An error from the input (an InputError or anything the user's iterator raises) is stored, not
    raised inside a worker, so in-flight records can finish before the run stops."""

    def __init__(self, records: Iterable[dict] | AsyncIterable[dict], limit: int | None,
                 previous: dict[str, JournalEntry], on_skip: Any, *, alike: IdCheck | None = None,
                 caps: SizeCaps | None = None, on_refuse: Any = None):
        self.limit = limit
        self.alike = alike  # a stream's near-duplicate ids are warned about as they are pulled
        self.caps, self.on_refuse = caps, on_refuse
        self.previous = previous
        self.on_skip = on_skip
        self.pos = 0
        self.seen: dict[str, int] = {}
        self.order: list[str] = []
        self.error: BaseException | None = None
        self.exhausted = False
        if hasattr(records, "__aiter__"):
            self._ait = records.__aiter__()  # type: ignore[union-attr]
            self._it = None
            self._lock = asyncio.Lock()
        else:
            self._ait = None
            self._it = iter(records)  # type: ignore[arg-type]

    @property
    def stopped(self) -> bool:
        return self.exhausted or self.error is not None or (self.limit is not None and self.pos >= self.limit)

    async def next(self) -> Task | None:
        # a record whose stages never wait (rules-only audit) would never hand the loop back: yield
        # once per record so Ctrl-C and SIGTERM (runner.interrupt) stop the run now, not at its end
        await asyncio.sleep(0)
        while True:
            if self._it is not None:
                rec = self._take_sync()  # no await inside: workers share the iterator without a lock
            else:
                async with self._lock:  # an async generator cannot be advanced by two tasks at once
                    rec = await self._take_async()
            if rec is None:
                return None
            prev = self.previous.get(rec["id"])
            if prev is not None and prev.status == "ok":
                self.on_skip()
                continue
            task = Task(rec, (prev.attempts if prev else 0) + 1)
            too_big = self.caps.refusal(rec) if self.caps is not None else None
            if too_big is not None:  # ends `error` here: no stage (no model call) ever sees it
                self.on_refuse(task, too_big)
                continue
            return task

    def _take_sync(self) -> dict | None:
        if self.stopped:
            return None
        try:
            rec = next(self._it)  # type: ignore[arg-type]
        except StopIteration:
            self.exhausted = True
            return None
        except Exception as exc:
            self.error = exc
            return None
        return self._accept(rec)

    async def _take_async(self) -> dict | None:
        if self.stopped:
            return None
        try:
            rec = await self._ait.__anext__()  # type: ignore[union-attr]
        except StopAsyncIteration:
            self.exhausted = True
            return None
        except Exception as exc:
            self.error = exc
            return None
        return self._accept(rec)

    def _accept(self, rec: Any) -> dict | None:
        pos = self.pos
        self.pos += 1
        try:
            rid = check_record(rec, pos, self.seen)
        except InputError as exc:
            self.error = exc
            return None
        self.seen[rid] = pos
        if self.alike is not None:
            self.alike.add(rid, pos)
        self.order.append(rid)
        return rec


def _known_total(records: Any, limit: int | None) -> int | None:
    try:
        n = len(records)
    except TypeError:
        return None
    return min(n, limit) if limit is not None else n


def _move_aside(out: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = out.with_name(f"{out.name}.{stamp}.bak")
    i = 1
    while target.exists():
        target = out.with_name(f"{out.name}.{stamp}.{i}.bak")
        i += 1
    out.rename(target)
    return target


def _usage_delta(end: Usage, start: Usage) -> Usage:
    a, b = end.model_dump(), start.model_dump()
    return Usage(**{k: a[k] - b[k] for k in a})


def _earlier_attempts(prev: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs that wrote this output before, oldest first, from its previous manifest `prev`. One
    whose manifest still says "running" was killed (SIGKILL, a lost machine): it is recorded as
    interrupted."""
    if not prev:
        return []
    state = prev.get("state")
    last = {"started": prev.get("started"), "finished": prev.get("finished"),
            "state": "interrupted" if state == "running" else state, "counts": prev.get("counts"),
            "skipped": prev.get("skipped"), "error": prev.get("error"),
            "executor": (prev.get("runner") or {}).get("executor")}
    return [*(prev.get("attempts") or []), last]


def absolute_paths(ctx: Context) -> None:
    """Every Path resource made absolute in the driver, before any executor ships the Context: a
    worker never interprets a path against its own working directory (ARCHITECTURE.md, "The driver
    owns paths and writes")."""
    for name, value in list(ctx.resources.items()):
        if isinstance(value, PurePath):
            ctx.resources[name] = Path(value).resolve()


def output_paths(out: Path) -> dict[str, Path]:
    """Where a run with journal `out` puts its manifest and (fmt="parquet") its Parquet file."""
    out = Path(out)
    return {"out": out, "manifest": mf.manifest_path(out), "parquet": side_path(out, ".parquet")}


def _check_args(out: Path, fmt: str, concurrency: int, limit: int | None) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, not {concurrency}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    if out.suffix == ".parquet":
        raise ValueError(f"out is the JSONL journal, not the Parquet file: pass {out.with_suffix('.jsonl')} "
                         "with fmt='parquet' and the Parquet file is written beside it")


class _Run:
    """The bookkeeping of one run: journal, counts, progress, manifest."""

    def __init__(self, out: Path, stages: list[Stage], ctx: Context, executor: Executor, *, resume: bool,
                 concurrency: int, limit: int | None, run_config: dict | None, fmt: str, description: str,
                 fsync_every: int, caps: SizeCaps, lock: bool = True):
        self.out, self.ctx, self.fmt, self.executor = out, ctx, fmt, executor
        self.caps, self.ids_checked = caps, False
        self.writer = Writer()  # the record's side files, written here in the driver (kbvqa.data.outbox)
        self.paths = output_paths(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        # one writer per output: a second run is refused here (Job.run takes it earlier and passes lock=False)
        self.lock = OutputLock(out).acquire() if lock else None
        self.previous_output: Path | None = None
        if not resume and out.exists():
            self.previous_output = _move_aside(out)
            ctx.log.info("resume=False: moved the existing output aside to %s", self.previous_output)
        self.started = time.monotonic()
        self.usage_start = ctx.usage.model_copy()
        self.journal = JsonlJournal(out, fsync_every=fsync_every)
        try:
            self.journal.open()  # repairs a truncated tail before we read or append
            self.previous: dict[str, JournalEntry] = scan_journal(out)[0] if resume else {}
            self.manifest = mf.base_manifest(stages=stages, roles=ctx.roles, run_config=run_config,
                                             description=description, out=out, fmt=fmt, concurrency=concurrency,
                                             resume=resume, limit=limit, executor=executor.describe(),
                                             record_deadline=ctx.resources.get("record_deadline"))
            # one output, one setting: records kept from a run under another fingerprint are refused
            # here, before this run writes its manifest (kbvqa.runner.fingerprint)
            prev_path, prev = mf.read_manifest(out) if resume else (None, {})  # the old name too
            check_resume(prev, self.manifest, out=out, logger=ctx.log, where=prev_path or self.paths["manifest"],
                         ok_records=sum(e.status == "ok" for e in self.previous.values()))
        except BaseException:
            self._abandon()  # e.g. a corrupt journal line: raise it, leave the file as it was
            raise
        self.manifest["previous_output"] = str(self.previous_output) if self.previous_output else None
        self.manifest["resumed_from_lines"] = len(self.previous)
        self.manifest["attempts"] = _earlier_attempts(prev) if resume else []
        self.counts = {"ok": 0, "error": 0, "invalid": 0, "needs_model": 0, "skipped": 0}
        self.remote_usage = Usage()
        self.bar: ProgressBar | None = None
        # who writes: `journal status` and the viewer call a `running` run whose process is gone
        # interrupted (kbvqa.runner.lock.run_state)
        self.manifest["writer"] = {"pid": os.getpid(), "host": socket.gethostname()}
        self.manifest["runner"]["size_caps"] = caps.describe()
        try:  # room kept for the final manifest: on a disk that fills up during the run it still says so
            mf.write_manifest(self.paths["manifest"], self.manifest, reserve=MANIFEST_RESERVE)
        except BaseException:  # a full disk, an unwritable folder: nothing ran, the lock goes
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Close what the constructor opened when it cannot finish (the error that stopped it matters more)."""
        with contextlib.suppress(OSError):
            self.journal.close()
        self.release()

    def release(self) -> None:
        self.writer.close()
        if self.lock is not None:
            self.lock.release()

    def _note(self) -> str:
        return " ".join(f"{k} {v}" for k, v in self.counts.items() if v)

    def skipped(self) -> None:
        self.counts["skipped"] += 1
        if self.bar is not None:
            self.bar.advance(note=self._note())

    def refuse(self, task: Task, refusal: tuple[str, dict[str, Any]]) -> None:
        """End a record over a size cap (kbvqa.runner.caps) `error`, without running it."""
        reason, kept = refusal
        self.emit(task, dumps_line(_out_line(kept, "error", reason, task.attempts, "input")), "error")

    def emit(self, task: Task, line: str, status: str, writes: Sequence[Any] = ()) -> None:
        self.writer.apply(writes)  # side files first: a journal line never names a file not yet written
        self.journal.write_line(line)
        self.counts[status] += 1
        if self.bar is not None:
            self.bar.advance(note=self._note())

    def usage(self) -> Usage:
        return _usage_delta(self.ctx.usage, self.usage_start).add(self.remote_usage)

    def finish_manifest(self, state: str, total: int, error: str | None = None, **extra: Any) -> None:
        usage = self.usage()
        wall = round(time.monotonic() - self.started, 3)
        # two different clocks, named apart: the run's wall time, and model time summed over calls
        # that overlap (concurrency), which may exceed the wall time many times over
        timing = {"wall_seconds": wall, "model_seconds_summed": round(usage.seconds, 3),
                  "mean_seconds_per_call": round(usage.seconds / usage.calls, 3) if usage.calls else None,
                  "mean_calls_in_flight": round(usage.seconds / wall, 2) if wall > 0 and usage.calls else None}
        # the executor again: what it found out while running (Ray: actors, batch size, start-up seconds)
        self.manifest["runner"]["executor"] = self.executor.describe()
        self.manifest["runner"]["side_writes"] = self.writer.counts()
        self.manifest.update(state=state, finished=mf.now_iso(), wall_seconds=wall, timing=timing,
                             total=total, counts={k: self.counts[k] for k in STATUSES}, skipped=self.counts["skipped"],
                             usage=usage.model_dump(), error=error, **extra)
        mf.write_manifest(self.paths["manifest"], self.manifest)

    def complete(self, order: list[str]) -> tuple[Path | None, dict[str, int]]:
        """Compact the journal to one line per id, write the Parquet copy, count the output."""
        compact_journal(self.out, order)
        parquet = None
        if self.fmt == "parquet":
            write_parquet(self.out, self.paths["parquet"])
            parquet = self.paths["parquet"]
        index, _ = scan_journal(self.out)
        output_counts: dict[str, int] = {}
        for entry in index.values():
            output_counts[str(entry.status)] = output_counts.get(str(entry.status), 0) + 1
        return parquet, output_counts


async def run_stages(records: Iterable[dict] | AsyncIterable[dict], stages: Sequence[Stage], ctx: Context, *,
                     out: Path, concurrency: int = 8, resume: bool = True, limit: int | None = None,
                     progress: bool = True, run_config: dict | None = None, fmt: str = "jsonl",
                     description: str = "", executor: str | Executor | None = None,
                     executor_options: dict[str, Any] | None = None, fsync_every: int = 100,
                     record_deadline: float | None = None, lock: bool = True,
                     caps: SizeCaps | None = None) -> RunSummary:
    """Run every record through `stages` in order and write one status line per record to `out`.

    `out` is a JSONL journal. `resume=True` skips ids already `ok` in it and re-runs the rest;
    `resume=False` renames an existing `out` to `<out>.<UTC time>.bak` (moved aside, never
    truncated) and starts fresh. With fmt="parquet" a Parquet copy is written to `<out>.parquet`
    after the journal is compacted. The manifest goes to `<out>.manifest.json` (every side file is
    named by kbvqa.runner.lock.side_path: `p.jsonl` -> `p.manifest.json`, `p.json` ->
    `p.json.manifest.json`). `executor` is a registered name (`local`, `ray`), an Executor, or None
    for the process default (`local` unless `kbvqa --executor` or KBVQA_EXECUTOR says otherwise);
    `executor_options` go to its constructor.
    `record_deadline` caps one record's time through all stages (None: the process default,
    `kbvqa --record-deadline` / KBVQA_RECORD_DEADLINE; unset means none). The run holds `<out>.lock`
    (runner.lock; removed on a clean exit) while it writes: a second run on the same `out` raises OutputLocked at once;
    `lock=False` when the caller already holds it. `caps` (kbvqa.runner.caps; None: the process
    default from KBVQA_MAX_FIELD_BYTES / KBVQA_MAX_RECORD_BYTES) ends an oversized record `error`
    before any stage runs it. Ids are checked before any record runs when they are known in
    advance (a sequence; a reader with an `ids` list); a stream's are checked as it is pulled.
    """
    out = Path(out)
    caps = caps if caps is not None else SizeCaps.from_env()
    _check_args(out, fmt, concurrency, limit)
    deadline = record_deadline if record_deadline is not None else default_record_deadline()
    if deadline is not None:
        if deadline <= 0:
            raise ValueError(f"record_deadline must be > 0 seconds, not {deadline}")
        ctx.resources["record_deadline"] = deadline  # travels with the context (Ray actors too)
    stages = list(stages)
    absolute_paths(ctx)
    ex = get_executor(executor, **(executor_options or {}))

    # An input whose ids are known (a sequence, a counted file) is checked whole before anything
    # runs or any file is touched.
    checked = precheck_ids(records, limit)

    run = _Run(out, stages, ctx, ex, resume=resume, concurrency=concurrency, limit=limit, run_config=run_config,
               fmt=fmt, description=description, fsync_every=fsync_every, caps=caps, lock=lock)
    run.ids_checked = checked
    try:
        return await _execute(run, records, stages, ctx, ex, out, concurrency, limit, progress, description)
    finally:
        run.release()


async def _execute(run: _Run, records: Iterable[dict] | AsyncIterable[dict], stages: list[Stage], ctx: Context,
                   ex: Executor, out: Path, concurrency: int, limit: int | None, progress: bool,
                   description: str) -> RunSummary:
    """The run proper, once `_Run` holds the output: stream, execute, compact, finish the manifest."""
    pending = _Pending(records, limit, run.previous, run.skipped, alike=None if run.ids_checked else IdCheck(),
                       caps=run.caps, on_refuse=run.refuse)

    def total() -> int:
        return pending.pos - (1 if isinstance(pending.error, InputError) else 0)

    try:
        with ProgressBar(_known_total(records, limit), description, progress) as bar:
            run.bar = bar
            run.remote_usage = await ex.execute(pending, stages, ctx, concurrency=concurrency, emit=run.emit)
        run.journal.close()
        if pending.error is not None:
            raise pending.error
        parquet, output_counts = run.complete(pending.order)
        run.finish_manifest("finished", total(), output_rows=sum(output_counts.values()),
                            output_counts=output_counts, parquet=str(parquet) if parquet else None)
    except BaseException as exc:
        # a write that failed without naming its file (the journal's write(), a flush) names the journal
        failed = as_write_failure(exc, out)
        try:
            run.journal.close()
        except Exception as close_exc:  # disk gone; the original error matters more
            (ctx.log.debug if failed else ctx.log.error)("could not close the journal %s: %s", out, close_exc)
        state = "interrupted" if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)) else "failed"
        try:
            run.finish_manifest(state, total(), error=error_reason(failed or exc))
        except Exception as mexc:  # best effort: never mask the real error (a full disk fails this too)
            (ctx.log.debug if failed else ctx.log.error)("could not write the manifest after the run %s: %s",
                                                         state, mexc)
        if state == "interrupted":
            INTERRUPTED.append(out)
        if failed is not None and failed is not exc:
            raise failed from exc
        raise

    c = run.counts
    summary = RunSummary(total=pending.pos, ok=c["ok"], error=c["error"], invalid=c["invalid"], skipped=c["skipped"],
                         seconds=time.monotonic() - run.started, usage=run.usage(), out=out,
                         manifest=run.paths["manifest"], parquet=parquet, previous_output=run.previous_output,
                         output_counts=output_counts, needs_model=c["needs_model"])
    ctx.log.info("run finished: %d records, ok %d, error %d, invalid %d, skipped %d in %.1fs -> %s",
                 summary.total, summary.ok, summary.error, summary.invalid, summary.skipped, summary.seconds, out)
    return summary


def run(records: Iterable[dict] | AsyncIterable[dict], stages: Sequence[Stage], ctx: Context, *, out: Path,
        close: bool = False, **options: Any) -> RunSummary:
    """Synchronous wrapper around `run_stages` (for the CLI and scripts; not from inside an event
    loop). `close=True` closes the context's HTTP pools inside the loop that used them."""

    async def main() -> RunSummary | None:
        task = asyncio.current_task()
        assert task is not None
        with sigterm_cancels(task) as terminated:  # SIGTERM ends the run as Ctrl-C does (runner.interrupt)
            try:
                return await run_stages(records, stages, ctx, out=out, **options)
            except asyncio.CancelledError:
                if not terminated:
                    raise
                task.uncancel()
                return None  # raised below, outside the loop: a KeyboardInterrupt inside it skips its shutdown
            finally:
                if close:
                    await ctx.aclose()

    summary = asyncio.run(main())
    if summary is None:
        raise Terminated("SIGTERM")
    return summary
