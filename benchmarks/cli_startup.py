"""Benchmark: how long the command line takes to start, against a bare `python -c pass`.

`kbvqa --help` (and `kbvqa` alone) list the commands from the table in cli/app.py without importing
any of them; before, the listing imported every command module and the pipelines behind them. Each
case runs as a fresh child process, the way the console script starts (`from kbvqa.cli.app import
main; main()`), after one warm-up run that leaves the bytecode cached. Rounds alternate the cases so
that all of them see the same load; the table gives medians of the wall time and of the child's own
CPU time (user + sys, from os.wait4), each also as a ratio to `python -c pass`, and how many modules
the child had imported when it exited.

Targets (issue 36 item 6): `kbvqa --help` under 0.3 s, no slower than `kbvqa score infoseek --help`.

Usage: python benchmarks/cli_startup.py [--rounds 11]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

# the console script's body; a second form prints the number of imported modules on exit
ENTRY = "import sys; from kbvqa.cli.app import main; sys.argv[0] = 'kbvqa'; main()"
COUNTING = "import atexit, sys; atexit.register(lambda: print(len(sys.modules), file=sys.stderr)); " + ENTRY
FULL = ("import sys; from kbvqa.cli.app import build_app; "
        "build_app()(sys.argv[1:], prog_name='kbvqa')")  # every command imported: the listing before

CASES: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ("kbvqa --help", ["-c", ENTRY, "--help"]),
    ("kbvqa (no arguments)", ["-c", ENTRY]),
    ("kbvqa score --help", ["-c", ENTRY, "score", "--help"]),
    ("kbvqa score infoseek --help", ["-c", ENTRY, "score", "infoseek", "--help"]),
    ("kbvqa audit run --help", ["-c", ENTRY, "audit", "run", "--help"]),
    ("full app --help (every command imported, as before)", ["-c", FULL, "--help"]),
]


def run_once(args: list[str]) -> tuple[float, float]:
    """Wall seconds and the child's own CPU seconds (user + sys)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 2):  # `kbvqa` alone prints the help and exits 2, as click does
        raise SystemExit(f"{args}: exit {code}")
    return wall, usage.ru_utime + usage.ru_stime


def modules_loaded(args: list[str]) -> int | None:
    """How many modules the case has imported when it exits (None for the baseline and the full app)."""
    if args[1] != ENTRY:
        return None
    out = subprocess.run([sys.executable, "-c", COUNTING, *args[2:]], capture_output=True, text=True, check=False)
    return int(out.stderr.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=11, help="alternating rounds (medians over them)")
    args = ap.parse_args()
    for _, case in CASES:  # warm-up: bytecode written, files in the page cache
        run_once(case)
    walls: dict[str, list[float]] = {name: [] for name, _ in CASES}
    cpus: dict[str, list[float]] = {name: [] for name, _ in CASES}
    for _ in range(args.rounds):
        for name, case in CASES:
            wall, cpu = run_once(case)
            walls[name].append(wall)
            cpus[name].append(cpu)
    wall = {name: statistics.median(v) for name, v in walls.items()}
    cpu = {name: statistics.median(v) for name, v in cpus.items()}
    base_w, base_c = wall["python -c pass"], cpu["python -c pass"]
    print(f"## CLI start-up, medians of {args.rounds} alternating rounds (load average "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)\n")
    print("| command | wall (s) | × python -c pass (wall) | CPU s (user+sys) | × python -c pass (CPU) "
          "| modules imported |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, case in CASES:
        mods = modules_loaded(case)
        print(f"| {name} | {wall[name]:.3f} | {wall[name] / base_w:.1f} | {cpu[name]:.3f} | "
              f"{cpu[name] / max(base_c, 1e-3):.1f} | {'–' if mods is None else mods} |")
    top, sub = wall["kbvqa --help"], wall["kbvqa score infoseek --help"]
    print(f"\n`kbvqa --help`: {top:.3f} s wall (target < 0.3 s: {'met' if top < 0.3 else 'NOT met'}), "
          f"{top / sub:.2f}× `kbvqa score infoseek --help`, "
          f"{wall['full app --help (every command imported, as before)'] / top:.1f}× faster than the "
          f"full app's listing")


if __name__ == "__main__":
    main()
