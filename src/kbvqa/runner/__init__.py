"""Run stages over records: concurrency, resume, error capture, manifest, progress.

Entry points: `run_stages` (async) / `run` (sync) execute stages and write a JSONL journal plus a
manifest; `read_results` reads an output back (last line per id wins).
"""

from kbvqa.runner.manifest import manifest_path, redact
from kbvqa.runner.runner import InputError, RunSummary, output_paths, run, run_stages
from kbvqa.runner.sinks import RUNNER_FIELDS, compact_journal, read_parquet, read_results, write_parquet

__all__ = ["InputError", "RUNNER_FIELDS", "RunSummary", "compact_journal", "manifest_path", "output_paths",
           "read_parquet", "read_results", "redact", "run", "run_stages", "write_parquet"]
