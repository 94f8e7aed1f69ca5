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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kbvqa.pipelines.reference.audit import export_sheet, import_sheet
from kbvqa.pipelines.reference.candidates import CandidateConfig, CandidateScoring
from kbvqa.pipelines.reference.common import Placement
from kbvqa.pipelines.reference.consistency import ConsistencyCheck, ConsistencyConfig
from kbvqa.pipelines.reference.dedup import Dedup, DedupConfig
from kbvqa.pipelines.reference.entities import EntityConfig, EntitySearch
from kbvqa.pipelines.reference.filter import FilterConfig, FiveRuleFilter
from kbvqa.pipelines.funnel import stage_lines, stage_summary
from kbvqa.pipelines.reference.harvest import Harvest, HarvestConfig, ImageStore, LoopFetcher, PageScraper
from kbvqa.pipelines.reference.records import intake, trajectory_tools
from kbvqa.pipelines.reference.synthesis import Synthesis, SynthesisConfig
from kbvqa.pipelines.reference.urls import UrlConfig, UrlScoring
from kbvqa.runner.config import load_table
from kbvqa.runner.job import Job
from kbvqa.runner.options import JobOptions, ModelFlags, RunOptions, read_table
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages.ask import VerdictCache

__all__ = ["STAGES", "BuildResult", "ReferenceConfig", "ReferenceOptions", "ReferenceSetupError", "build_references",
           "export_sheet", "import_sheet", "load_reference_config", "reference_context", "reference_options",
           "stage_job", "stage_plan"]

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


def _given(table: Any) -> dict[str, Any]:
    """A stage table as it was given: a dict as written, or a model's explicitly set fields."""
    if isinstance(table, BaseModel):
        return {k: getattr(table, k) for k in table.model_fields_set}
    return dict(table) if isinstance(table, Mapping) else {}


class ReferenceConfig(BaseModel):
    """The `[reference]` table of a kbvqa.toml: one sub-table per stage plus `[reference.fetch]`.

    Two settings have one home each and are handed to the stages that read them when the table is
    validated: `filter_placement` (the filter, de-duplication and synthesis stages' `placement`) and
    `[reference.harvest]` (the entity search's `backend` and its image gates, `entities.harvest`).
    Setting one of those copies to another value is an error naming the home."""

    model_config = ConfigDict(extra="forbid")
    #: after_synthesis: App. C.2 (each tag with ±200 characters of the draft); before_synthesis: §3.2's
    #: wording (each candidate with its page text). The default follows the paper's detailed account.
    filter_placement: Placement = "after_synthesis"
    urls: UrlConfig = Field(default_factory=UrlConfig)
    harvest: HarvestConfig = Field(default_factory=HarvestConfig)
    candidates: CandidateConfig = Field(default_factory=CandidateConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig, validate_default=True)
    dedup: DedupConfig = Field(default_factory=DedupConfig, validate_default=True)
    entities: EntityConfig = Field(default_factory=EntityConfig, validate_default=True)
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig, validate_default=True)
    consistency: ConsistencyConfig = Field(default_factory=ConsistencyConfig)
    fetch: FetchSettings = Field(default_factory=FetchSettings)

    @field_validator("filter", "dedup", "synthesis", mode="before")
    @classmethod
    def _placed(cls, table: Any, info: ValidationInfo) -> Any:
        """The stage runs where `filter_placement` puts it (its own `placement` is that value)."""
        place = info.data.get("filter_placement")
        if place is None:  # filter_placement itself was refused: its error is the one to read
            return table
        given = _given(table)
        if given.get("placement", place) != place:
            raise ValueError(f"placement {given['placement']!r} differs from filter_placement {place!r}: set "
                             "[reference] filter_placement, the one place the order of the stages is chosen")
        return {**given, "placement": place}

    @field_validator("entities", mode="before")
    @classmethod
    def _harvested_alike(cls, table: Any, info: ValidationInfo) -> Any:
        """The entity search downloads on the harvest's backend through the harvest's gates."""
        harvest = info.data.get("harvest")
        if harvest is None:
            return table
        given = _given(table)
        for key, value in (("backend", harvest.backend), ("harvest", harvest)):
            if key in given and given[key] != value:
                raise ValueError(f"{key} is [reference.harvest]'s (the entity search harvests alike): set it there")
        return {**given, "backend": harvest.backend, "harvest": harvest}

    def roles(self) -> tuple[str, ...]:
        """The model roles the stages read (what `--llm/--model` fills)."""
        cfgs = [getattr(self, f) for *_, f in STAGES]
        return tuple(dict.fromkeys(c.role for c in cfgs if "role" in type(c).model_fields))

    def settled(self, backend: str | None = None) -> ReferenceConfig:
        """These tables validated again, on the harvest `backend` when one is given: for a caller that
        changed a table in place or by `model_copy` (the build itself never needs it)."""
        data = {k: _given(v) if isinstance(v, BaseModel) else v
                for k in self.model_fields_set for v in [getattr(self, k)]}
        for key in ("filter", "dedup", "synthesis"):
            data.get(key, {}).pop("placement", None)
        for key in ("backend", "harvest"):
            data.get("entities", {}).pop(key, None)
        if backend is not None:
            data["harvest"] = {**_given(self.harvest), "backend": backend}
        return type(self).model_validate(data)


def load_reference_config(path: str | Path | None) -> ReferenceConfig:
    """`[reference]` of a kbvqa.toml (defaults when there is no file or no table); a bad key or value
    is an error naming the file and the dotted key."""
    return load_table(path, "reference", ReferenceConfig, error=ReferenceSetupError)


class ReferenceOptions(JobOptions):
    """Every setting of one `kbvqa reference build`, built once (`reference_options`: the class
    defaults, under `[reference]` of `--config`, under the flags) and handed down unchanged: each stage
    gets its table `opts.reference.<stage>` as validated, the run loop `opts.run`, the model roles
    `opts.models`; every stage's manifest and `funnel.json` record `used()`.

    The harvest backend has one home, `reference.harvest.backend` (`--tools`); when neither the flag
    nor `[reference.harvest] backend` sets it, it is the one backend the trajectories' ok episodes
    name (kbvqa's reading of "the backend the agent used"), local when they name none or several."""

    samples: Path | None = None  # benchmark file (any kbvqa format); required
    trajectories: Path | None = None  # `kbvqa answer --pipeline agent` output; required
    out: Path | None = None  # the build folder; required
    kb: Path | None = None
    kb_images: Path | None = None  # folder holding the KB's image files (local backend)
    images: Path | None = None  # folder the samples' images are relative to (default: the samples' folder)
    fmt: str | None = None  # the samples' format (default: detected)
    config: Path | None = None  # kbvqa.toml: [models.*] roles, [reference.*], [tools.web]
    reference: ReferenceConfig = Field(default_factory=ReferenceConfig)
    models: ModelFlags = Field(default_factory=ModelFlags)
    run: RunOptions = Field(default_factory=RunOptions)

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "tools": ("reference.harvest.backend",), "concurrency": ("run.concurrency",), "timeout": ("models.timeout",)}
    FLAGS: ClassVar[Mapping[str, str]] = {"fmt": "--format", "reference.harvest.backend": "--tools"}

    @model_validator(mode="before")
    @classmethod
    def _backend_of_trajectories(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("trajectories") is None:
            return data
        ref = data.get("reference")
        harvest = ref.get("harvest") if isinstance(ref, dict) else None
        if isinstance(ref, BaseModel) or isinstance(harvest, BaseModel) or "backend" in (harvest or {}):
            return data
        used = trajectory_tools(data["trajectories"])
        if used is None:
            return data
        return {**data, "reference": {**(ref or {}), "harvest": {**(harvest or {}), "backend": used}}}

    @model_validator(mode="after")
    def _inputs_given(self) -> ReferenceOptions:
        missing = [f"--{k}" for k in ("samples", "trajectories", "out") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} must be given")
        return self


def reference_options(**flags: Any) -> ReferenceOptions:
    """The build's options from the flags (names as `ReferenceOptions.flag_paths()` lists them; None:
    not given) over `[reference]` of the `config` file they name (errors name `FILE: reference.KEY`)."""
    config = flags.get("config")
    table = read_table(config, "reference")
    return ReferenceOptions.build({"reference": table} if table else {}, source=str(config) if config else None,
                                  **flags)


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
    options: dict[str, Any] | None = None  # ReferenceOptions.used(): the settings the build ran with

    def as_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "intake": self.intake, "stages": self.stages,
                **({"warnings": self.warnings} if self.warnings else {}),
                **({"options": self.options} if self.options is not None else {})}


def build_references(opts: ReferenceOptions, *, roles: Mapping[str, Any] | None = None, kb: Any = None,
                     progress: bool = False, fetcher: Any = None, entity_tools: Any = None,
                     web_tools: Mapping[str, Any] | None = None, page_scraper: Any = None,
                     on_stage: Callable[[dict[str, Any]], None] | None = None) -> BuildResult:
    """Run the eight stage jobs in order over `opts.samples` ⋈ `opts.trajectories` into `opts.out`;
    write `funnel.json` and return the funnel. `kb` is the open KB (default: `opts.kb` opened here).
    The harvest backend (`opts.reference.harvest.backend`) chooses how pages are harvested and which
    forward image search the entity stage uses (web: `entity_tools`, else the WebTools built from
    `web_tools` settings, `[tools.web]`). `on_stage` sees each stage's summary as it finishes.
    Resuming a folder built with the other filter placement is refused (its journals hold the other
    order's records)."""
    config, run = opts.reference, opts.run
    assert opts.out is not None and opts.samples is not None and opts.trajectories is not None  # _inputs_given
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    if kb is None and opts.kb is not None:
        from kbvqa.kb.store import open_kb

        kb = open_kb(opts.kb)
    taken = intake(opts.samples, opts.trajectories, image_root=opts.images, fmt=opts.fmt)
    records = taken.records[:run.limit] if run.limit is not None else taken.records
    backend = config.harvest.backend
    _check_placement(out / FUNNEL_FILE, config.filter_placement, run.resume)
    if backend == "web" and entity_tools is None and web_tools is not None:
        from kbvqa.pipelines.reference.entities import LoopTools

        entity_tools = LoopTools(dict(web_tools))
    ctx = reference_context(out, config, roles=roles, kb=kb, kb_images=opts.kb_images, fetcher=fetcher,
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
    extra = config.harvest.kbvqa_filters()
    if extra:
        on = ", ".join(f"{k} = {v}" for k, v in extra.items())
        warnings.append(f"harvest: kbvqa's own image filters are on ({on}), after seed 001's 100-px floor; "
                        "their drops are counted in the harvest row (too_elongated, tiny_file, gif, svg) and are "
                        "not the paper's")
    used = opts.used()
    summaries: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = records
    for key, journal, _, label in stage_plan(config.filter_placement):
        path = out / journal
        ids = [r["id"] for r in inputs]
        if inputs:
            stage_job(key, config, ctx).run(inputs, out=path, resume=run.resume, concurrency=run.concurrency,
                                            progress=progress, run_config={"options": used})
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
                               "filter_placement": config.filter_placement}, summaries, warnings, used)
    (out / FUNNEL_FILE).write_text(json.dumps(result.as_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    return result
