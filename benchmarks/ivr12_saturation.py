"""Does the IVR-12 judge keep a model server busy? (issue 12: ≥ 90% of what the server allows)

A fake OpenAI-compatible server (tests/fake_llm_server.py, in a child process) answers every request
in `--latency` seconds and at most `--server-ceiling` at once, with a valid verdict for the group it
is asked about. The items are the demo community set's interleaved references (query image + one
embedded photograph each), repeated under fresh ids; each item makes four judge calls (content,
presentation, image with two pictures, gate with one), so the server allows
min(concurrency, ceiling) / latency / 4 items per second. The judge runs through the runner
(`kbvqa score ivr12`'s pipeline function, journal and summary included) at `--concurrency`.

Three numbers: the share end to end (the whole command: reading the inputs, the manifest, the
client's connection pools, the summary — about a second of fixed cost), the share from the judge's
first request to its last reply (the server's log), and, for reference, what the same client alone
reaches with as many text-only requests at the same concurrency (no runner, no images) on a fresh
server — so a busy box is told apart from overhead in the judge.

    .venv/bin/python benchmarks/ivr12_saturation.py -n 640 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import bare_client_rate, child_server  # noqa: E402
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

from kbvqa.demo.bench import build_bench, build_community  # noqa: E402
from kbvqa.evaluate.ivr12 import load_rubric  # noqa: E402
from kbvqa.models.client import OpenAIChatClient  # noqa: E402
from kbvqa.pipelines.score import ivr12_files  # noqa: E402

CALLS_PER_ITEM = 4


def _replies() -> dict[str, str]:
    """A valid verdict per group, keyed by the word naming the group in the prompt's first line."""
    rb = load_rubric()
    out = {}
    for word, g in (("CONTENT", "content"), ("PRESENTATION", "presentation"), ("IMAGES", "image"), ("GATE", "gate")):
        value = {"pass": True} if g == "gate" else {"score": 4}
        out[word] = json.dumps({k: {**value, "rationale": "fine"} for k in rb.keys(g)})
    return out


class _Log(list):
    """The fake server's request log without the request bodies: it would otherwise hold every base64
    image sent (hundreds of MB over a run), which a model server does not, and pay for it in garbage
    collection pauses that stall all its threads."""

    def append(self, entry: dict) -> None:
        entry.pop("json", None)
        super().append(entry)


def _reference(a: argparse.Namespace) -> float:
    """Seconds the bare client needs for as many requests as the judge sent, on a fresh server."""
    with child_server(_serve, a.latency, a.server_ceiling) as (url, _, _):
        n = CALLS_PER_ITEM * a.n
        return n / asyncio.run(bare_client_rate(url, n, a.concurrency, "Grade the CONTENT of nothing", timeout=60))


def _serve(latency: float, ceiling: int, conn, stop) -> None:
    sys.setswitchinterval(0.0005)
    replies = _replies()

    def handler(req: dict) -> Reply:
        content = req["messages"][-1]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        return Reply(content=replies[text.split("\n", 1)[0].split()[3 if text.startswith("Decide") else 2]])

    with FakeLLMServer(latency=latency, max_concurrency=ceiling, handler=handler) as srv:
        srv.requests = _Log()
        conn.send(srv.base_url)
        stop.wait()
        log = list(srv.requests)
        conn.send({"requests": srv.count, "max_in_flight": srv.max_in_flight,
                   "span": max(e["t_end"] for e in log) - min(e["t_start"] for e in log) if log else 0.0})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=640, help="items")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--server-ceiling", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kbvqa-ivr12-bench-"))
    community = build_community(build_bench(tmp / "bench"))
    base = [json.loads(x) for x in community.read_text(encoding="utf-8").splitlines()]
    items = community.with_name("ivr12_items.jsonl")
    items.write_text("".join(json.dumps({**base[i % len(base)], "id": f"it{i:05d}"}) + "\n" for i in range(a.n)),
                     encoding="utf-8")
    with child_server(_serve, a.latency, a.server_ceiling) as (url, conn, stop):
        client = OpenAIChatClient(url, "bench-judge", concurrency=a.concurrency, timeout=60)
        t0 = time.perf_counter()
        summary = ivr12_files(items, items, [client], out=tmp / "ivr12.jsonl", resume=False,
                              concurrency=a.concurrency)
        dt = time.perf_counter() - t0
        stop.set()
        served = conn.recv()  # the judge's requests only: the bare client runs on a fresh server below
    bare = _reference(a)
    if summary["status"]["ok"] != a.n:
        raise SystemExit(f"only {summary['status']['ok']}/{a.n} items ended ok: {summary['status']}")
    ideal = min(a.concurrency, a.server_ceiling) / a.latency / CALLS_PER_ITEM
    rate = a.n / dt
    bare_share = CALLS_PER_ITEM * a.n / bare / (ideal * CALLS_PER_ITEM)
    steady = a.n / served["span"] / ideal  # first request to last response: start-up and summary left out
    out = {"items": a.n, "seconds": round(dt, 2), "items_per_s": round(rate, 2), "ceiling": round(ideal, 2),
           "share": round(rate / ideal, 4), "share_while_requesting": round(steady, 4),
           "bare_client_share": round(bare_share, 4), "requests": served["requests"],
           "max_in_flight": served["max_in_flight"]}
    if a.json:
        print(json.dumps(out))
        return
    print("| items | concurrency | server latency | calls/item | items/s | server allows | share, end to end | "
          "share, first request to last reply | bare client |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.n} | {a.concurrency} | {a.latency * 1000:.0f} ms | {CALLS_PER_ITEM} | {rate:.1f} | {ideal:.1f} | "
          f"{rate / ideal:.1%} | {steady:.1%} | {bare_share:.1%} |")


if __name__ == "__main__":
    main()
