"""Step 1 of the funnel, the model half of type cleaning (seed 001 §3.1 step 1): is the post a VQA
candidate at all (a VLM), the vision-necessity gate (a text-only model that can answer from the words
alone drops the post) and image–text consistency (a VLM).

Each check is one strict-JSON call; a post is dropped only on a valid verdict that says so. Offline
(no model in the stage's role) every post that reaches the first of them stops there with a
`NeedsModel` reason, which `--resume` picks up once a model is configured.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictBool

from kbvqa.models.prompts.curate import IMAGE_TEXT_CONSISTENCY, TEXT_ONLY_ANSWER, VQA_CANDIDATE
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.pipelines.curate.common import AskStage, ModelStageConfig, Verdict, YesNoStage
from kbvqa.stages import register_stage
from kbvqa.stages.ask import Ask


class CandidateReply(Reply):
    candidate: StrictBool
    reason: NonBlank


class TextOnlyReply(Reply):
    answerable: StrictBool
    answer: NonBlank | None


class ConsistencyReply(Reply):
    consistent: StrictBool
    reason: NonBlank


@register_stage
class VqaCandidate(YesNoStage):
    """A VLM decides whether the post asks something about what its images show."""

    name = "curate-vqa-candidate"
    version = "1"
    key = "candidate"
    asks = Ask(VQA_CANDIDATE, CandidateReply, "VQA-candidate check")
    answer_field, drop_reason = "candidate", "not_vqa_candidate"


class TextOnlyConfig(ModelStageConfig):
    role: str = "answerer"
    max_images: int = Field(0, ge=0, le=0)  # the point of the gate: the model never sees the images


@register_stage
class TextOnlyGate(AskStage):
    """The vision-necessity gate: a text-only model reads the post without its images; when it can
    answer, the picture is not needed and the post is dropped (its answer is kept as the evidence)."""

    name = "curate-text-only"
    version = "1"
    key = "text_only"
    config_model = TextOnlyConfig
    asks = Ask(TEXT_ONLY_ANSWER, TextOnlyReply, "text-only answerability gate", images=False)

    def decide(self, reply: TextOnlyReply, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:
        payload = {"answerable": reply.answerable, "answer": reply.answer, "judge": judge}
        if reply.answerable:
            return Verdict(payload, "text_only_answerable",
                           f"answered without the images: {reply.answer!r}" if reply.answer else
                           "the text-only model says the words alone answer it")
        return Verdict(payload)


@register_stage
class Consistency(YesNoStage):
    """A VLM checks that the images show what the text talks about."""

    name = "curate-consistency"
    version = "1"
    key = "consistency"
    asks = Ask(IMAGE_TEXT_CONSISTENCY, ConsistencyReply, "image-text consistency check")
    answer_field, drop_reason = "consistent", "image_text_inconsistent"
