"""The harness side of the tools: validate, look up the cache, call the backend, guard, render.

The agent loop hands every tool call to `Toolbox.call`. Whatever happens — unknown tool, arguments
that do not validate, a backend failure, every result on a blocked domain — the loop gets a
ToolResult whose status says so and whose text the model reads. Every result the backend gives
(errors included) goes into the run's cassette; replay mode answers only from it: a miss raises
`ReplayMiss`, which fails the record, because an exact re-run must never silently go live.
"""

from __future__ import annotations

import time
from functools import cached_property
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from kbvqa.tools.base import TOOL_ARGS, EpisodeInfo, ToolBackend, ToolItem, ToolResult
from kbvqa.tools.cache import ToolCache, query_image_key, tool_key

OBSERVATION_CHARS = 3000  # per item text shown to the model (the full text stays in the trajectory)


class ReplayMiss(RuntimeError):
    """A replayed run asked for a tool result its cassette does not hold."""


def _host(url: str | None) -> str:
    try:
        return (urlsplit(url or "").hostname or "").lower()
    except ValueError:
        return ""


def blocked_domain(url: str | None, domains: tuple[str, ...]) -> str | None:
    """The blocklisted domain `url` is on (the domain itself or a subdomain), or None."""
    host = _host(url)
    for d in domains:
        d = d.lower().lstrip(".")
        if host == d or host.endswith("." + d):
            return d
    return None


def render(result: ToolResult) -> str:
    """The observation text the model reads, always rebuilt from the items (so a guard that drops an
    item drops its text too). A visited page's item text already starts with the C.1 boundary line."""
    if result.status != "ok":
        return f"[{result.tool}: {result.status}] {result.reason}".strip()
    note = f"\n[partly failed: {result.reason}]" if result.reason else ""  # e.g. one query of a batch
    if result.tool == "visit":
        return "\n\n".join(it.text[: OBSERVATION_CHARS * 2] if not it.error else
                            f"[visit: error] the page {it.url} could not be read: {it.error}" for it in result.items)
    lines: list[str] = []
    query = object()
    for it in result.items:
        if it.query != query and it.query is not None:
            query = it.query
            label = "Images for" if result.tool == "text_to_image_search" else "Results for"
            lines.append(f"## {label} {it.query!r}")
        head = f"{it.rank}. {it.title or '(untitled)'}"
        if it.url:
            head += f" — {it.url}"
        if it.score is not None and result.tool == "image_search":
            head += f" (similarity {it.score:.3f})"
        if it.image and result.tool in ("image_search", "text_to_image_search"):
            head += f" [image {it.image}]"
        lines.append(head)
        if it.text:
            lines.append("   " + it.text[:OBSERVATION_CHARS])
    return "\n".join(lines) + note


@dataclass
class Toolbox:
    backend: ToolBackend
    cache: ToolCache | None = None
    replay: bool = False
    blocked_domains: tuple[str, ...] = ()
    calls: dict[str, int] = field(default_factory=dict)

    @cached_property
    def _identity(self) -> str:
        """The backend as the tool cache keys it: its name, and its provider when it has several (web:
        serper, searxng), so results of one provider are never served for another."""
        provider = self.backend.describe().get("provider")
        return f"{self.backend.name}/{provider}" if provider else self.backend.name

    def describe(self) -> dict[str, Any]:
        """For the manifest: the backend, replay mode, cache and leakage blocklist."""
        return {**self.backend.describe(), "replay": self.replay, "cache": str(self.cache.path) if self.cache else None,
                "blocked_domains": list(self.blocked_domains)}

    async def aclose(self) -> None:
        """Close the backend's HTTP pools (the job's context closes its resources at the end)."""
        if hasattr(self.backend, "aclose"):
            await self.backend.aclose()

    def parse(self, name: str, raw_args: Any) -> tuple[Any, dict[str, Any]] | ToolResult:
        """(validated args, canonical args), or an error ToolResult the model will read."""
        model = TOOL_ARGS.get(name)
        if model is None:
            return ToolResult(tool=str(name), status="error",
                              reason=f"unknown tool {name!r}; the tools are {', '.join(TOOL_ARGS)}")
        if not isinstance(raw_args, dict):
            return ToolResult(tool=name, status="error", reason=f"arguments must be a JSON object, got {raw_args!r:.80}")
        try:
            args = model.model_validate(raw_args)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
            return ToolResult(tool=name, status="error", reason=f"bad arguments: {where}: {first.get('msg')}")
        return args, args.canonical()

    async def call(self, name: str, args: Any, canonical: dict[str, Any], episode: EpisodeInfo, ctx: Any) -> ToolResult:
        """Run one validated call (from `parse`): cache, backend, domain guard, rendering."""
        t0 = time.perf_counter()
        self.calls[name] = self.calls.get(name, 0) + 1
        key = tool_key(self._identity, self.backend.version, name, canonical,
                       query_image_key(episode.image_sha256, episode.image_url), episode.locale)
        result = self.cache.get(key, replay=self.replay) if self.cache is not None else None
        if result is not None:
            result.provenance = {**result.provenance, "cached": True}
        elif self.replay:
            raise ReplayMiss(f"tool cassette has no {name} result for {canonical} "
                             f"(backend {self.backend.name}@{self.backend.version}); replay never goes live")
        else:
            try:
                result = await getattr(self.backend, name)(args, episode, ctx)
            except Exception as exc:  # a backend bug: the model sees an error status, the trajectory keeps why
                result = ToolResult(tool=name, status="error", reason=f"backend failed: {type(exc).__name__}: {exc}")
            result.provenance = {"backend": self.backend.name, "version": self.backend.version,
                                 "locale": episode.locale, **result.provenance, "cached": False}
            if self.cache is not None:
                self.cache.put(key, result)
        result = self._guard(result)
        result.text = render(result)
        result.provenance["seconds"] = round(time.perf_counter() - t0, 4)
        return result

    def note_stop(self, record_id: str, turn: int, where: str) -> None:
        """Record where the time budget stopped an episode (live runs; see ToolCache.note_stop)."""
        if self.cache is not None and not self.replay:
            self.cache.note_stop(record_id, turn, where)

    def recorded_stops(self, record_id: str) -> list[tuple[int, str]]:
        """Where the recorded run's time budget stopped this episode (replay only)."""
        return self.cache.recorded_stops(record_id) if self.replay and self.cache is not None else []

    def _guard(self, result: ToolResult) -> ToolResult:
        """Drop items on blocklisted domains (leakage guard); all of them dropped → status blocked."""
        if not self.blocked_domains or not result.items:
            return result
        kept: list[ToolItem] = []
        dropped: list[str] = []
        for it in result.items:
            d = blocked_domain(it.url, self.blocked_domains) or blocked_domain(it.image, self.blocked_domains)
            (dropped.append(d) if d else kept.append(it))
        if not dropped:
            return result
        update: dict[str, Any] = {"items": kept, "provenance": {**result.provenance, "blocked_items": len(dropped),
                                                 "blocked_domains_hit": sorted(set(dropped))}}
        if not kept:
            update.update(status="blocked", reason=f"every result is on a blocked domain ({', '.join(sorted(set(dropped)))})")
        return result.model_copy(update=update)
