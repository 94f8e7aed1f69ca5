"""What the saturation benchmarks share: a model server run in a child process, so that it does not
share the client's GIL, and the bare client each job's path is compared with."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def child_server(target: Callable[..., None], *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any, Any]]:
    """Run `target(*args, conn, stop, **kwargs)` in a child process and yield (url, conn, stop): the target sends
    its base URL first, then answers on `conn` what it answers (counts, stats, its totals once `stop`
    is set). Leaving the block stops the server."""
    parent, child = mp.Pipe()
    stop = mp.Event()
    proc = mp.Process(target=target, args=(*args, child, stop), kwargs=kwargs, daemon=True)
    proc.start()
    try:
        yield parent.recv(), parent, stop
    finally:
        stop.set()
        proc.join(timeout=5)


async def bare_client_rate(url: str, n: int, concurrency: int, content: str | None = None, *,
                           timeout: float = 30.0) -> float:
    """req/s of `n` requests straight through one OpenAIChatClient at `concurrency` (no runner, no
    stage), after a warm-up round that opens its connections. `content`: every request's text (default
    "q<i>"). A failed request stops the benchmark: a rate that counts failures is no baseline."""
    from kbvqa.models.client import OpenAIChatClient

    def message(text: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": content if content is not None else text}]

    async with OpenAIChatClient(url, "bench", concurrency=concurrency, timeout=timeout) as c:
        await asyncio.gather(*(c.chat(message("warm")) for _ in range(concurrency)))
        t0 = time.perf_counter()
        res = await asyncio.gather(*(c.chat(message(f"q{i}")) for i in range(n)))
        dt = time.perf_counter() - t0
    bad = [r.reason for r in res if r.status != "ok"]
    if bad:
        raise SystemExit(f"bare client: {len(bad)} of {n} requests failed: {bad[0]}")
    return n / dt
