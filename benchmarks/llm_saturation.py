"""Does one OpenAIChatClient saturate a model server? (PERFORMANCE.md: ≥95% of the ceiling)

Starts the local fake OpenAI-compatible server (tests/fake_llm_server.py) answering every request in
`--latency` seconds and processing at most `--server-ceiling` at once, then sends `-n` requests
through OpenAIChatClient at `--concurrency`. The ideal rate is min(concurrency, ceiling) / latency.
For contrast it also runs the old-script pattern (one request in flight, a fresh connection per
call) on a few requests. The server runs in a child process so it does not share the client's GIL.

    .venv/bin/python benchmarks/llm_saturation.py -n 800 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_llm_server import FakeLLMServer  # noqa: E402

from kbvqa.models.client import OpenAIChatClient  # noqa: E402


def _serve(latency: float, ceiling: int, conn, stop) -> None:
    sys.setswitchinterval(0.0005)  # 32 mostly-sleeping server threads: hand the GIL over quickly
    with FakeLLMServer(latency=latency, max_concurrency=ceiling) as srv:
        conn.send(srv.base_url)
        stop.wait()
        conn.send({"requests": srv.count, "max_in_flight": srv.max_in_flight})


async def _kbvqa(url: str, n: int, concurrency: int) -> tuple[float, int]:
    async with OpenAIChatClient(url, "bench", concurrency=concurrency, timeout=30) as c:
        await asyncio.gather(*(c.chat([{"role": "user", "content": "warm"}]) for _ in range(concurrency)))
        t0 = time.perf_counter()
        res = await asyncio.gather(*(c.chat([{"role": "user", "content": f"q{i}"}]) for i in range(n)))
        dt = time.perf_counter() - t0
    return dt, sum(r.status == "ok" for r in res)


def _naive(url: str, n: int) -> float:
    """The old audit-script pattern: sequential, new connection per request, no retries."""
    t0 = time.perf_counter()
    for i in range(n):
        with httpx.Client() as h:
            h.post(f"{url}/chat/completions", json={"model": "bench", "messages": [{"role": "user", "content": str(i)}]})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=800)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--server-ceiling", type=int, default=32)
    ap.add_argument("--naive-n", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    a = ap.parse_args()

    parent, child = mp.Pipe()
    stop = mp.Event()
    proc = mp.Process(target=_serve, args=(a.latency, a.server_ceiling, child, stop), daemon=True)
    proc.start()
    try:
        url = parent.recv()
        ideal = min(a.concurrency, a.server_ceiling) / a.latency
        rates = []
        for _ in range(a.repeats):
            dt, n_ok = asyncio.run(_kbvqa(url, a.n, a.concurrency))
            if n_ok != a.n:
                raise SystemExit(f"only {n_ok}/{a.n} requests succeeded")
            rates.append(a.n / dt)
        rates.sort()
        median = rates[len(rates) // 2]
        naive_rate = a.naive_n / _naive(url, a.naive_n)
        stop.set()
        server = parent.recv()
    finally:
        stop.set()
        proc.join(timeout=5)
    out = {"n": a.n, "concurrency": a.concurrency, "latency_s": a.latency, "server_ceiling": a.server_ceiling,
           "ideal_req_s": round(ideal, 1), "kbvqa_req_s_median": round(median, 1),
           "kbvqa_req_s_runs": [round(r, 1) for r in rates], "ratio_of_ideal": round(median / ideal, 4),
           "naive_req_s": round(naive_rate, 2), "naive_ratio_of_ideal": round(naive_rate / ideal, 4),
           "server_max_in_flight": server["max_in_flight"]}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"server: {a.latency * 1000:.0f} ms/request, ceiling {a.server_ceiling} concurrent "
              f"→ ideal {ideal:.1f} req/s")
        print(f"kbvqa OpenAIChatClient @ concurrency {a.concurrency}: {median:.1f} req/s median of "
              f"{a.repeats} × {a.n} requests = {100 * median / ideal:.1f}% of ideal "
              f"(runs: {', '.join(f'{r:.1f}' for r in rates)}; server saw ≤{server['max_in_flight']} in flight)")
        print(f"old-script pattern (sequential, new connection per call): {naive_rate:.2f} req/s = "
              f"{100 * naive_rate / ideal:.1f}% of ideal")
    if median / ideal < 0.95:
        print("BELOW TARGET: < 95% of the server's ceiling", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
