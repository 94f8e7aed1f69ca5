"""The single-pass answerer: the `answerer` role answers from the query image(s) and the question,
with no retrieval and no tools (seed 001's "single-pass" setting, Table 2 / Fig. 2).

One call per sample. The reply is plain text, the whole of it the answer (reasoning blocks removed by
the client), with `short_answer` derived the way the agent's is, so `score judge` treats direct and
agent predictions alike whichever text it grades. A failed call ends the record `error`; an empty
reply, or one cut off at max_tokens, ends it `invalid` (as the agent refuses a truncated answer) —
never an answer.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kbvqa.data.schema import Prediction, Sample
from kbvqa.models.prompts.direct import DIRECT_ANSWER
from kbvqa.models.result import ModelCallError, rejected
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.agent.tags import short_answer


class DirectConfig(StageConfig):
    role: str = "answerer"
    max_images: int | None = Field(None, ge=0)  # query images sent (None: all of the sample's)


@register_stage
class DirectAnswer(Stage):
    name = "answer-direct"
    version = "1"
    config_model = DirectConfig
    prompts = (DIRECT_ANSWER,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sample = Sample.model_validate({k: v for k, v in record.items() if k in Sample.model_fields})
        refs = sample.images if self.config.max_images is None else sample.images[: self.config.max_images]
        images = [ctx.image_path(r) for r in refs]  # sent as data URLs by the prompt's user message
        res = await ctx.role(self.config.role).chat(DIRECT_ANSWER.messages(images, question_raw=sample.question),
                                                    schema=None, prompt_version=DIRECT_ANSWER.id)
        ctx.add_usage(res.usage)
        if res.status == "error":
            raise ModelCallError(f"answerer call failed: {res.reason}")
        text = (res.text or "").strip() if res.status == "ok" else ""
        if not text:
            raise rejected(res, f"answerer reply unusable: {res.reason or 'empty reply'}")
        if res.truncated:
            raise rejected(res, "answerer reply cut off at max_tokens (finish_reason=length): not a whole answer")
        pred = Prediction(sample_id=sample.id, answer=text, short_answer=short_answer(text), usage=res.usage,
                          producer=res.provenance,
                          meta={"setting": "direct", "question": sample.question, "images_sent": len(images)})
        return pred.record()
