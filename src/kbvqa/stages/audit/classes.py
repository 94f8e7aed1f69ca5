"""Which samples the rules cannot decide, even when the answer is stated in the evidence.

Two classes of annotation error need a model: the rules see the answer written in the evidence but
cannot tell whether it is stated *as what the question asks*.

- `taxonomy_rank`: "closest parent taxonomy" questions. The evidence names several ranks (genus,
  family, order ...) and the annotation may be any of them. The rules decide only when the rank is
  explicit: the answer is the genus of the entity's own binomial name ("Aix" for "Aix sponsa"), or the
  evidence writes the answer with its rank ("the genus Aix", "family Rutaceae") and the question asks
  that rank or none.
- `answer_role`: the answer appears in the evidence, but possibly in another role in the sentence —
  the entity's own name given as what it is named after / who operates it, or the answer being the
  heading of the evidence's section rather than something the text states.

Both are tagged `needs_model:<class>`; with a model verifier configured the rules' match does not
settle these samples (the model verifiers decide), without one they are counted as undecided.
"""

from __future__ import annotations

import re
from typing import Iterable

from kbvqa.data import matching as mt
from kbvqa.data.schema import Sample

RANKS = ("kingdom", "subkingdom", "phylum", "subphylum", "infraphylum", "class", "subclass", "order", "suborder",
         "infraorder", "superfamily", "family", "subfamily", "tribe", "subtribe", "genus", "subgenus", "section",
         "species")
_TAXONOMY_RE = re.compile(r"\b(taxonom\w*|taxon|parent taxa|(which|what) (genus|family|order|tribe|class)\b"
                          r"|(genus|family|order) does this|belong to which (genus|family|order))", re.I)
_ASKED_RANK_RE = re.compile(r"\b(" + "|".join(RANKS) + r")\b", re.I)
# relations whose answer is another thing than the entity itself
_ROLE_RE = re.compile(r"\b(named after|name (derive|come)s? from|derives? its name|(who|what) (operates|maintains|"
                      r"owns|manages|runs)|operat(ed|or|es)|maintain(ed|s)? by|owner|owned by|dedicated to|"
                      r"commemorat\w+|in honou?r of)\b", re.I)


def taxonomy_question(question: str) -> bool:
    return bool(_TAXONOMY_RE.search(question or ""))


def asked_rank(question: str) -> str | None:
    """The rank a taxonomy question names ("What genus ...", "closest parent family"), or None."""
    m = _ASKED_RANK_RE.search(question or "")
    return m.group(1).lower() if m else None


def rank_stated(answer: str, texts: Iterable[str]) -> str | None:
    """The rank the evidence writes next to `answer` ("genus Aix", "Aix is a genus", "family
    Rutaceae"), or None."""
    a = mt.norm(answer)
    if not a:
        return None
    for t in texts:
        hay = f" {mt.norm(t)} "
        for r in RANKS:
            if f" {r} {a} " in hay or f" {a} {r} " in hay or f" {a} is {r} " in hay:
                return r
    return None


def taxonomy_settled(sample: Sample, texts: list[str]) -> bool:
    """The rules can decide a taxonomy answer: it is the genus of the entity's own binomial name
    (the closest parent of a species is its genus), or the evidence states its rank and the question
    asks that rank or none."""
    title = (sample.entity.title if sample.entity else None) or ""
    asked = asked_rank(sample.question)
    for a in sample.answers:
        words = title.split()
        if len(words) in (2, 3) and words[0][:1].isupper() and words[1][:1].islower() and \
                mt.norm(a.text) == mt.norm(words[0]) and asked in (None, "genus"):
            return True
        r = rank_stated(a.text, texts)
        if r is not None and asked in (None, r):
            return True
    return False


def role_suspect(sample: Sample) -> bool:
    """The question asks a relation to another thing and the answer is (part of) the entity's own
    name: "What is this building named after?" - "Asakusa" for "Asakusa Shrine"."""
    title = mt.norm((sample.entity.title if sample.entity else None) or "")
    if not title or not _ROLE_RE.search(sample.question or ""):
        return False
    return any(mt.norm(a.text) and f" {mt.norm(a.text)} " in f" {title} " for a in sample.answers)


def model_classes(sample: Sample, texts: list[str], kinds: Iterable[str | None] = ()) -> list[str]:
    """The classes (see the module docstring) that make a rules match on this sample undecisive."""
    out = []
    if taxonomy_question(sample.question) and not taxonomy_settled(sample, texts):
        out.append("taxonomy_rank")
    found = [k for k in kinds if k]
    if role_suspect(sample) or (found and all(k == "section_title" for k in found)):
        out.append("answer_role")
    return out
