"""A static, self-contained HTML page built from simple blocks (headings, text, tables, figures).

No template engine and no JavaScript: the page opens from disk, survives being mailed around, and
every value is escaped.
"""

from __future__ import annotations

import html
import json
import logging
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Sequence

from kbvqa.report.tables import fmt_value, unit_problems

log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.9rem}.bad{color:#a00}.good{color:#070}
figure{display:inline-block;margin:.5rem}figure img{max-height:140px;border:1px solid #ccc}
figcaption{font-size:.8rem;color:#555;max-width:220px}
.answer{border-left:3px solid #9ab;padding:.2rem 1rem;margin:.5rem 0 1rem;background:#fafcfd}
.answer figure img{max-height:180px}
figure.plot img{max-height:none;max-width:100%;width:560px}figure.plot figcaption{max-width:560px}
"""


@dataclass
class Table:
    rows: Sequence[dict[str, Any]]
    columns: Sequence[str] | None = None
    caption: str = ""
    images: dict[str, str] = field(default_factory=dict)  # column -> "img" to render values as <img>


@dataclass
class Figure:
    src: str  # path relative to the page
    caption: str = ""
    plot: bool = False  # a chart: shown wide, not as a thumbnail


@dataclass
class Interleaved:
    """An interleaved answer: text with `<image>{"query": Q, "idx": N}</image>` tags, shown with each
    resolved tag's picture in place. `images` maps (query, idx) to an image path relative to the page;
    a tag it lacks is shown as unresolved, never silently dropped."""

    text: str
    images: dict[tuple[str, int], str] = field(default_factory=dict)
    question: str = ""
    query_image: str | None = None
    caption: str = ""


_TAG = re.compile(r"<image>(.*?)</image>", re.S)


def _interleaved(a: Interleaved) -> str:
    out = ["<div class='answer'>"]
    if a.caption:
        out.append(f"<p class='note'>{html.escape(a.caption)}</p>")
    if a.question:
        img = f"<figure><img src='{html.escape(a.query_image)}'><figcaption>query image</figcaption></figure>" \
            if a.query_image else ""
        out.append(f"<p><b>Q:</b> {html.escape(a.question)}</p>{img}")
    pos = 0
    for m in _TAG.finditer(a.text):
        out.append(html.escape(a.text[pos:m.start()]).replace("\n", "<br>"))
        pos = m.end()
        try:
            tag = json.loads(m.group(1))
            key = (str(tag.get("query")), int(tag.get("idx")))
        except (ValueError, TypeError, AttributeError):
            key = None
        src = a.images.get(key) if key else None
        if src:
            out.append(f"<figure><img src='{html.escape(src)}'><figcaption>{html.escape(key[0])} "
                       f"#{key[1]}</figcaption></figure>")
        else:
            out.append(f"<span class='bad'>[unresolved image tag {html.escape(m.group(1))}]</span>")
    out.append(html.escape(a.text[pos:]).replace("\n", "<br>") + "</div>")
    return "".join(out)


def _text(value: Any) -> str:
    """A cell's text as the unit rule shows it (report.tables.fmt_value: floats with two decimals)."""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return fmt_value(value)


def _table(t: Table) -> str:
    """The table, checked against the unit rule (report.tables.unit_problems) as shown: a breach is
    printed under it in red and logged, never silently published."""
    cols = list(t.columns or (t.rows[0].keys() if t.rows else []))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body, shown = [], []
    for row in t.rows:
        tds, texts = [], []
        for c in cols:
            v = row.get(c)
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            text = _text(v)
            texts.append("" if t.images.get(c) == "img" else text)
            cell = f'<img src="{html.escape(text)}" style="max-height:64px">' \
                if t.images.get(c) == "img" and v else html.escape(text)
            tds.append(f"<td{cls}>{cell}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
        shown.append(texts)
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    problems = unit_problems(cols, shown)
    if problems:
        log.warning("table %r breaks the unit rule: %s", t.caption, "; ".join(problems))
    warn = "".join(f"<p class='bad'>unit rule: {html.escape(p)}</p>" for p in problems)
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{warn}"


class _TableReader(HTMLParser):
    """Every <table> of a page as (header, rows of cell texts); a table whose first row is not all <th>
    (a key-value table) has an empty header."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self._rows: list[list[tuple[str, str]]] | None = None
        self._cell: list[str] | None = None
        self._tag = ""
        self._skip = 0  # inside <caption>, <svg>, <script>, <style>

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("caption", "svg", "script", "style"):
            self._skip += 1
        elif tag == "table":
            self._rows = []
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th") and self._rows:
            self._cell, self._tag = [], tag

    def handle_endtag(self, tag: str) -> None:
        if tag in ("caption", "svg", "script", "style"):
            self._skip = max(0, self._skip - 1)
        elif tag in ("td", "th") and self._cell is not None and self._rows:
            self._rows[-1].append((self._tag, " ".join("".join(self._cell).split())))
            self._cell = None
        elif tag == "table" and self._rows is not None:
            rows = [r for r in self._rows if r]
            if rows and all(k == "th" for k, _ in rows[0]):
                self.tables.append(([c for _, c in rows[0]], [[c for _, c in r] for r in rows[1:]]))
            else:
                self.tables.append(([], [[c for _, c in r] for r in rows]))
            self._rows = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None and not self._skip:
            self._cell.append(data)


def page_tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    """The tables of a rendered HTML page as (header, rows), for checking them as they are shown."""
    reader = _TableReader()
    reader.feed(page)
    return reader.tables


def page_unit_problems(page: str) -> list[str]:
    """What breaks the unit rule (report.tables.unit_problems) in any table of a rendered page: the
    check the HTML report and the viewer share."""
    return [f"table {' | '.join(h)}: {p}" for h, rows in page_tables(page) if h for p in unit_problems(h, rows)]


def render_page(title: str, blocks: Sequence[tuple[str, Any]]) -> str:
    """blocks: ("h2", text) | ("p", text) | ("note", text) | ("table", Table) | ("figures", [Figure]) |
    ("interleaved", Interleaved)."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for kind, content in blocks:
        if kind == "h2":
            parts.append(f"<h2>{html.escape(content)}</h2>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(content)}</p>")
        elif kind == "note":
            parts.append(f"<p class='note'>{html.escape(content)}</p>")
        elif kind == "table":
            parts.append(_table(content))
        elif kind == "interleaved":
            parts.append(_interleaved(content))
        elif kind == "figures":
            parts.append("<div>" + "".join(
                f"<figure{' class=plot' if f.plot else ''}><img src='{html.escape(f.src)}'>"
                f"<figcaption>{html.escape(f.caption)}</figcaption></figure>"
                for f in content) + "</div>")
        else:
            raise ValueError(f"unknown report block kind {kind!r}")
    parts.append("</body></html>")
    return "".join(parts)


def write_page(path: Path, title: str, blocks: Sequence[tuple[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(title, blocks), encoding="utf-8")
    return path
