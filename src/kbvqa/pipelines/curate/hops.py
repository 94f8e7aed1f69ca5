"""The judge half of the benchmark comparison (seed 001 §2, Table 1): the mean number of reasoning
hops a judge model estimates per question.

One strict-JSON call per item (`{"hops": <integer 1-10>}`): a reply that is not exactly that — prose
around it, a string "2", a float, a number out of range — is `invalid`, counted and retried on
`--resume`, never a hop count; a failed call is `error`. Each benchmark is a runner job with its own
journal, so a large comparison resumes. Items can be sampled (`sample`): the ones whose id hashes
lowest, so the same items are chosen every time. The mean is over valid estimates, with the number
judged, invalid and failed beside it and the judge's provenance (model, base URL, prompt id and hash).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StrictInt

from kbvqa.data.schema import Sample
from kbvqa.models.prompts.curate import REASONING_HOPS
from kbvqa.models.replies import Reply
from kbvqa.pipelines.reference.common import ask, model_id
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage


class HopsReply(Reply):
    hops: Annotated[StrictInt, Field(ge=1, le=10)]


class HopsConfig(StageConfig):
    role: str = "judge"


@register_stage
class HopsJudge(Stage):
    """Records {id, question, answer}; adds `hops` (an integer) and `judge` (provenance)."""

    name = "compare-hops"
    version = "1"
    config_model = HopsConfig
    prompts = (REASONING_HOPS,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        reply, prov = await ask(ctx, self.config.role, REASONING_HOPS, HopsReply,  # type: ignore[attr-defined]
                                what=f"reasoning-hops estimate ({record['id']})", question=record["question"],
                                answer=record.get("answer") or "(none)")
        return {**record, "hops": reply.hops, "judge": prov}


def hop_records(samples: Iterable[Sample], sample: int | None = None) -> list[dict[str, Any]]:
    """The records the judge sees (question and first answer); `sample` keeps that many, chosen by id hash."""
    recs = [{"id": s.id, "question": s.question, "answer": s.answers[0].text if s.answers else None}
            for s in samples]
    if sample is not None and sample < len(recs):
        recs = sorted(recs, key=lambda r: hashlib.sha256(r["id"].encode("utf-8")).hexdigest())[:sample]
    return recs


def estimate_hops(records: list[dict[str, Any]], out: Path, roles: Mapping[str, Any], *, role: str = "judge",
                  resume: bool = True, concurrency: int = 8, progress: bool = False) -> dict[str, Any]:
    """Run the judge over `records` into the journal `out`; the mean and the counts."""
    ctx = Context(roles=dict(roles))
    job = Job([HopsJudge(HopsConfig(role=role))], ctx, description=f"reasoning hops ({out.stem})",
              run_config={"pipeline": "compare", "stage": "hops", "role": role})
    job.run(records, out=out, resume=resume, concurrency=concurrency, progress=progress)
    wanted = {r["id"] for r in records}
    lines = [ln for ln in read_results(out) if ln["id"] in wanted]
    hops = [ln["hops"] for ln in lines if ln.get("status") == "ok"]
    client = roles.get(role)
    return {"mean": round(sum(hops) / len(hops), 3) if hops else None, "judged": len(hops),
            "invalid": sum(1 for ln in lines if ln.get("status") == "invalid"),
            "error": sum(1 for ln in lines if ln.get("status") == "error"), "items": len(records),
            "journal": str(out),
            "judge": {**(model_id(client) if client is not None and not isinstance(client, list) else {}),
                      "role": role, "prompt": REASONING_HOPS.id, "prompt_sha256": REASONING_HOPS.sha256}}
