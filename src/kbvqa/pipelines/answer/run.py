"""One answer run from its settings: what `kbvqa answer` and `kbvqa eval` both run.

`AnswerSpec` holds `kbvqa answer`'s settings (one field per flag); `prepare_answer` builds the Job the
way every answer command must — preset settings checked, roles from --llm/--model/--config, the image
index and its encoder, the KB — and `run_answer` runs it and writes the Recall@K records beside the
predictions. One place, so the two commands cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

__all__ = ["AnswerSpec", "PreparedAnswer", "prepare_answer", "run_answer"]


@dataclass
class AnswerSpec:
    """`kbvqa answer`'s settings, one field per flag (`--out` aside: eval writes DIR/predictions.jsonl).
    The model-call limit flags (--timeout, --connect-timeout, --deadline, --structured-output,
    --max-retries) arrive as `limits`, the roles_from_flags keywords (kbvqa.cli.common.model_limits);
    the --web-* flags become AgentOptions.web (`web_options`)."""

    samples: Path
    kb: Path
    pipeline: str = "extractive"
    index: Path | None = None
    images: Path | None = None
    model_dir: Path | None = None
    reranker: str = "bm25"
    rerank_model_dir: Path | None = None
    text_index: Path | None = None
    k: int = 20
    articles: int = 5
    sections: int = 5
    alpha: float | None = None
    llm: str | None = None
    model: str | None = None
    config: Path | None = None
    api_key_env: str | None = None
    fmt: str | None = None
    concurrency: int = 4
    limit: int | None = None
    resume: bool = True
    tools: str | None = None
    cassette: Path | None = None
    protocol: str | None = None
    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    kb_images: Path | None = None
    blocked_domain: Sequence[str] = ()
    today: str | None = None
    guided: bool | None = None
    web_provider: str | None = None
    web_base_url: str | None = None
    web_api_key_env: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    allow_empty: bool = False  # an input with no samples is an error otherwise (kbvqa.data.formats.non_empty)

    def web_options(self) -> dict[str, Any] | None:
        """The web backend's settings for `--tools web` (`[tools.web]` of --config, the --web-* flags over
        it), None for any other backend; a --web-* flag without `--tools web` is an error, never ignored."""
        from kbvqa.tools.config import web_tool_options

        flags = {"provider": self.web_provider, "base_url": self.web_base_url, "api_key_env": self.web_api_key_env}
        if self.tools != "web":
            given = [f"--web-{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)} configure the agent's web backend: add --pipeline agent "
                                 f"--tools web (--tools is {self.tools or 'not set'})")
            return None
        return web_tool_options(self.config, **flags) or None


@dataclass
class PreparedAnswer:
    """An answer Job built and ready to run, the roles it uses and the notes for stderr."""

    job: Any
    roles: dict[str, Any]
    notes: list[str]


def prepare_answer(spec: AnswerSpec) -> PreparedAnswer:
    """Build the answer Job as `kbvqa answer` does: preset settings (a flag the preset does not take is
    an error), roles from --llm/--model/--config, the image index and its encoder, the KB."""
    from kbvqa.kb.store import open_kb
    from kbvqa.kb.text_index import TextIndex
    from kbvqa.models.config import roles_from_flags
    from kbvqa.pipelines.answer import build_answer_job, pipeline_roles, pipeline_settings
    from kbvqa.pipelines.index import load_image_index

    settings = pipeline_settings(
        spec.pipeline, {"k": spec.k, "articles": spec.articles, "sections": spec.sections, "alpha": spec.alpha},
        {"tools": spec.tools, "cassette": spec.cassette, "protocol": spec.protocol, "max_turns": spec.max_turns,
         "max_tokens": spec.max_tokens, "max_cost": spec.max_cost, "max_seconds": spec.max_seconds,
         "kb_images": spec.kb_images, "blocked_domains": tuple(spec.blocked_domain), "today": spec.today,
         "guided": spec.guided, "web": spec.web_options()})
    roles = roles_from_flags(spec.config, llm=spec.llm, model=spec.model, api_key_env=spec.api_key_env,
                             fill=pipeline_roles(spec.pipeline, spec.reranker), concurrency=spec.concurrency,
                             **spec.limits)
    idx, enc = load_image_index(spec.index, spec.model_dir) if spec.index is not None else (None, None)
    job = build_answer_job(spec.pipeline, kb=open_kb(spec.kb), roles=roles, index=idx, encoder=enc,
                           # absolute in the driver: a Ray worker never reads a path against its own folder
                           image_root=Path(spec.images or spec.samples.parent).resolve(), reranker=spec.reranker,
                           text_index=TextIndex.load(spec.text_index) if spec.text_index is not None else None,
                           rerank_model_dir=spec.rerank_model_dir, **settings)
    notes = []
    if spec.pipeline != "extractive" and job.stage_names[-1] == "answer-extractive":
        notes.append("note: no `answerer` role configured (--llm/--model or --config), so the embedded "
                     "extractive answerer answers; predictions name it as their producer")
    return PreparedAnswer(job, dict(roles), notes)


def run_answer(prepared: PreparedAnswer, spec: AnswerSpec, out: Path, *, progress: bool = False) -> tuple[Any, Path]:
    """Run the answer Job over the samples into `out` (resume, manifest) and write its Recall@K
    records to `<out stem>.retrieval.jsonl`, as `kbvqa answer` does. Returns (RunSummary, records)."""
    from kbvqa.data.formats import SampleRecords
    from kbvqa.pipelines.answer import write_retrieval_records

    summary = prepared.job.run(SampleRecords(spec.samples, spec.fmt, allow_empty=spec.allow_empty), out=out,
                               concurrency=spec.concurrency, limit=spec.limit, progress=progress,
                               resume=spec.resume,
                               # absolute: the viewer finds the references beside an episode from anywhere
                               run_config={"index": str(spec.index) if spec.index else None,
                                           "samples": str(Path(spec.samples).resolve())})
    return summary, write_retrieval_records(out, out.with_suffix(".retrieval.jsonl"))
