"""Local vs Ray executor: records/s of a one-call-per-record job, on one node and on a simulated
two-node cluster, and what Ray's start-up costs a command (paid once, however many jobs it runs).

Starts the fake OpenAI-compatible server (tests/fake_llm_server.py) in a child process answering
every request in `--latency` seconds, then runs the same one-stage job (one model call per record)
over `-n` records at `--concurrency` through `kbvqa.runner.run`:

1. `local` (asyncio in this process);
2. `ray, 1 node`: the first job of the process starts a local cluster (its start-up is in the job's
   manifest, `startup_seconds`), a second job reuses the session and the actor pool (start-up 0) —
   what every stage after the first of `reference build`, `curate run` or `eval` pays;
3. `ray, 2 nodes`: `ray.cluster_utils.Cluster` with a head and a worker node of `--cpus-per-node`
   CPUs each on this machine, one actor per CPU, so the actors really sit on two raylets.

The ideal rate is concurrency / latency. Every record's line goes back to the driver, so the rates
include shipping results home.

    .venv/bin/python benchmarks/executor_ray.py -n 2000 --concurrency 32 --latency 0.2
"""

from __future__ import annotations

import argparse
import json
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
from kbvqa.runner.ray import LOCAL_ENV, shutdown_session  # noqa: E402
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


def _job(url: str, n: int, concurrency: int, out: Path, executor: str, options: dict) -> dict:
    ctx = Context(roles={"answerer": OpenAIChatClient(url, "bench", concurrency=concurrency, timeout=30)})
    records = ({"id": f"q{i:06d}", "n": i} for i in range(n))
    t0 = time.perf_counter()
    s = run(records, [Ask()], ctx, out=out, concurrency=concurrency, progress=False, close=True,
            executor=executor, executor_options=options)
    wall = time.perf_counter() - t0
    ex = json.loads(s.manifest.read_text())["runner"]["executor"]
    return {"wall": wall, "ok": s.ok, "calls": s.usage.calls, "startup": ex.get("startup_seconds", 0.0),
            "actors": ex.get("actors", "-"), "nodes": ex.get("actor_nodes", 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--actors", type=int, default=None, help="Ray actors on one node (default: one per CPU)")
    ap.add_argument("--cpus-per-node", type=int, default=1, help="CPUs of each simulated node")
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    os.environ.update(LOCAL_ENV)
    rows: list[tuple[str, dict]] = []
    with child_server(_serve, args.latency) as (url, _, _), tempfile.TemporaryDirectory() as tmp:
        def job(name: str, executor: str, options: dict) -> None:
            rows.append((name, _job(url, args.n, args.concurrency, Path(tmp) / f"{len(rows)}.jsonl", executor,
                                    options)))

        job("local", "local", {})
        one = {"actors": args.actors} if args.actors else {}
        job("ray, 1 node, first job (starts Ray)", "ray", one)
        job("ray, 1 node, next job (session reused)", "ray", one)
        t0 = time.perf_counter()
        shutdown_session()
        shutdown = time.perf_counter() - t0

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus_per_node,
                                                                 "object_store_memory": 128 * 2**20,
                                                                 "include_dashboard": False})
        cluster.add_node(num_cpus=args.cpus_per_node, object_store_memory=128 * 2**20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        two = {"actors": 2 * args.cpus_per_node, "num_cpus_per_actor": 1}
        try:
            job("ray, 2 nodes, first job", "ray", two)
            job("ray, 2 nodes, next job", "ray", two)
        finally:
            ray.shutdown()
            cluster.shutdown()

    ideal = args.concurrency / args.latency
    print(f"{args.n} records, one model call each, concurrency {args.concurrency}, server latency "
          f"{args.latency * 1000:.0f} ms (ideal {ideal:.0f} rec/s), {os.cpu_count()} cores, ray {ray.__version__}\n")
    print("| executor | actors | actor nodes | Ray start-up s | job seconds | records/s | % of ideal | ok | calls |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        rate = args.n / r["wall"]
        print(f"| {name} | {r['actors']} | {r['nodes']} | {r['startup']:.2f} | {r['wall']:.2f} | {rate:.1f} | "
              f"{100 * rate / ideal:.0f}% | {r['ok']} | {r['calls']} |")
    print(f"\nRay shutdown at the end of the command: {shutdown:.2f} s. Job seconds include the start-up of a "
          "first job; a command of k jobs pays it once.")


if __name__ == "__main__":
    main()
