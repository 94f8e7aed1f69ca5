"""A static, self-contained HTML page built from simple blocks (headings, text, tables, figures).

No template engine and no JavaScript: the page opens from disk, survives being mailed around, and
every value is escaped.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

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


def _cell(value: Any, as_image: bool) -> str:
    if as_image and value:
        return f'<img src="{html.escape(str(value))}" style="max-height:64px">'
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    return html.escape("" if value is None else str(value))


def _table(t: Table) -> str:
    cols = list(t.columns or (t.rows[0].keys() if t.rows else []))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for row in t.rows:
        tds = []
        for c in cols:
            v = row.get(c)
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            tds.append(f"<td{cls}>{_cell(v, t.images.get(c) == 'img')}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


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
                f"<figure><img src='{html.escape(f.src)}'><figcaption>{html.escape(f.caption)}</figcaption></figure>"
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
