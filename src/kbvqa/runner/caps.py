"""Size caps on input records: a record too big to be a sample ends `error` before any stage sees it.

A 50 MB question is not a question: sent on, it costs minutes of rule matching, gigabytes of memory, a
model call that the server refuses or bills, and a journal line of the same size. The runner checks
every record it pulls against two caps (docs/reference.md, "Size caps") and ends an over-cap record
`error` with a reason naming the field and its size; the line keeps the record's other fields but
never the oversized text. A reply over the model client's `max_reply_bytes` is the same idea on the
way back (kbvqa.models.client).

Sizes are UTF-8 bytes of the record's text (strings at any depth; numbers and keys are not counted).
Both caps are process-wide settings: `KBVQA_MAX_FIELD_BYTES` and `KBVQA_MAX_RECORD_BYTES` (bytes; `0`
turns a cap off), or `run_stages(..., caps=SizeCaps(...))`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

FIELD_ENV = "KBVQA_MAX_FIELD_BYTES"
RECORD_ENV = "KBVQA_MAX_RECORD_BYTES"
DEFAULT_FIELD_BYTES = 1 << 20  # 1 MiB: a wiki article's section is a few KB, a long answer a few hundred bytes
DEFAULT_RECORD_BYTES = 8 << 20  # 8 MiB: a whole input line (record) with every text field


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of every string in `value` (nested lists and dicts included)."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", errors="surrogatepass"))
    if isinstance(value, dict):
        return sum(_text_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_text_bytes(v) for v in value)
    return 0


def _env_cap(name: str, default: int) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give a number of bytes (0 turns the cap off)") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r}: must be >= 0 (0 turns the cap off)")
    return value or None


@dataclass(frozen=True)
class SizeCaps:
    """`field_bytes`: the most one string of a record may hold; `record_bytes`: the most all its
    strings together may hold. None: no cap."""

    field_bytes: int | None = DEFAULT_FIELD_BYTES
    record_bytes: int | None = DEFAULT_RECORD_BYTES

    @classmethod
    def from_env(cls) -> "SizeCaps":
        return cls(_env_cap(FIELD_ENV, DEFAULT_FIELD_BYTES), _env_cap(RECORD_ENV, DEFAULT_RECORD_BYTES))

    def describe(self) -> dict[str, int | None]:
        return {"max_field_bytes": self.field_bytes, "max_record_bytes": self.record_bytes}

    def refusal(self, rec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """None when `rec` is within both caps; else (reason, the record without its oversized
        fields) — what its `error` line keeps."""
        sizes = {k: _text_bytes(v) for k, v in rec.items() if k != "id"}
        over = [k for k, n in sizes.items() if self.field_bytes is not None and n > self.field_bytes]
        parts = [f"field {k!r} holds {sizes[k]} bytes of text, over the {self.field_bytes}-byte field cap "
                 f"({FIELD_ENV})" for k in over]
        total = sum(sizes.values())
        if self.record_bytes is not None and total > self.record_bytes:
            parts.append(f"the record holds {total} bytes of text, over the {self.record_bytes}-byte record cap "
                         f"({RECORD_ENV})")
        if not parts:
            return None
        kept = {k: v for k, v in rec.items() if k not in over}
        if self.record_bytes is not None and _text_bytes(kept) > self.record_bytes:
            kept = {"id": rec["id"]}
        dropped = [k for k in rec if k not in kept]
        reason = "InputTooLarge: " + "; ".join(parts) + "; the record ran no stage" + \
            (f" and its line leaves out {', '.join(map(repr, dropped))}" if dropped else "")
        return reason, kept
