"""Step 2 of the funnel, quality rubric filtering (seed 001 §3.1 step 2): a VLM aesthetic filter, the
interleaved-suitability filter (a complete answer must cover at least three substantive aspects), the
five-axis rubric (question clarity, image quality, image–text alignment, interleaved fit, answer
objectivity; 1–5 each, strict JSON), per-tag top-K by rubric total, and a check that the comments hold
a plausible answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field, StrictBool, StrictInt

from kbvqa.models.prompts.curate import AESTHETIC, INTERLEAVED_FIT, PLAUSIBLE_ANSWER, RUBRIC
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.pipelines.curate.common import (AskStage, CorpusStage, CurateStageConfig, ModelStageConfig, Verdict,
                                           comment_list, post_fields, ranked_comments, stage_payload)
from kbvqa.pipelines.curate.corpus import top_k_by_group
from kbvqa.runner.stage import Context, Invalid
from kbvqa.stages import register_stage
from kbvqa.stages.ask import Ask

Score = Annotated[StrictInt, Field(ge=1, le=5)]
RUBRIC_AXES = ("question_clarity", "image_quality", "image_text_alignment", "interleaved_fit", "answer_objectivity")


class ScoreReply(Reply):
    score: Score
    reason: NonBlank


class AspectsReply(Reply):
    aspects: list[NonBlank] = Field(max_length=12)
    reason: NonBlank


class RubricReply(Reply):
    question_clarity: Score
    image_quality: Score
    image_text_alignment: Score
    interleaved_fit: Score
    answer_objectivity: Score
    reason: NonBlank


class PlausibleReply(Reply):
    plausible: StrictBool
    comment: StrictInt | None
    reason: NonBlank


class AestheticConfig(ModelStageConfig):
    min_score: int = Field(3, ge=1, le=5)


@register_stage
class Aesthetic(AskStage):
    """A VLM rates the images 1–5 as a benchmark picture; below `min_score` the post is dropped."""

    name = "curate-aesthetic"
    version = "1"
    key = "aesthetic"
    config_model = AestheticConfig
    asks = Ask(AESTHETIC, ScoreReply, "aesthetic filter")

    def values(self, record: dict[str, Any]) -> dict[str, Any]:
        return {}  # the pictures alone

    def decide(self, reply: ScoreReply, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:
        low = self.config.min_score  # type: ignore[attr-defined]
        payload = {"score": reply.score, "reason": reply.reason, "judge": judge}
        if reply.score < low:
            return Verdict(payload, "low_aesthetic", f"score {reply.score} < {low}: {reply.reason}")
        return Verdict(payload)


class InterleavedConfig(ModelStageConfig):
    role: str = "checker"
    max_images: int = Field(0, ge=0, le=16)
    min_aspects: int = Field(3, ge=1)
    comments: int = Field(10, ge=0)


@register_stage
class InterleavedFit(AskStage):
    """Interleaved suitability: a complete answer must cover at least `min_aspects` substantive aspects."""

    name = "curate-interleaved"
    version = "1"
    key = "interleaved"
    config_model = InterleavedConfig
    asks = Ask(INTERLEAVED_FIT, AspectsReply, "interleaved-suitability filter")

    def values(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"comments": comment_list(record, self.config.comments), **post_fields(record)}  # type: ignore[attr-defined]

    def decide(self, reply: AspectsReply, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:
        least = self.config.min_aspects  # type: ignore[attr-defined]
        aspects = list(dict.fromkeys(a.strip() for a in reply.aspects))
        payload = {"aspects": aspects, "reason": reply.reason, "judge": judge}
        if len(aspects) < least:
            return Verdict(payload, "too_few_aspects", f"{len(aspects)} aspect(s) < {least}: {reply.reason}")
        return Verdict(payload)


class RubricConfig(ModelStageConfig):
    min_axis: int = Field(3, ge=1, le=5)  # every axis at least this


@register_stage
class Rubric(AskStage):
    """The five-axis rubric; a post with any axis under `min_axis` is dropped, the total ranks the rest."""

    name = "curate-rubric"
    version = "1"
    key = "rubric"
    config_model = RubricConfig
    asks = Ask(RUBRIC, RubricReply, "five-axis rubric")

    def decide(self, reply: RubricReply, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:
        least = self.config.min_axis  # type: ignore[attr-defined]
        scores = {a: getattr(reply, a) for a in RUBRIC_AXES}
        payload = {"scores": scores, "total": sum(scores.values()), "reason": reply.reason, "judge": judge}
        low = [a for a, s in scores.items() if s < least]
        if low:
            return Verdict(payload, "low_rubric_score", ", ".join(f"{a} {scores[a]}" for a in low) + f" < {least}")
        return Verdict(payload)


class TopKConfig(CurateStageConfig):
    k: int = Field(50, ge=1)  # posts kept per tag


def primary_tag(record: dict[str, Any]) -> str:
    tags = [t.strip().lower().lstrip("#") for t in record.get("tags") or [] if t.strip()]
    return tags[0] if tags else "(untagged)"


@register_stage
class TopK(CorpusStage):
    """Per-tag top-K: posts grouped by their first tag, ranked by rubric total (input order breaks ties)."""

    name = "curate-topk"
    version = "1"
    key = "topk"
    config_model = TopKConfig

    def decide(self, records: Iterable[dict[str, Any]]) -> dict[str, Verdict]:
        k = self.config.k  # type: ignore[attr-defined]
        rows = [(r["id"], primary_tag(r), float(stage_payload(r, "rubric").get("total") or 0)) for r in records]
        ranks = top_k_by_group(rows, k)
        out = {}
        for rid, tag, _ in rows:
            rank, size = ranks[rid]
            payload = {"tag": tag, "rank": rank, "of": size, "k": k}
            out[rid] = Verdict(payload) if rank <= k else Verdict(
                payload, "below_tag_top_k", f"rank {rank} of {size} in tag {tag!r} (k = {k})")
        return out


class PlausibilityConfig(ModelStageConfig):
    role: str = "checker"
    max_images: int = Field(0, ge=0, le=16)
    comments: int = Field(10, ge=1)


@register_stage
class Plausibility(AskStage):
    """A model checks that a comment gives a plausible answer (the short reference is distilled from it)."""

    name = "curate-plausibility"
    version = "1"
    key = "plausibility"
    config_model = PlausibilityConfig
    asks = Ask(PLAUSIBLE_ANSWER, PlausibleReply, "answer plausibility check")

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        c: PlausibilityConfig = self.config  # type: ignore[assignment]
        comments = comment_list(record, c.comments)
        if not comments:
            return Verdict({"plausible": False}, "no_comments", "the post has no comments to take an answer from")
        def names_a_comment(r: PlausibleReply) -> None:
            if r.plausible and (r.comment is None or not 1 <= r.comment <= len(comments)):
                raise Invalid(f"answer plausibility check ({record['id']}): plausible but comment {r.comment!r} is "
                              f"not one of 1..{len(comments)}")

        reply, prov = await self.ask(record, ctx, comments=comments, check=names_a_comment, **post_fields(record))
        payload: dict[str, Any] = {"plausible": reply.plausible, "reason": reply.reason, "judge": prov}
        if not reply.plausible:
            return Verdict(payload, "no_plausible_answer", reply.reason)
        chosen = ranked_comments(record)[reply.comment - 1]
        payload.update(comment=reply.comment, comment_text=chosen["text"].strip(), comment_likes=chosen.get("likes", 0))
        return Verdict(payload)
