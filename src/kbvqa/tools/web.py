"""The `web` tool backend: the four tools over a search API and guarded page fetches.

Two providers (`provider`), configured like a model role (`[tools.web]` in kbvqa.toml, or
`--web-provider`, `--web-base-url`, `--web-api-key-env` on `kbvqa answer` / `kbvqa eval`):

- `serper` (the paper's; any Serper-compatible endpoint, default https://google.serper.dev; the key
  from `api_key_env`, default SERPER_API_KEY, sent as X-API-KEY):
  search `POST {base}/search` {"q", "num": 10, "gl", "hl"} per query (CJK queries ask for gl=cn,
  hl=zh-cn, as Tongyi DeepResearch does); image_search `POST {base}/lens` {"url"} — it needs a PUBLIC
  URL of the query image (`EpisodeInfo.image_url`; Lens downloads the image itself, so a local file
  cannot be sent); text_to_image_search `POST {base}/images`;
- `searxng` (self-hosted SearXNG, `base_url` required, its JSON format enabled in settings.yml;
  a key is optional and sent as `Authorization: Bearer` for a proxy in front of it):
  search `GET {base}/search?q=...&format=json`, text_to_image_search the same with
  `categories=images`; SearXNG has no reverse image search, so image_search is `unavailable`
  (a status of its own: not a failure, not counted in the agent's failure streak).

visit: each page (≤5) through the project's GuardedFetcher (or, with serper, its scrape endpoint:
`visit_via="scrape"`), HTML to text with the standard library parser (script/style/nav dropped,
headings and paragraphs kept, og:image read), then the goal extractor; a page that cannot be read
is an item with `error` and the fetch status, never a summary that looks like content.
text_to_image_search keeps at most 5 distinct images (the indices image tags cite).

Only fetchable images: an image result (or a page's og:image) that is not an http(s) URL on a public
host — `file:`, `javascript:`, `data:`, `ftp:`, credentials in the URL, a private address — is dropped
here, counted by reason in the result's `provenance["dropped_images"]` and said in its `reason`.

Trust boundary: the API base URL (and scrape URL) is the user's own configuration and is called
directly, like a model server's base URL — a local proxy or mock on 127.0.0.1 is legitimate there.
The SSRF guard applies to what the web chooses: visited pages and their redirects (and harvested
images). API replies are read under `max_api_bytes`, decoded by kbvqa (kbvqa.data.fetch.CappedBody),
never inflated whole. The key never appears in `describe()`, results or errors: every error text
passes through `kbvqa.data.redact.redact` before it reaches a result (and so the model).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Literal
from urllib.parse import urljoin

import httpx

from kbvqa.data.fetch import (HTML_TYPES, BodyTooLarge, BodyUnreadable, GuardedFetcher, RetryPolicy, accept_encoding,
                              read_capped, retry_after_seconds, shared_ssl_context, url_refusal)
from kbvqa.data.redact import excerpt, redact, register_key_env, register_secret
from kbvqa.data.urls import canonical_url
from kbvqa.tools import TOOL_BACKENDS
from kbvqa.tools.base import (WEB_PROVIDERS, EpisodeInfo, ImageSearchArgs, SearchArgs, TextToImageSearchArgs, ToolItem,
                              ToolResult, ToolStatus, VisitArgs, item_id, locale_for)
from kbvqa.tools.extract import ExtractionFailed, extract, visit_text

PROVIDERS = WEB_PROVIDERS
DEFAULT_BASE_URL = "https://google.serper.dev"  # serper's; searxng has none (a user's own instance)
DEFAULT_KEY_ENV = {"serper": "SERPER_API_KEY"}  # searxng: no key unless api_key_env names one
DEFAULT_SCRAPE_URL = "https://scrape.serper.dev"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
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


def image_drop(ref: str | None, *, allow_hosts: tuple[str, ...] = (), allow_private: bool = False) -> str | None:
    """Why an image reference from the web is not kept, as a short counted reason, or None for an http(s)
    URL kbvqa may fetch (the same host rules as the guarded fetcher): `scheme_file`, `scheme_javascript`,
    `scheme_data`, ..., `no_scheme` (a relative or local path), `credentials`, `malformed`, `non_public_host`."""
    m = _SCHEME.match((ref or "").strip())
    if not m:
        return "no_scheme"
    if m.group(1).lower() not in ("http", "https"):
        return f"scheme_{m.group(1).lower()}"
    why = url_refusal(ref.strip(), allow_hosts=allow_hosts, allow_private=allow_private)  # type: ignore[union-attr]
    if why is None:
        return None
    return "credentials" if "credentials" in why else "malformed" if why.startswith("malformed") else "non_public_host"


def _drop_note(dropped: Counter[str]) -> str:
    n = sum(dropped.values())
    kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(dropped.items()))
    return f"dropped {n} image result(s) that are not fetchable http(s) URLs ({kinds})"


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


@TOOL_BACKENDS.register("web", help="a search API (serper or searxng) and guarded page fetches")
class WebTools:
    name = "web"
    version = "2"  # 2: image results that are not fetchable http(s) URLs are dropped

    def __init__(self, *, provider: str = "serper", base_url: str | None = None, api_key_env: str | None = None,
                 visit_via: Literal["fetch", "scrape"] = "fetch", scrape_url: str = DEFAULT_SCRAPE_URL,
                 top_k: int = 10, images_per_query: int = 5, concurrency: int = 8, timeout: float = 30.0,
                 retries: int = 3, backoff: float = 0.5, gl: str = "us", hl: str = "en",
                 extractor_role: str | None = "extractor", max_page_bytes: int = 5_000_000,
                 max_api_bytes: int = 5_000_000, page_timeout: float = 20.0, allow_hosts: tuple[str, ...] = (),
                 allow_private: bool = False, fetcher: GuardedFetcher | None = None):
        if provider not in PROVIDERS:
            raise WebToolsConfigError(f"unknown web provider {provider!r} (choose from {', '.join(PROVIDERS)})")
        if visit_via not in ("fetch", "scrape"):
            raise WebToolsConfigError(f"visit_via must be 'fetch' or 'scrape', not {visit_via!r}")
        if provider == "searxng" and visit_via == "scrape":
            raise WebToolsConfigError("visit_via = 'scrape' is Serper's scrape endpoint; with provider searxng "
                                      "pages are visited through the guarded fetcher (visit_via = 'fetch')")
        key_env = api_key_env or DEFAULT_KEY_ENV.get(provider)
        register_key_env(key_env)  # an echo of it is redacted wherever it turns up
        key = os.environ.get(key_env, "").strip() if key_env else ""
        if key_env and not key and (provider == "serper" or api_key_env):
            raise WebToolsConfigError(f"the {provider} web tools need an API key in the environment variable "
                                      f"{key_env} (export it, or name another variable with api_key_env)")
        base = base_url or (DEFAULT_BASE_URL if provider == "serper" else None)
        if not base:
            raise WebToolsConfigError("provider searxng needs base_url: the address of your SearXNG instance "
                                      "(e.g. http://127.0.0.1:8888, with `json` in its search.formats)")
        register_secret(key)
        self.provider, self.base_url, self.api_key_env = provider, base.rstrip("/"), key_env
        self.visit_via, self.scrape_url, self.top_k = visit_via, scrape_url, top_k
        self.images_per_query, self.max_api_bytes = min(images_per_query, 5), max_api_bytes
        self.gl, self.hl, self.extractor_role = gl, hl, extractor_role
        self.allow_hosts, self.allow_private = tuple(allow_hosts), allow_private
        self.retry = RetryPolicy(retries=retries, backoff=backoff)
        self._slots = asyncio.Semaphore(concurrency)
        self._secret = key
        headers = {"Accept-Encoding": accept_encoding()}
        if provider == "serper":
            headers.update({"X-API-KEY": key, "Content-Type": "application/json"})
        else:
            headers["Accept"] = "application/json"
            if key:
                headers["Authorization"] = f"Bearer {key}"
        self._api = httpx.AsyncClient(timeout=timeout, verify=shared_ssl_context(), headers=headers)
        self.fetcher = fetcher or GuardedFetcher(allow_hosts=allow_hosts, allow_private=allow_private,
                                                 max_bytes=max_page_bytes, timeout=page_timeout,
                                                 concurrency=concurrency, retries=retries, backoff=backoff)

    def __repr__(self) -> str:  # the default repr would show the client, whose headers hold the key
        return (f"WebTools(provider={self.provider!r}, base_url={self.base_url!r}, api_key_env={self.api_key_env!r}, "
                f"visit_via={self.visit_via!r})")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "version": self.version, "provider": self.provider, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "visit_via": self.visit_via,
                "scrape_url": self.scrape_url if self.visit_via == "scrape" else None, "top_k": self.top_k,
                "images_per_query": self.images_per_query, "extractor_role": self.extractor_role,
                "max_api_bytes": self.max_api_bytes, "fetch": self.fetcher.describe()}

    async def aclose(self) -> None:
        await self._api.aclose()
        await self.fetcher.aclose()

    def _zh(self, text: str, episode: EpisodeInfo | None = None) -> bool:
        return locale_for(text) == "zh" or (episode is not None and episode.locale == "zh")

    def _locale(self, text: str, episode: EpisodeInfo | None = None) -> dict[str, str]:
        """Serper's gl/hl for a query (CJK → China, Chinese)."""
        return {"gl": "cn", "hl": "zh-cn"} if self._zh(text, episode) else {"gl": self.gl, "hl": self.hl}

    def _searx_params(self, q: str, **extra: str) -> dict[str, str]:
        return {"q": q, "format": "json", "language": "zh-CN" if self._zh(q) else self.hl, **extra}

    def _redact(self, text: str) -> str:
        return redact(text, extra=(self._secret,))

    async def _call(self, url: str, body: dict[str, Any] | None = None, *,
                    params: dict[str, str] | None = None) -> ApiReply:
        """One API call (POST `body` as JSON, or GET with `params`) with bounded concurrency, retries and
        a byte cap on the reply; every outcome is an ApiReply, its reason redacted."""
        method = "GET" if body is None else "POST"

        async def attempt() -> tuple[ApiReply, bool, float | None]:
            async with self._slots:
                try:
                    async with self._api.stream(method, url, json=body, params=params) as resp:
                        code, hint = resp.status_code, retry_after_seconds(resp)
                        content = await read_capped(resp.aiter_raw(), resp.headers.get_list("content-encoding"),
                                                    self.max_api_bytes, resp.headers.get("content-length"))
                except httpx.TimeoutException:
                    return ApiReply("error", reason=f"timed out calling {url}"), True, None
                except httpx.HTTPError as exc:
                    return ApiReply("error", reason=f"calling {url} failed: {type(exc).__name__}: {exc}"), False, None
                except (BodyTooLarge, BodyUnreadable) as exc:
                    return ApiReply("error", reason=f"the reply of {url} was refused: {exc}"), False, None
            detail = excerpt(" ".join(content[:4000].decode("utf-8", errors="replace").split()), 200,
                             extra=(self._secret,))
            if code == 429:
                return ApiReply("quota", reason=f"HTTP 429 rate limited by {url}"), True, hint
            if code >= 500:
                return ApiReply("error", reason=f"HTTP {code} from {url}: {detail}"), True, None
            if code == 402 or (code >= 400 and "credit" in detail.lower()):  # Serper: "Not enough credits"
                return ApiReply("quota", reason=f"HTTP {code} from {url}: {detail}"), False, None
            if code == 403 and self.provider == "searxng":
                return ApiReply("error", reason=f"HTTP 403 from {url}: {detail} (SearXNG refuses format=json "
                                                "unless `json` is in search.formats of its settings.yml)"), False, None
            if code >= 300:
                return ApiReply("error", reason=f"HTTP {code} from {url}: {detail}"), False, None
            try:
                data = json.loads(content)
            except ValueError:
                return ApiReply("error", reason=f"{url} answered HTTP {code} with a body that is not JSON"), False, None
            if not isinstance(data, dict):
                return ApiReply("error", reason=f"{url} answered a JSON {type(data).__name__}, not an object"), False, None
            return ApiReply("ok", data), False, None

        reply, attempts = await self.retry.run(attempt)
        reply.attempts = attempts
        if reply.status != "ok" and reply.attempts > 1:
            reply.reason += f" (after {reply.attempts} attempts)"
        reply.reason = self._redact(reply.reason)
        return reply

    # -- search ---------------------------------------------------------------------------------
    async def _text_query(self, q: str) -> tuple[ApiReply, list[dict[str, str]]]:
        """One text query: (the API reply, its hits as {link, title, snippet} in the provider's order)."""
        if self.provider == "searxng":
            reply = await self._call(f"{self.base_url}/search", params=self._searx_params(q))
            rows, link, snippet = reply.data.get("results"), "url", "content"
        else:
            reply = await self._call(f"{self.base_url}/search", {"q": q, "num": self.top_k, **self._locale(q)})
            rows, link, snippet = reply.data.get("organic"), "link", "snippet"
        hits = [{"link": str(r[link]), "title": str(r.get("title") or ""), "snippet": str(r.get(snippet) or "")}
                for r in rows or [] if isinstance(r, dict) and r.get(link)]
        return reply, hits[: self.top_k]

    async def search(self, args: SearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        outcomes = await asyncio.gather(*(self._text_query(q) for q in args.query))
        items: list[ToolItem] = []
        for q, (_, hits) in zip(args.query, outcomes):
            for rank, r in enumerate(hits, 1):
                items.append(ToolItem(id=item_id(canonical_url(r["link"])), kind="page", rank=rank, query=q,
                                      title=r["title"], url=r["link"], text=r["snippet"]))
        replies = [reply for reply, _ in outcomes]
        failed = {q: r.reason for q, r in zip(args.query, replies) if r.status != "ok"}
        locales = {q: (self._searx_params(q)["language"] if self.provider == "searxng" else self._locale(q)["hl"])
                   for q in args.query}
        prov = {"provider": self.provider, "locales": locales, "failed_queries": failed}
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
        if page.image:  # a page's picture is an image result too: only a fetchable one is kept
            why = image_drop(page.image, allow_hosts=self.allow_hosts, allow_private=self.allow_private)
            if why:
                trace["image_dropped"], page.image = why, None
        if not page.text.strip():
            return ToolItem(**base, title=page.title, image=page.image, error="the page has no readable text"), trace
        try:
            ext, backend, _ = await extract(page.text, url, goal, ctx, self.extractor_role)
        except ExtractionFailed as exc:
            return ToolItem(**base, title=page.title, image=page.image, error=self._redact(str(exc))), trace
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
        if self.provider == "searxng":
            return ToolResult(tool="image_search", status="unavailable", provenance={"provider": self.provider},
                              reason="reverse image search is not offered by the searxng web provider (SearXNG "
                                     "has no search by image); use search or text_to_image_search")
        if not episode.image_url:
            return ToolResult(tool="image_search", status="error",
                              reason="reverse image search needs a public URL of the question image, and this "
                                     "sample has none (Lens downloads the image itself; a local file cannot be sent)")
        why = url_refusal(episode.image_url)
        if why:
            return ToolResult(tool="image_search", status="error",
                              reason=f"the question image URL is not public ({why}); Lens cannot download it")
        body = {"url": episode.image_url, **self._locale(episode.question, episode)}
        reply = await self._call(f"{self.base_url}/lens", body)
        return self._images("image_search", reply, self._rows(reply, "organic"), limit=self.top_k, query=None,
                            locale={k: body[k] for k in ("gl", "hl")})

    async def text_to_image_search(self, args: TextToImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        q = args.query
        if self.provider == "searxng":
            params = self._searx_params(q, categories="images")
            reply = await self._call(f"{self.base_url}/search", params=params)
            rows = [{"imageUrl": r.get("img_src"), "thumbnailUrl": r.get("thumbnail_src"), "link": r.get("url"),
                     "title": r.get("title"), "source": r.get("source") or r.get("engine")}
                    for r in self._rows(reply, "results")]
            locale = {"language": params["language"]}
        else:
            locale = self._locale(q)
            reply = await self._call(f"{self.base_url}/images", {"q": q, "num": 10, **locale})
            rows = self._rows(reply, "images")
        return self._images("text_to_image_search", reply, rows, limit=self.images_per_query, query=q, locale=locale)

    @staticmethod
    def _rows(reply: ApiReply, key: str) -> list[dict[str, Any]]:
        return [r for r in reply.data.get(key) or [] if isinstance(r, dict)]

    def _images(self, tool: str, reply: ApiReply, rows: list[dict[str, Any]], *, limit: int, query: str | None,
                locale: dict[str, str]) -> ToolResult:
        """Image results, distinct by image URL, ranked 1..limit (the rank is the index a tag cites). An
        image that is not a fetchable http(s) URL is dropped and counted (the thumbnail stands in when
        only the full-size URL is bad)."""
        if reply.status != "ok":
            return ToolResult(tool=tool, status=reply.status, reason=reply.reason,
                              provenance={"provider": self.provider})
        items: list[ToolItem] = []
        seen: set[str] = set()
        dropped: Counter[str] = Counter()
        for r in rows:
            refs = [u.strip() for u in (r.get("imageUrl"), r.get("thumbnailUrl")) if isinstance(u, str) and u.strip()]
            refs = ["https:" + u if u.startswith("//") else u for u in refs]  # protocol-relative, as SearXNG gives
            if not refs:
                continue
            whys = [image_drop(u, allow_hosts=self.allow_hosts, allow_private=self.allow_private) for u in refs]
            image = next((u for u, why in zip(refs, whys) if why is None), None)
            if image is None:
                dropped[whys[0] or "unknown"] += 1
                continue
            if image in seen:
                continue
            seen.add(image)
            items.append(ToolItem(id=item_id(image), kind="image", rank=len(items) + 1, query=query,
                                  title=str(r.get("title") or ""), url=r.get("link"), image=image,
                                  text=str(r.get("source") or r.get("domain") or "")))
            if len(items) >= limit:
                break
        prov: dict[str, Any] = {"provider": self.provider, "results": len(rows), **locale}
        notes = []
        if dropped:
            prov["dropped_images"] = dict(sorted(dropped.items()))
            notes.append(_drop_note(dropped))
        if not items:
            notes.insert(0, "the API returned no images")
        return ToolResult(tool=tool, status="ok" if items else "empty", items=items, reason="; ".join(notes),
                          provenance=prov)
