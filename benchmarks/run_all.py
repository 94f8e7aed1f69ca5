"""Run every benchmark script in turn (what `make bench` does). Each prints a markdown table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["score_infoseek.py", "cli_startup.py", "kb_import.py", "llm_saturation.py", "audit_llm_saturation.py",
           "audit_ara.py", "composite_speed.py", "index_speed.py", "agent_saturation.py", "executor_ray.py",
           "ivr12_saturation.py", "phash_dedup.py", "infoseek_readings.py"]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        print(f"\n## {name}\n", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
