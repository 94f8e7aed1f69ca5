"""Stage 4b — cross-image de-duplication: perceptual hashes first, a VLM probe only where they cannot tell.

The paper asked a VLM "similar?" for every pair (O(n²) calls). Here each candidate, in rank order,
is compared with those already kept by the DCT hash (`kbvqa.data.phash`, thresholds calibrated on
near-duplicates built from the shipped photographs): at or below `NEAR_DUPLICATE_BITS` it is a
duplicate of the kept one (dropped, no call); above `DISTINCT_BITS` it is distinct (no call); in the
band between, the "same picture?" probe decides. Probe verdicts are cached by the sorted sha256
pair, the prompt hash and the model, so the same pair is never asked twice. A failed or unusable
probe fails the item (`error` / `invalid`): an undecided pair is not silently kept.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.data.images import BadImage
from kbvqa.data.phash import DISTINCT_BITS, NEAR_DUPLICATE_BITS, distance, phash, verdict
from kbvqa.models.prompts.reference import SIMILAR_PROBE
from kbvqa.pipelines.reference.common import ReferenceStageConfig, ask, counts, gather_all, needs_model, stage_record
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages import register_stage


class SimilarReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    similar: bool


class DedupConfig(ReferenceStageConfig):
    role: str = "vision"
    near_bits: int = Field(NEAR_DUPLICATE_BITS, ge=0, le=64)
    distinct_bits: int = Field(DISTINCT_BITS, ge=0, le=64)


def _hash(path: Any) -> int | None:
    try:
        return phash(path)
    except (BadImage, OSError):
        return None


@register_stage
class Dedup(Stage):
    """Reads `filter.kept`; adds `dedup` {kept, dropped, probes}. Resources: `image_store`, `verdicts`."""

    name = "reference-dedup"
    version = "1"
    config_model = DedupConfig
    prompts = (SIMILAR_PROBE,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: DedupConfig = self.config  # type: ignore[assignment]
        store = ctx.resource("image_store")
        cands = (record.get("filter") or {}).get("kept") or []
        hashes = await asyncio.gather(*(asyncio.to_thread(_hash, store.path(x["path"])) for x in cands))
        kept: list[tuple[dict[str, Any], int]] = []
        dropped: list[dict[str, Any]] = []
        probes: list[dict[str, Any]] = []
        pairs: Counter[str] = Counter()
        unloadable = 0
        for x, h in zip(cands, hashes):
            if h is None:
                unloadable += 1
                continue
            band = [(k, distance(h, kh)) for k, kh in kept]
            kinds = [verdict(d, c.near_bits, c.distinct_bits) for _, d in band]
            pairs.update(kinds)
            dup = next(((k, d) for (k, d), v in zip(band, kinds) if v == "duplicate"), None)
            if dup is not None:
                dropped.append({"sha256": x["sha256"], "duplicate_of": dup[0]["sha256"], "distance": dup[1],
                                "by": "phash"})
                continue
            unsure = [(k, d) for (k, d), v in zip(band, kinds) if v == "ambiguous"]
            twin = await self._probe(x, unsure, record, ctx, c, probes) if unsure else None
            if twin is not None:
                dropped.append({"sha256": x["sha256"], "duplicate_of": twin[0]["sha256"], "distance": twin[1],
                                "by": "probe"})
                continue
            kept.append(({**x, "phash": f"{h:016x}"}, h))
        drops = Counter(d["by"] for d in dropped)
        payload = {"kept": [k for k, _ in kept], "dropped": dropped, "probes": probes,
                   "thresholds": {"near_duplicate_bits": c.near_bits, "distinct_bits": c.distinct_bits}}
        tally = counts(candidates=len(cands), kept=len(kept), pairs=pairs, probes=len(probes),
                       dropped={"near_duplicate": drops["phash"], "probe_similar": drops["probe"],
                                "unloadable": unloadable})
        return stage_record(record, "dedup", payload, tally)

    async def _probe(self, x: dict[str, Any], unsure: list[tuple[dict[str, Any], int]], record: dict[str, Any],
                     ctx: Context, c: DedupConfig, log: list[dict[str, Any]]) -> tuple[dict[str, Any], int] | None:
        """The first kept image the probe calls the same picture as `x`, or None."""
        if c.role not in ctx.roles:
            raise needs_model("the de-duplication probe (ambiguous perceptual-hash band)", c.role)
        store, cache = ctx.resource("image_store"), ctx.resource("verdicts", None)
        replies = await gather_all((ask(
            ctx, c.role, SIMILAR_PROBE, SimilarReply, what=f"similarity probe ({x['sha256'][:12]})",
            images=[store.path(k["path"]), store.path(x["path"])], cache=cache,
            cache_parts={"kind": "similar", "pair": sorted([k["sha256"], x["sha256"]])}) for k, _ in unsure),
            "similarity probes")
        twin = None
        for (k, d), (reply, prov) in zip(unsure, replies):
            log.append({"a": k["sha256"], "b": x["sha256"], "distance": d, "similar": reply.similar,
                        "cached": bool(prov.get("cached"))})
            if reply.similar and twin is None:
                twin = (k, d)
        return twin
