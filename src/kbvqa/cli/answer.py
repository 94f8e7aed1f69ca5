"""`kbvqa answer`: predictions from a registered answer pipeline — an MM-RAG preset or the search agent.

Writes predictions (runner output, one line per sample with status) and `OUT.retrieval.jsonl` with
every retrieval stage's ranking; the agent also writes `OUT.cassette/` (its tool and model caches,
for exact offline replays) and `OUT.artifacts/` (long observations). `--pipeline` offers the PIPELINES registry's answer presets and
`--reranker` the RERANKERS registry, so a new preset or reranker shows up here without an edit
(typer offers a Literal's values as the choices, in --help and when checking the flag).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

import typer
from rich.console import Console

from kbvqa.cli.common import (CONNECT_TIMEOUT, DEADLINE, MAX_RETRIES, STRUCTURED_OUTPUT, TIMEOUT, end_job, fail,
                              journal_reasons,
                              model_limits)
from kbvqa.cli.retrieve import job_errors
from kbvqa.models.rerank import RERANKERS
from kbvqa.pipelines.answer import answer_pipelines
from kbvqa.tools import TOOL_BACKENDS
from kbvqa.tools.base import WEB_PROVIDERS

PipelineName = Literal[tuple(answer_pipelines())]  # type: ignore[valid-type]
ToolsName = Literal[tuple([*TOOL_BACKENDS.names(), "replay"])]  # type: ignore[valid-type]
ProtocolName = Literal["text", "tools"]
WebProviderName = Literal[WEB_PROVIDERS]  # type: ignore[valid-type]
RerankerName = Literal[tuple(RERANKERS.names())]  # type: ignore[valid-type]


def answer(
    samples: Path = typer.Option(..., "--samples", exists=True, dir_okay=False, help="Benchmark file."),
    kb: Path = typer.Option(..., "--kb", help="KB (SQLite or wiki JSON)."),
    out: Path = typer.Option(..., "--out", help="Predictions JSONL (P.jsonl)."),
    pipeline: PipelineName = typer.Option("extractive", "--pipeline", help="Answer preset (kbvqa.pipelines.PIPELINES)."),
    index: Optional[Path] = typer.Option(None, "--index", help="Image index (required except for iba)."),
    images: Optional[Path] = typer.Option(None, "--images", help="Folder the samples' images are relative to "
                                                                 "(default: the samples file's folder)."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The image encoder's local model dir."),
    reranker: RerankerName = typer.Option("bm25", "--reranker", help="Section reranker (kbvqa.models.rerank.RERANKERS)."),
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
    tools: Optional[ToolsName] = typer.Option(None, "--tools",  # type: ignore[valid-type]
                                              help="agent: tool backend (local: the KB, offline; web: a search "
                                                   "API, see --web-provider; replay: a cassette). Default local."),
    cassette: Optional[Path] = typer.Option(None, "--cassette", help="agent --tools replay: a run's OUT.cassette/."),
    protocol: Optional[ProtocolName] = typer.Option(None, "--protocol",  # type: ignore[valid-type]
                                                    help="agent: text (<tool_call> tags, the paper's) or tools "
                                                         "(native tool calling). Default text."),
    max_turns: Optional[int] = typer.Option(None, "--max-turns", min=1, help="agent: turn budget (default 12)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="agent: token budget per episode."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", min=0.0, help="agent: cost budget per episode."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", min=0.0,
                                                help="agent: wall-time budget per episode."),
    kb_images: Optional[Path] = typer.Option(None, "--kb-images",
                                             help="agent: folder holding the KB's images (image results)."),
    blocked_domain: list[str] = typer.Option([], "--blocked-domain",
                                             help="agent: leakage guard, drop results on this domain (repeat)."),
    today: Optional[str] = typer.Option(None, "--today", help="agent: the date in the system prompt (YYYY-MM-DD)."),
    web_provider: Optional[WebProviderName] = typer.Option(  # type: ignore[valid-type]
        None, "--web-provider", help="--tools web: the search API (serper: any Serper-compatible endpoint, the "
                                     "default; searxng: a SearXNG instance's JSON API). Else [tools.web] of --config."),
    web_base_url: Optional[str] = typer.Option(None, "--web-base-url",
                                               help="--tools web: the search API's base URL (serper default "
                                                    "https://google.serper.dev; searxng: required)."),
    web_api_key_env: Optional[str] = typer.Option(None, "--web-api-key-env",
                                                  help="--tools web: the environment variable holding the search "
                                                       "API key (serper default SERPER_API_KEY; searxng: none)."),
    timeout: Optional[float] = TIMEOUT,
    connect_timeout: Optional[float] = CONNECT_TIMEOUT,
    deadline: Optional[float] = DEADLINE,
    structured_output: Optional[str] = STRUCTURED_OUTPUT,
    max_retries: Optional[int] = MAX_RETRIES,
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Run on an input with no samples (otherwise an error)."),
    guided: Optional[bool] = typer.Option(None, "--guided", help="agent: tell it the short reference (trajectories "
                                                                "for `kbvqa reference build`, seed 001 §3.2)."),
) -> None:
    """Answer a benchmark with a registered pipeline (an MM-RAG preset or the search agent); predictions
    carry retrieval, evidence, trajectories and usage."""
    from kbvqa.pipelines.answer.run import AnswerSpec, prepare_answer, run_answer

    console = Console(stderr=True)
    spec = AnswerSpec(samples=samples, kb=kb, pipeline=pipeline, index=index, images=images, model_dir=model_dir,
                      reranker=reranker, rerank_model_dir=rerank_model_dir, text_index=text_index, k=k,
                      articles=articles, sections=sections, alpha=alpha, llm=llm, model=model, config=config,
                      api_key_env=api_key_env, fmt=fmt, concurrency=concurrency, limit=limit, resume=resume,
                      tools=tools, cassette=cassette, protocol=protocol, max_turns=max_turns, max_tokens=max_tokens,
                      max_cost=max_cost, max_seconds=max_seconds, kb_images=kb_images, blocked_domain=blocked_domain,
                      today=today, guided=guided, web_provider=web_provider, web_base_url=web_base_url,
                      web_api_key_env=web_api_key_env, allow_empty=allow_empty,
                      limits=model_limits(timeout, connect_timeout, deadline, structured_output, max_retries))
    try:
        prepared = prepare_answer(spec)
        for note in prepared.notes:
            console.print(note, markup=False)
        summary, rr = run_answer(prepared, spec, out, progress=console.is_terminal)
    except job_errors() as e:
        fail(e)
    typer.echo(json.dumps({"out": str(out), "retrieval_records": str(rr), "ok": summary.ok, "error": summary.error,
                           "invalid": summary.invalid, "pipeline": pipeline, "stages": prepared.job.stage_names,
                           "usage": summary.usage.model_dump(), "seconds": round(summary.seconds, 3)}))
    end_job(summary.ok, {"error": summary.error, "invalid": summary.invalid}, skipped=summary.skipped, what="sample(s)",
            needs_model=summary.needs_model, reasons=journal_reasons(out) if summary.error or summary.invalid else None)
