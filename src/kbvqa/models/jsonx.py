"""The one JSON parser for model replies (the old scripts had 21 copies of one), tolerant or strict.

Models wrap JSON in code fences, prose and `<think>` blocks. `extract_json` finds the first value
that actually parses; it never invents one, and when none is found it raises ValueError with a
short reason that ends up in `ChatResult.reason`. `extract_json(text, strict=True)` is the contract
check a grader needs instead: the whole reply (optionally inside one ```json fence) must be the
value, so a label fished out of prose is never accepted.
"""

from __future__ import annotations

import json
import re
from typing import Any

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_WHOLE_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def strip_think(text: str | None) -> str:
    """Remove `<think>…</think>` reasoning blocks.

    An unterminated `<think>` (a reply cut off while thinking) drops everything after it; a stray
    closing `</think>` with no opening tag (servers that strip the opening tag) drops everything
    before it. The result is stripped of surrounding whitespace."""
    if not text:
        return ""
    out = _THINK_BLOCK.sub("", text)
    m = _THINK_OPEN.search(out)
    if m:
        out = out[: m.start()]
    m = None
    for m in _THINK_CLOSE.finditer(out):
        pass
    if m is not None:
        out = out[m.end():]
    return out.strip()


def _balanced_end(text: str, start: int) -> int | None:
    """Index one past the bracket closing the one at `start`, honouring strings and escapes."""
    stack: list[str] = []
    in_str = False
    esc = False
    pairs = {"{": "}", "[": "]"}
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in pairs:
            stack.append(pairs[c])
        elif c in "}]":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i + 1
    return None


def _first_balanced(text: str) -> tuple[Any, str]:
    """First `{...}`/`[...]` span in `text` that parses; returns (value, "") or (None, why)."""
    why = "no JSON object or array found"
    for m in re.finditer(r"[\[{]", text):
        end = _balanced_end(text, m.start())
        if end is None:
            if why.startswith("no JSON"):
                why = f"unbalanced brackets from offset {m.start()}"
            continue
        try:
            return json.loads(text[m.start():end]), ""
        except json.JSONDecodeError as e:
            why = f"{e.msg} at offset {m.start() + e.pos}"
    return None, why


def _extract(body: str) -> tuple[Any, str]:
    try:
        return json.loads(body), ""
    except json.JSONDecodeError:
        pass
    reason = ""
    for m in _FENCE.finditer(body):
        block = m.group(2).strip()
        if not block:
            continue
        try:
            return json.loads(block), ""
        except json.JSONDecodeError:
            value, why = _first_balanced(block)
            if not why:
                return value, ""
            reason = reason or f"code block: {why}"
    value, why = _first_balanced(body)
    if not why:
        return value, ""
    return None, reason or why


def _whole_reply(text: str | None) -> Any:
    """Strict mode: the whole reply, optionally inside one ``` (or ```json) fence, as one JSON value."""
    if not text or not text.strip():
        raise ValueError("empty reply")
    m = _WHOLE_FENCE.match(text)
    body = m.group(1) if m else text.strip()
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        snippet = body[:60].replace("\n", " ")
        raise ValueError(f"not exactly one JSON value: {e.msg} at offset {e.pos} (reply starts {snippet!r})") from None


def extract_json(text: str | None, *, strict: bool = False) -> Any:
    """Parse the JSON value a model reply contains.

    `strict=True` is the contract check: the whole reply, optionally inside one ``` or ```json
    fence, must be one JSON value. No think-stripping and no scanning: prose around the value, a
    second fence, or anything that is not exactly JSON raises ValueError with the parser's reason.

    Tolerant (default) order: the whole (think-stripped) text; then each fenced code block; then the
    first balanced `{...}` or `[...]` that parses, scanning past prose. If the stripped text yields nothing, the
    unstripped text is tried too (a JSON string may legitimately contain "<think>"). Raises
    ValueError("…reason…") if nothing parses, so callers mark the record invalid, never guess."""
    if strict:
        return _whole_reply(text)
    try:
        return json.loads(text or "")  # the whole reply is JSON: nothing to strip or guess
    except json.JSONDecodeError:
        pass
    body = strip_think(text)
    if not body and not (text or "").strip():
        raise ValueError("empty reply")
    if body:
        value, why = _extract(body)
        if not why:
            return value
    else:
        why = "empty reply"
    raw = (text or "").strip()
    if raw != body:
        value, why2 = _extract(raw)
        if not why2:
            return value
    snippet = (body or raw)[:60].replace("\n", " ")
    raise ValueError(f"{why} (reply starts {snippet!r})" if body else why)
