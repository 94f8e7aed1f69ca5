"""The InfoSeek scorer's numeric-answer parser, shared by the reference loader and the scorers.

It lives apart from `infoseek.py` because the reference loader (`io.py`) needs it to turn numeric
answers written as text ("6 - 7", "1,234") into ranges, while `infoseek.py` needs the loader's
record types: with the parser here both import it at module level and neither imports the other's
module in a cycle.
"""

from __future__ import annotations

import re

__all__ = ["parse_numeric"]

# optional sign, optional leading '.', digits, optional ',ddd' groups, optional '.' and digits,
# optional exponent (the official pattern, character for character in behaviour)
_NUMBER_RE = re.compile(r"[-+]?\.?\d+(?:,\d\d\d)*\.?\d*(?:[eE][-+]?\d+)?")


def _space_ranges(text: str) -> str:
    """'9-10' -> '9 - 10': every '-' right after a digit (str.isdigit, as the official code)."""
    i = text.find("-")
    if i < 0:
        return text
    parts: list[str] = []
    last = 0
    while i >= 0:
        if i >= 1 and text[i - 1].isdigit():
            parts.append(text[last:i])
            parts.append(" - ")
            last = i + 1
        i = text.find("-", i + 1)
    parts.append(text[last:])
    return "".join(parts)


def parse_numeric(text: str, *, strict: bool = False) -> float | list[float] | None:
    """Parse a numeric answer the way the InfoSeek scorer does.

    Returns a range ``[a, b]`` (two numbers with a <= b), a scalar (one number, or two with a > b:
    the first), or ``[0.0, 0.0]`` when there is no number ("no idea" is therefore correct whenever
    the reference range contains 0). With ``strict=True`` "no number" returns None instead.
    No unit scaling: "1.2 million" is 1.2. Never raises: a sign-only token left by the "more than one
    '.'" rule (e.g. "-.5.3", where the official script crashed) is skipped.
    """
    values: list[float] = []
    for tok in _NUMBER_RE.findall(_space_ranges(text)):
        tok = tok.replace(",", "").strip(".")
        if tok.count(".") > 1:
            tok = tok.split(".")[0]
        try:
            values.append(float(tok))
        except ValueError:  # only "+" or "-" can get here
            continue
        if len(values) == 2:
            break
    if len(values) == 2:
        a, b = values
        return [a, b] if a <= b else a
    if len(values) == 1:
        return values[0]
    return None if strict else [0.0, 0.0]
