"""Cross-image de-duplication (seed 001 App. C.2): the model decides every pair the hash is not certain of.

Each image, in order, is compared with every image already kept. The DCT hash
(`kbvqa.data.phash`) settles a pair only when it is certain the two are the same picture: at or
below `CERTAIN_BITS` (6 bits; measured by benchmarks/phash_threshold.py to merge no two different
photographs among crops, resizes and re-encodes of the photographs shipped in PyPI packages).
Every other pair — a crop, a different view, or a different picture — goes to the "same picture?"
probe, as the paper asks the model about each pair; an image the probe calls similar to a kept one
is dropped. Probe verdicts are cached by the sorted sha256 pair, the prompt hash and the model.

Placement follows the filter's: after synthesis (default) the images are the draft's tags in order
and a duplicate's tag leaves the draft (the rest renumbered); before synthesis they are the filter's
survivors. Offline, the pairs the hash cannot settle are `undecided`: the item stops with a
NeedsModel reason that counts them — never called distinct. A failed or unusable probe fails the
item (`error` / `invalid`): an undecided pair is not silently kept.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.data.images import BadImage
from kbvqa.data.phash import CERTAIN_BITS, distance, phash
from kbvqa.models.prompts.reference import SIMILAR_PROBE
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import Placement, ReferenceStageConfig
from kbvqa.pipelines.reference.synthesis import keep_images
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages import register_stage
from kbvqa.stages.ask import ask, gather_all, needs_model


class SimilarReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    similar: bool


class DedupConfig(ReferenceStageConfig):
    role: str = "vision"
    placement: Placement = "after_synthesis"  # filled from [reference] filter_placement
    certain_bits: int = Field(CERTAIN_BITS, ge=0, le=15)  # at or below: the same picture, no probe


def _hash(path: Any) -> int | None:
    try:
        return phash(path)
    except (BadImage, OSError):
        return None


@register_stage
class Dedup(Stage):
    """Reads the draft's images (`after_synthesis`) or `filter.kept` (`before_synthesis`); adds
    `dedup` {kept, dropped, probes, undecided} and, after synthesis, rewrites `draft`. Resources:
    `image_store`, `verdicts`."""

    name = "reference-dedup"
    version = "2"
    config_model = DedupConfig
    prompts = (SIMILAR_PROBE,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: DedupConfig = self.config  # type: ignore[assignment]
        store = ctx.resource("image_store")
        after = c.placement == "after_synthesis"
        cands = ((record.get("draft") or {}).get("images") if after else (record.get("filter") or {}).get("kept")) or []
        hashes = await asyncio.gather(*(asyncio.to_thread(_hash, store.path(x["path"])) for x in cands))
        online = c.role in ctx.roles
        kept: list[tuple[dict[str, Any], int]] = []
        dropped: list[dict[str, Any]] = []
        probes: list[dict[str, Any]] = []
        undecided = 0
        pairs: Counter[str] = Counter()
        unloadable = 0
        for x, h in zip(cands, hashes):
            if h is None:
                unloadable += 1
                continue
            dists = [(k, distance(h, kh)) for k, kh in kept]
            same = next(((k, d) for k, d in dists if d <= c.certain_bits), None)
            if same is not None:
                pairs["hash_certain"] += 1
                dropped.append({"sha256": x["sha256"], "duplicate_of": same[0]["sha256"], "distance": same[1],
                                "by": "phash"})
                continue
            pairs["to_probe"] += len(dists)
            if dists and not online:
                undecided += len(dists)
                kept.append((x, h))  # only to count the pairs a model would have to decide
                continue
            twin = await self._probe(x, dists, ctx, c, probes) if dists else None
            if twin is not None:
                dropped.append({"sha256": x["sha256"], "duplicate_of": twin[0]["sha256"], "distance": twin[1],
                                "by": "probe"})
                continue
            kept.append((x, h))
        if undecided:
            raise needs_model(f"de-duplication: {undecided} image pair(s) the hash cannot settle (more than "
                              f"{c.certain_bits} bits apart) are undecided; the 'same picture?' probe", c.role)
        drops = Counter(d["by"] for d in dropped)
        payload = {"placement": c.placement, "kept": [{**k, "phash": f"{h:016x}"} for k, h in kept],
                   "dropped": dropped, "probes": probes, "thresholds": {"certain_bits": c.certain_bits}}
        tally = counts(images=len(cands), kept=len(kept), pairs=pairs, probes=len(probes),
                       dropped={"hash_certain": drops["phash"], "probe_similar": drops["probe"],
                                "unloadable": unloadable})
        out = stage_record(record, "dedup", payload, tally)
        if after:
            out["draft"] = keep_images(record["draft"], [k["index"] for k, _ in kept])
        return out

    async def _probe(self, x: dict[str, Any], others: list[tuple[dict[str, Any], int]], ctx: Context,
                     c: DedupConfig, log: list[dict[str, Any]]) -> tuple[dict[str, Any], int] | None:
        """The first kept image the probe calls the same picture as `x`, or None."""
        store, cache = ctx.resource("image_store"), ctx.resource("verdicts", None)
        replies = await gather_all((ask(
            ctx, c.role, SIMILAR_PROBE, SimilarReply, what=f"similarity probe ({x['sha256'][:12]})",
            images=[store.path(k["path"]), store.path(x["path"])], cache=cache,
            cache_parts={"kind": "similar", "pair": sorted([k["sha256"], x["sha256"]])}) for k, _ in others),
            "similarity probes")
        twin = None
        for (k, d), (reply, prov) in zip(others, replies):
            log.append({"a": k["sha256"], "b": x["sha256"], "distance": d, "similar": reply.similar,
                        "cached": bool(prov.get("cached"))})
            if reply.similar and twin is None:
                twin = (k, d)
        return twin
