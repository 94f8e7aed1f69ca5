"""Human-verified interleaved reference construction (seed 001 §3.2, App. C) over agent trajectories.

`kbvqa reference build` runs eight stages, each a registered Stage run by the runner as its own Job
with its own journal in the build folder (resume, manifest, exactly once, a status and a reason for
every item); an item goes on to the next stage only when the previous one ended `ok` for it. With
the five-rule filter after the synthesis (`filter_placement = "after_synthesis"`, the default: App.
C.2's account):

    urls.jsonl         reference-urls         every URL the trajectory touched, scored; top 5 (urls.py)
    harvest.jsonl      reference-harvest      page images + the reverse-search pool, gated (harvest.py)
    candidates.jsonl   reference-candidates   two-image VLM scores; top 10 (candidates.py)
    entities.jsonl     reference-entities     forward image search for unshown named entities (entities.py)
    synthesis.jsonl    reference-synthesis    the interleaved draft, tags validated (synthesis.py)
    filter.jsonl       reference-filter       the five-rule VLM filter on each tag, ±200 chars (filter.py)
    dedup.jsonl        reference-dedup        certain hash duplicates, the VLM probe for every other pair (dedup.py)
    consistency.jsonl  reference-consistency  the multimodal consistency check; failures flagged (consistency.py)

With `filter_placement = "before_synthesis"` (§3.2's wording) the filter and de-duplication run on
the candidates, between the entity search and the synthesis. Every stage's manifest records the
placement. Then `kbvqa reference audit-export` / `audit-import` (audit.py) turn reviewed drafts
(consistency.jsonl) into NoteVQA references. `images/` holds every kept image (content-addressed),
`verdicts.sqlite` the cached VLM verdicts, `funnel.json` the per-stage counts (funnel.py).

Offline (no model in a stage's role): URL selection uses an embedded, labelled ranker (urls.py);
harvesting and hashing are deterministic; the first VLM stage ends each item that reaches it with
status `needs_model` and a reason starting "NeedsModel:", which `--resume` retries once a model is
configured. Nothing is guessed in place of a model's verdict.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.pipelines.reference.audit import export_sheet, import_sheet
from kbvqa.pipelines.reference.candidates import CandidateConfig, CandidateScoring
from kbvqa.pipelines.reference.common import Placement, VerdictCache
from kbvqa.pipelines.reference.consistency import ConsistencyCheck, ConsistencyConfig
from kbvqa.pipelines.reference.dedup import Dedup, DedupConfig
from kbvqa.pipelines.reference.entities import EntityConfig, EntitySearch
from kbvqa.pipelines.reference.filter import FilterConfig, FiveRuleFilter
from kbvqa.pipelines.reference.funnel import stage_lines, stage_summary
from kbvqa.pipelines.reference.harvest import Harvest, HarvestConfig, ImageStore, LoopFetcher, PageScraper
from kbvqa.pipelines.reference.records import intake
from kbvqa.pipelines.reference.synthesis import Synthesis, SynthesisConfig
from kbvqa.pipelines.reference.urls import UrlConfig, UrlScoring
from kbvqa.runner.config import load_table
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context, Stage

__all__ = ["STAGES", "BuildResult", "ReferenceConfig", "ReferenceSetupError", "build_references", "export_sheet",
           "import_sheet", "load_reference_config", "reference_context", "stage_job", "stage_plan"]

_URLS = ("urls", "urls.jsonl", UrlScoring, "urls")
_HARVEST = ("harvest", "harvest.jsonl", Harvest, "harvest")
_CANDIDATES = ("candidates", "candidates.jsonl", CandidateScoring, "candidates")
_ENTITIES = ("entities", "entities.jsonl", EntitySearch, "entities")
_FILTER = ("filter", "filter.jsonl", FiveRuleFilter, "filter")
_DEDUP = ("dedup", "dedup.jsonl", Dedup, "dedup")
_SYNTHESIS = ("draft", "synthesis.jsonl", Synthesis, "synthesis")
_CONSISTENCY = ("consistency", "consistency.jsonl", ConsistencyCheck, "consistency")
#: (key, journal file, stage class, config field) in run order, per filter placement; the key names
#: the record field a stage adds and its entry in the funnel.
PLANS: dict[str, tuple[tuple[str, str, type[Stage], str], ...]] = {
    "after_synthesis": (_URLS, _HARVEST, _CANDIDATES, _ENTITIES, _SYNTHESIS, _FILTER, _DEDUP, _CONSISTENCY),
    "before_synthesis": (_URLS, _HARVEST, _CANDIDATES, _ENTITIES, _FILTER, _DEDUP, _SYNTHESIS, _CONSISTENCY),
}
STAGES = PLANS["after_synthesis"]
IMAGES_DIR = "images"
VERDICTS_FILE = "verdicts.sqlite"
FUNNEL_FILE = "funnel.json"
FINAL_JOURNAL = "consistency.jsonl"  # the drafts as they go to the human audit


def stage_plan(placement: str) -> tuple[tuple[str, str, type[Stage], str], ...]:
    return PLANS[placement]


class ReferenceSetupError(ValueError):
    """The build cannot run as configured (the message says what to change)."""


#: What seed 001 C.1 downloads with ("a browser User-Agent"); kbvqa's own spelling of a common one.
BROWSER_USER_AGENT = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 "
                      "Safari/537.36")


class FetchSettings(BaseModel):
    """The guarded fetcher for `--tools web` (pages and images): seed 001 used a 10 s timeout, 32
    downloads at once and a browser User-Agent (the default here; set `user_agent` to the fetcher's
    own `kbvqa/0.1 ...` to announce the crawler). The byte cap, the time cap and the address guard
    stay in force whatever the pool sizes. `allow_hosts` lifts the address guard for exact hosts
    (tests: 127.0.0.1)."""

    model_config = ConfigDict(extra="forbid")
    user_agent: str = Field(BROWSER_USER_AGENT, min_length=1)
    allow_hosts: list[str] = Field(default_factory=list)
    allow_private: bool = False
    max_bytes: int = Field(10_000_000, ge=1)
    timeout: float = Field(10.0, gt=0)
    concurrency: int = Field(32, ge=1)
    retries: int = Field(1, ge=0)


class ReferenceConfig(BaseModel):
    """The `[reference]` table of a kbvqa.toml: one sub-table per stage plus `[reference.fetch]`."""

    model_config = ConfigDict(extra="forbid")
    #: after_synthesis: App. C.2 (each tag with ±200 characters of the draft); before_synthesis: §3.2's
    #: wording (each candidate with its page text). The default follows the paper's detailed account.
    filter_placement: Placement = "after_synthesis"
    urls: UrlConfig = Field(default_factory=UrlConfig)
    harvest: HarvestConfig = Field(default_factory=HarvestConfig)
    candidates: CandidateConfig = Field(default_factory=CandidateConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    entities: EntityConfig = Field(default_factory=EntityConfig)
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    consistency: ConsistencyConfig = Field(default_factory=ConsistencyConfig)
    fetch: FetchSettings = Field(default_factory=FetchSettings)

    def roles(self) -> tuple[str, ...]:
        """The model roles the stages read (what `--llm/--model` fills)."""
        cfgs = [getattr(self, f) for *_, f in STAGES]
        return tuple(dict.fromkeys(c.role for c in cfgs if "role" in type(c).model_fields))

    def settled(self, backend: str | None = None) -> ReferenceConfig:
        """A copy with the build-wide settings handed down to the stages that read them (the harvest
        backend, the filter placement, the harvester's gates for the entity search), so each stage's
        manifest records what it ran with."""
        harvest = self.harvest.model_copy(update={"backend": backend or self.harvest.backend})
        place = {"placement": self.filter_placement}
        return self.model_copy(update={
            "harvest": harvest, "filter": self.filter.model_copy(update=place),
            "dedup": self.dedup.model_copy(update=place), "synthesis": self.synthesis.model_copy(update=place),
            "entities": self.entities.model_copy(update={"backend": harvest.backend, "harvest": harvest})})


def load_reference_config(path: str | Path | None) -> ReferenceConfig:
    """`[reference]` of a kbvqa.toml (defaults when there is no file or no table); a bad key or value
    is an error naming the file and the dotted key."""
    return load_table(path, "reference", ReferenceConfig, error=ReferenceSetupError)


def reference_context(out_dir: Path, config: ReferenceConfig, *, roles: Mapping[str, Any] | None = None,
                      kb: Any = None, kb_images: Path | None = None, kb_image_rule: str = "auto",
                      fetcher: Any = None, entity_tools: Any = None, page_scraper: Any = None,
                      web_tools: Mapping[str, Any] | None = None) -> Context:
    """The context every stage job of one build shares: model roles, the KB, the image store, the
    verdict cache, the KB image resolver (local), the guarded fetcher (web), the page scraper (web with
    `page_source = "scrape"`: given, else built from the `web_tools` settings, `[tools.web]`) and the
    forward image search of the entity stage (`entity_tools`; local: the KB's, web: given by the caller)."""
    from kbvqa.pipelines.index import ImageResolver

    backend = config.harvest.backend
    if backend == "local" and (kb is None or kb_images is None):
        raise ReferenceSetupError("--tools local harvests the KB's own images offline: give --kb and --kb-images "
                                  "(the folder holding the KB's image files)")
    resources: dict[str, Any] = {"image_store": ImageStore(out_dir / IMAGES_DIR),
                                 "verdicts": VerdictCache(out_dir / VERDICTS_FILE)}
    if kb_images is not None:
        resources["kb_image_file"] = ImageResolver(Path(kb_images).resolve(), kb_image_rule).resolve  # absolute: Ray
        resources["local_image_root"] = Path(kb_images).resolve()
    if backend == "web":
        resources["fetcher"] = fetcher or LoopFetcher(**config.fetch.model_dump())
        if config.harvest.page_source == "scrape":
            resources["page_scraper"] = page_scraper or PageScraper(
                dict(web_tools or {}), allow_hosts=config.fetch.allow_hosts, allow_private=config.fetch.allow_private)
    if entity_tools is None and backend == "local":
        from kbvqa.tools.local import LocalTools

        entity_tools = LocalTools()
    if entity_tools is not None:
        resources["entity_tools"] = entity_tools
    return Context(roles=dict(roles or {}), kb=kb, resources=resources)


def stage_job(key: str, config: ReferenceConfig, ctx: Context) -> Job:
    """The Job of one stage, by name: urls, harvest, candidates, entities, filter, dedup, synthesis
    (or `draft`, the field it adds), consistency. `config` is used as given (see `settled`)."""
    for k, _, cls, cfg in STAGES:
        if key in (k, cfg):
            stage = cls(getattr(config, cfg))
            store = ctx.resources.get("image_store")  # the harvested images the records name (absolute paths)
            return Job([stage], ctx, description=f"reference {cfg}",
                       run_config={"pipeline": "reference", "stage": cfg, "filter_placement": config.filter_placement,
                                   "config": getattr(config, cfg).model_dump(mode="json"),
                                   **({"image_root": str(store.root)} if store is not None else {})})
    raise KeyError(f"no reference stage {key!r} (stages: {', '.join(cfg for *_, cfg in STAGES)})")


def _check_placement(funnel: Path, placement: str, resume: bool) -> None:
    if not resume or not funnel.is_file():
        return
    try:
        before = json.loads(funnel.read_text(encoding="utf-8")).get("intake", {}).get("filter_placement")
    except ValueError:
        return
    if before and before != placement:
        raise ReferenceSetupError(f"{funnel.parent} was built with filter_placement = {before!r}; resuming it with "
                                  f"{placement!r} would mix the two orders: use --no-resume or another --out")


@dataclass
class BuildResult:
    out: Path
    intake: dict[str, Any]
    stages: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "intake": self.intake, "stages": self.stages,
                **({"warnings": self.warnings} if self.warnings else {})}


def build_references(samples: str | Path, trajectories: str | Path, out: str | Path, *,
                     config: ReferenceConfig | None = None, roles: Mapping[str, Any] | None = None, kb: Any = None,
                     kb_images: Path | None = None, tools: Literal["local", "web"] | None = None,
                     image_root: Path | None = None, sample_format: str | None = None, resume: bool = True,
                     concurrency: int = 8, limit: int | None = None, progress: bool = False,
                     fetcher: Any = None, entity_tools: Any = None, web_tools: Mapping[str, Any] | None = None,
                     page_scraper: Any = None,
                     on_stage: Callable[[dict[str, Any]], None] | None = None) -> BuildResult:
    """Run the eight stage jobs in order over `samples` ⋈ `trajectories`; write `funnel.json` and
    return the funnel. `tools` (default: the backend the trajectories were made with, else local)
    chooses how pages are harvested and which forward image search the entity stage uses (web:
    `entity_tools`, else the WebTools built from `web_tools` settings, `[tools.web]`). `on_stage` sees each stage's summary as it finishes. Resuming a folder built
    with the other filter placement is refused (its journals hold the other order's records)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = (config or ReferenceConfig()).model_copy(deep=True)
    taken = intake(samples, trajectories, image_root=image_root, fmt=sample_format)
    records = taken.records[:limit] if limit is not None else taken.records
    used = Counter(r["trajectory_source"].get("tools") for r in records)
    backend = tools or (next(iter(used)) if len(used) == 1 and next(iter(used)) in ("local", "web") else "local")
    config = config.settled(backend)
    _check_placement(out / FUNNEL_FILE, config.filter_placement, resume)
    if backend == "web" and entity_tools is None and web_tools is not None:
        from kbvqa.pipelines.reference.entities import LoopTools

        entity_tools = LoopTools(dict(web_tools))
    ctx = reference_context(out, config, roles=roles, kb=kb, kb_images=kb_images, fetcher=fetcher,
                            entity_tools=entity_tools, page_scraper=page_scraper, web_tools=web_tools)
    scraper = ctx.resources.get("page_scraper")
    if page_scraper is None and isinstance(scraper, PageScraper) and records:
        why = scraper.check()
        if why:
            raise ReferenceSetupError(f"pages are harvested as the paper reads them, as markdown from the web "
                                      f"backend's scrape endpoint ([reference.harvest] page_source = \"scrape\"), "
                                      f"which cannot run: {why}. Give the key ([tools.web] api_key_env), or set "
                                      "page_source = \"html\" to read raw HTML through the guarded fetcher")
    warnings = []
    if taken.counts["unguided"]:
        warnings.append(f"{taken.counts['unguided']} trajectories were not run with the short reference as guidance "
                        "(seed 001 collects them guided); references are built from them anyway")
    summaries: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = records
    for key, journal, _, label in stage_plan(config.filter_placement):
        path = out / journal
        ids = [r["id"] for r in inputs]
        if inputs:
            stage_job(key, config, ctx).run(inputs, out=path, resume=resume, concurrency=concurrency,
                                            progress=progress)
        lines = stage_lines(path, ids)
        summary = stage_summary(key, lines, label)
        summaries.append(summary)
        if on_stage is not None:
            on_stage(summary)
        if key == "urls" and config.urls.role in ctx.roles:
            offline = sum(1 for ln in lines if ln.get("status") == "ok"
                          and (ln.get("urls") or {}).get("scorer", {}).get("backend") == "rules")
            if offline:
                warnings.append(f"{offline} item(s) keep the URL selection of an earlier offline run (resume keeps "
                                "ok items); run with --no-resume to score their URLs with the model")
        inputs = [{k: v for k, v in ln.items() if k not in ("status", "reason", "attempts", "stage")}
                  for ln in lines if ln.get("status") == "ok"]
    result = BuildResult(out, {**taken.counts, "limited_to": len(records), "tools": backend,
                               "filter_placement": config.filter_placement}, summaries, warnings)
    (out / FUNNEL_FILE).write_text(json.dumps(result.as_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    return result
