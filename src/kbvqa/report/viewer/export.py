"""`kbvqa view --export DIR`: the same pages as the live app, written as a static site.

Links are relative (`StaticLinks`), so the folder opens from disk or from any static host. Every
record gets its page, every list its pages, and each facet value its own filtered list (filters
combine only in the live app); the images the pages show are copied in through the same checks the
live image route makes, and the viewer's CSS and JS are copied beside them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from kbvqa.report.viewer.images import ImageRefused
from kbvqa.report.viewer.site import (
    EXPORT_MAX_FACET_VALUES,
    PAGE_SIZE,
    Site,
    StaticLinks,
    rid_slug,
    value_slug,
)

STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass
class ExportResult:
    out: Path
    pages: int = 0
    records: int = 0
    images: int = 0
    problems: list[str] = field(default_factory=list)


def export_site(site: Site, out_dir: Path) -> ExportResult:
    """Write every page under `out_dir` (created; existing files of the same names replaced)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = ExportResult(out)
    images: set[str] = set()

    def write(rel: str, depth: int, render: callable) -> None:  # type: ignore[valid-type]
        links = StaticLinks(depth)
        _, body = render(links)
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
        images.update(links.images)
        res.pages += 1

    for o in site.catalog.outputs:
        base = f"o/{o.oid}"
        if o.kind == "summary":
            write(f"{base}/index.html", 2, lambda links, o=o: site.listing(o.oid, links))
            continue
        idx = site.index(o)
        entries = idx.entries(wait=600.0)
        if not idx.complete:
            res.problems.append(f"{o.rel}: indexing did not finish; exported {len(entries)} records")
        pages = max(1, -(-len(entries) // PAGE_SIZE))
        for p in range(1, pages + 1):
            write(f"{base}/index.html" if p == 1 else f"{base}/page-{p}.html", 2,
                  lambda links, o=o, p=p: site.listing(o.oid, links, page=p))
        for facet, counts in idx.facet_counts().items():
            if len(counts) > EXPORT_MAX_FACET_VALUES:
                res.problems.append(f"{o.rel}: facet {facet!r} has {len(counts)} values; not pre-rendered")
                continue
            for value in counts:
                n = len(idx.filtered({facet: value}))
                for p in range(1, max(1, -(-n // PAGE_SIZE)) + 1):
                    write(f"{base}/f/{value_slug(facet)}/{value_slug(value)}/page-{p}.html", 5,
                          lambda links, o=o, facet=facet, value=value, p=p:
                          site.listing(o.oid, links, page=p, filters={facet: value}))
        for e in entries:
            write(f"{base}/r/{rid_slug(e.rid)}.html", 3, lambda links, o=o, e=e: site.record(o.oid, e.rid, links))
            res.records += 1
    # the front page last, every output indexed: a static page shows real counts, never "0+ (indexing)"
    write("index.html", 0, lambda links: (200, site.home(links, wait=600.0)))
    for url in sorted(images):  # img/<root>/<quoted path>: copied only through the live route's checks
        _, root, rel = url.split("/", 2)
        try:
            src, _media = site.images.serve(int(root), unquote(rel))
        except (ImageRefused, FileNotFoundError, ValueError) as exc:
            res.problems.append(f"{url}: not copied ({exc})")
            continue
        dst = out / unquote(url)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        res.images += 1
    shutil.copytree(STATIC_DIR, out / "static", dirs_exist_ok=True)
    return res
