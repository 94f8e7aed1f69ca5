"""Stage 3 — score every harvested image against the query image; keep the top 10 (seed 001 C.1).

One two-image VLM call per candidate (the query image first, then the candidate): visual relevance,
information content, clarity, answer substantiation and necessity (1-5, each with a reason) plus an
overall score. Both pools are merged (page images first, in URL rank order, then the reverse-search
pool), stable-sorted by overall score, and the first 10 kept with their pool recorded, so the two
paths stay distinguishable downstream.

A candidate whose file no longer decodes is a counted drop (`unloadable`), never scored. A failed
or unusable verdict for any candidate fails the item (`error` / `invalid`), because ranking the
rest without it would silently change the top 10; the verdicts that did arrive are cached by
(query sha256, candidate sha256, question, answer, prompt hash, model), so a resumed item only asks
for the missing ones.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.data.images import BadImage, open_image
from kbvqa.models.prompts.reference import CANDIDATE_SCORE
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import ReferenceStageConfig
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages import register_stage
from kbvqa.stages.ask import ask, gather_all, needs_model

DIMENSIONS = ("visual_relevance", "information_content", "clarity", "answer_substantiation", "necessity")
Score = Annotated[int, Field(ge=1, le=5)]


class DimensionScore(BaseModel):
    model_config = ConfigDict(extra="forbid")
    score: Score
    reason: str


class CandidateReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    visual_relevance: DimensionScore
    information_content: DimensionScore
    clarity: DimensionScore
    answer_substantiation: DimensionScore
    necessity: DimensionScore
    overall: Score


class CandidateConfig(ReferenceStageConfig):
    role: str = "vision"
    top_k: int = Field(10, ge=1)


def loadable(path: Any) -> bool:
    """Whether the guarded decoder still reads the file (it may have been removed or damaged)."""
    try:
        open_image(path, draft=(64, 64))
        return True
    except (BadImage, OSError):
        return False


def query_image(record: dict[str, Any], what: str) -> str:
    q = record.get("query_image")
    if not q:
        raise ValueError(f"{what}: sample {record['id']!r} has no query image, and the two-image calls need one")
    return q


async def score_images(ctx: Context, role: str, record: dict[str, Any], images: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each image with its five dimension scores, overall score and scorer: one two-image call per
    image (the query image first); any failed or unusable verdict fails the item (`gather_all`)."""
    if not images:
        return []
    query = query_image(record, "candidate scoring")
    cache = ctx.resource("verdicts", None)
    replies = await gather_all((ask(
        ctx, role, CANDIDATE_SCORE, CandidateReply, what=f"candidate scoring ({x['sha256'][:12]})",
        images=[query, ctx.resource("image_store").path(x["path"])], cache=cache,
        cache_parts={"kind": "candidate", "query": record.get("query_sha256"), "candidate": x["sha256"],
                     "question": record.get("question", ""), "answer": record.get("answer", "")},
        question=record.get("question", ""), answer=record.get("answer", "")) for x in images),
        "candidate scores")
    scored = []
    for x, (reply, prov) in zip(images, replies):
        scores = {d: getattr(reply, d).model_dump() for d in DIMENSIONS}
        scored.append({**x, "scores": scores, "overall": reply.overall, "scorer": prov})
    return scored


@register_stage
class CandidateScoring(Stage):
    """Reads `harvest.candidates`; adds `candidates` {kept (top-k, scored, ranked), scorer}. Resources:
    `image_store`; `verdicts` (a VerdictCache, optional)."""

    name = "reference-candidates"
    version = "1"
    config_model = CandidateConfig
    prompts = (CANDIDATE_SCORE,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: CandidateConfig = self.config  # type: ignore[assignment]
        store = ctx.resource("image_store")
        pool = (record.get("harvest") or {}).get("candidates") or []
        if pool and c.role not in ctx.roles:
            raise needs_model("candidate-image scoring (a two-image VLM call)", c.role)
        ok = await asyncio.gather(*(asyncio.to_thread(loadable, store.path(x["path"])) for x in pool))
        live = [x for x, good in zip(pool, ok) if good]
        scored = await score_images(ctx, c.role, record, live)
        ranked = sorted(scored, key=lambda s: -s["overall"])  # stable: ties keep pool order
        kept = [{**s, "rank": i} for i, s in enumerate(ranked[: c.top_k], 1)]
        drops = Counter(unloadable=len(pool) - len(live), below_top_k=max(0, len(ranked) - c.top_k))
        payload = {"kept": kept, "below_top_k": [s["sha256"] for s in ranked[c.top_k:]]}
        tally = counts(candidates=len(pool), scored=len(scored), kept=len(kept),
                       kept_by_pool=Counter(k["pool"] for k in kept), dropped=drops)
        return stage_record(record, "candidates", payload, tally)
