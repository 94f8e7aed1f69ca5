"""Export a kbvqa benchmark (any file the data adapters read: an original, audited-and-fixed or
augmented split) as a task of another evaluation harness: inspect_ai, lmms-eval or VLMEvalKit.

One module per harness (to_inspect, to_lmms_eval, to_vlmevalkit); common.py reads the samples, places
the images and checks the scorer. `export` is what `kbvqa export <harness>` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kbvqa.pipelines.export.common import SCORERS, ExportError, Exported, prepare

__all__ = ["HARNESSES", "ExportResult", "ExportError", "SCORERS", "export"]


def _writer(module: str, func: str) -> Callable[[Exported, str], list[Path]]:
    def write(exp: Exported, name: str) -> list[Path]:
        import importlib

        return getattr(importlib.import_module(f"kbvqa.pipelines.export.{module}"), func)(exp, name)

    return write


#: harness -> its writer (every harness gets the images as files under DIR/images/; VLMEvalKit's
#: writer inlines them from there into the TSV)
HARNESSES: dict[str, Callable[[Exported, str], list[Path]]] = {
    "inspect": _writer("to_inspect", "write_inspect"),
    "lmms-eval": _writer("to_lmms_eval", "write_lmms_eval"),
    "vlmevalkit": _writer("to_vlmevalkit", "write_vlmevalkit"),
}


@dataclass
class ExportResult:
    harness: str
    out: Path
    scorer: str
    n_samples: int
    n_images: int
    files: list[Path]

    def as_dict(self) -> dict[str, Any]:
        return {"harness": self.harness, "out": str(self.out), "scorer": self.scorer,
                "scorer_help": SCORERS[self.scorer], "n_samples": self.n_samples, "n_images": self.n_images,
                "files": [str(p) for p in self.files]}


def export(harness: str, samples: str | Path, out: str | Path, *, name: str | None = None, fmt: str | None = None,
           scorer: str = "auto", images: str | Path | None = None, limit: int | None = None) -> ExportResult:
    """Write `samples` as a `harness` task under `out` (see the harness modules for what is written)."""
    if harness not in HARNESSES:
        raise ExportError(f"unknown harness {harness!r}; known: {', '.join(HARNESSES)}")
    write = HARNESSES[harness]
    exp = prepare(samples, out, fmt=fmt, scorer=scorer, images=images, limit=limit)
    files = write(exp, name or Path(samples).stem)
    return ExportResult(harness, exp.out, exp.scorer, len(exp.samples), exp.n_images_copied,
                        [exp.out / "samples.jsonl", *files])
