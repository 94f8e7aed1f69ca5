"""`kbvqa retrieve`, `kbvqa answer`: command functions the app registers.

`retrieve` writes clean retrieval records ({id, retrieved, stage, scores, status}) that `kbvqa score
retrieval` reads, encoding query images in batches; failures are error lines (a miss, never a drop).
`answer` writes
predictions (runner output, one line per sample with status) and `OUT.retrieval.jsonl` with every
retrieval stage's ranking.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from kbvqa.cli.common import fail


class Pipeline(str, Enum):
    echosight = "echosight"
    iba = "iba"
    extractive = "extractive"


class RerankerName(str, Enum):
    bm25 = "bm25"
    dense = "dense"
    cross_encoder = "cross-encoder"
    llm = "llm"


def _errors() -> tuple[type[BaseException], ...]:
    from kbvqa.data.errors import DataError
    from kbvqa.kb.store import KBError

    return (FileNotFoundError, ValueError, ImportError, OSError, KeyError, DataError, KBError)


def _load_index(index: Path, model_dir: Optional[Path], device: Optional[str] = None):
    from kbvqa.kb.image_index import ImageIndex
    from kbvqa.models.image_encoders import get_encoder

    idx = ImageIndex.load(index)
    kwargs: dict[str, Any] = {"device": device} if device and idx.encoder.startswith(("hf-", "open_clip")) else {}
    return idx, get_encoder(idx.encoder, model_dir, **kwargs)


def _samples(samples: Path, fmt: Optional[str]):
    from kbvqa.data.formats import read_samples

    return (s.dump() for s in read_samples(samples, fmt))


def retrieve(
    index: Path = typer.Option(..., "--index", help="Image index built by `kbvqa index images`."),
    samples: Path = typer.Option(..., "--samples", help="Benchmark file (kbvqa JSONL, InfoSeek, E-VQA CSV ...)."),
    images: Optional[Path] = typer.Option(None, "--images", help="Folder the samples' image paths/ids are relative "
                                                                 "to (default: the samples file's folder)."),
    out: Path = typer.Option(..., "--out", help="Retrieval records JSONL (R.jsonl)."),
    k: int = typer.Option(20, "--k", min=1, help="Articles kept per query (entity-deduplicated)."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The encoder's local model dir (neural indexes)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Samples format (default: detected)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Query images encoded per batch."),
    device: Optional[str] = typer.Option(None, "--device"),
) -> None:
    """Image-to-image retrieval: rank KB articles for each sample's image; missing images become error records."""
    import time

    from kbvqa.progress import ProgressBar
    from kbvqa.stages.answer.retrieve import batch_retrieve

    console = Console(stderr=True)
    t0 = time.perf_counter()
    counts = {"ok": 0, "error": 0}
    images = images or samples.parent
    try:
        idx, enc = _load_index(index, model_dir, device)
        bar = ProgressBar(None, "retrieve", console.is_terminal)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for line in batch_retrieve(_samples(samples, fmt), idx, enc, image_root=images, k=k,
                                       batch_size=batch_size, on_batch=bar.advance):
                counts[line["status"]] += 1
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        bar.close()
        tmp.replace(out)
    except _errors() as e:
        fail(e)
        return
    typer.echo(json.dumps({"out": str(out), "records": sum(counts.values()), **counts, "encoder": enc.name, "k": k,
                           "seconds": round(time.perf_counter() - t0, 3)}))


def answer(
    samples: Path = typer.Option(..., "--samples", help="Benchmark file."),
    kb: Path = typer.Option(..., "--kb", help="KB (SQLite or wiki JSON)."),
    out: Path = typer.Option(..., "--out", help="Predictions JSONL (P.jsonl)."),
    pipeline: Pipeline = typer.Option(Pipeline.extractive, "--pipeline", help="echosight | iba | extractive"),
    index: Optional[Path] = typer.Option(None, "--index", help="Image index (required except for iba)."),
    images: Optional[Path] = typer.Option(None, "--images", help="Folder the samples' images are relative to "
                                                                 "(default: the samples file's folder)."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The image encoder's local model dir."),
    reranker: RerankerName = typer.Option(RerankerName.bm25, "--reranker", help="Section reranker."),
    rerank_model_dir: Optional[Path] = typer.Option(None, "--rerank-model-dir",
                                                    help="Local model for dense / cross-encoder rerank."),
    text_index: Optional[Path] = typer.Option(None, "--text-index", help="Dense section index (`kbvqa index text`)."),
    k: int = typer.Option(20, "--k", min=1),
    articles: int = typer.Option(5, "--articles", min=1, help="Retrieved articles whose sections are reranked."),
    sections: int = typer.Option(5, "--sections", min=1, help="Sections given to the answerer."),
    alpha: Optional[float] = typer.Option(None, "--alpha", min=0.0, max=1.0,
                                          help="Weight of the retrieval score in the fused section order."),
    llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL for the model roles."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on that server."),
    config: Optional[Path] = typer.Option(None, "--config", help="kbvqa.toml with [models.*] roles."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env"),
    fmt: Optional[str] = typer.Option(None, "--format"),
    concurrency: int = typer.Option(4, "--concurrency", min=1),
    limit: Optional[int] = typer.Option(None, "--limit", min=1),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip samples already answered ok in --out; "
                                                                     "re-run errored and invalid ones."),
) -> None:
    """Answer a benchmark with a reference MM-RAG pipeline; predictions carry retrieval, evidence and usage."""
    from kbvqa.kb.store import open_kb
    from kbvqa.models.config import roles_from_flags
    from kbvqa.pipelines.answer import build_answer_job, write_retrieval_records

    console = Console(stderr=True)
    images = images or samples.parent
    try:
        wanted = ("answerer", *(["vision"] if pipeline == Pipeline.iba else []),
                  *(["checker"] if reranker == RerankerName.llm else []))
        roles = roles_from_flags(config, llm=llm, model=model, api_key_env=api_key_env, fill=wanted,
                                 concurrency=concurrency)
        store = open_kb(kb)
        idx = enc = None
        if index is not None:
            idx, enc = _load_index(index, model_dir)
        tidx = None
        if text_index is not None:
            from kbvqa.kb.text_index import TextIndex

            tidx = TextIndex.load(text_index)
        job = build_answer_job(pipeline.value, kb=store, roles=roles, index=idx, encoder=enc, image_root=images,
                               reranker=reranker.value, text_index=tidx, rerank_model_dir=rerank_model_dir,
                               k=k, articles=articles, sections=sections, alpha=alpha)
        stages = job.stages
        if pipeline != Pipeline.extractive and stages[-1].name == "answer-extractive":
            console.print("note: no `answerer` role configured (--llm/--model or --config), so the embedded "
                          "extractive answerer answers; predictions name it as their producer")
        records = _samples(samples, fmt)
        if limit:
            import itertools

            records = itertools.islice(records, limit)
        summary = job.run(records, out=out, concurrency=concurrency, progress=console.is_terminal, resume=resume,
                          run_config={"index": str(index) if index else None})
        rr = write_retrieval_records(out, out.with_suffix(".retrieval.jsonl"))
    except _errors() as e:
        fail(e)
        return
    typer.echo(json.dumps({"out": str(out), "retrieval_records": str(rr), "ok": summary.ok, "error": summary.error,
                           "invalid": summary.invalid, "pipeline": pipeline.value,
                           "stages": [s.name for s in stages], "usage": summary.usage.model_dump(),
                           "seconds": round(summary.seconds, 3)}))
