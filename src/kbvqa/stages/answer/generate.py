"""The LLM answerer: answer from retrieved KB sections with the configured `answerer` role.

Retrieval picks the article (image retrieval, or the oracle entity when none ran). When a rerank
stage ran, its `sections` are the evidence; otherwise the article's sections are ranked by BM25
against the question when the KB store offers `search_in`. The top sections go to the model with
the image, and the prediction carries the retrieval trail and the usage of every model call.
The reply must be JSON {"answer": ...} with a real answer in it: anything else (a missing or blank
answer, an echo of the prompt's own example `{"answer": "..."}`) ends the record `invalid`, and an API
failure ends it `error` (never an empty answer).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from kbvqa.data.schema import Evidence, Prediction, Sample
from kbvqa.models.prompts.answer import SHORT_ANSWER
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import call_model
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.answer.retrieve import record_usage, retrieval_trail


class ShortAnswer(Reply):
    """`answer` is required and non-blank; a JSON number (`{"answer": 1889}`) is taken as its text,
    since the prompt asks for "a number with no unit" and the value is unambiguous."""

    answer: NonBlank

    @field_validator("answer", mode="before")
    @classmethod
    def _number_as_text(cls, v: object) -> object:
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


class GenerateConfig(StageConfig):
    sections: int = Field(3, ge=1)  # evidence sections sent to the model
    max_section_chars: int = Field(2000, ge=1)
    send_image: bool = True


@register_stage
class GenerateAnswer(Stage):
    name = "answer-llm"
    version = "1"
    config_model = GenerateConfig
    prompts = (SHORT_ANSWER,)

    def __init__(self, config: GenerateConfig | None = None):
        super().__init__(config)

    def _evidence(self, sample: Sample, urls: list[str], ctx: Context,
                  sections: list[dict[str, Any]] | None = None) -> list[Evidence]:
        if sections:  # a rerank stage already chose them
            return [Evidence(text=c.get("text") or "", section_id=str(c.get("section_index")),
                             section_title=c.get("section_title"), url=c.get("url"))
                    for c in sections[: self.config.sections]]
        if ctx.kb is None or not urls:
            return list(sample.evidence)
        url = urls[0]
        if url not in ctx.kb:  # e.g. an oracle entity the KB lacks: the model answers without evidence
            return []
        if hasattr(ctx.kb, "search_in"):
            hits = ctx.kb.search_in(url, sample.question, k=self.config.sections)
            if hits:
                return [Evidence(text=h.text, section_id=str(h.section_index), section_title=h.section_title,
                                 url=h.url) for h in hits]
        article = ctx.kb.get(url)
        if article is None:
            return []
        return [Evidence(text=s.text, section_id=str(s.index), section_title=s.title, url=article.url)
                for s in article.sections[: self.config.sections]]

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sample = Sample.model_validate({k: v for k, v in record.items() if k in Sample.model_fields})
        urls = list(record.get("retrieved") or [])
        setting = "retrieved"
        if not urls and sample.entity and sample.entity.url:
            urls, setting = [sample.entity.url], "oracle-entity"
        evidence = self._evidence(sample, urls, ctx, record.get("sections"))
        if record.get("sections"):
            setting = "reranked-sections"
        passages = "\n\n".join(f"[{i + 1}] {e.section_title or ''}: {e.text[: self.config.max_section_chars]}"
                               for i, e in enumerate(evidence)) or "(no evidence retrieved)"
        images = []
        if self.config.send_image and sample.images:
            images = [ctx.image_path(sample.images[0])]
        messages = SHORT_ANSWER.messages(images, passages_raw=passages, question_raw=sample.question)
        reply, result = await call_model(ctx.role("answerer"), messages, ShortAnswer, ctx=ctx, who="answerer",
                                         prompt_version=SHORT_ANSWER.id)
        answer = reply.answer
        meta: dict[str, Any] = {"setting": setting, "question": sample.question}
        trail = retrieval_trail(record)
        if trail:
            meta["retrieval"] = trail
        pred = Prediction(sample_id=sample.id, answer=answer, retrieved=list(record.get("retrieved") or []),
                          evidence_used=evidence, usage=record_usage(record).add(result.usage),
                          producer=result.provenance, meta=meta)
        return pred.record()
