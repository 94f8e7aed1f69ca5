"""What the reference-construction stages share beyond the funnel module (kbvqa.pipelines.funnel)
and the one model call (kbvqa.stages.ask): where the five-rule filter runs, the stage settings'
table, and the candidate pools the filter and the synthesis read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from kbvqa.pipelines.funnel import FunnelStageConfig

#: Where the five-rule filter and the de-duplication run: on each tag of the synthesised draft, as
#: seed 001 App. C.2 describes it (the default), or on the candidates before synthesis, as §3.2 words it.
Placement = Literal["after_synthesis", "before_synthesis"]
PLACEMENTS: tuple[str, ...] = ("after_synthesis", "before_synthesis")


class ReferenceStageConfig(FunnelStageConfig):
    """Stage settings as `[reference.<stage>]` tables of a kbvqa.toml: a misspelt key is an error."""


#: the pool name of the entity-search images (kbvqa.pipelines.reference.entities)
ENTITY_POOL = "entity_search"


def scored_pool(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The scored top-k followed by the entity-search additions: what the pre-synthesis filter
    checks (the synthesis caps it with `fill_pool`)."""
    top = list((record.get("candidates") or {}).get("kept") or [])
    return [*top, *((record.get("entities") or {}).get("added") or [])]


def fill_pool(cands: list[dict[str, Any]], cap: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(at most `cap` candidates, in their given order; the ones left out). Seed 001 C.2 shows "up to
    ten candidate images"; how the entity-search images join them the paper does not say. kbvqa's
    reading: they count toward the ten, not on top of it, and they take their places first (each was
    searched because no candidate shows its entity; the best-scored first if they alone are more than
    `cap`), the scored top-k filling the rest in rank order."""
    entity = [x for x in cands if x.get("pool") == ENTITY_POOL]
    if len(entity) > cap:
        entity = sorted(entity, key=lambda x: -(x.get("overall") or 0))[:cap]  # stable: ties keep their order
    room = cap - len(entity)
    scored = [x for x in cands if x.get("pool") != ENTITY_POOL][:room]
    keep = {id(x) for x in (*entity, *scored)}
    return [x for x in cands if id(x) in keep], [x for x in cands if id(x) not in keep]


def synthesis_pool(record: Mapping[str, Any], placement: str, max_candidates: int = 10
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the candidates the synthesis may cite, those left out by the cap): what survived the
    pre-synthesis filter and de-duplication (`before_synthesis`), or the scored pool itself
    (`after_synthesis`, where the filter and de-duplication work on the draft's tags instead); at
    most `max_candidates` either way, entity-search images included (`fill_pool`)."""
    if placement == "before_synthesis":
        pool = list((record.get("dedup") or {}).get("kept") or [])
    else:
        pool = scored_pool(record)
    return fill_pool(pool, max_candidates)
