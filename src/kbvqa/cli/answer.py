"""`kbvqa answer`: predictions from a registered answer pipeline — an MM-RAG preset or the search agent.

Writes predictions (runner output, one line per sample with status) and `OUT.retrieval.jsonl` with
every retrieval stage's ranking; the agent also writes `OUT.cassette/` (its tool and model caches,
for exact offline replays) and `OUT.artifacts/` (long observations). It ends with a short summary
(records by status, and for the agent how episodes ended, forced answers, image-tag validity);
`--json` prints the full summary as one JSON object instead. `--pipeline` offers the PIPELINES registry's answer presets and
`--reranker` the RERANKERS registry, so a new preset or reranker shows up here without an edit
(typer offers a Literal's values as the choices, in --help and when checking the flag).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal, Optional

import typer
from rich.console import Console

from kbvqa.cli.common import emit_json, end_job, fail, journal_reasons
from kbvqa.cli.flag_groups import GROUP, ModelLimits, ungrouped, with_groups
from kbvqa.cli.options import flags, option
from kbvqa.cli.common import job_errors
from kbvqa.models.rerank import RERANKERS
from kbvqa.pipelines.answer import AnswerOptions, answer_options, answer_pipelines
from kbvqa.tools import TOOL_BACKENDS
from kbvqa.tools.base import WEB_PROVIDERS

PipelineName = Literal[tuple(answer_pipelines())]  # type: ignore[valid-type]
ToolsName = Literal[tuple([*TOOL_BACKENDS.names(), "replay"])]  # type: ignore[valid-type]
ProtocolName = Literal["text", "tools"]
WebProviderName = Literal[WEB_PROVIDERS]  # type: ignore[valid-type]
RerankerName = Literal[tuple(RERANKERS.names())]  # type: ignore[valid-type]


O = AnswerOptions


@with_groups
def answer(
    samples: Path = typer.Option(..., "--samples", exists=True, dir_okay=False, help="Benchmark file."),
    kb: Optional[Path] = option(O, "kb", help="KB (SQLite or wiki JSON); every preset but direct reads one."),
    out: Path = typer.Option(..., "--out", help="Predictions JSONL (P.jsonl)."),
    pipeline: Optional[PipelineName] = option(O, "pipeline",  # type: ignore[valid-type]
                                              help="Answer preset (kbvqa.pipelines.PIPELINES)."),
    index: Optional[Path] = option(O, "index", help="Image index (required except for iba and direct)."),
    images: Optional[Path] = option(O, "images", help="Folder the samples' images are relative to "
                                                      "(default: the samples file's folder)."),
    model_dir: Optional[Path] = option(O, "model_dir", help="The image encoder's local model dir."),
    reranker: Optional[RerankerName] = option(O, "reranker",  # type: ignore[valid-type]
                                              help="Section reranker (kbvqa.models.rerank.RERANKERS)."),
    rerank_model_dir: Optional[Path] = option(O, "rerank_model_dir",
                                              help="Local model for dense / cross-encoder rerank."),
    text_index: Optional[Path] = option(O, "text_index", help="Dense section index (`kbvqa index text`)."),
    k: Optional[int] = option(O, "k", min=1, help="Articles kept by image retrieval."),
    articles: Optional[int] = option(O, "articles", min=1, help="Retrieved articles whose sections are reranked."),
    sections: Optional[int] = option(O, "sections", min=1, help="Sections given to the answerer."),
    alpha: Optional[float] = option(O, "alpha", min=0.0, max=1.0,
                                    help="Weight of the retrieval score in the fused section order (iba: 0.3)."),
    llm: Optional[str] = option(O, "llm", help="OpenAI-compatible base URL for the model roles."),
    model: Optional[str] = option(O, "model", help="Model name on that server."),
    config: Optional[Path] = typer.Option(None, "--config", help="kbvqa.toml: [models.*] roles, [answer] settings "
                                                                 "(flags win), [tools.web]."),
    api_key_env: Optional[str] = option(O, "api_key_env"),
    fmt: Optional[str] = option(O, "fmt", "--format", help="The samples' format (default: detected)."),
    concurrency: Optional[int] = option(O, "concurrency", min=1),
    limit: Optional[int] = option(O, "limit", min=1),
    resume: Optional[bool] = option(O, "resume", "--resume/--no-resume",
                                    help="Skip samples already answered ok in --out; re-run errored and invalid ones."),
    tools: Optional[ToolsName] = option(O, "tools",  # type: ignore[valid-type]
                                        help="agent: tool backend (local: the KB, offline; web: a search API, see "
                                             "--web-provider; replay: a cassette)."),
    cassette: Optional[Path] = option(O, "cassette", help="agent --tools replay: a run's OUT.cassette/."),
    protocol: Optional[ProtocolName] = option(O, "protocol",  # type: ignore[valid-type]
                                              help="agent: text (<tool_call> tags, the paper's) or tools "
                                                   "(native tool calling)."),
    max_turns: Optional[int] = option(O, "max_turns", min=1, help="agent: turn budget."),
    max_tokens: Optional[int] = option(O, "max_tokens", min=1, help="agent: token budget per episode."),
    max_cost: Optional[float] = option(O, "max_cost", min=0.0, help="agent: cost budget per episode."),
    max_seconds: Optional[float] = option(O, "max_seconds", min=0.0, help="agent: wall-time budget per episode."),
    kb_images: Optional[Path] = option(O, "kb_images", help="agent: folder holding the KB's images (image results)."),
    blocked_domain: list[str] = typer.Option([], "--blocked-domain",
                                             help="agent: leakage guard, drop results on this domain (repeat)."),
    today: Optional[str] = option(O, "today", help="agent: the date in the system prompt (YYYY-MM-DD; default "
                                                   "today, or the cassette's)."),
    web_provider: Optional[WebProviderName] = option(  # type: ignore[valid-type]
        O, "web_provider", help="--tools web: the search API (serper: any Serper-compatible endpoint, the "
                                "default; searxng: a SearXNG instance's JSON API). Else [tools.web] of --config."),
    web_base_url: Optional[str] = option(O, "web_base_url", help="--tools web: the search API's base URL (serper "
                                                                 "default https://google.serper.dev; searxng: required)."),
    web_api_key_env: Optional[str] = option(O, "web_api_key_env",
                                            help="--tools web: the environment variable holding the search API "
                                                 "key (serper default SERPER_API_KEY; searxng: none)."),
    limits: ModelLimits = GROUP,
    allow_empty: Optional[bool] = option(O, "allow_empty", "--allow-empty",
                                         help="Run on an input with no samples (otherwise an error)."),
    guided: Optional[bool] = option(O, "guided", "--guided", help="agent: tell it the short reference "
                                                                  "(trajectories for `kbvqa reference build`, seed 001 §3.2)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full summary as one JSON object (instead of "
                                                       "the short one)."),
) -> None:
    """Answer a benchmark with a registered pipeline (an MM-RAG preset or the search agent); predictions
    carry retrieval, evidence, trajectories and usage. Every setting is one AnswerOptions: the defaults,
    under [answer] of --config, under the flags; the manifest records it as used."""
    from kbvqa.pipelines.answer.run import prepare_answer, run_answer

    console = Console(stderr=True)
    try:
        opts = answer_options(**flags(O, ungrouped(locals())))
        prepared = prepare_answer(opts)
        for note in prepared.notes:
            console.print(note, markup=False)
        summary, rr = run_answer(prepared, opts, out, progress=console.is_terminal)
    except job_errors() as e:
        fail(e)
    doc = {"out": str(out), "retrieval_records": str(rr), "ok": summary.ok, "error": summary.error,
           "invalid": summary.invalid, "needs_model": summary.needs_model, "skipped": summary.skipped,
           "in_file": dict(summary.output_counts), "pipeline": opts.pipeline, "stages": prepared.job.stage_names,
           "usage": summary.usage.model_dump(), "seconds": round(summary.seconds, 3)}
    if opts.pipeline == "agent":
        doc["episodes"] = episode_summary(out)
    if as_json:
        emit_json(doc)
    else:
        for line in summary_lines(doc):
            typer.echo(line)
    end_job(summary.ok, {"error": summary.error, "invalid": summary.invalid}, skipped=summary.skipped, what="sample(s)",
            needs_model=summary.needs_model, reasons=journal_reasons(out) if summary.error or summary.invalid else None)


def episode_summary(out: Path) -> dict[str, Any]:
    """How the agent's episodes in the output ended (kbvqa.evaluate.agent.termination_counts), forced
    answers among them, and image-tag validity as the answers' provenance records it."""
    from kbvqa.evaluate.agent import termination_counts
    from kbvqa.runner import read_results

    preds = [p for p in read_results(out) if p.get("status") == "ok"] if out.is_file() else []
    tags: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for p in preds:
        prov = (p.get("meta") or {}).get("provenance") or {}
        tags["tags"] += int(prov.get("tags") or 0)
        tags["valid"] += int(prov.get("valid") or 0)
        tags["episodes with violations"] += bool(prov.get("violations"))
        kinds.update(str(v.get("kind")) for v in prov.get("violations") or [] if isinstance(v, dict))
    ending = termination_counts(preds)
    return {"n": len(preds), "terminations": {r["termination"]: r["episodes"] for r in ending["rows"]},
            "forced_answers": ending["forced_answers"],
            "no_answer": sum(r["no_answer"] for r in ending["rows"]),
            "tags": {"valid": tags["valid"], "total": tags["tags"],
                     "episodes_with_violations": tags["episodes with violations"], "violations": dict(kinds)}}


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The short terminal summary of an answer run (the full one is `--json`)."""
    from kbvqa.report.tables import prose, wrap_text

    this_run = {k: doc[k] for k in ("ok", "error", "invalid", "needs_model") if doc[k] or k == "ok"}
    lines = [f"answer --pipeline {doc['pipeline']}: {prose(this_run)} this run"
             + (f" ({doc['skipped']} already ok, kept)" if doc["skipped"] else "")
             + f"; {doc['out']} holds {prose(doc['in_file']) if doc['in_file'] else 'nothing'}"]
    ep = doc.get("episodes")
    if ep:
        t = ep["tags"]
        lines.append(f"episodes ok in the file: {ep['n']}, ended by {prose(ep['terminations'])}; forced answers "
                     f"{ep['forced_answers']}" + (f"; no answer {ep['no_answer']}" if ep["no_answer"] else ""))
        lines.append(f"image tags: {t['valid']} of {t['total']} valid"
                     + (f"; violations {prose(t['violations'])} in {t['episodes_with_violations']} episode(s)"
                        if t["violations"] else ""))
    u = doc["usage"]
    lines.append(f"model calls {u.get('calls', 0)}, tokens {u.get('prompt_tokens', 0)} in / "
                 f"{u.get('completion_tokens', 0)} out, {doc['seconds']:.2f} s; retrieval records "
                 f"{doc['retrieval_records']}; the full summary: --json")
    return [wrap_text(line) for line in lines]
