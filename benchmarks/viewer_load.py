"""`kbvqa view` on a synthetic 100k-record audit run: how long until its first page is served.

Writes an audit output shaped like `kbvqa audit run`'s (four stages with rationales and provenance,
a verifier with per-section labels, ~2.4 kB a line) with its manifest, starts the viewer (uvicorn
on 127.0.0.1, in this process) and times HTTP requests, request to complete response:

* first page, cold: the first request right after start-up, while the file is still being indexed
  (the target: under 2 s);
* first page again, a page deep in the file, a filter (needs the whole index) and a permalink;
* how long the background index takes to cover the whole file.

    .venv/bin/python benchmarks/viewer_load.py [--records 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

TARGET_S = 2.0


def record(i: int) -> dict:
    action = ("keep", "keep", "keep", "drop", "repair")[i % 5]
    support = {"keep": "supported", "drop": "unsupported", "repair": "mismatched"}[action]
    sections = [{"section_id": str(s), "title": f"Section {s}", "source": "kb",
                 "label": "entailed" if s == 1 else "not_supported",
                 "rationale": "states 'Elmira' as 'Elmira'" if s == 1 else "no answer alternative is stated"}
                for s in range(4)]
    stage = {"backend": "openai", "model": "qwen3-30b-a3b", "settled_by": "llm"}
    return {
        "id": f"syn_{i:06d}", "question": f"In which city was person number {i} born?", "answers": ["Elmira"],
        "images": [f"images/q_{i % 1000:04d}.jpg"], "question_type": ("String", "Numerical", "Time")[i % 3],
        "answer_type": "String", "entity": {"url": f"https://en.wikipedia.org/wiki/Person_{i}", "title": f"Person {i}"},
        "split": "val", "dataset": ("infoseek", "evqa")[i % 2], "meta": {"entity_type": "person"},
        "audit": {"question_before": f"In which city was person {i} born?", "answers_before": ["elmira"],
                  "action": action, "tags": ["answer_leak"] if i % 7 == 0 else [], "reasons": [],
                  "answer_support": support,
                  "stages": {"verify": {"label": "entailed", "consensus": "all", "evidence_source": "kb",
                                        "rationale": "1/1 verifiers found support", "version": "verify@2",
                                        "verifiers": [{"verifier": "v1", "label": "entailed", "version": "verify@2",
                                                       "sections": sections, **stage}], **stage},
                             "derive": {"label": support, "rationale": "evidence states 'Elmira'", "version": "derive@1",
                                        **stage},
                             "posedness": {"label": "clear", "tags": [], "repaired": [], "rationale": "no ambiguity",
                                           "version": "posedness@1", **stage},
                             "leakage": {"label": "ok", "leak": None, "rationale": "no leak; answer supported and unique",
                                         "version": "leakage@1", **stage}}},
        "status": "ok", "reason": "", "attempts": 1, "stage": ""}


def write_run(folder: Path, n: int) -> Path:
    import orjson

    out = folder / "audit" / "audited.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        f.writelines(orjson.dumps(record(i)) + b"\n" for i in range(n))
    (out.parent / "audited.manifest.json").write_text(json.dumps({
        "description": "audit", "state": "finished", "stages": [{"name": s} for s in ("verify", "derive", "posedness",
                                                                                     "leakage")],
        "run_config": {}, "roles": {"verifier": {"backend": "openai", "model": "qwen3-30b-a3b"}}}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, default=None, help="Write the synthetic run here and keep it.")
    args = ap.parse_args()

    import httpx
    import uvicorn

    from kbvqa.cli.view import build_site
    from kbvqa.report.viewer.app import create_app

    tmp = tempfile.TemporaryDirectory(prefix="kbvqa-viewer-bench-")
    folder = args.keep or Path(tmp.name)
    t0 = time.perf_counter()
    out = write_run(folder, args.records)
    size_mb = out.stat().st_size / 1e6
    print(f"synthetic audit run: {args.records:,} records, {size_mb:.0f} MB, written in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t_start = time.perf_counter()
    site = build_site([folder])
    server = uvicorn.Server(uvicorn.Config(create_app(site), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    startup = time.perf_counter() - t_start
    base = f"http://127.0.0.1:{port}"
    rows: list[tuple[str, float, str]] = []
    with httpx.Client(base_url=base, timeout=120) as client:
        def timed(name: str, url: str) -> float:
            t = time.perf_counter()
            r = client.get(url)
            dt = time.perf_counter() - t
            r.raise_for_status()
            rows.append((name, dt, f"{len(r.content) / 1e3:.0f} kB"))
            return dt

        first = timed("first page, cold (indexing in the background)", "/o/audit-audited/")
        timed("first page again", "/o/audit-audited/")
        timed("page 1000 (records 49,951-50,000)", "/o/audit-audited/?page=1000")
        idx = site.index(site.catalog.get("audit-audited"))
        idx.wait(None, timeout=600)
        indexed = time.perf_counter() - t_start
        timed("filter action=drop & tag=answer_leak (whole index)", "/o/audit-audited/?action=drop&tag=answer_leak")
        timed(f"permalink to record syn_{args.records - 1:06d}", f"/o/audit-audited/r/syn_{args.records - 1:06d}")
        timed("runs page", "/")
    server.should_exit = True
    thread.join(timeout=10)

    print(f"\n| request ({args.records:,} audit records, {size_mb:.0f} MB JSONL) | seconds | response |")
    print("|---|---:|---:|")
    print(f"| viewer start-up (discovery, app) | {startup:.3f} | |")
    for name, dt, size in rows:
        print(f"| {name} | {dt:.3f} | {size} |")
    print(f"| whole file indexed (from start-up) | {indexed:.3f} | |")
    ok = first < TARGET_S
    print(f"\nfirst page in {first:.3f} s: {'under' if ok else 'OVER'} the {TARGET_S:.0f} s target")
    tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
