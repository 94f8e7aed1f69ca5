"""The local asyncio executor: stream records through stages, journal results, resume, summarise.

Why it looks like this:

- **Streaming.** `concurrency` workers pull from the one input iterator, so at most `concurrency`
  records are held at a time and a 10M-line input never sits in memory. Memory grows only with the
  number of ids (input order and the resume index).
- **Nothing dropped.** Every record pulled ends as one output line with `status` ok / error /
  invalid. A stage exception becomes `error` ("ExcType: message"), `Invalid` becomes `invalid`, and
  a failed record is written as it came in (not half-modified by the stage that failed).
- **Crash-safe resume.** Lines are appended and flushed as records finish (fsync every N lines), so
  SIGKILL loses only in-flight records. The next run skips ids whose last line is `ok` and runs
  `error`/`invalid` ones again with `attempts` incremented (the original ARA scripts skipped failed
  rows forever; this does not). At the end the journal is compacted to one line per id.
- **Input errors are loud.** A record that is not a dict, has no string `id`, or repeats an id
  raises `InputError` naming the position (and, for a duplicate, both positions). For a list or
  other sequence this is checked before anything runs; for a generator it is found as the record
  is pulled: no new records start, the in-flight ones finish and are journaled (so a fixed input
  resumes), and then it raises. It is not recorded as an output row because a row is keyed by id.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import time
from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbvqa.data.schema import Usage
from kbvqa.runner import manifest as mf
from kbvqa.runner.sinks import (RUNNER_FIELDS, JournalEntry, JsonlJournal, compact_journal, dumps_line,
                                scan_journal, write_parquet)
from kbvqa.stages.base import Context, Invalid, Stage

log = logging.getLogger("kbvqa.runner")

FORMATS = ("jsonl", "parquet")


class InputError(ValueError):
    """The input itself is unusable: a record without a string id, a non-dict, or a duplicate id."""


@dataclass
class RunSummary:
    """Counts are for this run's input: total = ok + error + invalid + skipped, where skipped means
    already ok in the output from a previous run."""

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


def _check_record(rec: Any, pos: int, seen: dict[str, int]) -> str:
    if not isinstance(rec, dict):
        raise InputError(f"input record #{pos} (0-based) is a {type(rec).__name__}, not a dict")
    if "id" not in rec:
        raise InputError(f"input record #{pos} (0-based) has no 'id' field")
    rid = rec["id"]
    if not isinstance(rid, str) or not rid.strip():
        raise InputError(f"input record #{pos} (0-based) has id {rid!r}; ids must be non-empty strings")
    if rid in seen:
        raise InputError(f"duplicate id {rid!r} at input records #{seen[rid]} and #{pos} (0-based)")
    return rid


class _Source:
    """The shared input iterator: applies `limit`, checks ids, remembers input order.

    An error from the input (an InputError or anything the user's iterator raises) is stored, not
    raised inside a worker, so the other workers can finish their records before the run stops.
    """

    def __init__(self, records: Iterable[dict] | AsyncIterable[dict], limit: int | None):
        self.limit = limit
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

    async def next(self) -> dict | None:
        if self._it is not None:
            return self._take_sync()
        async with self._lock:  # an async generator cannot be advanced by two tasks at once
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

    def _take_sync(self) -> dict | None:
        # No await in here, so workers can share the iterator without a lock.
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

    def _accept(self, rec: Any) -> dict | None:
        pos = self.pos
        self.pos += 1
        try:
            rid = _check_record(rec, pos, self.seen)
        except InputError as exc:
            self.error = exc
            return None
        self.seen[rid] = pos
        self.order.append(rid)
        return rec


def _reason(exc: BaseException) -> str:
    msg = str(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _stage_name(stage: Any) -> str:
    return str(getattr(stage, "name", None) or type(stage).__name__)


def _out_line(record: dict[str, Any], status: str, reason: str, attempts: int, stage: str) -> dict[str, Any]:
    line = {k: v for k, v in record.items() if k not in RUNNER_FIELDS}
    line.update(status=status, reason=reason, attempts=attempts, stage=stage)
    return line


async def _run_one(rec: dict[str, Any], stages: Sequence[Stage], ctx: Context, attempts: int) -> tuple[str, str]:
    """Run one record through the stages; return (JSONL line, status). Never raises except on
    cancellation, which must propagate so an interrupted record is not written as an error."""
    base = {k: v for k, v in rec.items() if k not in RUNNER_FIELDS}
    rid = base["id"]
    current: dict[str, Any] = copy.deepcopy(base)  # a failing stage must not alter what is written
    status, reason, failed = "ok", "", ""
    for stage in stages:
        name = _stage_name(stage)
        try:
            result = await stage.run(current, ctx)
            if not isinstance(result, dict):
                raise TypeError(f"stage {name!r} returned {type(result).__name__}, not a dict")
            if result.get("id") != rid:
                raise ValueError(f"stage {name!r} changed the record id from {rid!r} to {result.get('id')!r}")
        except Invalid as exc:
            status, reason, failed = "invalid", str(exc) or "Invalid (no reason given)", name
            ctx.log.debug("record %s invalid in stage %s: %s", rid, name, reason)
            break
        except Exception as exc:
            status, reason, failed = "error", _reason(exc), name
            ctx.log.debug("record %s failed in stage %s", rid, name, exc_info=exc)
            break
        current = result
    try:
        return dumps_line(_out_line(current if status == "ok" else base, status, reason, attempts, failed)), status
    except (TypeError, ValueError) as exc:
        # The result (or the input) holds something JSON cannot: a datetime, NaN, a set...
        reason = f"{type(exc).__name__}: record is not JSON-serialisable: {exc}"
        failed = failed or (_stage_name(stages[-1]) if stages else "")
        try:
            return dumps_line(_out_line(base, "error", reason, attempts, failed)), "error"
        except (TypeError, ValueError):
            return dumps_line(_out_line({"id": rid}, "error", reason + " (input record too; only the id is kept)",
                                        attempts, failed)), "error"


class _Progress:
    """A rich progress bar on stderr, only when asked for and stderr is a terminal."""

    def __init__(self, enabled: bool, total: int | None, description: str):
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        console = Console(stderr=True)
        if not console.is_terminal:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[counts]}"),
                            console=console)
        self.task = self.bar.add_task(description or "records", total=total, counts="")

    def __enter__(self) -> "_Progress":
        if self.bar is not None:
            self.bar.start()
        return self

    def advance(self, counts: dict[str, int]) -> None:
        if self.bar is not None:
            text = " ".join(f"{k} {v}" for k, v in counts.items() if v)
            self.bar.update(self.task, advance=1, counts=text)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()


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


def output_paths(out: Path) -> dict[str, Path]:
    """Where a run with journal `out` puts its manifest and (fmt="parquet") its Parquet file."""
    out = Path(out)
    return {"out": out, "manifest": mf.manifest_path(out), "parquet": out.with_suffix(".parquet")}


async def run_stages(records: Iterable[dict] | AsyncIterable[dict], stages: Sequence[Stage], ctx: Context, *,
                     out: Path, concurrency: int = 8, resume: bool = True, limit: int | None = None,
                     progress: bool = True, run_config: dict | None = None, fmt: str = "jsonl",
                     description: str = "", executor: str = "local", fsync_every: int = 100) -> RunSummary:
    """Run every record through `stages` in order and write one status line per record to `out`.

    `out` is a JSONL journal. `resume=True` skips ids already `ok` in it and re-runs the rest;
    `resume=False` renames an existing `out` to `<out>.<UTC time>.bak` (moved aside, never
    truncated) and starts fresh. With fmt="parquet" a Parquet copy is written to `<out stem>.parquet`
    after the journal is compacted. The manifest goes to `<out stem>.manifest.json`.
    """
    if executor != "local":
        raise NotImplementedError(f"executor {executor!r} is not implemented yet; only 'local' (asyncio) is. "
                                  "The Ray executor is planned as the optional kbvqa[ray] extra.")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, not {fmt!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, not {concurrency}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    out = Path(out)
    paths = output_paths(out)
    if out.suffix == ".parquet":
        raise ValueError(f"out is the JSONL journal, not the Parquet file: pass {out.with_suffix('.jsonl')} "
                         "with fmt='parquet' and the Parquet file is written beside it")
    stages = list(stages)

    # A sequence can be checked whole before anything runs or any file is touched.
    if isinstance(records, Sequence) and not isinstance(records, (str, bytes)):
        seen: dict[str, int] = {}
        for pos, rec in enumerate(itertools.islice(records, limit)):
            seen[_check_record(rec, pos, seen)] = pos
        del seen

    out.parent.mkdir(parents=True, exist_ok=True)
    previous_output: Path | None = None
    if not resume and out.exists():
        previous_output = _move_aside(out)
        ctx.log.info("resume=False: moved the existing output aside to %s", previous_output)

    started = time.monotonic()
    usage_start = ctx.usage.model_copy()
    journal = JsonlJournal(out, fsync_every=fsync_every)
    journal.open()  # repairs a truncated tail before we read or append
    try:
        previous: dict[str, JournalEntry] = scan_journal(out)[0] if resume else {}
        manifest = mf.base_manifest(stages=stages, roles=ctx.roles, run_config=run_config,
                                    description=description, out=out, fmt=fmt, concurrency=concurrency,
                                    resume=resume, limit=limit)
    except BaseException:
        journal.close()  # e.g. a corrupt journal line: raise it, leave the file as it was
        raise
    manifest["previous_output"] = str(previous_output) if previous_output else None
    manifest["resumed_from_lines"] = len(previous)
    counts = {"ok": 0, "error": 0, "invalid": 0, "skipped": 0}
    source = _Source(records, limit)

    def finish_manifest(state: str, error: str | None = None, **extra: Any) -> None:
        manifest.update(state=state, finished=mf.now_iso(), wall_seconds=round(time.monotonic() - started, 3),
                        total=source.pos - (1 if isinstance(source.error, InputError) else 0),
                        counts={k: counts[k] for k in ("ok", "error", "invalid")}, skipped=counts["skipped"],
                        usage=_usage_delta(ctx.usage, usage_start).model_dump(), error=error, **extra)
        mf.write_manifest(paths["manifest"], manifest)

    mf.write_manifest(paths["manifest"], manifest)

    async def worker(bar: _Progress) -> None:
        while True:
            rec = await source.next()
            if rec is None:
                return
            rid = rec["id"]
            prev = previous.get(rid)
            if prev is not None and prev.status == "ok":
                counts["skipped"] += 1
            else:
                line, status = await _run_one(rec, stages, ctx, (prev.attempts if prev else 0) + 1)
                journal.write_line(line)
                counts[status] += 1
            bar.advance(counts)

    try:
        with _Progress(progress, _known_total(records, limit), description) as bar:
            tasks = [asyncio.create_task(worker(bar)) for _ in range(concurrency)]
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()  # no-op for finished ones; stops the rest if one worker broke
                await asyncio.gather(*tasks, return_exceptions=True)
        journal.close()
        if source.error is not None:
            raise source.error
        compact_journal(out, source.order)
        parquet = None
        if fmt == "parquet":
            write_parquet(out, paths["parquet"])
            parquet = paths["parquet"]
        index, _ = scan_journal(out)
        output_counts: dict[str, int] = {}
        for entry in index.values():
            output_counts[str(entry.status)] = output_counts.get(str(entry.status), 0) + 1
        finish_manifest("finished", output_rows=len(index), output_counts=output_counts,
                        parquet=str(parquet) if parquet else None)
    except BaseException as exc:
        try:
            journal.close()
        except Exception as close_exc:  # pragma: no cover - disk gone; the original error matters more
            ctx.log.error("could not close the journal %s: %s", out, close_exc)
        state = "interrupted" if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)) else "failed"
        try:
            finish_manifest(state, error=_reason(exc))
        except Exception as mexc:  # best effort: never mask the real error
            ctx.log.error("could not write the manifest after the run %s: %s", state, mexc)
        raise

    summary = RunSummary(total=source.pos, ok=counts["ok"], error=counts["error"], invalid=counts["invalid"],
                         skipped=counts["skipped"], seconds=time.monotonic() - started,
                         usage=_usage_delta(ctx.usage, usage_start), out=out, manifest=paths["manifest"],
                         parquet=parquet, previous_output=previous_output, output_counts=output_counts)
    ctx.log.info("run finished: %d records, ok %d, error %d, invalid %d, skipped %d in %.1fs -> %s",
                 summary.total, summary.ok, summary.error, summary.invalid, summary.skipped, summary.seconds, out)
    return summary


def run(records: Iterable[dict] | AsyncIterable[dict], stages: Sequence[Stage], ctx: Context, *, out: Path,
        concurrency: int = 8, resume: bool = True, limit: int | None = None, progress: bool = True,
        run_config: dict | None = None, fmt: str = "jsonl", description: str = "", executor: str = "local",
        fsync_every: int = 100) -> RunSummary:
    """Synchronous wrapper around `run_stages` (for the CLI and scripts; not from inside an event loop)."""
    return asyncio.run(run_stages(records, stages, ctx, out=out, concurrency=concurrency, resume=resume,
                                  limit=limit, progress=progress, run_config=run_config, fmt=fmt,
                                  description=description, executor=executor, fsync_every=fsync_every))
