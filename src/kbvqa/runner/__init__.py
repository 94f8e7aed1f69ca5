"""Run stages over records: the stage contract, executors, resume, error capture, manifest, progress.

The contract (`Stage`, `StageConfig`, `Context`, `Invalid`, `run_record`) is in `runner.stage`; the
Executor protocol and the registry of executors in `runner.executor` (`local`: asyncio in this
process; `ray`: Ray actors, the `kbvqa[ray]` extra); `run_stages` (async) / `run` (sync) read the
input, journal and resume, and write the manifest; `read_results` reads an output back (last line
per id wins).
"""

from kbvqa.runner.executor import EXECUTORS, Executor, Task, get_executor, set_default_executor
from kbvqa.runner.manifest import manifest_path, redact
from kbvqa.runner.run import InputError, RunSummary, output_paths, run, run_stages
from kbvqa.runner.sinks import compact_journal, read_parquet, read_results, write_parquet
from kbvqa.runner.stage import RUNNER_FIELDS, Context, Invalid, NeedsModel, Stage, StageConfig, run_record

__all__ = ["EXECUTORS", "Context", "Executor", "InputError", "Invalid", "NeedsModel", "RUNNER_FIELDS", "RunSummary", "Stage",
           "StageConfig", "Task", "compact_journal", "get_executor", "manifest_path", "output_paths", "read_parquet",
           "read_results", "redact", "run", "run_record", "run_stages", "set_default_executor", "write_parquet"]
