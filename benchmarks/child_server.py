"""A model server for the saturation benchmarks, run in a child process so that it does not share the
client's GIL (every benchmark that measures a client against a local server starts one this way)."""

from __future__ import annotations

import multiprocessing as mp
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
