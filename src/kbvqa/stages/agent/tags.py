"""Image tags in interleaved answers: validate each against the trajectory and resolve it.

The agent cites an image with `<image>{"query": "<exact text_to_image_search query>", "idx": N}</image>`
(seed 001 App. D). `validate_tags` is a pure function of the answer and the episode's forward image
searches: a tag is valid only when an earlier call used exactly that query and returned an N-th
image. Each violation is typed — malformed_tag, no_prior_call, query_mismatch (a call exists whose
query differs only in case or spacing), idx_out_of_range, duplicate_image (an image already cited) —
and each valid tag resolves to the image (URL or path), its sha256 and its source page.

`short_answer` is what the SimpleQA-style judge grades for an interleaved answer: its first sentence,
tags removed. The system prompt asks the agent to open with a one-sentence direct answer, so the
judge sees the claim, not 300 words of context it might find a contradiction in.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

_TAG = re.compile(r"<image>(.*?)</image>", re.S)
_OPEN = re.compile(r"<image>")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


def _norm(q: str) -> str:
    return " ".join(q.split()).casefold()


def strip_tags(text: str) -> str:
    """The answer text without image tags (and without an unclosed trailing `<image>`)."""
    out = _TAG.sub("", text or "")
    i = out.find("<image>")
    return (out[:i] if i >= 0 else out).strip()


def short_answer(text: str | None, max_chars: int = 300) -> str | None:
    plain = strip_tags(text or "")
    if not plain:
        return None
    first = next((s.strip() for s in _SENTENCE_END.split(plain) if s.strip()), "")
    return first[:max_chars] or None


def validate_tags(answer: str | None, searches: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(provenance, resolved). `searches` are the episode's text_to_image_search calls in order, each
    {"query": <the query as the model wrote it>, "status": ..., "items": [{"rank", "image", "sha256",
    "url"}, ...]}."""
    calls = [s for s in searches if isinstance(s, dict)]
    text = answer or ""
    violations: list[dict[str, Any]] = []
    resolved: list[dict[str, Any]] = []
    used: set[str] = set()
    n_tags = len(_OPEN.findall(text))
    closed = list(_TAG.finditer(text))
    for _ in range(n_tags - len(closed)):
        violations.append({"kind": "malformed_tag", "tag": "<image> without </image>"})
    for m in closed:
        raw = m.group(0)
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            obj = None
        if (not isinstance(obj, dict) or not isinstance(obj.get("query"), str)
                or not isinstance(obj.get("idx"), int) or isinstance(obj.get("idx"), bool)):
            violations.append({"kind": "malformed_tag", "tag": raw})
            continue
        query, idx = obj["query"], obj["idx"]
        exact = [c for c in calls if c.get("query") == query]
        if not exact:
            near = any(_norm(str(c.get("query", ""))) == _norm(query) for c in calls)
            violations.append({"kind": "query_mismatch" if near else "no_prior_call", "tag": raw})
            continue
        items = (exact[-1].get("items") or []) if exact[-1].get("status", "ok") == "ok" else []
        item = next((it for it in items if it.get("rank") == idx), None)
        if item is None:
            violations.append({"kind": "idx_out_of_range", "tag": raw, "returned": len(items)})
            continue
        key = item.get("sha256") or item.get("image")
        if key in used:
            violations.append({"kind": "duplicate_image", "tag": raw})
            continue
        used.add(key)
        resolved.append({"query": query, "idx": idx, "image": item.get("image"), "sha256": item.get("sha256"),
                         "url": item.get("url"), "title": item.get("title", "")})
    provenance = {"tags": n_tags, "valid": len(resolved), "violations": violations}
    return provenance, resolved
