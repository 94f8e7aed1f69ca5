"""The id convention of augmented samples: `<anchor id>__anchor|__intra|__inter|__blank|__double`.

It lives in the data layer because both sides of the augmentation study read it: the augment
pipeline writes these ids, and the evaluate layer (scoring and Recall@K per variant) parses them
back, and evaluate may not import pipelines. The authors' release spells the variants
`__method1__...` / `__method2__...` (also `m1`/`m2`); they parse to intra / inter.
"""

from __future__ import annotations

import re

__all__ = ["VARIANTS", "anchor_id", "split_variant"]

VARIANTS: tuple[str, ...] = ("anchor", "intra", "inter", "blank", "double")
_SUFFIX_RE = re.compile(r"^(?P<anchor>.*?)__(?P<variant>anchor|intra|inter|blank|double|method[12]|m[12])(?:__.*)?$")
_AUTHORS_VARIANTS = {"method1": "intra", "m1": "intra", "method2": "inter", "m2": "inter"}


def split_variant(sample_id: str) -> tuple[str, str | None]:
    """(anchor id, variant) of an augmented id: `x__intra` -> (`x`, `intra`); the authors'
    `x__method1__...` -> (`x`, `intra`); an id without a variant suffix -> (id, None). The one place
    the id convention is parsed, so scoring and the retrieval study agree."""
    m = _SUFFIX_RE.match(sample_id)
    if not m:
        return sample_id, None
    return m.group("anchor"), _AUTHORS_VARIANTS.get(m.group("variant"), m.group("variant"))


def anchor_id(sample_id: str) -> str:
    """The anchor's id for an augmented id (`x__intra` -> `x`; also the authors' `x__method1__...`)."""
    return split_variant(sample_id)[0]
