"""`kbvqa retrieve`: image-to-image retrieval records for Recall@K (`kbvqa score retrieval` reads them).

The job is `kbvqa.pipelines.retrieve`: one status line per sample through the runner (resume,
manifest), query images encoded in batches; a missing or unreadable image is an error record.

The command itself is in `kbvqa.cli.retrieve_command`, imported when `retrieve` is looked up here:
its flags are read from `RetrieveOptions`, whose module imports the image stack (numpy, Pillow), and
other commands import this module for `job_errors` alone.
"""

from __future__ import annotations

from typing import Any

from kbvqa.cli.common import job_errors  # noqa: F401  (other commands import it from here)


def __getattr__(name: str) -> Any:
    if name == "retrieve":
        from kbvqa.cli.retrieve_command import retrieve

        return retrieve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
