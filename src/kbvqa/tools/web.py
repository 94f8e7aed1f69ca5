"""The `web` tool backend: the four tools over a Serper-compatible API and guarded page fetches.

- search: `POST {base}/search` {"q", "num": 10, "gl", "hl"} per query (CJK queries ask for gl=cn,
  hl=zh-cn, as Tongyi DeepResearch does), organic results ranked 1..N per query;
- visit: each page (≤5) through the project's GuardedFetcher (or a Serper-compatible scrape endpoint,
  `visit_via="scrape"`), HTML to text with the standard library parser (script/style/nav dropped,
  headings and paragraphs kept, og:image read), then the goal extractor; a page that cannot be read
  is an item with `error` and the fetch status, never a summary that looks like content;
- image_search: `POST {base}/lens` {"url"} — it needs a PUBLIC URL of the query image
  (`EpisodeInfo.image_url`); Lens downloads the image itself, so a local file cannot be sent;
- text_to_image_search: `POST {base}/images`, at most 5 distinct images (the indices image tags cite).

Trust boundary: the API base URL (and scrape URL) is the user's own configuration and is called
directly, like a model server's base URL — a local proxy or mock on 127.0.0.1 is legitimate there.
The SSRF guard applies to what the web chooses: visited pages and their redirects (and, later,
harvested images). The key is read from the environment variable the config names and sent as
X-API-KEY; it never appears in `describe()`, results or errors.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Literal
from urllib.parse import urljoin

import httpx

from kbvqa.data.fetch import (HTML_TYPES, GuardedFetcher, RetryPolicy, retry_after_seconds, shared_ssl_context,
                              url_refusal)
from kbvqa.data.urls import canonical_url
from kbvqa.tools import TOOL_BACKENDS
from kbvqa.tools.base import (EpisodeInfo, ImageSearchArgs, SearchArgs, TextToImageSearchArgs, ToolItem, ToolResult,
                              ToolStatus, VisitArgs, item_id, locale_for)
from kbvqa.tools.extract import ExtractionFailed, extract, visit_text

DEFAULT_BASE_URL = "https://google.serper.dev"
DEFAULT_SCRAPE_URL = "https://scrape.serper.dev"
_DROP = frozenset({"script", "style", "nav", "noscript", "template", "svg", "iframe", "footer", "aside", "form"})
_BLOCK = frozenset({"p", "div", "br", "li", "ul", "ol", "tr", "td", "th", "table", "section", "article", "main",
                    "header", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "dd", "dt", "figcaption"})
_OG_IMAGE = ("og:image", "og:image:url", "og:image:secure_url")


class WebToolsConfigError(ValueError):
    """The web backend cannot be built as configured (a missing key, an unknown visit mode)."""


class _PageText(HTMLParser):
    """HTML → (title, readable text, og:image); boilerplate containers are skipped wholesale."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self.og_image: str | None = None
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROP:
            self._skip += 1
        elif tag == "meta" and self.og_image is None:
            a = dict(attrs)
            if (a.get("property") or a.get("name") or "").lower() in _OG_IMAGE and a.get("content"):
                self.og_image = a["content"]
        if tag == "title" and not self._skip and not self.title_parts:  # not an <svg><title> tooltip
            self._in_title = True
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROP and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skip:
            self.parts.append(data)


@dataclass
class Page:
    title: str = ""
    text: str = ""
    image: str | None = None


def html_to_page(html: str, base_url: str) -> Page:
    """Readable text of an HTML page: one line per block, whitespace collapsed, empty lines dropped."""
    p = _PageText()
    p.feed(html)
    p.close()
    lines = (" ".join(line.split()) for line in "".join(p.parts).split("\n"))
    image = urljoin(base_url, p.og_image.strip()) if p.og_image else None
    return Page(title=" ".join("".join(p.title_parts).split()), text="\n".join(x for x in lines if x),
                image=image if image and image.startswith(("http://", "https://")) else None)


@dataclass
class ApiReply:
    status: ToolStatus
    data: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    attempts: int = 0


def _status_of(failures: list[ApiReply]) -> ToolStatus:
    """No result at all: quota if any call hit it, else error if any failed, else empty."""
    statuses = {f.status for f in failures}
    return "quota" if "quota" in statuses else "error" if "error" in statuses else "empty"


@TOOL_BACKENDS.register("web", help="a Serper-compatible search API and guarded page fetches")
class WebTools:
    name = "web"
    version = "1"

    def __init__(self, *, base_url: str = DEFAULT_BASE_URL, api_key_env: str = "SERPER_API_KEY",
                 visit_via: Literal["fetch", "scrape"] = "fetch", scrape_url: str = DEFAULT_SCRAPE_URL,
                 top_k: int = 10, images_per_query: int = 5, concurrency: int = 8, timeout: float = 30.0,
                 retries: int = 3, backoff: float = 0.5, gl: str = "us", hl: str = "en",
                 extractor_role: str | None = "extractor", max_page_bytes: int = 5_000_000,
                 page_timeout: float = 20.0, allow_hosts: tuple[str, ...] = (), allow_private: bool = False,
                 fetcher: GuardedFetcher | None = None):
        key = os.environ.get(api_key_env, "").strip()
        if not key:
            raise WebToolsConfigError(f"the web tools need an API key in the environment variable {api_key_env} "
                                      f"(export it, or name another variable with api_key_env)")
        if visit_via not in ("fetch", "scrape"):
            raise WebToolsConfigError(f"visit_via must be 'fetch' or 'scrape', not {visit_via!r}")
        self.base_url, self.api_key_env, self.visit_via = base_url.rstrip("/"), api_key_env, visit_via
        self.scrape_url, self.top_k, self.images_per_query = scrape_url, top_k, min(images_per_query, 5)
        self.gl, self.hl, self.extractor_role = gl, hl, extractor_role
        self.retry = RetryPolicy(retries=retries, backoff=backoff)
        self._slots = asyncio.Semaphore(concurrency)
        self._api = httpx.AsyncClient(timeout=timeout, verify=shared_ssl_context(),
                                      headers={"X-API-KEY": key, "Content-Type": "application/json"})
        self.fetcher = fetcher or GuardedFetcher(allow_hosts=allow_hosts, allow_private=allow_private,
                                                 max_bytes=max_page_bytes, timeout=page_timeout,
                                                 concurrency=concurrency, retries=retries, backoff=backoff)

    def __repr__(self) -> str:  # the default repr would show the client, whose headers hold the key
        return f"WebTools(base_url={self.base_url!r}, api_key_env={self.api_key_env!r}, visit_via={self.visit_via!r})"

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "version": self.version, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "visit_via": self.visit_via,
                "scrape_url": self.scrape_url if self.visit_via == "scrape" else None, "top_k": self.top_k,
                "images_per_query": self.images_per_query, "extractor_role": self.extractor_role,
                "fetch": self.fetcher.describe()}

    async def aclose(self) -> None:
        await self._api.aclose()
        await self.fetcher.aclose()

    def _locale(self, text: str, episode: EpisodeInfo | None = None) -> dict[str, str]:
        zh = locale_for(text) == "zh" or (episode is not None and episode.locale == "zh")
        return {"gl": "cn", "hl": "zh-cn"} if zh else {"gl": self.gl, "hl": self.hl}

    async def _call(self, url: str, body: dict[str, Any]) -> ApiReply:
        """One API call with bounded concurrency and retries; every outcome is an ApiReply."""

        async def attempt() -> tuple[ApiReply, bool, float | None]:
            async with self._slots:
                try:
                    resp = await self._api.post(url, json=body)
                except httpx.TimeoutException:
                    return ApiReply("error", reason=f"timed out calling {url}"), True, None
                except httpx.HTTPError as exc:
                    return ApiReply("error", reason=f"calling {url} failed: {type(exc).__name__}: {exc}"), False, None
            code, detail = resp.status_code, " ".join(resp.text[:200].split())
            if code == 429:
                return ApiReply("quota", reason=f"HTTP 429 rate limited by {url}"), True, retry_after_seconds(resp)
            if code >= 500:
                return ApiReply("error", reason=f"HTTP {code} from {url}: {detail}"), True, None
            if code == 402 or (code >= 400 and "credit" in detail.lower()):  # Serper: "Not enough credits"
                return ApiReply("quota", reason=f"HTTP {code} from {url}: {detail}"), False, None
            if code >= 300:
                return ApiReply("error", reason=f"HTTP {code} from {url}: {detail}"), False, None
            try:
                data = resp.json()
            except ValueError:
                return ApiReply("error", reason=f"{url} answered HTTP {code} with a body that is not JSON"), False, None
            if not isinstance(data, dict):
                return ApiReply("error", reason=f"{url} answered a JSON {type(data).__name__}, not an object"), False, None
            return ApiReply("ok", data), False, None

        reply, attempts = await self.retry.run(attempt)
        reply.attempts = attempts
        if reply.status != "ok" and reply.attempts > 1:
            reply.reason += f" (after {reply.attempts} attempts)"
        return reply

    # -- search ---------------------------------------------------------------------------------
    async def search(self, args: SearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        replies = await asyncio.gather(*(self._call(f"{self.base_url}/search",
                                                    {"q": q, "num": self.top_k, **self._locale(q)})
                                         for q in args.query))
        items: list[ToolItem] = []
        for q, reply in zip(args.query, replies):
            hits = [r for r in reply.data.get("organic") or [] if isinstance(r, dict) and r.get("link")]
            for rank, r in enumerate(hits[: self.top_k], 1):
                items.append(ToolItem(id=item_id(canonical_url(r["link"])), kind="page", rank=rank, query=q,
                                      title=str(r.get("title") or ""), url=r["link"], text=str(r.get("snippet") or "")))
        failed = {q: r.reason for q, r in zip(args.query, replies) if r.status != "ok"}
        prov = {"locales": {q: self._locale(q)["hl"] for q in args.query}, "failed_queries": failed}
        if items:
            return ToolResult(tool="search", status="ok", items=items, provenance=prov,
                              reason="; ".join(f"{q!r}: {why}" for q, why in failed.items()))
        bad = [r for r in replies if r.status != "ok"]
        status = _status_of(bad)
        reason = "; ".join(f"{q!r}: {why}" for q, why in failed.items()) or "no results for any query"
        return ToolResult(tool="search", status=status, reason=reason, provenance=prov)

    # -- visit ----------------------------------------------------------------------------------
    async def visit(self, args: VisitArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        urls = list(dict.fromkeys(args.url))
        outcomes = await asyncio.gather(*(self._visit_one(u, rank, args.goal, ctx) for rank, u in enumerate(urls, 1)))
        items = [it for it, _ in outcomes]
        ok = [it for it in items if not it.error]
        return ToolResult(tool="visit", status="ok" if ok else "error", items=items,
                          reason="" if ok else "; ".join(f"{it.url}: {it.error}" for it in items),
                          provenance={"visit_via": self.visit_via, "pages": [p for _, p in outcomes]})

    async def _visit_one(self, url: str, rank: int, goal: str, ctx: Any) -> tuple[ToolItem, dict[str, Any]]:
        base = {"id": item_id(canonical_url(url)), "kind": "page", "rank": rank, "url": url}
        page, trace = await (self._scrape(url) if self.visit_via == "scrape" else self._fetch(url))
        if isinstance(page, str):
            return ToolItem(**base, error=page), trace
        if not page.text.strip():
            return ToolItem(**base, title=page.title, image=page.image, error="the page has no readable text"), trace
        try:
            ext, backend, _ = await extract(page.text, url, goal, ctx, self.extractor_role)
        except ExtractionFailed as exc:
            return ToolItem(**base, title=page.title, image=page.image, error=str(exc)), trace
        trace["extractor"] = backend
        return ToolItem(**base, title=page.title, image=page.image, text=visit_text(url, goal, ext)), trace

    async def _fetch(self, url: str) -> tuple[Page | str, dict[str, Any]]:
        """(page, trace) or (error text, trace) through the guarded fetcher."""
        r = await self.fetcher.fetch(url, accept=HTML_TYPES)
        trace = {"url": url, "status": r.status, "final_url": r.final_url, "http_status": r.http_status,
                 "redirects": r.redirects, "bytes": len(r.content), "attempts": r.attempts}
        if not r.ok:
            return f"{r.status}: {r.reason}", trace
        if r.content_type.split(";", 1)[0].strip().lower() == "text/plain":
            return Page(text=r.text), trace
        return await asyncio.to_thread(html_to_page, r.text, r.final_url or url), trace

    async def _scrape(self, url: str) -> tuple[Page | str, dict[str, Any]]:
        """(page, trace) or (error text, trace) from a Serper-compatible scrape endpoint."""
        why = url_refusal(url)  # the scraper fetches it, but a private or non-web URL is never sent out
        if why:
            return f"blocked: {why}", {"url": url, "status": "blocked"}
        reply = await self._call(self.scrape_url, {"url": url})
        trace = {"url": url, "status": reply.status, "attempts": reply.attempts}
        if reply.status != "ok":
            return f"{reply.status}: {reply.reason}", trace
        meta = reply.data.get("metadata") if isinstance(reply.data.get("metadata"), dict) else {}
        image = next((meta[k] for k in (*_OG_IMAGE, "ogImage") if isinstance(meta.get(k), str)), None)
        return Page(title=str(meta.get("title") or meta.get("og:title") or ""),
                    text=str(reply.data.get("text") or reply.data.get("markdown") or ""),
                    image=urljoin(url, image) if image else None), trace

    # -- images ---------------------------------------------------------------------------------
    async def image_search(self, args: ImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        if not episode.image_url:
            return ToolResult(tool="image_search", status="error",
                              reason="reverse image search needs a public URL of the question image, and this "
                                     "sample has none (Lens downloads the image itself; a local file cannot be sent)")
        why = url_refusal(episode.image_url)
        if why:
            return ToolResult(tool="image_search", status="error",
                              reason=f"the question image URL is not public ({why}); Lens cannot download it")
        return await self._images("image_search", f"{self.base_url}/lens",
                                  {"url": episode.image_url, **self._locale(episode.question, episode)},
                                  key="organic", limit=self.top_k, query=None)

    async def text_to_image_search(self, args: TextToImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        return await self._images("text_to_image_search", f"{self.base_url}/images",
                                  {"q": args.query, "num": 10, **self._locale(args.query)},
                                  key="images", limit=self.images_per_query, query=args.query)

    async def _images(self, tool: str, url: str, body: dict[str, Any], *, key: str, limit: int,
                      query: str | None) -> ToolResult:
        """Image results, distinct by image URL, ranked 1..limit (the rank is the index a tag cites)."""
        reply = await self._call(url, body)
        if reply.status != "ok":
            return ToolResult(tool=tool, status=reply.status, reason=reply.reason)
        items: list[ToolItem] = []
        seen: set[str] = set()
        rows = [r for r in reply.data.get(key) or [] if isinstance(r, dict)]
        for r in rows:
            image = r.get("imageUrl") or r.get("thumbnailUrl")
            if not image or image in seen:
                continue
            seen.add(image)
            items.append(ToolItem(id=item_id(image), kind="image", rank=len(items) + 1, query=query,
                                  title=str(r.get("title") or ""), url=r.get("link"), image=image,
                                  text=str(r.get("source") or r.get("domain") or "")))
            if len(items) >= limit:
                break
        return ToolResult(tool=tool, status="ok" if items else "empty", items=items,
                          reason="" if items else "the API returned no images",
                          provenance={"results": len(rows), **{k: v for k, v in body.items() if k in ("gl", "hl")}})
