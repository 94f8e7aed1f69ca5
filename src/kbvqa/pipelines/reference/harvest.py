"""Stage 2 — harvest candidate images from the selected pages, plus the reverse-search pool (seed 001 C.1).

Deterministic gates run before any model sees an image (agent-anchors, recommendation 11), and every
image that does not get through is counted under one reason:

1. found: on a web page, og:image first, then markdown `![..](url)` and HTML `<img src|data-src>`
   in page order (the union, relative URLs resolved); the page is read as seed 001 C.1 reads it by
   default (`page_source = "scrape"`: markdown from the web backend's scrape endpoint with the
   og:image put first) or as raw HTML through the guarded fetcher (`page_source = "html"`); on the
   `local` backend, the KB article's `image_urls` resolved to files (`kb_image_file`), offline;
2. before any download: `data_uri`, `bad_url` (a URL scheme other than
   http/https: `file:`, `javascript:`, `ftp:`, ... — only http(s) URLs and files under the KB image
   folder are ever read),
   `blocklisted` (ad / tracker / icon / logo patterns: `BLOCKLIST` plus the config's own),
   `duplicate_url` within a page; `remote_offline` for a web image on the local backend;
3. download through the one `GuardedFetcher` (SSRF guard on every redirect, byte cap on the wire and
   after decoding any Content-Encoding, timeout, bounded concurrency, image content types):
   `fetch_blocked`, `fetch_error`, `http_error`, `too_large`, `bad_encoding`, `bad_type`;
   `svg_not_raster` (an SVG by content type: a vector image the decoder cannot read or measure);
4. decode with `kbvqa.data.images.open_image` (verification, pixel cap): `decompression_bomb`,
   `unreadable`; then the paper's floor, `too_small` (shorter side < 100 px);
5. at most 60 attempts and 20 kept per page (`attempt_cap`, `per_url_cap`);
6. sha256: `same_as_query` (the query image itself), `duplicate_sha256` (across pages and pools,
   first kept wins and records where else it was found).

Filters seed 001 does not have are kbvqa's and off by default (`[reference.harvest]`): `max_aspect`
(`too_elongated`), `min_bytes` (`tiny_file`) and `skip_gif_svg` (`svg` / `gif` by URL before any
download, by content type and by decoded format). When on, each runs after the paper's 100-px floor
(an image under the floor is `too_small` whatever else it is), its drops are counted under its own
reason, and the stage records which were on (`harvest.kbvqa_filters`; the build says so in its
warnings).

The reverse-image-search pool (every image an `image_search` call returned) goes through the same
gates and stays tagged `image_search_pool`; page images are `best_link`. Kept images are stored
content-addressed under the run's `images/` folder (`ImageStore`), so later stages, the audit sheet
and the final references point at the same files.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from pydantic import Field

from kbvqa.data.fetch import HTML_TYPES, IMAGE_TYPES, GuardedFetcher
from kbvqa.data.images import MAX_PIXELS, BadImage, open_image
from kbvqa.data.outbox import readable, write_file
from kbvqa.data.urls import canonical_url
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import ReferenceStageConfig
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages import register_stage

PAGE_TYPES = (*HTML_TYPES, "text/markdown")
POOLS = ("best_link", "image_search_pool")

#: Ad, tracker and icon patterns (case-insensitive, searched in the whole URL). Written for kbvqa
#: after EasyList's commonest hosts and the structural rules image crawlers use; a subject that is
#: itself a logo or an icon needs `blocklist = []`-style config (HarvestConfig.blocklist).
BLOCKLIST = (
    r"doubleclick\.net", r"googlesyndication", r"googleadservices", r"adservice\.", r"adsystem", r"adnxs\.com",
    r"taboola", r"outbrain", r"criteo", r"scorecardresearch", r"quantserve", r"facebook\.com/tr\b",
    r"google-analytics", r"analytics\.", r"/analytics/", r"tracking", r"tracker", r"/track/", r"/beacon",
    r"/pixel", r"pixel\.(gif|png)", r"\b1x1\b", r"spacer\.", r"blank\.(gif|png)", r"/ads?/", r"[/_.-]ads?[/_.-]",
    r"advert", r"banner", r"favicon", r"apple-touch-icon", r"/icons?/", r"[/_.-]icons?[/_.-]", r"logo", r"sprite",
    r"avatar", r"gravatar", r"emoji", r"/badges?/", r"placeholder", r"spinner", r"loading\.", r"/share[/_.-]",
    r"social[/_.-]", r"widget",
)

_OG = re.compile(r"""<meta\b(?=[^>]*\b(?:property|name)\s*=\s*["']?og:image(?::url|:secure_url)?["'\s>])"""
                 r"""[^>]*\bcontent\s*=\s*["']([^"']+)["'][^>]*>""", re.IGNORECASE)
_MARKDOWN = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)")
_HTML_IMG = re.compile(r"""<img\b[^>]*?\b(?:data-src|src)\s*=\s*["']?([^"'\s>]+)""", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_DROP_BLOCKS = re.compile(r"<(script|style|noscript|template)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>|!\[[^\]]*\]\([^)]*\)")
_URL_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):")
_EXT = {"JPEG": ".jpg", "MPO": ".jpg", "PNG": ".png", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif", "GIF": ".gif"}


def _plain(text: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", _DROP_BLOCKS.sub(" ", text))).split())


@dataclass
class Found:
    """One image reference: a URL or a local file, where it was found, and the text around it."""

    ref: str
    pool: str
    page_url: str | None = None
    context: str = ""
    source_url: str | None = None  # what the image is called publicly (a KB image URL for a local file)


def page_images(text: str, base_url: str, context_chars: int = 200) -> list[Found]:
    """Image references in a page (HTML or markdown): og:image first, then every markdown and HTML
    image in page order, each with ±`context_chars` of the page's plain text around it."""
    title = _TITLE.search(text)
    lead = (_plain(title.group(1)) + " — " if title else "") + _plain(text[:4000])[:context_chars]
    hits: list[tuple[int, int, str, str]] = []  # (start, end, url, how)
    og = [(m.start(), m.end(), m.group(1), "og") for m in _OG.finditer(text)][:1]
    for rx in (_MARKDOWN, _HTML_IMG):
        hits.extend((m.start(), m.end(), m.group(1), "inline") for m in rx.finditer(text))
    out = []
    for start, end, raw, how in og + sorted(hits):
        url = html.unescape(raw.strip())
        if not url.lower().startswith("data:"):
            url = urljoin(base_url, url)
        if how == "og":
            context = lead
        else:
            before = _plain(text[max(0, start - 8 * context_chars):start])[-context_chars:]
            after = _plain(text[end:end + 8 * context_chars])[:context_chars]
            context = f"{before} [image] {after}".strip()
        out.append(Found(ref=url, pool="best_link", page_url=base_url, context=context, source_url=url))
    return out


def pre_gate(ref: str, blocklist: re.Pattern[str], *, remote_allowed: bool,
             skip_gif_svg: bool = False) -> str | None:
    """Why a reference is dropped before any download, or None. A local file passes (it was
    resolved by the KB resolver or returned by the local tools; `_read_local` still reads only under
    the KB image folder). Anything with a URL scheme — `javascript:x`, `file:/etc/passwd` have no
    `//` — is a URL, and only http(s) ones are fetched; a one-letter scheme is a Windows drive.
    `skip_gif_svg` (kbvqa's filter, off by default) drops .svg and .gif by name."""
    low = ref.strip().lower()
    if low.startswith("data:"):
        return "data_uri"
    scheme = _URL_SCHEME.match(low)
    is_url = "://" in low or low.startswith("//") or (scheme is not None and len(scheme.group(1)) > 1)
    path = urlsplit(low).path if is_url else low
    if skip_gif_svg and path.endswith((".svg", ".svgz")):
        return "svg"
    if skip_gif_svg and path.endswith(".gif"):
        return "gif"
    if is_url:
        if not low.startswith(("http://", "https://")):
            return "bad_url"
        if blocklist.search(low):
            return "blocklisted"
        if not remote_allowed:
            return "remote_offline"
    return None


def _file_format(path: Path) -> str:
    """The container format from the file header (open_image's EXIF transpose drops `.format`)."""
    from PIL import Image

    with Image.open(path) as probe:
        return (probe.format or "").upper()


class ImageStore:
    """Content-addressed image files under one folder: `<sha[:2]>/<sha><ext>`. A file is admitted
    only after the decode gates pass; the store pickles as its folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def node_inputs(self) -> dict[str, str]:
        """Once harvest has kept images, the stages after it read them by path: the folder must then be at
        the same absolute path on every node (a read-only mount on a cluster); the Ray executor lists it in
        the manifest and stops, naming it, on a node without it, before any record runs."""
        return {str(self.root): "the build's harvested images"} if self.root.is_dir() else {}

    def path(self, rel: str) -> Path:
        """The file to read `rel` from (an image this record admitted is staged until the driver writes it)."""
        p = (self.root / rel).resolve()
        if not p.is_relative_to(self.root):
            raise ValueError(f"image path {rel!r} points outside the image store {self.root}")
        return readable(p)

    def admit(self, data: bytes, gates: HarvestConfig) -> dict[str, Any] | str:
        """Decode-gate `data`; keep it (returning {sha256, path, width, height, bytes, format}) or
        return the drop reason. Runs in a worker thread (decoding is CPU work). The kept file goes through
        the record's outbox (kbvqa.data.outbox): the driver writes it, wherever the record ran; the
        decode reads a scratch copy in the system's temporary folder, removed at once."""
        fd, name = tempfile.mkstemp(prefix="kbvqa-incoming-")
        tmp = Path(name)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            try:
                img = open_image(tmp, mode=None, max_pixels=gates.max_pixels, max_bytes=gates.max_image_bytes)
            except BadImage as exc:
                msg = str(exc)
                return ("decompression_bomb" if "pixel cap" in msg else "too_large" if "byte cap" in msg
                        else "unreadable")
            w, h = img.size
            fmt = _file_format(tmp)
            if min(w, h) < gates.min_side:  # the paper's floor, before any filter of kbvqa's
                return "too_small"
            why = gates.extra_drop(w, h, len(data), fmt)
            if why:
                return why
            sha = hashlib.sha256(data).hexdigest()
            rel = f"{sha[:2]}/{sha}{_EXT.get(fmt, '.img')}"
            final = self.root / rel
            if not final.exists():
                write_file(final, data)
            return {"sha256": sha, "path": rel, "width": w, "height": h, "bytes": len(data), "format": fmt}
        finally:
            tmp.unlink(missing_ok=True)


class LoopFetcher:
    """The GuardedFetcher's settings, and one fetcher per event loop (each stage job runs its own
    loop); pickles as the settings, so a Ray actor builds its own."""

    def __init__(self, **settings: Any):
        self.settings = settings
        self._fetcher: GuardedFetcher | None = None
        self._loop: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["settings"])  # type: ignore[misc]

    def _current(self) -> GuardedFetcher:
        loop = asyncio.get_running_loop()
        if self._fetcher is None or self._loop is not loop:
            self._fetcher, self._loop = GuardedFetcher(**self.settings), loop
        return self._fetcher

    async def fetch(self, url: str, *, accept: Any = None) -> Any:
        return await self._current().fetch(url, accept=accept)

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.settings.items() if k != "resolver"}

    async def aclose(self) -> None:
        if self._fetcher is not None:
            await self._fetcher.aclose()
            self._fetcher = self._loop = None


class HarvestConfig(ReferenceStageConfig):
    backend: Literal["local", "web"] = "local"
    max_per_url: int = Field(20, ge=1)  # images kept per page
    max_attempts_per_url: int = Field(60, ge=1)  # images tried per page
    max_pool: int | None = Field(None, ge=0)  # reverse-search images kept; None: every one, as the paper takes
    min_side: int = Field(100, ge=1)  # px, the shorter side (seed 001's minimum-size constraint)
    #: kbvqa's filters, not the paper's: off by default; when on, counted (too_elongated, tiny_file,
    #: gif / svg) and listed in `harvest.kbvqa_filters`
    max_aspect: float | None = Field(None, ge=1.0)  # longer / shorter side at most this (kbvqa used 3)
    min_bytes: int | None = Field(None, ge=1)  # files smaller than this dropped (kbvqa used 1024)
    skip_gif_svg: bool = False  # GIF and SVG dropped by URL, content type and decoded format
    max_pixels: int = Field(MAX_PIXELS, ge=1)  # the decompression-bomb cap
    max_image_bytes: int = Field(10_000_000, ge=1)
    context_chars: int = Field(200, ge=0)  # of page text on each side of an image
    blocklist: list[str] = Field(default_factory=lambda: list(BLOCKLIST))
    extra_blocklist: list[str] = Field(default_factory=list)
    #: where a page's images are read from on the web backend. "scrape" (seed 001 C.1, the default):
    #: the page as markdown from the web backend's scrape endpoint (Serper's, includeMarkdown), its
    #: og:image put first; it needs the backend's API key. "html": the raw HTML through the guarded
    #: fetcher (no key; og:image, <img> and markdown images alike). Images are downloaded through the
    #: guarded fetcher either way.
    page_source: Literal["scrape", "html"] = "scrape"

    def kbvqa_filters(self) -> dict[str, Any]:
        """The filters of kbvqa's own that are on (empty by default): what the funnel notes."""
        on = {"max_aspect": self.max_aspect, "min_bytes": self.min_bytes,
              "skip_gif_svg": True if self.skip_gif_svg else None}
        return {k: v for k, v in on.items() if v is not None}

    def extra_drop(self, width: int, height: int, size: int, fmt: str) -> str | None:
        """Why one of kbvqa's filters (when on) drops a decoded image, or None."""
        if self.skip_gif_svg and fmt == "GIF":
            return "gif"
        if self.max_aspect is not None and max(width, height) / max(min(width, height), 1) > self.max_aspect:
            return "too_elongated"
        if self.min_bytes is not None and size < self.min_bytes:
            return "tiny_file"
        return None


class PageScraper:
    """The web backend's scrape endpoint as the harvester's page source: one WebTools per event loop
    (each stage job runs its own loop), built from its settings (`[tools.web]`); pickles as the
    settings. A page URL the address guard refuses (`[reference.fetch]` allow_hosts / allow_private
    apply) is never sent to the scraper."""

    def __init__(self, settings: dict[str, Any] | None = None, *, allow_hosts: list[str] | tuple[str, ...] = (),
                 allow_private: bool = False):
        self.settings = dict(settings or {})
        self.allow_hosts, self.allow_private = tuple(allow_hosts), allow_private
        self._tools: Any = None
        self._loop: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "allow_hosts": self.allow_hosts, "allow_private": self.allow_private}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], allow_hosts=state["allow_hosts"],  # type: ignore[misc]
                      allow_private=state["allow_private"])

    def check(self) -> str | None:
        """Why this scraper cannot run (no API key, a provider without a scrape endpoint), or None."""
        from kbvqa.tools.web import WebTools, WebToolsConfigError

        if self.settings.get("provider", "serper") != "serper":
            return f"provider {self.settings['provider']!r} has no scrape endpoint (Serper's has)"

        async def probe() -> None:
            await WebTools(**self.settings).aclose()

        try:
            asyncio.run(probe())
        except WebToolsConfigError as exc:
            return str(exc)
        return None

    async def scrape(self, url: str) -> tuple[str | None, str, str]:
        """(markdown with the og:image first, or None; status; reason) for one page."""
        from kbvqa.data.fetch import url_refusal
        from kbvqa.tools.web import WebTools, WebToolsConfigError

        why = url_refusal(url, allow_hosts=self.allow_hosts, allow_private=self.allow_private)
        if why:
            return None, "blocked", why
        loop = asyncio.get_running_loop()
        if self._tools is None or self._loop is not loop:
            try:
                self._tools, self._loop = WebTools(**self.settings), loop
            except WebToolsConfigError as exc:
                return None, "unavailable", str(exc)
        tools = self._tools
        # the backend's one API call (retries, byte cap, key header, redaction): here with markdown asked for
        reply = await tools._call(tools.scrape_url, {"url": url, "includeMarkdown": True})
        if reply.status != "ok":
            return None, reply.status, reply.reason
        markdown = reply.data.get("markdown")
        if not isinstance(markdown, str):
            return None, "no_markdown", f"the scrape reply for {url} has no markdown"
        meta = reply.data.get("metadata") if isinstance(reply.data.get("metadata"), dict) else {}
        og = next((meta[k] for k in ("og:image", "og:image:url", "og:image:secure_url", "ogImage")
                   if isinstance(meta.get(k), str) and meta[k].strip()), None)
        return (f"![og:image]({og.strip()})\n\n" if og else "") + markdown, "ok", ""

    async def aclose(self) -> None:
        if self._tools is not None:
            await self._tools.aclose()
            self._tools = self._loop = None


@dataclass
class _Page:
    url: str
    rank: int
    status: str = "ok"
    reason: str = ""
    found: list[Found] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)


@register_stage
class Harvest(Stage):
    """Reads `urls.selected` and `urls.image_results`; adds `harvest` {backend, pages, candidates}.
    Resources: `image_store` (ImageStore); `fetcher` (web); `page_scraper` (web with page_source
    "scrape"); `kb_image_file` and `ctx.kb` (local); `local_image_root` (where local pool images may
    come from)."""

    name = "reference-harvest"
    version = "3"  # 2: pages scraped as markdown by default (page_source); 3: kbvqa's own filters off by default
    config_model = HarvestConfig

    def __init__(self, config: HarvestConfig | None = None):
        super().__init__(config)
        c: HarvestConfig = self.config  # type: ignore[assignment]
        self._block = re.compile("|".join(f"(?:{p})" for p in [*c.blocklist, *c.extra_blocklist]) or r"(?!)",
                                 re.IGNORECASE)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: HarvestConfig = self.config  # type: ignore[assignment]
        urls = record.get("urls") or {}
        drops: Counter[str] = Counter()
        pages: list[_Page] = []
        seen_pages: set[str] = set()
        for s in urls.get("selected") or []:
            key = canonical_url(s["url"])
            if key in seen_pages:
                drops["duplicate_page"] += 1
                continue
            seen_pages.add(key)
            pages.append(_Page(url=s["url"], rank=s.get("rank", len(pages) + 1)))
        pool = [Found(ref=r["image"], pool="image_search_pool", page_url=r.get("page_url"),
                      context=r.get("context", ""), source_url=r["image"] if "://" in r["image"] else None)
                for r in urls.get("image_results") or []]
        page_drops = await asyncio.gather(*(self._page(p, ctx, c) for p in pages))
        cap = len(pool) if c.max_pool is None else c.max_pool
        pool_kept, pool_drops = await self._images(pool, ctx, c, cap, len(pool) if c.max_pool is None else cap * 3)
        for d in (*page_drops, pool_drops):
            drops.update(d)
        candidates: list[dict[str, Any]] = []
        admitted, kept = Counter(), Counter()
        first: dict[str, dict[str, Any]] = {}
        query_sha = record.get("query_sha256")
        for group, pool_name in [*((p.kept, "best_link") for p in pages), (pool_kept, "image_search_pool")]:
            for cand in group:
                admitted[pool_name] += 1
                if cand["sha256"] == query_sha:
                    drops["same_as_query"] += 1
                elif cand["sha256"] in first:
                    drops["duplicate_sha256"] += 1
                    first[cand["sha256"]].setdefault("also_found", []).append(
                        {k: cand[k] for k in ("pool", "page_url", "source_url") if cand.get(k)})
                else:
                    first[cand["sha256"]] = cand
                    candidates.append(cand)
                    kept[pool_name] += 1
        page_rows = [{"url": p.url, "rank": p.rank, "status": p.status, **({"reason": p.reason} if p.reason else {}),
                      "found": len(p.found), "kept": len(p.kept)} for p in pages]
        payload = {"backend": c.backend, "pages": page_rows, "candidates": candidates,
                   **({"kbvqa_filters": c.kbvqa_filters()} if c.kbvqa_filters() else {})}
        tally = counts(pages=len(pages), pages_failed=Counter(p.status for p in pages if p.status != "ok"),
                       references=sum(len(p.found) for p in pages) + len(pool), admitted_by_pool=admitted,
                       kept_by_pool=kept,
                       kept=len(candidates), dropped=drops)
        return stage_record(record, "harvest", payload, tally)

    # -- pages ----------------------------------------------------------------------------------
    async def _page(self, page: _Page, ctx: Context, c: HarvestConfig) -> Counter[str]:
        if c.backend == "local":
            await asyncio.to_thread(self._local_page, page, ctx, c)
        elif c.page_source == "scrape":
            text, status, reason = await ctx.resource("page_scraper").scrape(page.url)
            if text is None:
                page.status, page.reason = f"scrape_{status}", reason
                return Counter()
            page.found = await asyncio.to_thread(page_images, text, page.url, c.context_chars)
        else:
            fetcher = ctx.resource("fetcher")
            r = await fetcher.fetch(page.url, accept=PAGE_TYPES)
            if not r.ok:
                page.status, page.reason = f"fetch_{r.status}", r.reason
                return Counter()
            page.found = await asyncio.to_thread(page_images, r.text, r.final_url or page.url, c.context_chars)
        page.kept, drops = await self._images(page.found, ctx, c, c.max_per_url, c.max_attempts_per_url)
        return drops

    def _local_page(self, page: _Page, ctx: Context, c: HarvestConfig) -> None:
        if ctx.kb is None:
            raise RuntimeError("the local harvest backend needs the KB (--kb)")
        art = ctx.kb.get(page.url)
        if art is None:
            page.status, page.reason = "not_in_kb", "the KB has no article at this URL"
            return
        resolve = ctx.resource("kb_image_file", None)
        if resolve is None:
            raise RuntimeError("the local harvest backend needs the KB image folder (--kb-images)")
        lead = " ".join(art.sections[0].text.split())[: 2 * c.context_chars] if art.sections else ""
        context = f"{art.title} — {lead}" if lead else art.title
        for u in art.image_urls:
            path = resolve(u)
            page.found.append(Found(ref=str(path) if path is not None else f"missing:{u}", pool="best_link",
                                    page_url=page.url, context=context, source_url=u))

    # -- images ---------------------------------------------------------------------------------
    async def gate_images(self, found: list[Found], ctx: Context, keep: int,
                          attempts: int) -> tuple[list[dict[str, Any]], Counter[str]]:
        """The same gates for images found elsewhere (the entity image search): kept, drops."""
        return await self._images(found, ctx, self.config, keep, attempts)  # type: ignore[arg-type]

    async def _images(self, found: list[Found], ctx: Context, c: HarvestConfig, keep: int,
                      attempts: int) -> tuple[list[dict[str, Any]], Counter[str]]:
        """Gate, fetch and admit `found` in order, in windows (bounded work, deterministic order):
        at most `attempts` tried and `keep` kept."""
        drops: Counter[str] = Counter()
        pending: list[Found] = []
        seen: set[str] = set()
        for f in found:
            why = "file_missing" if f.ref.startswith("missing:") else \
                pre_gate(f.ref, self._block, remote_allowed=c.backend == "web", skip_gif_svg=c.skip_gif_svg)
            if why is None:
                key = canonical_url(f.ref) if "://" in f.ref else f.ref
                why = "duplicate_url" if key in seen else None
                seen.add(key)
            if why:
                drops[why] += 1
            else:
                pending.append(f)
        kept: list[dict[str, Any]] = []
        shas: set[str] = set()
        tried = 0
        while pending and len(kept) < keep and tried < attempts:
            window, pending = pending[: min(keep - len(kept), attempts - tried)], pending[min(keep - len(kept),
                                                                                             attempts - tried):]
            tried += len(window)
            for f, res in zip(window, await asyncio.gather(*(self._one(f, ctx, c) for f in window))):
                if isinstance(res, str):
                    drops[res] += 1
                elif res["sha256"] in shas:
                    drops["duplicate_sha256"] += 1
                else:
                    shas.add(res["sha256"])
                    kept.append({**res, "pool": f.pool, "page_url": f.page_url, "source_url": f.source_url,
                                 "context": f.context})
        if pending:
            drops["per_url_cap" if len(kept) >= keep else "attempt_cap"] += len(pending)
        return kept, drops

    async def _one(self, f: Found, ctx: Context, c: HarvestConfig) -> dict[str, Any] | str:
        store: ImageStore = ctx.resource("image_store")
        if "://" in f.ref:
            r = await ctx.resource("fetcher").fetch(f.ref, accept=IMAGE_TYPES)
            if not r.ok:
                return {"blocked": "fetch_blocked", "error": "fetch_error"}.get(r.status, r.status)
            media = r.content_type.split(";", 1)[0].strip().lower()
            if media.startswith("image/svg"):
                return "svg" if c.skip_gif_svg else "svg_not_raster"
            if media == "image/gif" and c.skip_gif_svg:
                return "gif"
            data = r.content
        else:
            data_or_why = await asyncio.to_thread(self._read_local, f.ref, ctx, c)
            if isinstance(data_or_why, str):
                return data_or_why
            data = data_or_why
        return await asyncio.to_thread(store.admit, data, c)

    @staticmethod
    def _read_local(ref: str, ctx: Context, c: HarvestConfig) -> bytes | str:
        """A local image's bytes, only from under `local_image_root` (the KB image folder); without
        one, no local file is read at all: a trajectory file must not make kbvqa copy arbitrary files."""
        p = Path(ref)
        root = ctx.resource("local_image_root", None)
        try:
            if root is None or not p.resolve().is_relative_to(Path(root).resolve()):
                return "outside_image_root"
            if not p.is_file():
                return "file_missing"
            if p.stat().st_size > c.max_image_bytes:
                return "too_large"
            return p.read_bytes()
        except OSError:
            return "file_missing"
