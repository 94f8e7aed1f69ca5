"""What every harness export shares: the samples read by kbvqa's adapters, their images copied beside
the task, the benchmark's scorer chosen (and checked by loading the references with kbvqa's own
loader, so a file the scorer would refuse is refused here, not halfway through a harness run), and
`kbvqa_export.json`, the settings the exported code reads at run time.

The exported folder is self-contained: the images live under DIR/images/ (hard links where the
filesystem allows, else copies) and every path inside it is relative to DIR, so it can be moved or
shipped. The code a harness runs imports kbvqa's scorers from `kbvqa.evaluate` and nothing above it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbvqa import __version__
from kbvqa.data.formats import detect_format, read_samples
from kbvqa.data.images import resolve_image
from kbvqa.data.schema import Sample

__all__ = ["SCORERS", "SETTINGS_FILE", "SAMPLES_FILE", "JUDGE_REFS_FILE", "ExportError", "Exported",
           "prepare", "write_settings", "copy_harness_file"]

#: The scorer an exported task applies, by benchmark (`--scorer`; "auto" picks one, `choose_scorer`).
SCORERS = {
    "infoseek": "InfoSeek's official per-item rules (normalised exact match, numeric ranges); the task also "
                "reports the official final score (harmonic mean over the unseen_question / unseen_entity splits)",
    "evqa": "E-VQA exact match (evqa-em), not BEM; with a local BEM model directory (bem_dir) exact match then "
            "BEM >= 0.5, the paper's metric",
    "judge": "the SimpleQA-style judge (kbvqa's prompts: SimpleQA's for short golds, kbvqa's paragraph rubric "
             "for NoteVQA-layout or long golds) asked through the harness's grader model",
}
SETTINGS_FILE = "kbvqa_export.json"
SAMPLES_FILE = "samples.jsonl"
JUDGE_REFS_FILE = "judge_references.json"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class ExportError(ValueError):
    """The input cannot be exported as asked (no samples, a missing image, a scorer that refuses it)."""


@dataclass
class Exported:
    """The samples of an export, their images as files inside `out`, and the scorer chosen."""

    out: Path
    source: Path
    fmt: str
    scorer: str
    samples: list[Sample]
    #: per sample id, its images as paths relative to `out` (images/<file>)
    images: dict[str, list[str]] = field(default_factory=dict)
    n_images_copied: int = 0
    judge_layout: dict[str, str] = field(default_factory=dict)

    def image_files(self, sid: str) -> list[Path]:
        return [self.out / p for p in self.images.get(sid, [])]


def choose_scorer(samples: list[Sample], fmt: str) -> str:
    """auto: E-VQA's scorer for E-VQA input (or samples whose question types are all E-VQA's), the
    InfoSeek scorer when every sample has an answer type (String / Numerical / Time), else the judge
    (NoteVQA-layout and other open-answer sets)."""
    from kbvqa.data.evqa import EVQA_QUESTION_TYPES

    if fmt == "evqa" or all(s.question_type in EVQA_QUESTION_TYPES for s in samples):
        return "evqa"
    if fmt != "notevqa" and all(s.answer_type for s in samples):
        return "infoseek"
    return "judge"


def _place_image(src: Path, images_dir: Path, taken: dict[str, Path]) -> str:
    """Link or copy one image into images/, under its own name (a suffix added when two different
    files share a name); returns its path relative to the export folder."""
    name = _SAFE_NAME.sub("_", src.name) or "image"
    stem, suffix = os.path.splitext(name)
    n = 1
    while name in taken and taken[name] != src:
        n += 1
        name = f"{stem}_{n}{suffix}"
    if name not in taken:
        dest = images_dir / name
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        try:
            os.link(src, dest)
        except OSError:  # another filesystem, or links not allowed
            shutil.copyfile(src, dest)
        taken[name] = src
    return f"images/{name}"


def prepare(samples_path: str | Path, out: str | Path, *, fmt: str | None = None, scorer: str = "auto",
            images: str | Path | None = None, limit: int | None = None) -> Exported:
    """Read `samples_path` (any format the data adapters read), put its images under out/images/ and
    write out/samples.jsonl (kbvqa JSONL, images relative to `out`). `images` is the image root
    (default: the samples file's folder). Raises ExportError for an empty input, a missing image or a
    scorer whose reference loader refuses the samples."""
    source = Path(samples_path).resolve()
    fmt = fmt or detect_format(source)
    samples = list(read_samples(source, fmt))
    if limit is not None:
        samples = samples[:limit]
    if not samples:
        raise ExportError(f"{source}: no samples to export")
    if scorer == "auto":
        scorer = choose_scorer(samples, fmt)
    if scorer not in SCORERS:
        raise ExportError(f"unknown scorer {scorer!r}; known: auto, {', '.join(SCORERS)}")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    exp = Exported(out=out, source=source, fmt=fmt, scorer=scorer, samples=samples)
    root = Path(images).resolve() if images is not None else source.parent
    images_dir = out / "images"
    images_dir.mkdir(exist_ok=True)
    taken: dict[str, Path] = {}
    for s in samples:
        refs = []
        for ref in s.images:
            try:
                src = resolve_image(ref, root).resolve()
            except (FileNotFoundError, ValueError) as exc:
                raise ExportError(f"sample {s.id!r}: {exc}") from None
            refs.append(_place_image(src, images_dir, taken))
        exp.images[s.id] = refs
    exp.n_images_copied = len(taken)
    with (out / SAMPLES_FILE).open("w", encoding="utf-8") as fh:
        for s in samples:
            line = s.dump()
            line["images"] = exp.images[s.id]
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    _check_references(exp)
    return exp


def _check_references(exp: Exported) -> None:
    """Load the exported samples with the scorer's own reference loader (what the harness will run);
    for the judge, also write judge_references.json (question, target, layout per id, as
    `kbvqa score judge` reads them from the source, so a NoteVQA file keeps its paragraph rubric)."""
    from kbvqa.evaluate.io import ScoreInputError

    path = exp.out / SAMPLES_FILE
    try:
        if exp.scorer == "infoseek":
            from kbvqa.evaluate.io import load_infoseek_references

            load_infoseek_references(path, keep_raw=False)
        elif exp.scorer == "evqa":
            from kbvqa.evaluate.evqa import load_evqa_references

            load_evqa_references(path)
        else:
            from kbvqa.evaluate.judge import read_judge_references

            try:  # the source's own layout (NoteVQA) decides the rubric, as in `kbvqa score judge`
                refs = read_judge_references(exp.source)
            except (ScoreInputError, ValueError, KeyError):
                refs = {}
            own = read_judge_references(path)
            table = {sid: (refs.get(sid) or ref)._asdict() for sid, ref in own.items()}
            (exp.out / JUDGE_REFS_FILE).write_text(json.dumps(table, ensure_ascii=False, indent=1), encoding="utf-8")
            exp.judge_layout = {sid: r["layout"] for sid, r in table.items() if r["layout"]}
    except ScoreInputError as exc:
        raise ExportError(f"the {exp.scorer} scorer refuses these samples: {exc}") from None


def write_settings(exp: Exported, harness: str, **extra: Any) -> Path:
    """out/kbvqa_export.json: what the exported code reads (scorer, files) and what made the export."""
    settings = {"harness": harness, "scorer": exp.scorer, "scorer_help": SCORERS[exp.scorer],
                "samples": SAMPLES_FILE, "judge_references": JUDGE_REFS_FILE if exp.scorer == "judge" else None,
                "n_samples": len(exp.samples), "n_images": exp.n_images_copied, "source": str(exp.source),
                "source_format": exp.fmt, "kbvqa_version": __version__, **extra}
    path = exp.out / SETTINGS_FILE
    path.write_text(json.dumps(settings, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def copy_harness_file(name: str, dest: Path) -> Path:
    """Write one of this package's harness files (`_inspect_task.py`, `_lmms_utils.py`) to `dest`."""
    from importlib.resources import files

    dest.write_text(files("kbvqa.pipelines.export").joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
    return dest
