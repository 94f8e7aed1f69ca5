"""Dynamic micro-batching for stages: one-record stages, batched model calls.

A stage handles one record, but a neural encoder is several times faster on a batch than on one
input at a time. So, the way model servers batch, every in-flight record `await`s
`MicroBatcher.submit(item)`; the batcher gathers the items that arrive together (up to `max_batch`,
or whatever came within `max_wait` seconds of the first) into one call of a batch function, run in
a worker thread so the event loop keeps serving the other records. Each record keeps its own
status line, resume and manifest entry, and the model still sees full batches when the job runs
enough records at once (concurrency >= max_batch).

Failures stay per record: the batch function returns one result per item, and a result that is an
exception fails only that item (an unreadable image); an exception raised by the batch function
fails every item of that batch and nothing else (the next batch runs).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generic, Sequence, TypeVar

__all__ = ["MicroBatcher"]

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """`await submit(item)` -> that item's result from `fn(items)`, computed in a batch.

    At most `max_concurrent` batches run at once: 1 for a model that already uses every core or
    the GPU, more for a CPU-light function. `batches`, `items` and `sizes` count what was run (the
    sizes of the last 1000 batches), for a run summary and for tests.

    The queue belongs to the running event loop and is made again in a new one (each `Job.run` is
    an `asyncio.run`); pickling keeps only the function and settings, so a Ray actor gets its own
    batcher."""

    def __init__(self, fn: Callable[[list[T]], Sequence[R | BaseException]], *, max_batch: int = 64,
                 max_wait: float = 0.005, max_concurrent: int = 1, name: str = "batch"):
        if max_batch < 1 or max_concurrent < 1 or max_wait < 0:
            raise ValueError("max_batch and max_concurrent must be >= 1 and max_wait >= 0")
        self.fn = fn
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_concurrent = max_concurrent
        self.name = name
        self.batches = 0
        self.items = 0
        self.sizes: list[int] = []
        self._reset(None)

    def _reset(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._queue: list[tuple[T, asyncio.Future]] = []
        self._full = asyncio.Event() if loop is not None else None
        self._active = 0  # drain workers started and not yet returned (counted synchronously, see _drain)
        self._tasks: set[asyncio.Task] = set()  # strong references, so a running worker is not collected

    def __getstate__(self) -> dict[str, Any]:
        keep = ("fn", "max_batch", "max_wait", "max_concurrent", "name")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.batches, self.items, self.sizes = 0, 0, []
        self._reset(None)

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._reset(loop)
        fut: asyncio.Future = loop.create_future()
        self._queue.append((item, fut))
        if len(self._queue) >= self.max_batch:
            self._full.set()  # type: ignore[union-attr]
        if self._active < self.max_concurrent:
            self._active += 1
            task = loop.create_task(self._drain(), name=f"{self.name} batcher")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await fut

    async def _drain(self) -> None:
        """Take batches off the queue until it is empty; wait up to max_wait for a batch to fill.

        The worker count drops in the same step as the queue is found empty (no await between):
        a done-callback would run later, and a submit in between would find no worker and wait
        forever."""
        try:
            await self._drain_queue()
        finally:
            self._active -= 1

    async def _drain_queue(self) -> None:
        waited = False
        while True:
            self._queue = [(i, f) for i, f in self._queue if not f.done()]  # records cancelled meanwhile
            if not self._queue:
                return
            if len(self._queue) < self.max_batch and self.max_wait > 0 and not waited:
                self._full.clear()  # type: ignore[union-attr]
                try:
                    await asyncio.wait_for(self._full.wait(), self.max_wait)  # type: ignore[union-attr]
                except asyncio.TimeoutError:
                    pass
                waited = True
                continue  # look again: records cancelled meanwhile, or another worker took the batch
            waited = False
            batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            await self._run(batch)

    async def _run(self, batch: list[tuple[T, asyncio.Future]]) -> None:
        try:
            results = list(await asyncio.to_thread(self.fn, [item for item, _ in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"{self.name}: the batch function returned {len(results)} results "
                                   f"for {len(batch)} items")
        except asyncio.CancelledError:
            for _, fut in batch:
                fut.cancel()
            raise
        except Exception as exc:  # the whole batch failed: each of its records gets the error
            results = [exc] * len(batch)
        self.batches += 1
        self.items += len(batch)
        self.sizes = [*self.sizes[-999:], len(batch)]
        for (_, fut), res in zip(batch, results):
            if fut.done():
                continue
            if isinstance(res, BaseException):
                fut.set_exception(res)
            else:
                fut.set_result(res)
