"""The multimodal consistency check of a draft before human review (seed 001 §3.2 stage 4).

One multimodal call sees the query photo, every picture the draft embeds (in tag order), the
question, the short reference and the draft, and says whether the draft is consistent, listing
issues of four kinds (answer_conflict, image_mismatch, query_mismatch, unsupported: kbvqa's, since
the paper names the check but not its criteria). A draft that fails is not dropped: it stays `ok`,
is counted (`failed`), and goes to the audit sheet flagged with its issues, where the reviewer
decides — the paper's references pass "multimodal consistency checks and human review". A failed
call is an `error`, an unusable reply `invalid` (retried on `--resume`); offline the item stops
with a NeedsModel reason. Never a default verdict.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from kbvqa.models.prompts.reference import CONSISTENCY_CHECK
from kbvqa.pipelines.reference.candidates import query_image
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import ReferenceStageConfig
from kbvqa.runner.stage import Context
from kbvqa.stages import register_stage
from kbvqa.stages.ask import Ask, OneCallStage, require_role

ISSUE_KINDS = ("answer_conflict", "image_mismatch", "query_mismatch", "unsupported")


class Issue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal[ISSUE_KINDS]  # type: ignore[valid-type]
    tag: int | None = None
    detail: str


class ConsistencyReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    consistent: bool
    issues: list[Issue]

    @model_validator(mode="after")
    def _issues_iff_inconsistent(self) -> ConsistencyReply:
        if not self.consistent and not self.issues:
            raise ValueError("consistent is false but no issue is named")
        if self.consistent and self.issues:
            raise ValueError("consistent is true but issues are listed")
        return self


class ConsistencyConfig(ReferenceStageConfig):
    role: str = "vision"


@register_stage
class ConsistencyCheck(OneCallStage):
    """Reads `draft`; adds `consistency` {passed, issues, checker}. Resources: `image_store`."""

    name = "reference-consistency"
    version = "1"
    config_model = ConsistencyConfig
    asks = Ask(CONSISTENCY_CHECK, ConsistencyReply, "consistency check")

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: ConsistencyConfig = self.config  # type: ignore[assignment]
        require_role(ctx, c.role, "the multimodal consistency check of the draft")
        store = ctx.resource("image_store")
        draft = record["draft"]
        n = len(draft["images"])
        reply, prov = await self.call(ctx, images=[query_image(record, "the consistency check"),
                                                   *(store.path(im["path"]) for im in draft["images"])],
                                      question=record.get("question", ""), answer=record.get("answer", ""),
                                      draft_raw=draft["text"])
        issues = [i.model_dump() for i in reply.issues]
        for i in issues:
            if i["tag"] is not None and not 1 <= i["tag"] <= n:
                i["tag_out_of_range"] = True  # kept as said: the reviewer reads it
        payload = {"passed": reply.consistent, "issues": issues, "checker": prov}
        tally = counts(checked=1, passed=int(reply.consistent), failed=int(not reply.consistent),
                       issues=Counter(i["kind"] for i in issues))
        return stage_record(record, "consistency", payload, tally)
