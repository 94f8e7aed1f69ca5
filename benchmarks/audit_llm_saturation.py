"""Does the LLM verify stage keep a model server saturated through the runner? (target ≥ 95%)

Starts a local OpenAI-compatible server in a child process (`--server asyncio`: a minimal asyncio
server, the default; `--server threaded`: tests/fake_llm_server.py, which needs more CPU per request
and so competes with the client on a small machine): every request takes `--latency` seconds, at
most `--server-ceiling` are processed at once, and every reply is a valid verifier verdict. Then audits `-n` synthetic samples with the verify stage only (rules
verifier + the model verifier; each sample carries one evidence sentence that the rules cannot
match, so each sample costs exactly one model call) through `kbvqa.runner.run_stages` at
`--concurrency`, and compares requests/s with the server's ceiling min(concurrency, ceiling)/latency.

    .venv/bin/python benchmarks/audit_llm_saturation.py -n 600 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import bare_client_rate, child_server  # noqa: E402
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

from kbvqa.data.schema import Evidence, Sample  # noqa: E402
from kbvqa.models.client import OpenAIChatClient  # noqa: E402
from kbvqa.runner import run_stages  # noqa: E402
from kbvqa.runner.stage import Context  # noqa: E402
from kbvqa.stages.audit.verify import VerifyConfig, VerifyStage  # noqa: E402

REPLY = json.dumps({"label": "entailed", "rationale": "the section states it"})


def _serve(latency: float, ceiling: int, conn, stop) -> None:
    sys.setswitchinterval(0.0005)  # many mostly-sleeping server threads: hand the GIL over quickly
    with FakeLLMServer(latency=latency, max_concurrency=ceiling, default=ok(REPLY)) as srv:
        conn.send(srv.base_url)
        while not stop.wait(0.05):
            if conn.poll():
                conn.recv()
                conn.send(srv.count)
        conn.send(srv.count)


def _serve_asyncio(latency: float, ceiling: int, conn, stop, reply: str = REPLY) -> None:
    """A minimal asyncio HTTP/1.1 keep-alive server for /v1/chat/completions: at most `ceiling`
    requests are processed at once, each takes `latency` s, every answer is `reply`. Far less CPU
    per request than the threaded test server, so on a small machine the measurement is about the
    client side. Asked "count" on `conn` it answers the requests served; asked "stats", a dict with
    the count and the most requests it ever had in flight."""
    body = json.dumps({"id": "x", "object": "chat.completion", "model": "bench",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": reply}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n")
    count = in_flight = max_in_flight = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count, in_flight, max_in_flight
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for line in headers.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        n = int(line.split(b":", 1)[1])
                await reader.readexactly(n)
                async with gate:
                    in_flight += 1
                    max_in_flight = max(max_in_flight, in_flight)
                    await asyncio.sleep(latency)
                    in_flight -= 1
                count += 1
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256)
        conn.send(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        nonlocal max_in_flight
        while not stop.is_set():
            await asyncio.sleep(0.02)
            if conn.poll():
                if conn.recv() == "stats":
                    conn.send({"count": count, "max_in_flight": max_in_flight})
                    max_in_flight = 0
                else:
                    conn.send(count)
        conn.send(count)
        server.close()

    gate = asyncio.Semaphore(ceiling)
    asyncio.run(main())


def samples(n: int, tag: str) -> list[dict]:
    return [Sample(id=f"{tag}-{i}", question=f"Who founded organisation number {i}?", answers=[f"Person {i}"],
                   evidence=[Evidence(text=f"Organisation {i} was set up in the north of the country.")],
                   answer_type="String").dump() for i in range(n)]


async def _run(url: str, n: int, concurrency: int, workers: int, tag: str, out_dir: Path) -> tuple[float, dict]:
    client = OpenAIChatClient(url, "bench", concurrency=concurrency, timeout=30)
    ctx = Context(roles={"verifier": client})
    stage = VerifyStage(VerifyConfig(verifiers=["rules", "verifier"], fallback_to_kb=False))
    await run_stages(samples(concurrency, f"warm{tag}"), [stage], ctx, out=out_dir / f"warm{tag}.jsonl",
                     concurrency=concurrency, progress=False)
    t0 = time.perf_counter()
    rs = await run_stages(samples(n, tag), [stage], ctx, out=out_dir / f"run{tag}.jsonl",
                          concurrency=workers, progress=False)
    dt = time.perf_counter() - t0
    await client.aclose()
    return dt, {"ok": rs.ok, "error": rs.error, "invalid": rs.invalid, "calls": ctx.usage.calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--server-ceiling", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None,
                    help="runner workers (default: concurrency + concurrency/4, so a record's own CPU work "
                         "and journal write never leave a model slot idle)")
    ap.add_argument("--server", choices=["asyncio", "threaded"], default="asyncio",
                    help="asyncio: a minimal asyncio server (default); threaded: tests/fake_llm_server.py")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    workers = a.workers or a.concurrency + max(1, a.concurrency // 4)

    target = _serve_asyncio if a.server == "asyncio" else _serve
    rates, counts = [], []
    with child_server(target, a.latency, a.server_ceiling) as (url, conn, _):
        ideal = min(a.concurrency, a.server_ceiling) / a.latency
        bares = []
        with tempfile.TemporaryDirectory() as d:
            for r in range(a.repeats):  # interleaved: the stage path, then the bare client, each round
                conn.send("count")
                before = conn.recv()
                dt, c = asyncio.run(_run(url, a.n, a.concurrency, workers, str(r), Path(d)))
                conn.send("count")
                served = conn.recv() - before - a.concurrency  # minus the warm-up requests
                if c["ok"] != a.n or served != a.n:
                    raise SystemExit(f"expected {a.n} ok records and requests, got {c} / {served} requests")
                rates.append(served / dt)
                counts.append(c)
                bares.append(asyncio.run(bare_client_rate(url, a.n, a.concurrency)))
        bare = sorted(bares)[a.repeats // 2]
    rates_sorted = sorted(rates)
    median = rates_sorted[len(rates) // 2]
    out = {"server": a.server, "n": a.n, "concurrency": a.concurrency, "runner_workers": workers, "latency_s": a.latency, "server_ceiling": a.server_ceiling,
           "ideal_req_s": round(ideal, 1), "req_s_median": round(median, 1), "req_s_runs": [round(x, 1) for x in rates],
           "ratio_of_ideal": round(median / ideal, 4), "records": counts[-1],
           "bare_client_req_s": round(bare, 1), "bare_client_runs": [round(x, 1) for x in bares],
           "bare_client_ratio_of_ideal": round(bare / ideal, 4), "load_average": round(os.getloadavg()[0], 2),
           "stage_vs_bare_client": round(median / bare, 4)}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.server} server: {a.latency * 1000:.0f} ms/request, ceiling {a.server_ceiling} concurrent → ideal {ideal:.1f} req/s")
        print(f"audit verify stage (rules + model verifier) via runner @ model concurrency {a.concurrency} "
              f"({workers} runner workers): "
              f"{median:.1f} req/s median of {a.repeats} × {a.n} samples = {100 * median / ideal:.1f}% of ideal "
              f"(runs: {', '.join(f'{x:.1f}' for x in rates)}); records {counts[-1]}")
        print(f"bare OpenAIChatClient, same requests, no runner/stage: {bare:.1f} req/s = {100 * bare / ideal:.1f}% "
              f"of ideal (runs: {', '.join(f'{x:.1f}' for x in bares)}); the stage path reaches "
              f"{100 * median / bare:.1f}% of the bare client (target >= 95%); load average {os.getloadavg()[0]:.1f}")
    if median / ideal < 0.95:
        print("BELOW TARGET: < 95% of the server's ceiling", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
