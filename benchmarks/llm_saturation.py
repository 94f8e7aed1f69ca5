"""Does one OpenAIChatClient saturate a model server? (PERFORMANCE.md: ≥95% of the ceiling)

Starts the local fake OpenAI-compatible server (tests/fake_llm_server.py) answering every request in
`--latency` seconds and processing at most `--server-ceiling` at once, then sends `-n` requests
through OpenAIChatClient at `--concurrency`. The ideal rate is min(concurrency, ceiling) / latency.
For contrast it also runs the old-script pattern (one request in flight, a fresh connection per
call) on a few requests. The server runs in a child process so it does not share the client's GIL.

Then the high-rate check (issue 17; skip with `--skip-fast`): a minimal asyncio server answering in
`--fast-latency` (50 ms) with `--fast-concurrency` (64) slots, and side by side in one run, rounds
interleaved: a raw keep-alive generator (64 asyncio connections writing prepared request bytes and
reading Content-Length replies: the most a Python client can get out of this server here), the
OpenAIChatClient (its plain-http transport), the same client forced onto its httpx transport (what
https / proxied servers use, and what every server got before), and a bare aiohttp session when
aiohttp is installed. Target: the client >= 80% of the raw generator.

    .venv/bin/python benchmarks/llm_saturation.py -n 800 --concurrency 32
    .venv/bin/python benchmarks/llm_saturation.py --skip-slow --fast-n 4000   # only the high-rate table
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_llm_server import FakeLLMServer  # noqa: E402

import kbvqa.models.client as client_mod  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import bare_client_rate, child_server  # noqa: E402
from audit_llm_saturation import _serve_asyncio  # noqa: E402

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "q"}], "temperature": 0.0}).encode()


async def raw_generator(url: str, n: int, concurrency: int) -> float:
    """req/s of the leanest client: `concurrency` keep-alive connections, each writing prepared
    request bytes and reading the reply by its Content-Length (JSON-decoded, as any client must)."""
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY
    share = [n // concurrency + (i < n % concurrency) for i in range(concurrency)]
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(concurrency)]

    async def worker(k: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(k):
            w.write(req)
            head = await r.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            json.loads(await r.readexactly(length))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k, r, w) for k, (r, w) in zip(share, conns)))
    dt = time.perf_counter() - t0
    for _, w in conns:
        w.close()
    return n / dt


async def client_rate(url: str, n: int, concurrency: int, transport: str = "default") -> float:
    """req/s of OpenAIChatClient (after a warm-up round that opens its connections)."""
    saved = client_mod._fast_path
    if transport == "httpx":
        client_mod._fast_path = lambda base_url: None  # what https / proxied servers get
    try:
        return await bare_client_rate(url, n, concurrency)
    finally:
        client_mod._fast_path = saved


async def aiohttp_rate(url: str, n: int, concurrency: int) -> float:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                async with s.post(f"{url}/chat/completions",
                                  json={"model": "bench", "messages": [{"role": "user", "content": f"q{i}"}]}) as r:
                    await r.json()

        await asyncio.gather(*(one(i) for i in range(concurrency)))
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return n / (time.perf_counter() - t0)


def fast_table(n: int, latency: float, concurrency: int, repeats: int) -> dict:
    """The high-rate comparison: every client against the same asyncio server, rounds interleaved."""
    try:
        import aiohttp  # noqa: F401
        have_aiohttp = True
    except ImportError:
        have_aiohttp = False
    runs: dict[str, list[float]] = {"raw": [], "kbvqa": [], "kbvqa_httpx": []}
    if have_aiohttp:
        runs["aiohttp"] = []
    with child_server(_serve_asyncio, latency, concurrency) as (url, _, _):
        for _ in range(repeats):
            runs["raw"].append(asyncio.run(raw_generator(url, n, concurrency)))
            runs["kbvqa"].append(asyncio.run(client_rate(url, n, concurrency)))
            runs["kbvqa_httpx"].append(asyncio.run(client_rate(url, max(n // 4, concurrency * 4), concurrency, "httpx")))
            if have_aiohttp:
                runs["aiohttp"].append(asyncio.run(aiohttp_rate(url, n, concurrency)))
    med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
    return {"n": n, "latency_s": latency, "concurrency": concurrency, "ideal_req_s": concurrency / latency,
            "req_s_median": {k: round(v, 1) for k, v in med.items()},
            "runs": {k: [round(x, 1) for x in v] for k, v in runs.items()},
            "ratio_to_raw": {k: round(v / med["raw"], 4) for k, v in med.items()}}


def _serve(latency: float, ceiling: int, conn, stop) -> None:
    sys.setswitchinterval(0.0005)  # 32 mostly-sleeping server threads: hand the GIL over quickly
    with FakeLLMServer(latency=latency, max_concurrency=ceiling) as srv:
        conn.send(srv.base_url)
        stop.wait()
        conn.send({"requests": srv.count, "max_in_flight": srv.max_in_flight})


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
    ap.add_argument("--skip-slow", action="store_true", help="skip the 200 ms / ceiling check")
    ap.add_argument("--skip-fast", action="store_true", help="skip the high-rate check")
    ap.add_argument("--fast-n", type=int, default=3000)
    ap.add_argument("--fast-latency", type=float, default=0.05)
    ap.add_argument("--fast-concurrency", type=int, default=64)
    a = ap.parse_args()
    failed = False
    if not a.skip_slow:
        failed = slow_check(a)
    if not a.skip_fast:
        fast = fast_table(a.fast_n, a.fast_latency, a.fast_concurrency, a.repeats)
        if a.json:
            print(json.dumps({"high_rate": fast}))
        else:
            med, ratio = fast["req_s_median"], fast["ratio_to_raw"]
            print(f"\nHigh rate: server {1000 * a.fast_latency:.0f} ms, {a.fast_concurrency} slots, concurrency "
                  f"{a.fast_concurrency} (ideal {fast['ideal_req_s']:.0f} req/s), median of {a.repeats} interleaved "
                  f"rounds of {a.fast_n} requests; load average {os.getloadavg()[0]:.1f}\n")
            print("| client | req/s | runs | vs raw generator | target |")
            print("|---|---:|---|---:|---|")
            names = {"raw": "raw keep-alive generator", "kbvqa": "OpenAIChatClient (plain-http transport)",
                     "kbvqa_httpx": "OpenAIChatClient on httpx (https / proxies; before issue 17)",
                     "aiohttp": "bare aiohttp session"}
            for k in med:
                tgt = ">= 80%" if k == "kbvqa" else ""
                print(f"| {names[k]} | {med[k]:.0f} | {', '.join(f'{x:.0f}' for x in fast['runs'][k])} "
                      f"| {100 * ratio[k]:.1f}% | {tgt} |")
        if fast["ratio_to_raw"]["kbvqa"] < 0.8:
            print("BELOW TARGET: the client < 80% of the raw generator", file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)


def slow_check(a: argparse.Namespace) -> bool:
    with child_server(_serve, a.latency, a.server_ceiling) as (url, conn, stop):
        ideal = min(a.concurrency, a.server_ceiling) / a.latency
        rates = []
        for _ in range(a.repeats):
            rates.append(asyncio.run(bare_client_rate(url, a.n, a.concurrency)))
        rates.sort()
        median = rates[len(rates) // 2]
        naive_rate = a.naive_n / _naive(url, a.naive_n)
        stop.set()
        server = conn.recv()
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
        return True
    return False


if __name__ == "__main__":
    main()
