"""The live viewer: a read-only Starlette app over a `Site` (run it with uvicorn).

Routes: `/` (the runs), `/o/<output>/` (a record list: `?page=`, facet filters, `?q=` ids
containing), `/o/<output>/r/<id>` (a record's permalink), `/search?id=` (every output holding an
id), `/img/<root>/<path>` (an image inside a run folder or a configured image root, checked by
`ImageLinks.serve`) and `/static/` (the viewer's own CSS and JS: nothing is loaded from a CDN).
Every response forbids scripts from anywhere but the viewer itself (Content-Security-Policy), a
second line of defence behind the templates' autoescaping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kbvqa.report.viewer.images import ImageRefused
from kbvqa.report.viewer.site import LiveLinks, Site

STATIC_DIR = Path(__file__).resolve().parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")
#: Query parameters that are not facet filters.
RESERVED = {"page", "q"}


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={"Content-Security-Policy": CSP,
                                                           "X-Content-Type-Options": "nosniff"})


def create_app(site: Site, *, warm: bool = True) -> Starlette:
    """The app over one site; `warm` starts indexing every output at startup."""
    links = LiveLinks()

    async def home(request: Request) -> Response:
        return _html(await _threaded(site.home, links))

    async def listing(request: Request) -> Response:
        params = request.query_params
        try:
            page = int(params.get("page", "1"))
        except ValueError:
            page = 1
        filters = {k: v for k, v in params.items() if k not in RESERVED}
        q = params.get("q") or None
        oid = request.path_params["oid"]
        if q:  # an exact id opens the record
            out = site.catalog.get(oid)
            if out is not None and out.kind != "summary" and site.index(out).find(q, wait=20.0) is not None:
                return RedirectResponse(links.record(oid, q), status_code=303)
        status, body = await _threaded(site.listing, oid, links, page=page, filters=filters, q=q)
        return _html(body, status)

    async def record(request: Request) -> Response:
        status, body = await _threaded(site.record, request.path_params["oid"], request.path_params["rid"], links)
        return _html(body, status)

    async def search(request: Request) -> Response:
        rid = request.query_params.get("id", "").strip()
        if not rid:
            return RedirectResponse("/", status_code=303)
        target, body = await _threaded(site.search, rid, links)
        return RedirectResponse(target, status_code=303) if target else _html(body)

    async def image(request: Request) -> Response:
        try:
            path, media = site.images.serve(int(request.path_params["root"]), request.path_params["path"])
        except ImageRefused as exc:
            return PlainTextResponse(f"refused: {exc}", status_code=403)
        except FileNotFoundError:
            return PlainTextResponse("image not found", status_code=404)
        return FileResponse(path, media_type=media, headers={"Content-Security-Policy": CSP,
                                                             "X-Content-Type-Options": "nosniff"})

    async def startup() -> None:
        if warm:
            site.warm()

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        await startup()
        yield

    routes = [Route("/", home), Route("/search", search), Route("/o/{oid}/", listing),
              Route("/o/{oid}", lambda r: RedirectResponse(f"/o/{r.path_params['oid']}/", status_code=308)),
              Route("/o/{oid}/r/{rid:path}", record), Route("/img/{root:int}/{path:path}", image),
              Mount("/static", StaticFiles(directory=STATIC_DIR), name="static")]
    return Starlette(routes=routes, lifespan=lifespan)


async def _threaded(fn: Any, *args: Any, **kw: Any) -> Any:
    """Render in a worker thread: a page may wait for an index being built or read a KB."""
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn, *args, **kw)
