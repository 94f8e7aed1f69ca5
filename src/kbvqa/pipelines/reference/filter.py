"""The five-rule filter (seed 001 §3.2 stage 3, App. C.2), after the synthesis (the default) or before it.

One two-image VLM call per image (query image, candidate) deciding remove or keep under five rules:
redundant with the query image, composite/collage, global watermark, video thumbnail, off-topic.

Two placements, because the paper is not consistent with itself:
- `after_synthesis` (default, App. C.2, the paper's detailed account): each image tag of the draft is
  re-examined with the ±200 characters of the draft around the tag as context (truncated to 300);
  a removed image's tag leaves the draft and the rest are renumbered. The context is the sentence
  the picture illustrates, which is what "off-topic" is about.
- `before_synthesis` (§3.2's wording): every scored candidate is checked with the text around it on
  its source page (the harvester's ±200 characters, truncated to 300), and the generator never sees
  a removed picture.
The manifest of the stage (and of the synthesis and de-duplication) records which was used.

Failure policy (App. C.2), in both placements: an image that cannot be loaded is removed
(`unloadable`, no call); a call that fails (HTTP, timeout) keeps the image, counted as
`kept_call_failed`, and an unusable reply keeps it too, counted as `kept_invalid_reply` — in both
cases the image carries the failure instead of a verdict, and the audit sheet flags it.
`on_call_failure = "error"` makes either end the item instead (`error` / `invalid`, retried on
`--resume`). Verdicts are cached by (query sha256, candidate sha256, question, answer, context,
prompt hash, model).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kbvqa.models.prompts.reference import FILTER_RULES, FIVE_RULE_FILTER
from kbvqa.pipelines.reference.candidates import loadable, query_image
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import Placement, ReferenceStageConfig, scored_pool
from kbvqa.pipelines.reference.synthesis import keep_images, tag_context
from kbvqa.runner.stage import Context, Invalid, Stage
from kbvqa.stages import register_stage
from kbvqa.stages.ask import ModelCallFailed, ask, needs_model, settle

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
    placement: Placement = "after_synthesis"  # filled from [reference] filter_placement
    window_chars: int = Field(200, ge=0)  # of draft text on each side of a tag (after_synthesis)
    context_chars: int = Field(300, ge=0)  # the context sent is truncated to this
    on_call_failure: Literal["keep", "error"] = "keep"  # the paper keeps the image


@register_stage
class FiveRuleFilter(Stage):
    """Reads the draft (`after_synthesis`) or `candidates.kept` + `entities.added`
    (`before_synthesis`); adds `filter` {placement, kept, removed, unchecked} and, after synthesis,
    rewrites `draft` without the removed images. Resources: `image_store`, `verdicts`."""

    name = "reference-filter"
    version = "2"
    config_model = FilterConfig
    prompts = (FIVE_RULE_FILTER,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: FilterConfig = self.config  # type: ignore[assignment]
        store = ctx.resource("image_store")
        after = c.placement == "after_synthesis"
        if after:
            draft = record.get("draft") or {}
            items = [{**im, "context": tag_context(draft["text"], im["index"], c.window_chars, c.context_chars)}
                     for im in draft.get("images") or []]
        else:
            items = [{**x, "context": (x.get("context") or "")[: c.context_chars]} for x in scored_pool(record)]
        if items and c.role not in ctx.roles:
            raise needs_model("the five-rule image filter (a two-image VLM call)", c.role)
        ok = await asyncio.gather(*(asyncio.to_thread(loadable, store.path(x["path"])) for x in items))
        live = [x for x, good in zip(items, ok) if good]
        query = query_image(record, "the five-rule filter") if live else None
        cache = ctx.resource("verdicts", None)
        q, a = record.get("question", ""), record.get("answer", "")
        outcomes = await settle(ask(
            ctx, c.role, FIVE_RULE_FILTER, FilterReply, what=f"five-rule filter ({x['sha256'][:12]})",
            images=[query, store.path(x["path"])], cache=cache,
            cache_parts={"kind": "filter", "query": record.get("query_sha256"), "candidate": x["sha256"],
                         "question": q, "answer": a, "context": x["context"]},
            question=q, answer=a, context=x["context"] or "(none)") for x in live)
        failures = [(st, v) for st, v in outcomes if st != "ok"]
        if failures and c.on_call_failure == "error":  # a failed call first: it is the one to retry
            st, v = sorted(failures, key=lambda f: f[0] != "error")[0]
            note = f" ({len(failures)} of {len(outcomes)} filter calls failed)" if len(failures) > 1 else ""
            raise (ModelCallFailed(f"{v}{note}") if st == "error" else Invalid(f"{v}{note}"))
        kept, removed, unchecked = [], [], []
        drops: Counter[str] = Counter(unloadable=len(items) - len(live))
        for x, (status, value) in zip(live, outcomes):
            if status != "ok":
                note = {"status": status, "reason": str(value)}
                unchecked.append({"sha256": x["sha256"], **({"index": x["index"]} if after else {}), **note})
                kept.append({**x, "filter": note})
                continue
            reply, prov = value
            verdict = {"remove": reply.remove, "rule": reply.rule, "reason": reply.reason, "judge": prov}
            if reply.remove:
                removed.append({"sha256": x["sha256"], "rank": x.get("rank"), **({"index": x["index"]} if after else {}),
                                "context": x["context"], **verdict})
                drops[reply.rule] += 1
            else:
                kept.append({**x, "filter": verdict})
        failed = Counter(u["status"] for u in unchecked)
        payload = {"placement": c.placement, "kept": kept, "removed": removed, "unchecked": unchecked}
        tally = counts(images=len(items), checked=len(live), kept=len(kept), dropped=drops,
                       kept_without_verdict={"kept_call_failed": failed["error"],
                                             "kept_invalid_reply": failed["invalid"]})
        out = stage_record(record, "filter", payload, tally)
        if after:
            draft = record["draft"]
            out["draft"] = keep_images(draft, [x["index"] for x in kept])
            out["filter"]["kept"] = [{"sha256": x["sha256"], "index_before": x["index"], "filter": x["filter"],
                                      "context": x["context"]} for x in kept]
        return out
