"""The judge half of the benchmark comparison (seed 001 §2, Table 1): the mean number of reasoning
hops a judge model estimates per question.

One strict-JSON call per item (`{"hops": <integer 1-10>}`): a reply that is not exactly that — prose
around it, a string "2", a float, a number out of range — is `invalid`, counted and retried on
`--resume`, never a hop count; a failed call is `error`. Each benchmark is a runner job with its own
journal, so a large comparison resumes. Items can be sampled (`sample`): the ones whose id hashes
lowest, so the same items are chosen every time. The mean is over valid estimates, with the number
judged, invalid and failed beside it and the judge's provenance (model, base URL, prompt id and hash).

`CompareOptions` is the whole `kbvqa data compare` job's options: the judge stage's `HopsConfig` as it
is (its `role` is the --judge-role default), the sample size, concurrency, resume and the model flags;
built once from `[data.compare]` of --config and the flags, recorded in every journal's manifest and in
compare.json.

    [data.compare]
    concurrency = 4
    hops_sample = 200
    [data.compare.hops]
    role = "judge"
    [data.compare.models]
    timeout = 60
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, StrictInt

from kbvqa.data.schema import Sample
from kbvqa.models.prompts.curate import REASONING_HOPS
from kbvqa.models.replies import Reply
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.options import JobOptions, ModelFlags
from kbvqa.runner.stage import Context, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.ask import Ask, OneCallStage, model_id

__all__ = ["CompareOptions", "HopsConfig", "HopsJudge", "estimate_hops", "hop_records", "hops_roles"]


class HopsReply(Reply):
    hops: Annotated[StrictInt, Field(ge=1, le=10)]


class HopsConfig(StageConfig):
    role: str = "judge"


class CompareOptions(JobOptions):
    """`kbvqa data compare`'s settings and their only defaults. The files compared, their formats and
    labels, and the output folder are the command's arguments. How many items to judge is kbvqa's
    choice (seed 001 does not say): all of them unless `hops_sample` is set."""

    SECTION: ClassVar[str] = "data.compare"
    config: Path | None = None  # kbvqa.toml: the judge's [models.<role>] and this job's table
    hops: HopsConfig = Field(default_factory=HopsConfig)  # the judge stage's config (its model role)
    hops_sample: int | None = Field(None, ge=1)  # judge at most this many items per benchmark (by id hash)
    concurrency: int = Field(8, ge=1)  # judge requests in flight
    resume: bool = True  # keep the journals' estimates; ask again only what failed or was invalid
    models: ModelFlags = Field(default_factory=ModelFlags)  # --llm/--model for the judge role, call limits

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {"judge_role": ("hops.role",)}


def hops_roles(opts: CompareOptions) -> dict[str, Any]:
    """The model roles the hops judge may use: kbvqa.toml / KBVQA_<ROLE>_* (`opts.config`), or one server
    (`--llm` + `--model`) filling the judge role; empty of that role when none is configured (then the
    comparison has no hops column)."""
    return opts.models.roles(opts.config, fill=(opts.hops.role,), concurrency=opts.concurrency)


@register_stage
class HopsJudge(OneCallStage):
    """Records {id, question, answer}; adds `hops` (an integer) and `judge` (provenance)."""

    name = "compare-hops"
    version = "1"
    config_model = HopsConfig
    asks = Ask(REASONING_HOPS, HopsReply, "reasoning-hops estimate")

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        reply, prov = await self.call(ctx, what=f"{self.asks.what} ({record['id']})", question=record["question"],
                                      answer=record.get("answer") or "(none)")
        return {**record, "hops": reply.hops, "judge": prov}


def hop_records(samples: Iterable[Sample], sample: int | None = None) -> list[dict[str, Any]]:
    """The records the judge sees (question and first answer); `sample` keeps that many, chosen by id hash."""
    recs = [{"id": s.id, "question": s.question, "answer": s.answers[0].text if s.answers else None}
            for s in samples]
    if sample is not None and sample < len(recs):
        recs = sorted(recs, key=lambda r: hashlib.sha256(r["id"].encode("utf-8")).hexdigest())[:sample]
    return recs


def estimate_hops(records: list[dict[str, Any]], out: Path, roles: Mapping[str, Any],
                  opts: CompareOptions | None = None, *, progress: bool = False, **settings: Any) -> dict[str, Any]:
    """Run the judge stage (config `opts.hops`) over `records` into the journal `out`, as the options
    say (or, for a library caller, its `settings` by flag name: judge_role, concurrency, resume);
    the mean and the counts. The journal's manifest records the options as used."""
    if opts is None:
        opts = CompareOptions.build(**settings)
    elif settings:
        raise TypeError(f"give the options object or its settings ({', '.join(settings)}), not both")
    role = opts.hops.role
    ctx = Context(roles=dict(roles))
    job = Job([HopsJudge(opts.hops)], ctx, description=f"reasoning hops ({out.stem})",
              run_config={"pipeline": "compare", "stage": "hops", "role": role, "options": opts.used()})
    job.run(records, out=out, resume=opts.resume, concurrency=opts.concurrency, progress=progress)
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
