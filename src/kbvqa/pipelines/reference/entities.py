"""Entity image search (seed 001 §3.2 stage 2): a forward image search for each named entity of the
short reference that no candidate picture shows.

One multimodal call (the query photo, then the scored candidates) lists the named entities the short
reference mentions, which candidates show each, and an image-search query for it. Each entity no
candidate shows is searched with the forward image-search tool of the build's backend
(`text_to_image_search`: the KB's images on `local`, the search API on `web`); what comes back goes
through the harvester's gates (`Harvest.gate_images`), is scored like any candidate (the same
two-image call) and joins the pool as `entity_search`, naming its entity. The stage journal keeps,
per entity, the query, the tool's status and reason, how many images came back and how many were
kept, so "which entities, which queries, what came back" can be read off every item.

How many entities are searched (5) and how many images are kept per entity (2) are kbvqa's
choices: the paper does not say. A search that fails is recorded on its entity (the item goes on:
the supplement is missing, nothing is made up); a failed or unusable entity listing fails the item
(`error` / `invalid`); offline the item stops with a NeedsModel reason.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kbvqa.models.prompts.reference import ENTITY_CHECK
from kbvqa.pipelines.reference.candidates import query_image, score_images
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import ENTITY_POOL, ReferenceStageConfig
from kbvqa.pipelines.reference.harvest import Found, Harvest, HarvestConfig
from kbvqa.runner.stage import Context, Invalid, Stage
from kbvqa.stages import register_stage
from kbvqa.stages.ask import ask, require_role

POOL = ENTITY_POOL


class Entity(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    shown_in: list[int]
    query: str = Field(min_length=1)

    @field_validator("name", "query")
    @classmethod
    def _text(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("must not be blank")
        return v


class EntityReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entities: list[Entity]


class EntityConfig(ReferenceStageConfig):
    role: str = "vision"
    backend: Literal["local", "web"] = "local"  # filled from the build's harvest backend
    max_entities: int = Field(5, ge=0)  # entities searched per item (kbvqa's)
    per_entity: int = Field(2, ge=1, le=5)  # images kept per entity (kbvqa's)
    harvest: HarvestConfig = Field(default_factory=HarvestConfig)  # the gates: filled from [reference.harvest]


class LoopTools:
    """The web tool backend for the entity search, built from its settings on first use in each event
    loop (every stage job runs its own loop and closes what it used); pickles as the settings. A
    backend that cannot be built (no API key) makes each search `unavailable`, with the reason."""

    name = "web"

    def __init__(self, settings: dict[str, Any]):
        self.settings = dict(settings)
        self._tools: Any = None
        self._loop: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"])  # type: ignore[misc]

    async def text_to_image_search(self, args: Any, episode: Any, ctx: Any) -> Any:
        from kbvqa.tools.base import ToolResult
        from kbvqa.tools.web import WebTools, WebToolsConfigError

        loop = asyncio.get_running_loop()
        if self._tools is None or self._loop is not loop:
            try:
                self._tools, self._loop = WebTools(**self.settings), loop
            except WebToolsConfigError as exc:
                return ToolResult(tool="text_to_image_search", status="unavailable", reason=str(exc))
        return await self._tools.text_to_image_search(args, episode, ctx)

    async def aclose(self) -> None:
        if self._tools is not None:
            await self._tools.aclose()
            self._tools = self._loop = None


def shown_in_range(reply: EntityReply, n: int) -> None:
    """Every `shown_in` index names one of the `n` candidates shown (else the reply is refused)."""
    for e in reply.entities:
        bad = [i for i in e.shown_in if not 1 <= i <= n]
        if bad:
            raise Invalid(f"entity check: {e.name!r} is shown in candidate(s) {bad}, but there are {n}")


def candidate_lines(cands: list[dict[str, Any]]) -> str:
    lines = []
    for i, x in enumerate(cands, 1):
        where = x.get("page_url") or x.get("source_url") or "(unknown)"
        ctx = " ".join(str(x.get("context") or "").split())[:160]
        lines.append(f"Candidate {i}: from {where}" + (f" — {ctx}" if ctx else ""))
    return "\n".join(lines) or "(no candidates: every entity is unshown)"


@register_stage
class EntitySearch(Stage):
    """Reads `candidates.kept`; adds `entities` {entities (with their searches), added}. Resources:
    `image_store`, `verdicts`, `entity_tools` (an object with `text_to_image_search`), and what the
    harvester's gates read (`fetcher` on web, `local_image_root` on local)."""

    name = "reference-entities"
    version = "1"
    config_model = EntityConfig
    prompts = (ENTITY_CHECK,)

    def __init__(self, config: EntityConfig | None = None):
        super().__init__(config)
        c: EntityConfig = self.config  # type: ignore[assignment]
        self._gates = Harvest(c.harvest.model_copy(update={"backend": c.backend}))

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: EntityConfig = self.config  # type: ignore[assignment]
        require_role(ctx, c.role, "the entity check before the entity image search (a multimodal call)")
        store = ctx.resource("image_store")
        cands = (record.get("candidates") or {}).get("kept") or []
        q, a = record.get("question", ""), record.get("answer", "")
        reply, prov = await ask(ctx, c.role, ENTITY_CHECK, EntityReply, what="entity check",
                                images=[query_image(record, "the entity check"), *(store.path(x["path"]) for x in cands)],
                                cache=ctx.resource("verdicts", None),
                                cache_parts={"kind": "entities", "query": record.get("query_sha256"), "question": q,
                                             "answer": a, "candidates": [x["sha256"] for x in cands]},
                                question=q, answer=a, candidates_raw=candidate_lines(cands),
                                check=lambda r: shown_in_range(r, len(cands)))
        missing = [e for e in reply.entities if not e.shown_in]
        searched = missing[: c.max_entities]
        known = {x["sha256"] for x in cands} | {record.get("query_sha256")}
        rows = [{"name": e.name, "shown_in": e.shown_in, "query": e.query} for e in reply.entities]
        by_name = {r["name"]: r for r in rows}
        found_images: list[dict[str, Any]] = []
        drops: Counter[str] = Counter()
        statuses: Counter[str] = Counter()
        results = await asyncio.gather(*(self._search(e, record, ctx, c) for e in searched))
        for e, (search, kept, gate_drops) in zip(searched, results):
            statuses[search["status"]] += 1
            drops.update(gate_drops)
            fresh = []
            for img in kept:
                if img["sha256"] in known:
                    drops["already_in_pool" if img["sha256"] != record.get("query_sha256") else "same_as_query"] += 1
                    continue
                known.add(img["sha256"])
                fresh.append({**img, "pool": POOL, "entity": e.name})
            by_name[e.name]["search"] = {**search, "kept": len(fresh)}
            found_images.extend(fresh)
        added = await score_images(ctx, c.role, record, found_images)
        payload = {"entities": rows, "added": added, "checker": prov}
        tally = counts(entities=len(rows), unshown=len(missing), searched=len(searched),
                       not_searched_over_cap=len(missing) - len(searched), search_status=statuses,
                       added=len(added), dropped=drops)
        return stage_record(record, "entities", payload, tally)

    async def _search(self, e: Entity, record: dict[str, Any], ctx: Context,
                      c: EntityConfig) -> tuple[dict[str, Any], list[dict[str, Any]], Counter[str]]:
        """(what the search returned, the images kept through the gates, the gate drops)."""
        from kbvqa.tools.base import EpisodeInfo, TextToImageSearchArgs

        tools = ctx.resource("entity_tools", None)
        if tools is None:
            return ({"status": "unavailable", "reason": "no forward image search is configured for this backend "
                     "(web: [tools.web] in --config)", "results": 0}, [], Counter())
        episode = EpisodeInfo(record_id=record["id"], question=record.get("question", ""))
        res = await tools.text_to_image_search(TextToImageSearchArgs(query=e.query), episode, ctx)
        found = [Found(ref=it.image, pool=POOL, page_url=it.url, context=f"{e.name}: {it.title}".strip(),
                       source_url=it.image if "://" in it.image else it.url)
                 for it in res.items if it.image]
        kept, drops = await self._gates.gate_images(found, ctx, c.per_entity, c.per_entity * 3)
        search = {"status": res.status, "results": len(res.items), **({"reason": res.reason} if res.reason else {}),
                  "backend": getattr(tools, "name", type(tools).__name__)}
        return search, kept, drops
