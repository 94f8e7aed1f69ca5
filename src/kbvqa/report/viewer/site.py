"""Render the viewer's pages, for the live app and for the static export alike.

`Site` owns the catalog (what discovery found), one lazily built `RecordIndex` per JSONL file, the
image links and the Jinja environment (autoescaping on for every template: model output and dataset
text are untrusted). A page is rendered with a `Links` object that says how pages, records and
images are addressed: `LiveLinks` for the Starlette app (`/o/<output>/r/<id>`), `StaticLinks` for
`--export` (relative `.html` paths that open from disk). Nothing here runs a model or writes into a
run folder.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined

from kbvqa.report.html import page_unit_problems
from kbvqa.report.tables import fmt_value, percent
from kbvqa.report.viewer.discovery import Catalog, Output, recorded_roots
from kbvqa.report.viewer.images import ImageLink, ImageLinks
from kbvqa.report.viewer.index import Entry, RecordIndex, StaleRecord
from kbvqa.runner.lock import run_state
from kbvqa.report.viewer.views import FACET_TITLES, VIEWS, judge_figures, pretty

log = logging.getLogger("kbvqa.viewer")

PAGE_SIZE = 50
#: How long a page waits for an index still being built before it says so and shows what it has.
PAGE_WAIT_S = 20.0
#: A static export pre-renders single-facet filters with at most this many values.
EXPORT_MAX_FACET_VALUES = 200
#: Observation files longer than this are shown cut, with a note.
MAX_OBSERVATION_BYTES = 200_000


@dataclass
class Lookups:
    """What the viewer may consult beyond the run folders, handed in by the caller (the CLI),
    since the report layer reads outputs and imports no KB or metric code: the KB's articles
    (`article(url)` -> Article or None; for evidence text, titles and thumbnails) with the folder its
    image paths start from, and the augmentation study (`augmentation_recall(records, samples)` ->
    Recall@K rows per variant)."""

    article: Callable[[str], Any] | None = None
    kb_dir: Path | None = None
    augmentation_recall: Callable[[Path, Path], list[dict[str, Any]]] | None = None
    samples: list[Path] = field(default_factory=list)  # extra references files (--samples)


def fnv1a32(text: str) -> str:
    h = 0x811C9DC5
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def rid_slug(rid: str) -> str:
    """A record id as a file name for the static export: its UTF-8 bytes in hex (the export's search
    box computes the same in JavaScript), shortened with a hash for long ids."""
    raw = rid.encode("utf-8")
    return raw.hex() if len(raw) <= 100 else raw[:50].hex() + "-" + fnv1a32(rid)


def value_slug(value: str) -> str:
    return (re.sub(r"[^A-Za-z0-9]+", "-", value).strip("-")[:40] or "v") + "-" + fnv1a32(value)


class LiveLinks:
    """Addresses in the live app."""

    static_site = False
    base = "/"

    def home(self) -> str:
        return "/"

    def output(self, oid: str, page: int = 1, filters: dict[str, str] | None = None, q: str | None = None) -> str:
        params = dict(filters or {})
        if q:
            params["q"] = q
        if page > 1:
            params["page"] = str(page)
        return f"/o/{quote(oid)}/" + (f"?{urlencode(params)}" if params else "")

    def with_filter(self, oid: str, filters: dict[str, str], key: str, value: str | None) -> str:
        f = {k: v for k, v in filters.items() if k != key}
        if value is not None:
            f[key] = value
        return self.output(oid, 1, f)

    def record(self, oid: str, rid: str) -> str:
        return f"/o/{quote(oid)}/r/{quote(rid, safe='')}"

    def image(self, url: str) -> str:
        return "/" + url

    def static(self, name: str) -> str:
        return "/static/" + name


class StaticLinks(LiveLinks):
    """Relative addresses in an exported site; `depth` is how deep the page being rendered lies.
    Filters are pre-rendered one facet at a time, so a filter link replaces the current one."""

    static_site = True

    def __init__(self, depth: int):
        self.base = "../" * depth
        self.images: set[str] = set()

    def home(self) -> str:
        return self.base + "index.html"

    def output(self, oid: str, page: int = 1, filters: dict[str, str] | None = None, q: str | None = None) -> str:
        if filters:
            (k, v), = list(filters.items())[:1]
            return self.base + f"o/{oid}/f/{value_slug(k)}/{value_slug(v)}/page-{page}.html"
        return self.base + (f"o/{oid}/index.html" if page == 1 else f"o/{oid}/page-{page}.html")

    def with_filter(self, oid: str, filters: dict[str, str], key: str, value: str | None) -> str:
        return self.output(oid, 1, {key: value} if value is not None else None)

    def record(self, oid: str, rid: str) -> str:
        return self.base + f"o/{oid}/r/{rid_slug(rid)}.html"

    def image(self, url: str) -> str:
        self.images.add(url)
        return self.base + url

    def static(self, name: str) -> str:
        return self.base + "static/" + name


class RecordContext:
    """What a view may ask while it builds one record's page: images, the KB, references, verdicts."""

    def __init__(self, site: Site, output: Output, links: LiveLinks):
        self.site, self.output, self.links = site, output, links
        near = [output.path.parent, *(p.parent for p in output.related.values()),
                *(p for _, p in recorded_roots(output) if p.is_absolute())]  # e.g. the posts a curation stage read
        self._near = tuple(dict.fromkeys(p.resolve() for p in near))

    def image(self, ref: Any) -> ImageLink:
        if isinstance(ref, dict):  # {path, url} (posts, NoteVQA references): the file where there is one
            ref = ref.get("path") or ref.get("image") or ref.get("url")
        return self.site.images.link(str(ref or ""), self._near)

    def href_image(self, link: ImageLink) -> str:
        return self.links.image(link.url) if link.url else ""

    def images(self, refs: Any) -> list[ImageLink]:
        if refs in (None, "", []):
            return []
        return [self.image(r) for r in (refs if isinstance(refs, list) else [refs])]

    def first_image(self, refs: Any) -> ImageLink | None:
        imgs = self.images(refs)
        return imgs[0] if imgs else None

    def article(self, url: str | None) -> Any:
        return self.site.article(url)

    def kb_image(self, ref: str) -> ImageLink:
        kb_dir = self.site.lookups.kb_dir
        return self.site.images.link(str(ref), (kb_dir.resolve(),) if kb_dir else ())

    def sample(self, rid: Any) -> dict[str, Any] | None:
        """The samples / references line with this id: from the files this output's manifest (or
        a judge or rubric run over it) names, then from every other samples file known."""
        if rid is None:
            return None
        own = [self.output.related[k] for k in ("samples", "input", "references") if k in self.output.related]
        for path in dict.fromkeys([*own, *self.site.sample_files()]):
            idx = self.site.index_for(path)
            entry = idx.find(str(rid), wait=PAGE_WAIT_S)
            if entry is not None and not entry.problem:
                return idx.read(entry)
        return None

    def verdicts(self, rid: Any) -> list[dict[str, Any]]:
        """Scorers' verdicts on this prediction: per-item score files named after the predictions
        (`P.<scorer>.jsonl`) and judge runs whose manifest names these predictions."""
        out: list[dict[str, Any]] = []
        if rid is None:
            return out
        for path in self.output.scores:
            idx = self.site.index_for(path)
            e = idx.find(str(rid), wait=PAGE_WAIT_S)
            if e is not None:
                line = idx.read(e)
                label = line.get("label") if "label" in line else ("correct" if line.get("correct") else "incorrect")
                out.append({"source": path.name, "label": label, "rationale": line.get("rationale") or "",
                            "judge": None, "href": None})
        for o in self.site.catalog.outputs:
            if o.kind == "judge" and o.related.get("predictions") is not None and \
                    o.related["predictions"].resolve() == self.output.path.resolve():
                idx = self.site.index(o)
                e = idx.find(str(rid), wait=PAGE_WAIT_S)
                if e is None:
                    continue
                line = idx.read(e)
                v = line.get("verdict") or {}
                label = v.get("label") if line.get("status", "ok") == "ok" else line.get("status")
                out.append({"source": o.rel, "label": label, "rationale": v.get("rationale") or line.get("reason") or "",
                            "judge": v.get("judge"), "href": self.links.record(o.oid, str(rid))})
        return out

    def observation(self, rel: str | None) -> str | None:
        """An agent step's full observation file (inside the output's folder only), as text."""
        if not rel:
            return None
        base = self.output.path.parent.resolve()
        p = (base / rel).resolve()
        if not p.is_relative_to(base) or not p.is_file():
            return f"[observation file {rel!r} is not inside {base} or is missing]"
        with open(p, "rb") as f:
            raw = f.read(MAX_OBSERVATION_BYTES + 1)
        text = raw[:MAX_OBSERVATION_BYTES].decode("utf-8", "replace")
        return text + ("\n[… cut at 200 kB]" if len(raw) > MAX_OBSERVATION_BYTES else "")

    def related_record(self, key: str, rid: Any) -> str | None:
        path = self.output.related.get(key)
        target = self.site.catalog.by_path(path) if path is not None else None
        return self.links.record(target.oid, str(rid)) if target is not None and rid is not None else None


class Site:
    """Renders every page of the viewer; one per app or export."""

    def __init__(self, catalog: Catalog, lookups: Lookups | None = None):
        self.catalog = catalog
        self.lookups = lookups or Lookups()
        bases = [p.parent for p in [*catalog.sample_files(), *self.lookups.samples]]
        if self.lookups.kb_dir is not None:
            bases.append(self.lookups.kb_dir)
        self.images = ImageLinks(catalog.allowed_roots, bases)
        self._indexes: dict[Path, RecordIndex] = {}
        self._given: dict[str, RecordIndex] = {}
        self._articles: dict[str, Any] = {}
        self._recall: dict[str, Any] = {}
        self._unit_checks: Counter[str] = Counter()  # pages of each template checked against the unit rule
        self.env = Environment(loader=PackageLoader("kbvqa.report.viewer", "templates"), autoescape=True,
                               undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, auto_reload=False)
        self.env.globals.update(FACET_TITLES=FACET_TITLES, pretty=pretty)
        # the one unit rule (report.tables): a fraction shown as a percentage, every float with two decimals
        self.env.filters.update(pct=lambda v: "n/a" if v is None else fmt_value(percent(v, fraction=True)),
                                num=lambda v: "n/a" if v is None else fmt_value(v))

    # -- data --------------------------------------------------------------------------------
    def index_for(self, path: Path, facet_fn: Any = None) -> RecordIndex:
        idx = self._given.get(str(path))
        if idx is None:  # one index per file, whatever spelling of its path asked
            key = Path(path).resolve()
            idx = self._given[str(path)] = self._indexes.setdefault(key, RecordIndex(key, facet_fn))
        return idx.start()

    def index(self, out: Output) -> RecordIndex:
        return self.index_for(out.path, VIEWS[out.kind].facets if out.kind in VIEWS else None)

    def warm(self) -> None:
        """Start indexing every output in the background (a page then rarely waits)."""
        for o in self.catalog.outputs:
            if o.kind != "summary":
                self.index(o)

    def sample_files(self) -> list[Path]:
        return [*self.catalog.sample_files(), *self.lookups.samples]

    def article(self, url: str | None) -> Any:
        if not url or self.lookups.article is None:
            return None
        if url not in self._articles:
            try:
                self._articles[url] = self.lookups.article(url)
            except Exception as exc:  # a broken KB must not take the page down: say so instead
                log.warning("KB lookup of %s failed: %s", url, exc)
                self._articles[url] = None
        return self._articles[url]

    def recall_rows(self, out: Output) -> tuple[list[dict[str, Any]], str | None, list[str]]:
        """(rows, why there are none, the R@K columns): Recall@K per augmentation variant, from the
        augment folder's retrieval records against its samples' gold entities."""
        rows, why = self._recall_rows(out)
        return rows, why, [k for k in (rows[0] if rows else {}) if k.startswith("R@")]

    def _recall_rows(self, out: Output) -> tuple[list[dict[str, Any]], str | None]:
        records, samples = out.related.get("records"), out.related.get("samples")
        if records is None or samples is None:
            return [], "no retrieval.jsonl beside the augmentation manifest: retrieve the augmented samples first"
        if self.lookups.augmentation_recall is None:
            return [], "the augmentation study is not available to this viewer"
        key = f"{records}:{records.stat().st_mtime_ns}"
        if key not in self._recall:
            try:
                self._recall[key] = (self.lookups.augmentation_recall(records, samples), None)
            except Exception as exc:
                self._recall[key] = ([], f"Recall@K could not be computed: {type(exc).__name__}: {exc}")
        return self._recall[key]

    # -- pages -------------------------------------------------------------------------------
    #: pages of one template checked against the unit rule per process: a template formats every record
    #: alike, and parsing each page back took half of a static export's time (tests check every page)
    UNIT_CHECKS_PER_TEMPLATE = 20

    def _render(self, template: str, links: LiveLinks, **ctx: Any) -> str:
        """A page; the first pages of each template have their tables checked against the unit rule as
        the HTML report's are (a breach is logged)."""
        page = self.env.get_template(template).render(links=links, catalog=self.catalog, **ctx)
        if self._unit_checks[template] < self.UNIT_CHECKS_PER_TEMPLATE:
            self._unit_checks[template] += 1
            for problem in page_unit_problems(page):
                log.warning("%s: unit rule: %s", template, problem)
        return page

    def home(self, links: LiveLinks, *, wait: float = 0.0) -> str:
        """The list of outputs with their record counts: the live app shows what is indexed so far
        ("15+ (indexing)"); a static export waits up to `wait` seconds per output for the real count."""
        rows = []
        for o in self.catalog.outputs:
            idx = self.index(o) if o.kind != "summary" else None
            if idx is not None and wait > 0:
                idx.wait(timeout=wait)
            info = _manifest_info(o)
            held = held_counts(idx) if idx is not None else {}
            last = {k: v for k, v in (info["counts"] or {}).items() if v}
            rows.append({"out": o, "n": len(idx) if idx is not None else None,
                         "complete": idx.complete if idx is not None else True, "manifest": info, "held": held,
                         "last_run": last if last and last != held else None})
        return self._render("home.html", links, rows=rows, title="kbvqa runs")

    def listing(self, oid: str, links: LiveLinks, *, page: int = 1, filters: dict[str, str] | None = None,
                q: str | None = None) -> tuple[int, str]:
        """(HTTP status, page) for one output's record list."""
        out = self.catalog.get(oid)
        if out is None:
            return 404, self._render("error.html", links, title="not found", message=f"no output {oid!r}")
        if out.kind == "summary":
            return 200, self._render("summary.html", links, title=out.rel, out=out, body=pretty(out.summary))
        filters = {k: v for k, v in (filters or {}).items() if v}
        idx = self.index(out)
        page = max(1, page)
        start = (page - 1) * PAGE_SIZE
        t0 = time.perf_counter()
        if filters or q:
            entries = idx.filtered(filters, wait=PAGE_WAIT_S)
            if q:
                entries = [e for e in entries if q.casefold() in e.rid.casefold()]
            total, chosen = len(entries), entries[start:start + PAGE_SIZE]
        else:
            chosen = idx.page(start, PAGE_SIZE, wait=PAGE_WAIT_S)
            total = len(idx)
        ctx = RecordContext(self, out, links)
        view = VIEWS[out.kind]
        rows = [self._row(view, idx, e, ctx, out, links) for e in chosen]
        counts = idx.facet_counts()
        pages = max(1, -(-total // PAGE_SIZE))
        scanned, size = idx.progress()
        return 200, self._render(
            "list.html", links, title=f"{out.title}: {out.rel}", out=out, rows=rows, page=page, pages=pages,
            total=total, complete=idx.complete, error=idx.error, scanned=scanned, size=size, filters=filters, q=q,
            facets=_facet_menu(counts), charts=self._charts(out, idx, counts, links),
            recall=self.recall_rows(out) if out.kind == "augmentation" else ([], None, []),
            judge=judge_figures(counts.get("label")) if out.kind == "judge" else None,
            manifest=_manifest_info(out), ms=round((time.perf_counter() - t0) * 1000))

    def _row(self, view: Any, idx: RecordIndex, e: Entry, ctx: RecordContext, out: Output, links: LiveLinks) -> dict:
        base = {"id": e.rid, "href": links.record(out.oid, e.rid), "status": e.status, "line": e.line}
        if e.problem:
            return {**base, "title": e.problem, "sub": "", "badges": [("corrupt", "bad")], "thumb": None}
        try:
            rec = idx.read(e)
            return {**base, "reason": rec.get("reason") if isinstance(rec.get("reason"), str) else "",
                    **view.row(rec, ctx)}
        except Exception as exc:  # show the row with its problem rather than lose it
            return {**base, "title": f"cannot show this record: {type(exc).__name__}: {exc}", "sub": "",
                    "badges": [("view error", "bad")], "thumb": None}

    def record(self, oid: str, rid: str, links: LiveLinks) -> tuple[int, str]:
        out = self.catalog.get(oid)
        if out is None or out.kind == "summary":
            return 404, self._render("error.html", links, title="not found", message=f"no output {oid!r}")
        idx = self.index(out)
        entry = idx.find(rid, wait=PAGE_WAIT_S)
        if entry is None:
            note = "" if idx.complete else " (the file is still being indexed: try again in a moment)"
            return 404, self._render("error.html", links, title="not found",
                                     message=f"no record {rid!r} in {out.rel}{note}", out=out)
        try:
            rec = idx.read(entry)
        except StaleRecord as exc:  # the file changed under the page: say so, never another record
            return 404, self._render("error.html", links, title="not found", message=str(exc), out=out)
        view = VIEWS[out.kind]
        ctx = RecordContext(self, out, links)
        problem = None
        detail: dict[str, Any] = {}
        try:
            detail = view.detail(rec, ctx)
        except Exception as exc:  # the raw record is still shown below, with what went wrong
            log.exception("view of %s in %s failed", rid, out.rel)
            problem = f"{type(exc).__name__}: {exc}"
        pos = idx.position(rid)
        neighbours = idx.page(max(0, (pos or 0) - 1), 3, wait=0) if pos is not None else []
        prev_e = next((e for e in neighbours if idx.position(e.rid) == (pos or 0) - 1), None)
        next_e = next((e for e in neighbours if idx.position(e.rid) == (pos or 0) + 1), None)
        elsewhere = [(o, links.record(o.oid, rid)) for o in self.catalog.outputs
                     if o is not out and o.kind != "summary" and self.index(o).peek(rid) is not None]
        template = view.template if problem is None else "record_plain.html"
        return 200, self._render(template, links, title=f"{rid} — {out.rel}", out=out, rec=rec, rid=rid, d=detail,
                                 ctx=ctx, problem=problem, raw=pretty(rec), position=pos, total=len(idx),
                                 prev=prev_e and links.record(out.oid, prev_e.rid),
                                 next=next_e and links.record(out.oid, next_e.rid), elsewhere=elsewhere,
                                 images=ctx.images(rec.get("images")) if problem else detail.get("images", []))

    def search(self, rid: str, links: LiveLinks) -> tuple[str | None, str]:
        """(redirect target when exactly one output holds the id, page listing every match)."""
        hits = []
        for o in self.catalog.outputs:
            if o.kind != "summary" and self.index(o).find(rid, wait=PAGE_WAIT_S) is not None:
                hits.append((o, links.record(o.oid, rid)))
        page = self._render("search.html", links, title=f"search: {rid}", rid=rid, hits=hits)
        return (hits[0][1] if len(hits) == 1 else None), page

    # -- summaries as charts -----------------------------------------------------------------
    def _charts(self, out: Output, idx: RecordIndex, counts: dict[str, Counter], links: LiveLinks) -> list[dict]:
        groups: list[tuple[str, str, dict[str, int]]] = []  # (title, facet, counts)
        s = out.summary or {}
        if out.kind == "audit":
            for title, key, facet in (("answer support", "answer_support", "support"), ("action", "action", "action"),
                                      ("tags", "tags", "tag")):
                src = s.get(key) if isinstance(s.get(key), dict) else dict(counts.get(facet, {}))
                groups.append((title, facet, src))
        elif out.kind in ("judge", "agent", "ivr12", "augmentation", "scores"):
            for facet, c in counts.items():
                groups.append((FACET_TITLES.get(facet, facet), facet, dict(c)))
        elif "status" in counts:
            groups.append(("status", "status", dict(counts["status"])))
        charts = []
        for title, facet, c in groups:
            if not c:
                continue
            bars = [{"label": str(k), "value": int(v), "href": links.with_filter(out.oid, {}, facet, str(k))}
                    for k, v in sorted(c.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))]
            charts.append(bar_chart(title, bars, source="summary file" if out.summary and out.kind == "audit"
                                    else ("all records" if idx.complete else "records indexed so far")))
        return charts


def held_counts(idx: RecordIndex) -> dict[str, int]:
    """Records by status as the file holds them (the last line per id), from the index: a manifest's
    counts are its last invocation's only (a resumed run that had nothing left to do counts 0)."""
    statuses = idx.facet_counts().get("status", Counter())
    counts = dict(sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0])))
    unmarked = len(idx) - sum(counts.values())
    if unmarked > 0:
        counts["no status"] = unmarked
    return counts


def bar_chart(title: str, bars: list[dict[str, Any]], *, source: str = "", fmt: str = "{:d}",
              max_value: float | None = None) -> dict[str, Any]:
    """Geometry of a horizontal bar chart (drawn as inline SVG by the template, labels escaped)."""
    top = max_value or max((b["value"] for b in bars), default=0) or 1
    width = 360
    rows = [{**b, "y": i * 22, "w": max(1, round(width * b["value"] / top)) if b["value"] else 0,
             "text": fmt.format(b["value"])} for i, b in enumerate(bars)]
    return {"title": title, "bars": rows, "height": len(rows) * 22 + 4, "width": width, "source": source}


def _facet_menu(counts: dict[str, Counter]) -> list[tuple[str, list[tuple[str, int]]]]:
    return [(k, sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for k, c in counts.items() if c]


def _manifest_info(o: Output) -> dict[str, Any]:
    """The parts of a manifest a reader wants first: what ran, when, with which models, counts."""
    m = o.manifest or {}
    roles = m.get("roles") or {}
    models = []
    for name, r in roles.items():
        for one in (r if isinstance(r, list) else [r]):
            if isinstance(one, dict):
                models.append(f"{name}: {one.get('backend') or '?'}" + (f" {one['model']}" if one.get("model") else ""))
    return {"description": m.get("description"), "state": run_state(m, o.path), "started": m.get("started"),
            "wall_seconds": m.get("wall_seconds"), "counts": m.get("counts") or m.get("output_counts"),
            "stages": [s.get("name") for s in m.get("stages") or [] if isinstance(s, dict)], "models": models,
            "version": m.get("kbvqa_version"), "commit": (m.get("git") or {}).get("commit"),
            "manifest_rel": o.manifest_path.relative_to(o.root).as_posix() if o.manifest_path else None,
            "summary_rel": o.summary_path.relative_to(o.root).as_posix() if o.summary_path else None,
            # the job's settings as used (kbvqa.runner.options): every default, file value and flag
            "options": json.dumps(options, indent=1, ensure_ascii=False) if isinstance(
                options := (m.get("run_config") or {}).get("options"), dict) else None}
