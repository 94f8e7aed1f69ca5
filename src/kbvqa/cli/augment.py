"""`kbvqa augment`: multi-entity composites with minimally rewritten questions (seed 000 §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, end_job, fail, print_result
from kbvqa.cli.options import flags, option
from kbvqa.data.errors import DataError
from kbvqa.pipelines.augment.options import AugmentOptions as O


def _items(text: Optional[str]) -> Optional[list[str]]:
    """A comma-separated flag as a list (None: not given)."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def augment(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="Benchmark file (kbvqa JSONL, InfoSeek, E-VQA, ARA CSV)."),
    images: Path = typer.Option(..., "--images", exists=True, file_okay=False, help="Root that relative image paths are under."),
    out: Path = typer.Option(..., "--out", help="Output directory (manifest.csv/.jsonl, samples.jsonl, stats.json, composites/)."),
    config: Optional[Path] = option(O, "config", exists=True, dir_okay=False,
                                    help="kbvqa.toml: its [augment] table sets any of these options by name "
                                         "(composite.* and tagging.* as sub-tables); a flag wins over it."),
    input_format: Optional[str] = option(O, "input_format", "--from", help="Input format (default: detected)."),
    variants: Optional[str] = option(O, "variants", help="Comma-separated: intra, inter, blank, double."),
    seed: Optional[int] = option(O, "seed", help="RNG seed (the default is the released ARA files' seed)."),
    num_samples: Optional[int] = option(O, "num_samples", min=1,
                                        help="Anchors to draw, balanced across types (default: all)."),
    height: Optional[int] = option(O, "height", min=8, help="Panel height in pixels."),
    gap: Optional[int] = option(O, "gap", min=0, help="Pixels between panels."),
    background: Optional[str] = option(O, "background", help="Gap/canvas colour, RRGGBB or R,G,B."),
    workers: Optional[int] = option(O, "workers", min=1, help="Composite processes (default: CPU count)."),
    with_position: Optional[bool] = option(O, "with_position", "--with-position",
                                           help="Inter query with the spatial cue (the authors' release) instead "
                                                "of unchanged (the paper)."),
    inter_explicit: Optional[bool] = option(O, "inter_explicit", "--inter-explicit",
                                            help="Inter query as the anchor question made explicit (pronouns -> "
                                                 "'this <type>') instead of unchanged (the paper)."),
    paired_exclusion: Optional[bool] = option(O, "paired_exclusion", "--paired-exclusion/--no-paired-exclusion",
                                              help="An anchor whose intra or inter variant fails loses the other "
                                                   "too (the paper: excluded from both splits)."),
    k: Optional[int] = option(O, "k", min=1, help="Distractors per composite."),
    layout: Optional[str] = option(O, "layout", help="row or grid."),
    image_format: Optional[str] = option(O, "image_format", help="jpg or png."),
    resample: Optional[str] = option(O, "resample", help="fast: OpenCV resizes panels (bicubic to enlarge, a Lanczos "
                                     "low-pass + bicubic to shrink; within 1/255 of LANCZOS); lanczos: Pillow's "
                                     "LANCZOS, as the authors."),
    min_entities: Optional[int] = option(O, "min_entities", min=2, help="Drop types with fewer distinct entities."),
    vocabulary: Optional[str] = option(O, "vocabulary", help="Type vocabulary: auto (each sample's benchmark: "
                                       "E-VQA rows evqa, others infoseek), infoseek or evqa."),
    types: Optional[str] = option(O, "types", help="Comma-separated type vocabulary of your own (instead of "
                                  "--vocabulary)."),
    url_types: Optional[Path] = option(O, "url_types", exists=True, dir_okay=False,
                                       help="JSON {url: type} KB-category fallback."),
    similar: Optional[bool] = option(O, "similar", "--similar",
                                     help="Hardest same-type distractor by image similarity (histogram baseline "
                                          "encoder)."),
    as_json: bool = typer.Option(False, "--json", help="Print the stats as JSON."),
    allow_empty: Optional[bool] = option(O, "allow_empty", "--allow-empty",
                                         help="Run on an input with no samples (otherwise an error)."),
) -> None:
    """Augment INPUT: intra/inter-category composites, Blank/Double controls, rewritten questions."""
    from kbvqa.pipelines.augment.run import augment_file
    from kbvqa.report.summaries import augment_stats_tables
    from kbvqa.runner.options import read_table

    given = {**locals(), "variants": _items(variants), "types": _items(types)}
    try:
        opts = O.build(read_table(config, "augment"), source=str(config), **flags(O, given))
        stats = augment_file(input, images, out, opts, progress=not as_json)
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
