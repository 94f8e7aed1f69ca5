"""Reference MM-RAG pipelines: compose retrieve -> rerank -> answer from the stages.

Presets:

- `echosight` (EchoSight-like): image-to-image retrieval over KB images, section rerank fused with
  the visual score (alpha 0.5, as EchoSight fuses its Q-Former score), answer with the `answerer`
  role (the extractive answerer when no answerer is configured; the prediction's producer says so).
- `iba` (identify-then-rank, IBA-like): the `vision` role names candidate entities, they are resolved
  in the KB (title / FTS), image retrieval results (when an index is given) follow them, sections
  are reranked and the answer generated.
- `extractive`: image retrieval, BM25 section rerank, embedded extractive answerer. No model at all,
  so the demo and tests run offline.

Each prediction line carries `retrieved`, `meta.retrieval` (every retrieval stage's ranking, e.g.
initial and post-rerank), `evidence_used` and `usage` (all model calls of the record summed).
`build_answer_job(name, ...)` gives the preset's Job (stages + context); the presets are registered
in `kbvqa.pipelines.PIPELINES`.

Also here: turning predictions into Recall@K retrieval records. (The augmentation study, Recall@K per
variant, is kbvqa.evaluate.augmentation; tables are written by kbvqa.report.tables.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from kbvqa.data.jsonl import write_jsonl
from kbvqa.pipelines import PIPELINES
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context, Stage

Answerer = Literal["auto", "llm", "extractive"]


@dataclass
class AnswerOptions:
    """Settings shared by the answer presets (the CLI's --k, --articles, --sections, ...)."""

    k: int = 20  # articles kept by image retrieval
    articles: int = 5  # retrieved articles whose sections are reranked
    sections: int = 5  # sections given to the answerer
    alpha: float | None = None  # weight of the retrieval score in the fused order (None: the preset's)
    answerer: Answerer = "auto"
    identify_candidates: int = 3


def _answer_stage(pipeline: str, opts: AnswerOptions, roles: Mapping[str, Any]) -> Stage:
    from kbvqa.stages.answer.extractive import ExtractiveAnswer, ExtractiveConfig
    from kbvqa.stages.answer.generate import GenerateAnswer, GenerateConfig

    use_llm = opts.answerer == "llm" or (opts.answerer == "auto" and pipeline != "extractive" and "answerer" in roles)
    if use_llm:
        if "answerer" not in roles:
            raise ValueError("answerer='llm' needs the `answerer` model role (--llm URL --model NAME)")
        return GenerateAnswer(GenerateConfig(sections=opts.sections))
    return ExtractiveAnswer(ExtractiveConfig(top_articles=2))


def _rag_stages(pipeline: str, opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool,
                default_alpha: float) -> list[Stage]:
    from kbvqa.stages.answer.identify import IdentifyConfig, IdentifyEntities
    from kbvqa.stages.answer.rerank import RerankConfig, SectionRerank
    from kbvqa.stages.answer.retrieve import ImageRetrieve, RetrieveConfig

    stages: list[Stage] = []
    if has_index:
        stages.append(ImageRetrieve(RetrieveConfig(k=opts.k)))
    elif pipeline != "iba":
        raise ValueError(f"pipeline {pipeline!r} retrieves by image: give an image index")
    if pipeline == "iba":
        if "vision" not in roles:
            raise ValueError("pipeline 'iba' needs the `vision` model role (it names the entity in the image)")
        stages.append(IdentifyEntities(IdentifyConfig(candidates=opts.identify_candidates)))
    stages.append(SectionRerank(RerankConfig(articles=opts.articles, sections=opts.sections,
                                             alpha=default_alpha if opts.alpha is None else opts.alpha)))
    stages.append(_answer_stage(pipeline, opts, roles))
    return stages


_RAG_OPTIONS = ("k", "articles", "sections", "alpha", "answerer", "identify_candidates")


@PIPELINES.register("echosight", kind="answer", roles=("answerer",), options=_RAG_OPTIONS,
                    help="image retrieval, section rerank fused with the visual score, answerer role")
def echosight(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    return _rag_stages("echosight", opts, roles, has_index, 0.5)


@PIPELINES.register("iba", kind="answer", roles=("answerer", "vision"), options=_RAG_OPTIONS, help="the vision role names the entity, the KB resolves it, rerank, answer")
def iba(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    return _rag_stages("iba", opts, roles, has_index, 0.3)


@PIPELINES.register("extractive", kind="answer", roles=(), options=_RAG_OPTIONS, help="image retrieval, BM25 rerank, extractive answer (no model)")
def extractive(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    return _rag_stages("extractive", opts, roles, has_index, 0.5)


def build_answer_job(pipeline: str, *, kb: Any = None, roles: Mapping[str, Any] | None = None, index: Any = None,
                     encoder: Any = None, image_root: Path | None = None, reranker: Any = "bm25",
                     text_index: Any = None, rerank_model_dir: Path | None = None, rerank_role: str = "checker",
                     options: AnswerOptions | None = None, **settings: Any) -> Job:
    """The Job for an answer preset: its stages, and a context holding the KB, the roles, the image
    index and encoder, the image root and the reranker (a registered name or a Reranker).
    `settings` are AnswerOptions fields (k=..., sections=...)."""
    from kbvqa.models.rerank import Reranker, get_reranker

    entry = PIPELINES.entry(pipeline)
    if entry.info.get("kind") != "answer":
        raise ValueError(f"{pipeline!r} is not an answer pipeline (choose from {', '.join(answer_pipelines())})")
    if entry.info.get("job"):  # a pipeline that builds its own Job (the agent)
        return entry.obj(kb=kb, roles=roles, index=index, encoder=encoder, image_root=image_root, **settings)
    opts = options or AnswerOptions(**settings)
    roles = dict(roles or {})
    if index is not None:
        if encoder is None:
            raise ValueError("an image index needs its encoder")
        if index.encoder != encoder.name:
            raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
    stages = PIPELINES.get(pipeline)(opts, roles, index is not None)
    rr = reranker if isinstance(reranker, Reranker) else get_reranker(
        reranker, model_dir=rerank_model_dir, text_index=text_index, role=rerank_role)
    resources: dict[str, Any] = {"reranker": rr, "image_root": image_root}
    if index is not None:
        resources.update(image_index=index, image_encoder=encoder)
    if text_index is not None:
        resources["text_index"] = text_index
    return Job(stages, Context(kb=kb, roles=roles, resources=resources), description="answer",
               run_config={"pipeline": pipeline, "reranker": rr.name})


def answer_pipelines() -> list[str]:
    return PIPELINES.names(kind="answer")


def pipeline_roles(pipeline: str, reranker: str = "bm25") -> tuple[str, ...]:
    """The model roles `--llm URL --model NAME` fills for a preset (each entry declares its own)."""
    roles = tuple(PIPELINES.entry(pipeline).info.get("roles", ()))
    return roles + (("checker",) if reranker == "llm" and "checker" not in roles else ())


def pipeline_settings(pipeline: str, settings: Mapping[str, Any], explicit: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a preset takes, from everything the command line offers. `settings` have
    defaults and are passed when the preset takes them; `explicit` (flags with no default) were set
    by the user, so one the preset does not take is an error rather than silently ignored."""
    takes = set(PIPELINES.entry(pipeline).info.get("options", ()))
    stray = [k for k, v in explicit.items() if v not in (None, ()) and k not in takes]
    if stray:
        raise ValueError(f"--pipeline {pipeline} does not take {', '.join('--' + k.replace('_', '-') for k in stray)}")
    merged = {**settings, **{k: v for k, v in explicit.items() if v not in (None, ())}}
    return {k: v for k, v in merged.items() if k in takes}


def write_retrieval_records(predictions: Path, out: Path) -> Path:
    """One Recall@K record per (prediction, retrieval stage); failed lines become empty (miss) records."""
    from kbvqa.runner import read_results
    from kbvqa.stages.answer.retrieve import retrieval_records

    out = Path(out)
    write_jsonl(out, (r for rec in read_results(predictions) for r in retrieval_records(rec)))
    return out
