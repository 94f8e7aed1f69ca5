"""`kbvqa export inspect`: the benchmark as an inspect_ai task folder (task.py + its data).

DIR/task.py is kbvqa's harness file `_inspect_task.py` copied verbatim: it reads kbvqa_export.json
and samples.jsonl beside it, so the same file serves every export and nothing is generated as code.
"""

from __future__ import annotations

from pathlib import Path

from kbvqa.pipelines.export.common import Exported, copy_harness_file, write_settings

__all__ = ["write_inspect"]

TASK_FILE = "task.py"


def write_inspect(exp: Exported, name: str) -> list[Path]:
    """Write DIR/task.py and DIR/kbvqa_export.json; returns the files written."""
    settings = write_settings(exp, "inspect", name=name, task_file=TASK_FILE,
                              run=f"cd {exp.out} && inspect eval {TASK_FILE} --model <provider/model>"
                                  + (" --model-role grader=<provider/model>" if exp.scorer == "judge" else ""))
    return [copy_harness_file("_inspect_task.py", exp.out / TASK_FILE), settings]
