"""The local asyncio executor: the default, needs nothing installed, fastest on one machine.

`concurrency` workers pull from the one task source, so at most `concurrency` records are in memory
and in flight at a time; a 10M-line input is streamed, never loaded. Model clients bound their own
requests in flight, so the job's `--concurrency` is what reaches the server.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from kbvqa.data.schema import Usage
from kbvqa.runner.executor import EXECUTORS, Emit, TaskSource, run_lanes
from kbvqa.runner.stage import Context, Stage, run_record


@EXECUTORS.register("local", help="asyncio workers in this process (default)")
class LocalExecutor:
    name = "local"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    async def execute(self, tasks: TaskSource, stages: Sequence[Stage], ctx: Context, *, concurrency: int,
                      emit: Emit) -> Usage:
        async def worker() -> None:
            while True:
                task = await tasks.next()
                if task is None:
                    return
                writes: list = []
                line, status = await run_record(task.record, stages, ctx, task.attempts, writes=writes)
                emit(task, line, status, writes)  # the driver applies them: the same path as Ray's

        await run_lanes([asyncio.create_task(worker()) for _ in range(concurrency)])
        return Usage()  # stages added their usage to ctx directly
