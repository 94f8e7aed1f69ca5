"""Local vs Ray executor on one machine: records/s of a one-call-per-record job, and Ray's start-up.

Starts the fake OpenAI-compatible server (tests/fake_llm_server.py) in a child process answering
every request in `--latency` seconds, then runs the same one-stage job (one model call per record)
over `-n` records at `--concurrency` through `kbvqa.runner.run` with `executor="local"` and with
`executor="ray"` (actors on a local cluster). The ideal rate is concurrency / latency. Ray's
start-up (`ray.init` of a local cluster) and shutdown are timed apart from the run, so the table
shows both the steady rate and what a cold `--executor ray` run pays on top.

    .venv/bin/python benchmarks/executor_ray.py -n 2000 --concurrency 32 --latency 0.2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import child_server  # noqa: E402
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

from kbvqa.models.client import OpenAIChatClient  # noqa: E402
from kbvqa.runner import run  # noqa: E402
from kbvqa.runner.ray import LOCAL_ENV  # noqa: E402
from kbvqa.runner.stage import Context, Stage  # noqa: E402


class Ask(Stage):
    """One model call per record (defined in __main__, so Ray pickles it by value)."""

    name = "ask"

    async def run(self, record, ctx):
        res = await ctx.role("answerer").chat([{"role": "user", "content": f"question {record['n']}"}])
        ctx.add_usage(res.usage)
        if res.status != "ok":
            raise RuntimeError(res.reason)
        record["answer"] = res.text
        return record


def _serve(latency: float, conn, stop) -> None:
    sys.setswitchinterval(0.0005)  # many mostly-sleeping server threads: hand the GIL over quickly
    with FakeLLMServer(latency=latency, default=ok("Paris")) as srv:
        conn.send(srv.base_url)
        stop.wait()


def _job(url: str, n: int, concurrency: int, out: Path, executor: str, options: dict) -> tuple[float, int, int]:
    ctx = Context(roles={"answerer": OpenAIChatClient(url, "bench", concurrency=concurrency, timeout=30)})
    records = ({"id": f"q{i:06d}", "n": i} for i in range(n))
    t0 = time.perf_counter()
    s = run(records, [Ask()], ctx, out=out, concurrency=concurrency, progress=False, close=True,
            executor=executor, executor_options=options)
    return time.perf_counter() - t0, s.ok, s.usage.calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--actors", type=int, default=None, help="Ray actors (default: one per CPU)")
    args = ap.parse_args()

    import ray

    rows = []
    with child_server(_serve, args.latency) as (url, _, _):
        with tempfile.TemporaryDirectory() as tmp:
            dt, n_ok, calls = _job(url, args.n, args.concurrency, Path(tmp) / "local.jsonl", "local", {})
            rows.append(("local", dt, n_ok, calls))
            os.environ.update(LOCAL_ENV)
            t0 = time.perf_counter()
            ray.init(address="local", include_dashboard=False, log_to_driver=False, object_store_memory=256 * 2**20)
            startup = time.perf_counter() - t0
            dt, n_ok, calls = _job(url, args.n, args.concurrency, Path(tmp) / "ray.jsonl", "ray",
                                   {"actors": args.actors} if args.actors else {})
            rows.append(("ray", dt, n_ok, calls))
            t0 = time.perf_counter()
            ray.shutdown()
            shutdown = time.perf_counter() - t0

    ideal = args.concurrency / args.latency
    print(f"{args.n} records, one model call each, concurrency {args.concurrency}, server latency "
          f"{args.latency * 1000:.0f} ms (ideal {ideal:.0f} rec/s), {os.cpu_count()} cores, ray {ray.__version__}\n")
    print("| executor | seconds | records/s | % of ideal | ok | model calls |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, dt, n_ok, calls in rows:
        print(f"| {name} | {dt:.2f} | {args.n / dt:.1f} | {100 * args.n / dt / ideal:.0f}% | {n_ok} | {calls} |")
    ratio = rows[1][1] / rows[0][1]
    print(f"\nray / local wall time (warm cluster): {ratio:.2f}x; records/s ratio ray/local: {1 / ratio:.2f}")
    print(f"ray start-up (ray.init, local cluster): {startup:.2f} s; shutdown: {shutdown:.2f} s; "
          f"a cold --executor ray run pays both: {args.n / (rows[1][1] + startup + shutdown):.1f} rec/s end to end")


if __name__ == "__main__":
    main()
