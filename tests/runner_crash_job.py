"""Helper for tests/test_runner_crash.py (not a test): run a slow stage over N records.

Usage: python runner_crash_job.py OUT N SLEEP_SECONDS CONCURRENCY [EXECUTOR]
(EXECUTOR defaults to local; with `ray` the cluster is $RAY_ADDRESS, else a local one is started.)
Prints the run summary as one JSON line on stdout when the run completes; SIGTERM or Ctrl-C end it as
the CLI ends them (the hint on stderr, exit 143 or 130).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from kbvqa.runner import run
from kbvqa.runner.interrupt import INTERRUPTED_HINT, exit_code
from kbvqa.runner.stage import Context, Stage


class Sleepy(Stage):
    name = "sleepy"

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    async def run(self, record, ctx):
        await asyncio.sleep(self.seconds)
        record["answer"] = f"a{record['n']}"
        return record


def main() -> None:
    out, n, seconds, concurrency = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    executor = sys.argv[5] if len(sys.argv) > 5 else "local"
    records = ({"id": f"q{i:04d}", "n": i} for i in range(n))  # a generator: streamed, length unknown
    try:
        s = run(records, [Sleepy(seconds)], Context(), out=out, concurrency=concurrency, progress=False,
                fsync_every=10, executor=executor)
    except KeyboardInterrupt as exc:  # SIGTERM (runner.interrupt.Terminated) or Ctrl-C: as the CLI ends it
        print(INTERRUPTED_HINT, file=sys.stderr, flush=True)
        sys.exit(exit_code(exc))
    print(json.dumps({"total": s.total, "ok": s.ok, "error": s.error, "invalid": s.invalid,
                      "skipped": s.skipped}), flush=True)


if __name__ == "__main__":
    main()
