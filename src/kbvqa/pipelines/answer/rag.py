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

from pathlib import Path
from typing import Any, Mapping

from kbvqa.data.jsonl import write_jsonl
from kbvqa.pipelines import PIPELINES
from kbvqa.pipelines.answer.options import AnswerOptions
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context, Stage


def _answer_stage(opts: AnswerOptions, roles: Mapping[str, Any]) -> Stage:
    from kbvqa.stages.answer.extractive import ExtractiveAnswer
    from kbvqa.stages.answer.generate import GenerateAnswer

    use_llm = opts.answerer == "llm" or (opts.answerer == "auto" and opts.pipeline != "extractive"
                                          and "answerer" in roles)
    if use_llm:
        if "answerer" not in roles:
            raise ValueError("answerer='llm' needs the `answerer` model role (--llm URL --model NAME)")
        return GenerateAnswer(opts.generate)
    return ExtractiveAnswer(opts.extractive)


def _rag_stages(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    """The preset's stages, each with its config from `opts` as it is."""
    from kbvqa.stages.answer.identify import IdentifyEntities
    from kbvqa.stages.answer.rerank import SectionRerank
    from kbvqa.stages.answer.retrieve import ImageRetrieve

    stages: list[Stage] = []
    if has_index:
        stages.append(ImageRetrieve(opts.retrieve))
    elif opts.pipeline != "iba":
        raise ValueError(f"pipeline {opts.pipeline!r} retrieves by image: give an image index")
    if opts.pipeline == "iba":
        if "vision" not in roles:
            raise ValueError("pipeline 'iba' needs the `vision` model role (it names the entity in the image)")
        stages.append(IdentifyEntities(opts.identify))
    stages.append(SectionRerank(opts.rerank))
    stages.append(_answer_stage(opts, roles))
    return stages


#: the option groups (kbvqa.pipelines.answer.options.GROUPS) the RAG presets take
_RAG_OPTIONS = ("retrieve", "identify", "rerank", "generate", "extractive", "answerer")


@PIPELINES.register("echosight", kind="answer", roles=("answerer",), options=_RAG_OPTIONS,
                    help="image retrieval, section rerank fused with the visual score, answerer role")
def echosight(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    return _rag_stages(opts, roles, has_index)


@PIPELINES.register("iba", kind="answer", roles=("answerer", "vision"), options=_RAG_OPTIONS,
                    defaults={"rerank.alpha": 0.3},
                    help="the vision role names the entity, the KB resolves it, rerank, answer")
def iba(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    return _rag_stages(opts, roles, has_index)


@PIPELINES.register("extractive", kind="answer", roles=(), options=_RAG_OPTIONS,
                    help="image retrieval, BM25 rerank, extractive answer (no model)")
def extractive(opts: AnswerOptions, roles: Mapping[str, Any], has_index: bool) -> list[Stage]:
    return _rag_stages(opts, roles, has_index)


def build_answer_job(pipeline: str | None = None, *, kb: Any = None, roles: Mapping[str, Any] | None = None,
                     index: Any = None, encoder: Any = None, image_root: Path | None = None, reranker: Any = None,
                     text_index: Any = None, rerank_role: str = "checker", options: AnswerOptions | None = None,
                     **settings: Any) -> Job:
    """The Job for an answer preset: its stages, and a context holding the KB, the roles, the image
    index and encoder, the image root and the reranker. `options` is the run's AnswerOptions, handed
    down as it is and recorded in the manifest; a library caller may give `settings` (AnswerOptions
    flag names: k=..., max_turns=...) instead, built by the same AnswerOptions.build. `reranker` may be
    a Reranker object (a name goes into the options)."""
    from kbvqa.models.rerank import Reranker, get_reranker

    if options is None:
        named = {"reranker": reranker} if isinstance(reranker, str) else {}
        options = AnswerOptions.build(pipeline=pipeline, **named, **settings)
        options.check_applies()
    elif settings or (pipeline is not None and pipeline != options.pipeline):
        raise ValueError("give either options or settings, not both")
    opts = options
    entry = PIPELINES.entry(opts.pipeline)
    if entry.info.get("job"):  # a pipeline that builds its own Job (the agent, direct)
        return entry.obj(opts, kb=kb, roles=roles, index=index, encoder=encoder, image_root=image_root)
    roles = dict(roles or {})
    if index is not None:
        if encoder is None:
            raise ValueError("an image index needs its encoder")
        if index.encoder != encoder.name:
            raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
    stages = PIPELINES.get(opts.pipeline)(opts, roles, index is not None)
    rr = reranker if isinstance(reranker, Reranker) else get_reranker(
        opts.reranker, model_dir=opts.rerank_model_dir, text_index=text_index, role=rerank_role)
    resources: dict[str, Any] = {"reranker": rr, "image_root": image_root}
    if index is not None:
        resources.update(image_index=index, image_encoder=encoder)
    if text_index is not None:
        resources["text_index"] = text_index
    return Job(stages, Context(kb=kb, roles=roles, resources=resources), description="answer",
               run_config={"pipeline": opts.pipeline, "reranker": rr.name, "options": opts.used()})


def answer_pipelines() -> list[str]:
    return PIPELINES.names(kind="answer")


def pipeline_roles(pipeline: str, reranker: str = "bm25") -> tuple[str, ...]:
    """The model roles `--llm URL --model NAME` fills for a preset (each entry declares its own)."""
    roles = tuple(PIPELINES.entry(pipeline).info.get("roles", ()))
    return roles + (("checker",) if reranker == "llm" and "checker" not in roles else ())


def write_retrieval_records(predictions: Path, out: Path) -> Path:
    """One Recall@K record per (prediction, retrieval stage); failed lines become empty (miss) records."""
    from kbvqa.runner import read_results
    from kbvqa.stages.answer.retrieve import retrieval_records

    out = Path(out)
    write_jsonl(out, (r for rec in read_results(predictions) for r in retrieval_records(rec)))
    return out
