"""Stage 4a — the five-rule filter (seed 001 §3.2 stage 3, App. C.2).

One two-image VLM call per candidate (query image, candidate) with the text around the candidate
where it was found (±200 characters of its page, or the KB article's lead / the reverse-search
result's title), deciding remove or keep under five rules: redundant with the query image,
composite/collage, global watermark, video thumbnail, off-topic.

Where kbvqa differs from the paper, on purpose:
- a failed call is an `error` and an unusable reply `invalid` for the whole item (retried on
  `--resume`), never "keep" (the paper kept the image on an API failure);
- the filter runs before the synthesis (as §3.2 and the issue order it), so the context is the
  candidate's own page text rather than the ±200 characters around a tag in a draft; the generator
  then never sees a removed picture;
- verdicts are cached by (query sha256, candidate sha256, question, answer, context, prompt hash,
  model). An image that no longer decodes is a counted drop (`unloadable`), as in the paper.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kbvqa.models.prompts.reference import FILTER_RULES, FIVE_RULE_FILTER
from kbvqa.pipelines.reference.candidates import loadable, query_image
from kbvqa.pipelines.reference.common import ReferenceStageConfig, ask, counts, gather_all, needs_model, stage_record
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages import register_stage

Rule = Literal[FILTER_RULES]  # type: ignore[valid-type]  # the prompt and the reply contract share one list


class FilterReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    remove: bool
    rule: Rule | None
    reason: str

    @model_validator(mode="after")
    def _rule_iff_remove(self) -> FilterReply:
        if self.remove and self.rule is None:
            raise ValueError("remove is true but no rule is named")
        if not self.remove and self.rule is not None:
            raise ValueError(f"remove is false but rule {self.rule!r} is named")
        return self


class FilterConfig(ReferenceStageConfig):
    role: str = "vision"
    context_chars: int = Field(400, ge=0)  # of the candidate's context sent (±200 around it)


@register_stage
class FiveRuleFilter(Stage):
    """Reads `candidates.kept`; adds `filter` {kept, removed}. Resources: `image_store`, `verdicts`."""

    name = "reference-filter"
    version = "1"
    config_model = FilterConfig
    prompts = (FIVE_RULE_FILTER,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: FilterConfig = self.config  # type: ignore[assignment]
        store = ctx.resource("image_store")
        cands = (record.get("candidates") or {}).get("kept") or []
        if cands and c.role not in ctx.roles:
            raise needs_model("the five-rule image filter (a two-image VLM call)", c.role)
        ok = await asyncio.gather(*(asyncio.to_thread(loadable, store.path(x["path"])) for x in cands))
        live = [x for x, good in zip(cands, ok) if good]
        query = query_image(record, "the five-rule filter") if live else None
        cache = ctx.resource("verdicts", None)
        q, a = record.get("question", ""), record.get("answer", "")
        replies = await gather_all((ask(
            ctx, c.role, FIVE_RULE_FILTER, FilterReply, what=f"five-rule filter ({x['sha256'][:12]})",
            images=[query, store.path(x["path"])], cache=cache,
            cache_parts={"kind": "filter", "query": record.get("query_sha256"), "candidate": x["sha256"],
                         "question": q, "answer": a, "context": (x.get("context") or "")[: c.context_chars]},
            question=q, answer=a, context=(x.get("context") or "")[: c.context_chars] or "(none)") for x in live),
            "filter verdicts")
        kept, removed = [], []
        for x, (reply, prov) in zip(live, replies):
            verdict = {"remove": reply.remove, "rule": reply.rule, "reason": reply.reason, "judge": prov}
            if reply.remove:
                removed.append({"sha256": x["sha256"], "rank": x.get("rank"), **verdict})
            else:
                kept.append({**x, "filter": verdict})
        drops = Counter(r["rule"] for r in removed)
        drops["unloadable"] = len(cands) - len(live)
        payload = {"kept": kept, "removed": removed}
        tally = counts(candidates=len(cands), checked=len(live), kept=len(kept), dropped=drops)
        return stage_record(record, "filter", payload, tally)
