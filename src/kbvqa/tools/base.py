"""The one contract every agent tool keeps, whatever backend answers it.

Four tools (seed 001 App. D): `search` (batched text queries, top 10 each), `visit` (up to 5 URLs and
a goal; goal-directed extraction), `image_search` (reverse search on the query image, once per
episode) and `text_to_image_search` (forward image search whose ranked candidates the answer cites
by index). Arguments are pydantic models, so the same definitions render into the paper's `<tools>`
prompt block and into OpenAI tool schemas.

Every call ends in a `ToolResult` with a status — ok | empty | error | blocked | quota | repeated |
unavailable — items with stable ids, the text the model sees, and provenance. An expected failure (a
page that cannot be fetched, a missing API key, a quota) is a status the model reads as an
observation, never content that looks real and never a crash. `unavailable` is a tool the configured
backend does not offer at all (reverse image search on SearXNG): not a failure, so it does not count
towards the agent's run of failed calls.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kbvqa.data.urls import canonical_url

ToolStatus = Literal["ok", "empty", "error", "blocked", "quota", "repeated", "unavailable"]
TOOL_NAMES = ("search", "visit", "image_search", "text_to_image_search")
#: The search APIs the `web` backend speaks (kbvqa.tools.web): Serper-compatible, and SearXNG's JSON API.
WEB_PROVIDERS = ("serper", "searxng")
#: The boundary seed 001 C.1 splits visited pages on; reference construction relies on it.
VISIT_HEADER = "The useful information in {url} for user goal {goal} as follows:"


def _clean(text: str) -> str:
    return " ".join(str(text).split())


class SearchArgs(BaseModel):
    """Perform web text searches and return the top results. Accepts several queries in one call."""

    model_config = ConfigDict(extra="forbid")
    query: list[str] = Field(min_length=1, max_length=10, description="one or more search queries")

    @field_validator("query", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("query")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        out = [_clean(q) for q in v if _clean(q)]
        if not out:
            raise ValueError("at least one non-empty query")
        return out

    def canonical(self) -> dict[str, Any]:
        return {"query": sorted(dict.fromkeys(q.casefold() for q in self.query))}


class VisitArgs(BaseModel):
    """Visit one or more webpages and return what they say about the goal."""

    model_config = ConfigDict(extra="forbid")
    url: list[str] = Field(min_length=1, max_length=5, description="up to 5 page URLs")
    goal: str = Field(description="what to look for on the pages")

    @field_validator("url", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def canonical(self) -> dict[str, Any]:
        return {"url": sorted(dict.fromkeys(canonical_url(u) for u in self.url)), "goal": _clean(self.goal).casefold()}


class ImageSearchArgs(BaseModel):
    """Reverse image search on the question image: identify entities, similar images and related pages.
    Use it only once."""

    model_config = ConfigDict(extra="forbid")
    goal: str = Field("", description="what you want to learn from the image")

    def canonical(self) -> dict[str, Any]:
        return {}  # the result depends on the image alone (its sha256 is part of every key)


class TextToImageSearchArgs(BaseModel):
    """Search for images by text, to show entities mentioned in your answer; cite a result by its
    1-based index."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, description="the image search query")

    def canonical(self) -> dict[str, Any]:
        return {"query": _clean(self.query).casefold()}


TOOL_ARGS: dict[str, type[BaseModel]] = {"search": SearchArgs, "visit": VisitArgs, "image_search": ImageSearchArgs,
                                         "text_to_image_search": TextToImageSearchArgs}


class ToolItem(BaseModel):
    """One result. `id` is stable across runs (derived from what the item is, not from its position)."""

    id: str
    kind: Literal["page", "section", "image"]
    rank: int  # 1-based within its query (text_to_image_search: the idx an image tag cites)
    query: str | None = None  # which query of a batched search produced it
    title: str = ""
    url: str | None = None  # canonical page / article URL
    text: str = ""
    image: str | None = None  # image URL or local path
    sha256: str | None = None  # of the image bytes, when known
    score: float | None = None
    error: str | None = None  # a visit of this one URL failed (the others may not have)


class ToolResult(BaseModel):
    tool: str
    status: ToolStatus
    items: list[ToolItem] = Field(default_factory=list)
    text: str = ""  # what the model reads
    reason: str = ""  # why, for any status but ok
    provenance: dict[str, Any] = Field(default_factory=dict)  # backend, version, locale, cached, ...

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class EpisodeInfo(BaseModel):
    """What a backend may know about the episode a call comes from."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    record_id: str
    question: str = ""
    image: Path | None = None  # the query image, resolved
    image_sha256: str | None = None
    image_url: str | None = None  # a public URL of the query image, when the sample has one (web lens)
    locale: str = "en"


class ToolBackend(Protocol):
    """A backend answers the four tools. It raises only for its own bugs: expected failures are
    ToolResults with a status."""

    name: str
    version: str

    def describe(self) -> dict[str, Any]: ...

    async def search(self, args: SearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult: ...

    async def visit(self, args: VisitArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult: ...

    async def image_search(self, args: ImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult: ...

    async def text_to_image_search(self, args: TextToImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult: ...


def item_id(*parts: Any) -> str:
    """A short stable id from what an item is (its canonical URL, section, image hash)."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:12]


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def locale_for(text: str) -> str:
    """`zh` when the text holds CJK characters (search then asks for Chinese results), else `en`."""
    return "zh" if _CJK.search(text or "") else "en"


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tool_schemas() -> list[dict[str, Any]]:
    """The four tools as OpenAI `tools=[...]` function schemas (for `--protocol tools`)."""
    out = []
    for name, model in TOOL_ARGS.items():
        schema = model.model_json_schema()
        schema.pop("title", None)
        for p in schema.get("properties", {}).values():
            p.pop("title", None)
        out.append({"type": "function", "function": {"name": name, "description": (model.__doc__ or "").strip(),
                                                      "parameters": schema}})
    return out


def tools_block() -> str:
    """The `<tools>` block of the system prompt (one JSON object per tool, as in seed 001 App. D)."""
    import json

    lines = []
    for s in tool_schemas():
        f = s["function"]
        lines.append(json.dumps({"name": f["name"], "description": " ".join(f["description"].split()),
                                 "parameters": f["parameters"].get("properties", {})}, ensure_ascii=False))
    return "<tools>\n" + "\n".join(lines) + "\n</tools>"
