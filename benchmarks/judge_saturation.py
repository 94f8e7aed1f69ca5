"""Does `kbvqa score judge --concurrency N` keep a judge server as busy as a bare client? (issue 17: >= 95%)

A minimal asyncio OpenAI-compatible server (benchmarks/audit_llm_saturation.py) answers every request
in `--latency` seconds with a valid SimpleQA verdict, at most `--server-ceiling` at once. Side by side,
rounds interleaved, on the same `-n` references and predictions:

* the judge job as `kbvqa score judge` runs it: the client built by `pipelines.score.judge_client`
  from the flags (the one builder, `roles_from_flags`) and `judge_files` (a runner job with a journal);
  the script checks that the client got the job's `--concurrency` and that the server saw that many
  requests in flight at once (the rule: the job's --concurrency is what reaches the server);
* a bare OpenAIChatClient sending the same number of requests at the same concurrency;
* once, the real CLI as a subprocess (`kbvqa score judge ... --json`), start-up included.

    .venv/bin/python benchmarks/judge_saturation.py [-n 1600] [--concurrency 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import bare_client_rate, child_server  # noqa: E402
from audit_llm_saturation import _serve_asyncio  # noqa: E402

from kbvqa.pipelines.score import judge_client, judge_files  # noqa: E402

os.environ["KBVQA_CACHE"] = "off"  # every item must reach the server (no cached verdicts from an earlier run)
RUN = f"{os.getpid()}-{time.time_ns()}"
VERDICT = json.dumps({"label": "correct", "rationale": "the answer names the same entity"})


def write_inputs(root: Path, n: int, tag: str) -> tuple[Path, Path]:
    refs, preds = root / f"refs_{tag}.jsonl", root / f"preds_{tag}.jsonl"
    with open(refs, "w") as r, open(preds, "w") as p:
        for i in range(n):
            r.write(json.dumps({"id": f"q{i}", "question": f"Which city is landmark number {i} in ({RUN}-{tag})?",
                                "answers": [f"City {i}"]}) + "\n")
            p.write(json.dumps({"data_id": f"q{i}", "prediction": f"It is in City {i}."}) + "\n")
    return refs, preds


def job(url: str, refs: Path, preds: Path, out: Path, concurrency: int) -> tuple[float, dict, int]:
    client = judge_client(base_url=url, model="bench", concurrency=concurrency)
    t0 = time.perf_counter()
    report = judge_files(preds, refs, client, out=out, resume=False, concurrency=concurrency)
    dt = time.perf_counter() - t0
    return dt, report.summary, client.concurrency


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=1600)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--server-ceiling", type=int, default=None, help="default: --concurrency")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ceiling = a.server_ceiling or a.concurrency
    ideal = min(a.concurrency, ceiling) / a.latency

    job_rates, bare_rates, in_flight = [], [], []
    cli = None
    with child_server(_serve_asyncio, a.latency, ceiling, reply=VERDICT) as (url, conn, _):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            for r in range(a.repeats):
                refs, preds = write_inputs(root, a.n, str(r))
                conn.send("stats")
                before = conn.recv()["count"]
                dt, summary, conc = job(url, refs, preds, root / f"judge_{r}.jsonl", a.concurrency)
                conn.send("stats")
                stats = conn.recv()
                served = stats["count"] - before
                if summary["n_correct"] != a.n or served != a.n:
                    raise SystemExit(f"expected {a.n} correct verdicts and requests, got {summary['n_correct']} / {served}")
                if conc != a.concurrency:
                    raise SystemExit(f"the judge client has concurrency {conc}, the job asked for {a.concurrency}")
                job_rates.append(a.n / dt)
                in_flight.append(stats["max_in_flight"])
                bare_rates.append(asyncio.run(bare_client_rate(url, a.n, a.concurrency)))
                conn.send("stats")
                conn.recv()  # reset the in-flight maximum
            if not a.skip_cli:
                refs, preds = write_inputs(root, a.n, "cli")
                cmd = [sys.executable, "-m", "kbvqa.cli.app", "score", "judge", "-p", str(preds), "-r", str(refs),
                       "--judge-base-url", url, "--judge-model", "bench", "--concurrency", str(a.concurrency),
                       "--out", str(root / "cli.jsonl"), "--json"]
                t0 = time.perf_counter()
                out = subprocess.run(cmd, capture_output=True, text=True)
                wall = time.perf_counter() - t0
                if out.returncode != 0:
                    raise SystemExit(f"CLI failed: {out.stderr[-2000:]}")
                conn.send("stats")
                cli = {"req_s": a.n / wall, "max_in_flight": conn.recv()["max_in_flight"],
                       "correct": json.loads(out.stdout)["n_correct"]}
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    j, b = med(job_rates), med(bare_rates)
    res = {"n": a.n, "concurrency": a.concurrency, "latency_s": a.latency, "server_ceiling": ceiling,
           "ideal_req_s": ideal, "job_req_s": round(j, 1), "job_runs": [round(x, 1) for x in job_rates],
           "bare_req_s": round(b, 1), "bare_runs": [round(x, 1) for x in bare_rates],
           "job_vs_bare": round(j / b, 4), "server_max_in_flight": in_flight, "cli": cli,
           "load_average": round(os.getloadavg()[0], 2)}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"Judge server: {1000 * a.latency:.0f} ms/request, {ceiling} slots -> ideal {ideal:.0f} req/s; "
              f"{a.n} items, concurrency {a.concurrency}, median of {a.repeats} interleaved rounds; "
              f"load average {res['load_average']}\n")
        print("| path | req/s | runs | vs bare client | server saw in flight | target |")
        print("|---|---:|---|---:|---:|---|")
        print(f"| `score judge` job (judge_client + judge_files) | {j:.1f} | "
              f"{', '.join(f'{x:.1f}' for x in job_rates)} | {100 * j / b:.1f}% | {max(in_flight)} | >= 95% |")
        print(f"| bare OpenAIChatClient | {b:.1f} | {', '.join(f'{x:.1f}' for x in bare_rates)} | 100% | | |")
        if cli:
            print(f"| `kbvqa score judge` CLI, start-up included | {cli['req_s']:.1f} | | {100 * cli['req_s'] / b:.1f}% "
                  f"| {cli['max_in_flight']} | |")
    if j / b < 0.95:
        print("BELOW TARGET: the judge job < 95% of the bare client", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
