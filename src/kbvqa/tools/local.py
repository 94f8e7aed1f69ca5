"""The `local` tool backend: the four tools over the KB, offline and reproducible (the default).

- search: BM25 (the KB store's FTS5 index) over sections, top 10 per query;
- visit: the article's sections, ranked against the goal, through the goal extractor (rules
  offline, the `extractor` role when configured); a URL the KB lacks is a per-URL error;
- image_search: the FAISS image index over KB images (the weight-free encoder by default), one
  result per article, with the article's image as the picture;
- text_to_image_search: BM25 over article titles and section titles/text, returning the KB images of
  the best articles, ranked 1..5 — the candidates an image tag cites.

Context resources it reads: `image_index` and `image_encoder` (image_search), `kb_image_file` (a
callable KB image URL → local file, for image results); the KB is `ctx.kb`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from kbvqa.data.schema import Usage
from kbvqa.tools import TOOL_BACKENDS
from kbvqa.tools.base import (EpisodeInfo, ImageSearchArgs, SearchArgs, TextToImageSearchArgs, ToolItem, ToolResult,
                              VisitArgs, file_sha256, item_id)
from kbvqa.tools.extract import ExtractionFailed, extract, visit_text

SNIPPET_CHARS = 300


def _snippet(text: str, n: int = SNIPPET_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1].rsplit(" ", 1)[0] + "…"


@TOOL_BACKENDS.register("local", help="the KB: FTS5 search and visit, FAISS reverse image search, KB images")
class LocalTools:
    name = "local"
    version = "2"  # bump whenever what a call returns changes: the tool cache is keyed on it

    def __init__(self, *, top_k: int = 10, images_per_query: int = 5, extractor_role: str | None = "extractor",
                 visit_sections: int = 4):
        self.top_k, self.images_per_query = top_k, images_per_query
        self.extractor_role, self.visit_sections = extractor_role, visit_sections

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "version": self.version, "top_k": self.top_k,
                "images_per_query": self.images_per_query, "extractor_role": self.extractor_role}

    @staticmethod
    def _kb(ctx: Any) -> Any:
        if getattr(ctx, "kb", None) is None:
            raise RuntimeError("the local tools need a KB")  # a wiring bug: the pipeline always sets one
        return ctx.kb

    async def search(self, args: SearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        kb = self._kb(ctx)
        items: list[ToolItem] = []
        for q in args.query:
            hits = await asyncio.to_thread(kb.search, q, self.top_k)
            for rank, h in enumerate(hits, 1):
                items.append(ToolItem(id=item_id(h.url, h.section_index), kind="section", rank=rank, query=q,
                                      title=f"{h.title} — {h.section_title}" if h.section_title else h.title,
                                      url=h.url, text=_snippet(h.text), score=round(float(h.score), 4)))
        return ToolResult(tool="search", status="ok" if items else "empty", items=items,
                          reason="" if items else "no KB section matches the queries")

    async def visit(self, args: VisitArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        kb = self._kb(ctx)
        items: list[ToolItem] = []
        backends = set()
        usage = Usage()
        for rank, url in enumerate(dict.fromkeys(args.url), 1):
            art = await asyncio.to_thread(kb.get, url)
            if art is None:
                items.append(ToolItem(id=item_id(url), kind="page", rank=rank, url=url,
                                      error="not in the knowledge base"))
                continue
            text = await asyncio.to_thread(self._page_text, kb, art, args.goal)
            try:
                ext, backend, spent = await extract(text, art.url, args.goal, ctx, self.extractor_role)
            except ExtractionFailed as exc:
                usage = usage.add(exc.usage)
                items.append(ToolItem(id=item_id(art.url), kind="page", rank=rank, url=art.url, title=art.title,
                                      error=str(exc)))
                continue
            backends.add(backend)
            usage = usage.add(spent)
            items.append(ToolItem(id=item_id(art.url), kind="page", rank=rank, url=art.url, title=art.title,
                                  text=visit_text(art.url, args.goal, ext)))
        ok = [it for it in items if not it.error]
        return ToolResult(tool="visit", status="ok" if ok else "error", items=items,
                          reason="" if ok else "; ".join(f"{it.url}: {it.error}" for it in items),
                          provenance={"extractor": sorted(backends), "usage": usage.model_dump()})

    def _page_text(self, kb: Any, art: Any, goal: str) -> str:
        """The article as a page: the sections most about the goal first (all of them for a short one)."""
        order = list(range(len(art.sections)))
        if hasattr(kb, "search_in") and len(art.sections) > self.visit_sections:
            hits = [h.section_index for h in kb.search_in(art.url, goal, k=self.visit_sections)]
            order = hits + [i for i in order if i not in hits]
        by_index = {s.index: s for s in art.sections}
        return "\n\n".join(f"{by_index[i].title}\n{by_index[i].text}" for i in order[: self.visit_sections * 2]
                           if i in by_index)

    def _image_file(self, ctx: Any, url: str) -> Path | None:
        resolve: Callable[[str], Path | None] | None = ctx.resource("kb_image_file", None)
        return resolve(url) if resolve is not None else None

    def _article_images(self, ctx: Any, art: Any) -> list[tuple[str, Path]]:
        out = []
        for u in art.image_urls:
            p = self._image_file(ctx, u)
            if p is not None:
                out.append((u, p))
        return out

    async def image_search(self, args: ImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        index, encoder = ctx.resource("image_index", None), ctx.resource("image_encoder", None)
        if index is None or encoder is None:
            return ToolResult(tool="image_search", status="error",
                              reason="reverse image search is unavailable: this run has no image index of the KB")
        if episode.image is None:
            return ToolResult(tool="image_search", status="error", reason="the question has no image to search with")
        vec = await asyncio.to_thread(encoder.encode, [episode.image])
        ranked = index.search(vec, k=self.top_k)[0]
        kb = self._kb(ctx)
        items = []
        for rank, (url, score) in enumerate(ranked, 1):
            art = kb.get(url)
            title = art.title if art else url
            imgs = self._article_images(ctx, art) if art else []
            image = str(imgs[0][1]) if imgs else None
            items.append(ToolItem(id=item_id(url), kind="image", rank=rank, title=title, url=url, image=image,
                                  sha256=file_sha256(imgs[0][1]) if imgs else None, score=round(float(score), 4),
                                  text=_snippet(art.sections[0].text) if art and art.sections else ""))
        return ToolResult(tool="image_search", status="ok" if items else "empty", items=items,
                          provenance={"encoder": encoder.name})

    async def text_to_image_search(self, args: TextToImageSearchArgs, episode: EpisodeInfo, ctx: Any) -> ToolResult:
        kb = self._kb(ctx)
        hits = await asyncio.to_thread(kb.search, args.query, self.top_k * 3)
        items: list[ToolItem] = []
        seen_articles: list[str] = []
        seen_images: set[str] = set()
        for h in hits:
            if h.url in seen_articles:
                continue
            seen_articles.append(h.url)
            art = kb.get(h.url)
            for img_url, path in (self._article_images(ctx, art) if art else []):
                digest = file_sha256(path)
                if digest in seen_images:
                    continue
                seen_images.add(digest)
                items.append(ToolItem(id=item_id(digest), kind="image", rank=len(items) + 1, query=args.query,
                                      title=art.title, url=art.url, image=str(path), sha256=digest,
                                      text=f"source image: {img_url}"))
                if len(items) >= self.images_per_query:
                    break
            if len(items) >= self.images_per_query:
                break
        reason = "" if items else ("no KB article matching the query has an image file" if seen_articles
                                   else "no KB article matches the query")
        return ToolResult(tool="text_to_image_search", status="ok" if items else "empty", items=items, reason=reason)
