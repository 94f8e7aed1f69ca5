"""Text shown as marked segments, never as HTML: the templates escape every segment.

Model output and dataset text are untrusted, so nothing here builds markup: a diff, a highlighted
evidence span or an interleaved reference is a list of `(text, css class)` or image segments that
the Jinja templates (autoescaped) render.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kbvqa.data.matching import find_phrase
from kbvqa.data.notevqa import reference_tags

Segment = tuple[str, str]  # (text, css class: "" | "del" | "ins" | "hit")
_WORDS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
_QUOTED = re.compile(r"'([^']{1,200})'")
_TAG = re.compile(r"<image>(.*?)</image>", re.DOTALL)


def diff(before: str, after: str) -> tuple[list[Segment], list[Segment]]:
    """Word-level diff: the before text with deletions marked `del`, the after text with `ins`."""
    a, b = _WORDS.findall(before or ""), _WORDS.findall(after or "")
    left: list[Segment] = []
    right: list[Segment] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            left.append(("".join(a[i1:i2]), ""))
            right.append(("".join(b[j1:j2]), ""))
            continue
        if i2 > i1:
            left.append(("".join(a[i1:i2]), "del"))
        if j2 > j1:
            right.append(("".join(b[j1:j2]), "ins"))
    return left, right


def quoted(texts: Iterable[str | None]) -> list[str]:
    """Phrases a rationale quotes ('states '41 metres' for ...'): what a verifier matched."""
    return [m for t in texts if t for m in _QUOTED.findall(t)]


def highlight(text: str, phrases: Iterable[str]) -> list[Segment]:
    """`text` with every span matching one of `phrases` (kbvqa's word-bounded, normalised matching,
    `find_phrase`, which returns the span as the text writes it) marked `hit`."""
    text = text or ""
    spans: list[tuple[int, int]] = []
    for p in dict.fromkeys(p.strip() for p in phrases if p and p.strip()):
        written = find_phrase(text, p) if len(p) < 300 else None
        if not written:
            continue
        start = text.find(written)
        while start >= 0:
            spans.append((start, start + len(written)))
            start = text.find(written, start + len(written))
    if not spans:
        return [(text, "")]
    spans.sort()
    merged: list[list[int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    out: list[Segment] = []
    pos = 0
    for s, e in merged:
        if s > pos:
            out.append((text[pos:s], ""))
        out.append((text[s:e], "hit"))
        pos = e
    if pos < len(text):
        out.append((text[pos:], ""))
    return out


@dataclass(frozen=True)
class Piece:
    """One piece of an interleaved text: prose, an image (with its link), or a tag that is shown as
    a problem (malformed, out of range) in place."""

    kind: str  # text | image | bad
    text: str = ""
    image: Any = None
    caption: str = ""


def reference_pieces(text: str, images: list[dict[str, Any]], link: Callable[[str], Any]) -> list[Piece]:
    """An interleaved reference (`<image>{"candidate_images": N}</image>` tags, NoteVQA layout) as
    pieces, with the one parser of reference tags (`kbvqa.data.notevqa.reference_tags`); each
    violation stays visible where it was written."""
    tags, violations = reference_tags(text or "", len(images), allow_duplicates=True)
    good = {t.start: t for t in tags}
    bad = {v.get("tag"): v.get("kind", "malformed_tag") for v in violations}
    out: list[Piece] = []
    pos = 0
    for m in _TAG.finditer(text or ""):
        out.append(Piece("text", text[pos:m.start()]))
        t = good.get(m.start())
        if t is None:
            out.append(Piece("bad", f"[{bad.get(m.group(0), 'malformed_tag')}: {m.group(0)}]"))
        else:
            img = images[t.index - 1] if isinstance(images[t.index - 1], dict) else {"path": images[t.index - 1]}
            out.append(Piece("image", image=link(str(img.get("path") or img.get("image") or "")),
                             caption=f"image {t.index}" + (f" — {img['source_url']}" if img.get("source_url") else "")))
        pos = m.end()
    out.append(Piece("text", (text or "")[pos:]))
    return [p for p in out if p.kind != "text" or p.text]


_IMAGE_N = re.compile(r"\[Image (\d+)\]")


def numbered_pieces(text: str, embedded: list[dict[str, Any]], link: Callable[[str], Any]) -> list[Piece]:
    """IVR-12's judged text, where each tag became `[Image n]` and `embedded` lists image n."""
    by_n = {e.get("n"): e for e in embedded or [] if isinstance(e, dict)}
    out: list[Piece] = []
    pos = 0
    for m in _IMAGE_N.finditer(text or ""):
        out.append(Piece("text", text[pos:m.start()]))
        e = by_n.get(int(m.group(1)))
        out.append(Piece("image", image=link(e.get("image") or ""), caption=f"Image {m.group(1)}")
                   if e else Piece("bad", f"[{m.group(0)}: not among the embedded images]"))
        pos = m.end()
    out.append(Piece("text", (text or "")[pos:]))
    return [p for p in out if p.kind != "text" or p.text]
