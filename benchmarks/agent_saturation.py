"""Does the search agent keep a model server busy? (issue: ≥ 90% of what the server allows)

A fake OpenAI-compatible server (tests/fake_llm_server.py, in a child process) answers every request
in `--latency` seconds and at most `--server-ceiling` at once. Each agent episode is scripted to two
model turns — a `search` call over the demo KB, then an answer — so the server allows
min(concurrency, ceiling) / latency / 2 episodes per second. The agent runs through the runner
(`kbvqa answer --pipeline agent`'s Job) at `--concurrency`, with the local tools, and the script
prints episodes/s as a share of that ceiling.

    .venv/bin/python benchmarks/agent_saturation.py -n 480 --concurrency 32
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import child_server  # noqa: E402
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

from kbvqa.data.formats import read_samples  # noqa: E402
from kbvqa.demo.bench import build_bench  # noqa: E402
from kbvqa.kb.store import KBStore  # noqa: E402
from kbvqa.models.client import OpenAIChatClient  # noqa: E402
from kbvqa.pipelines.answer import build_answer_job  # noqa: E402

SEARCH = '<think>look it up</think><tool_call>{"name": "search", "arguments": {"query": ["%s"]}}</tool_call>'
ANSWER = "<think>found it</think><answer>It is in the KB.</answer>"


def _handler(req: dict) -> Reply:
    turns = sum(1 for m in req["messages"] if m["role"] == "assistant")
    if turns == 0:
        q = req["messages"][1]["content"]
        q = q if isinstance(q, str) else q[0]["text"]
        return Reply(content=SEARCH % q.replace('"', "")[:60])
    return Reply(content=ANSWER)


def _serve(latency: float, ceiling: int, conn, stop) -> None:
    sys.setswitchinterval(0.0005)
    with FakeLLMServer(latency=latency, max_concurrency=ceiling, handler=_handler) as srv:
        conn.send(srv.base_url)
        stop.wait()
        conn.send({"requests": srv.count, "max_in_flight": srv.max_in_flight})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=480, help="episodes")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--server-ceiling", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kbvqa-agent-bench-"))
    bench = build_bench(tmp / "bench")
    base = [s.dump() for s in read_samples(bench.samples, "kbvqa")]
    records = [{**base[i % len(base)], "id": f"ep{i:05d}", "images": []} for i in range(a.n)]
    with child_server(_serve, a.latency, a.server_ceiling) as (url, conn, stop):
        kb = KBStore(bench.kb)
        client = OpenAIChatClient(url, "bench-agent", concurrency=a.concurrency, timeout=30)
        job = build_answer_job("agent", kb=kb, roles={"agent": client}, image_root=bench.root)
        t0 = time.perf_counter()
        summary = job.run(records, out=tmp / "agent.jsonl", concurrency=a.concurrency, progress=False, resume=False)
        dt = time.perf_counter() - t0
        stop.set()
        served = conn.recv()
    if summary.ok != a.n:
        raise SystemExit(f"only {summary.ok}/{a.n} episodes ended ok")
    ideal = min(a.concurrency, a.server_ceiling) / a.latency / 2
    rate = a.n / dt
    out = {"episodes": a.n, "seconds": round(dt, 2), "episodes_per_s": round(rate, 2), "ceiling": round(ideal, 2),
           "share": round(rate / ideal, 4), "requests": served["requests"], "max_in_flight": served["max_in_flight"]}
    if a.json:
        print(json.dumps(out))
        return
    print("| episodes | concurrency | server latency | episodes/s | server allows | share |")
    print("|---|---|---|---|---|---|")
    print(f"| {a.n} | {a.concurrency} | {a.latency * 1000:.0f} ms | {rate:.1f} | {ideal:.1f} | {rate / ideal:.1%} |")


if __name__ == "__main__":
    main()
