"""`kbvqa augment`: multi-entity composites with minimally rewritten questions (seed 000 §5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, end_job, fail, print_result
from kbvqa.data.errors import DataError


def _colour(text: str) -> tuple[int, int, int]:
    t = text.strip().lstrip("#")
    if len(t) == 6 and all(c in "0123456789abcdefABCDEF" for c in t):
        return int(t[0:2], 16), int(t[2:4], 16), int(t[4:6], 16)
    parts = [p for p in text.replace(" ", "").split(",") if p]
    if len(parts) == 3 and all(p.isdigit() and int(p) < 256 for p in parts):
        return int(parts[0]), int(parts[1]), int(parts[2])
    raise ValueError(f"colour {text!r}: use RRGGBB or R,G,B")


def augment(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Benchmark file (kbvqa JSONL, InfoSeek, E-VQA, ARA CSV)."),
    images: Path = typer.Option(..., "--images", exists=True, file_okay=False, help="Root that relative image paths are under."),
    out: Path = typer.Option(..., "--out", help="Output directory (manifest.csv/.jsonl, samples.jsonl, stats.json, composites/)."),
    fmt: Optional[str] = typer.Option(None, "--from", help="Input format (default: detected)."),
    variants: str = typer.Option("intra,inter,blank,double", "--variants", help="Comma-separated: intra, inter, blank, double."),
    seed: int = typer.Option(3185, "--seed", help="RNG seed (3185 = the released ARA files)."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples", min=1, help="Anchors to draw, balanced across types (default: all)."),
    height: int = typer.Option(512, "--height", min=8, help="Panel height in pixels."),
    gap: int = typer.Option(0, "--gap", min=0, help="Pixels between panels."),
    background: str = typer.Option("000000", "--background", help="Gap/canvas colour, RRGGBB or R,G,B."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Composite processes (default: CPU count)."),
    with_position: bool = typer.Option(False, "--with-position", help="Inter query with the spatial cue (the authors' release) instead of unchanged (the paper)."),
    k: int = typer.Option(1, "--k", min=1, help="Distractors per composite."),
    layout: str = typer.Option("row", "--layout", help="row or grid."),
    image_format: str = typer.Option("jpg", "--image-format", help="jpg or png."),
    resample: str = typer.Option("fast", "--resample", help="fast: OpenCV resizes panels (bicubic to enlarge, a Lanczos "
                                 "low-pass + bicubic to shrink; within 1/255 of LANCZOS); lanczos: Pillow's LANCZOS, as the authors."),
    min_entities: int = typer.Option(4, "--min-entities", min=2, help="Drop types with fewer distinct entities."),
    types: Optional[str] = typer.Option(None, "--types", help="Comma-separated type vocabulary (default: the 19 InfoSeek types)."),
    url_types: Optional[Path] = typer.Option(None, "--url-types", exists=True, dir_okay=False, help="JSON {url: type} KB-category fallback."),
    similar: bool = typer.Option(False, "--similar", help="Hardest same-type distractor by image similarity (histogram baseline encoder)."),
    as_json: bool = typer.Option(False, "--json", help="Print the stats as JSON."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Run on an input with no samples (otherwise an error)."),
) -> None:
    """Augment INPUT: intra/inter-category composites, Blank/Double controls, rewritten questions."""
    from kbvqa.pipelines.augment.run import AugmentConfig, augment_file
    from kbvqa.pipelines.augment.types import INFOSEEK_TYPES
    from kbvqa.report.summaries import augment_stats_tables

    try:
        cfg = AugmentConfig(
            height=height, gap=gap, background=_colour(background), workers=workers, with_position=with_position,
            k=k, layout=layout, image_format=image_format, resample=resample, min_entities=min_entities,
            types=tuple(t.strip() for t in types.split(",") if t.strip()) if types else INFOSEEK_TYPES,
            url_types=json.loads(url_types.read_text(encoding="utf-8")) if url_types else None)
        if similar:
            from kbvqa.models.image_encoders import HistogramEncoder
            cfg.encoder = HistogramEncoder()
        stats = augment_file(input, images, out, fmt=fmt, config=cfg, seed=seed, num_samples=num_samples,
                             variants=[v.strip() for v in variants.split(",") if v.strip()], progress=not as_json,
                             allow_empty=allow_empty)
    except (DataError, ValueError, OSError) as e:
        fail(e)
    if as_json:
        emit_json(stats)
    else:
        for table in augment_stats_tables(stats):
            print_result(table)
        typer.echo(f"wrote {out / 'manifest.csv'}, {out / 'manifest.jsonl'}, {out / 'samples.jsonl'}, "
                   f"{out / 'stats.json'}")
    _end(stats)


def _end(stats: dict) -> None:
    """The exit-code convention over anchors: one whose composites were all made is ok, `partial` is
    counted with the failures (its missing variants), and when no anchor got a composite — every one
    failed, or every input was excluded — the job exits 3 with the most common reasons."""
    status = stats.get("status") or {}
    made = int(status.get("ok", 0)) + int(status.get("partial", 0))
    failed = {"error": int(status.get("error", 0)), "partial": int(status.get("partial", 0))}
    reasons = dict(stats.get("failure_reasons") or {})
    if not made and not failed["error"] and stats.get("inputs"):  # nothing reached compositing
        failed = {"excluded": int(status.get("excluded", 0)), "not sampled": int(status.get("not_sampled", 0))}
        reasons = {str(k): int(v) for k, v in (stats.get("exclusions") or {}).items()}
    end_job(made, failed, what="anchor(s)", reasons=reasons, hint="each anchor's reason is in OUT/manifest.jsonl")
