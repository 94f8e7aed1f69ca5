"""Entity-type tagging for augmentation.

Why: an intra-category distractor must be "the same kind of thing" as the anchor, and the rewritten
question must name that kind ("the bird on the left"). The type comes, in order, from

1. the question itself ("this <type>", "this specific|particular|pictured|shown <type>",
   "this type of <type>", E-VQA "these/those <type>s", "the <type> in this image"; earliest wins),
2. an optional LLM tagger (a model role answering with a type from the vocabulary),
3. the KB category (`Article.meta["type"]`) or a configured url -> type map.

Questions whose reference stays ambiguous once a second entity is in the picture ("this object",
"this place", ...) are excluded from every variant and counted, as the paper does.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from kbvqa.data.schema import Sample
from kbvqa.data.urls import canonical_url
from kbvqa.models.prompts.augment import ENTITY_TYPE

# The 19 InfoSeek types of the authors' script (place/location disabled there).
INFOSEEK_TYPES: tuple[str, ...] = (
    "building", "bridge", "facility", "park", "mountain", "lake", "island", "city", "town", "village",
    "vehicle", "aircraft", "plant", "bird", "animal", "insect", "fish", "fungus", "food", "material")
AMBIGUOUS_WORDS: tuple[str, ...] = ("object", "place", "item", "thing", "location", "entity")
_IRREGULAR_PLURALS = {"fungus": "fungi", "fish": "fish", "aircraft": "aircraft", "cactus": "cacti",
                      "person": "people", "mouse": "mice", "goose": "geese", "species": "species",
                      "moss": "mosses", "city": "cities", "butterfly": "butterflies", "lily": "lilies"}
_MODIFIERS = r"(?:(?:specific|particular|pictured|shown|depicted)\s+)?"
_KIND = r"(?:(?:type|kind|species|variety|breed|model)\s+of\s+)?"
_IMAGE_NOUNS = r"(?:image|picture|photo|photograph)"


def plural(word: str) -> str:
    """English plural of a type noun (good enough for a type vocabulary)."""
    if word in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[word]
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    if re.search(r"(s|x|z|ch|sh)$", word):
        return word + "es"
    return word + "s"


@dataclass(frozen=True)
class TypeMatch:
    """Where a type phrase sits in the question; `noun` is the word as written (may be plural)."""

    type: str
    start: int
    end: int
    phrase: str
    noun: str
    plural: bool = False
    ambiguous: bool = False


class TypeVocabulary:
    """A configurable type vocabulary: canonical types, extra surface forms, ambiguous words.

    `aliases` maps a surface noun to a canonical type (e.g. {"tree": "plant"}); plural forms are
    added automatically so "these birds" and "those fungi" match.
    """

    def __init__(self, types: Iterable[str] = INFOSEEK_TYPES, *, aliases: Mapping[str, str] | None = None,
                 ambiguous: Iterable[str] = AMBIGUOUS_WORDS):
        self.types = tuple(dict.fromkeys(t.strip().lower() for t in types if t.strip()))
        self.ambiguous = tuple(dict.fromkeys(a.strip().lower() for a in ambiguous if a.strip()))
        surface: dict[str, tuple[str, bool, bool]] = {}  # noun -> (type, plural, ambiguous)
        for a in self.ambiguous:
            surface[a] = (a, False, True)
            surface[plural(a)] = (a, True, True)
        for noun, t in {**{t: t for t in self.types}, **{k.lower(): v.lower() for k, v in (aliases or {}).items()}}.items():
            surface[noun] = (t, False, False)
            surface.setdefault(plural(noun), (t, True, False))
        self.surface = surface
        nouns = "|".join(re.escape(n) for n in sorted(surface, key=len, reverse=True))
        det = rf"(?:this|these|those)\s+{_MODIFIERS}{_KIND}"
        self._pattern = re.compile(
            rf"\b{det}(?P<n1>{nouns})\b"
            rf"|\bthe\s+(?P<n2>{nouns})\s+(?:(?:shown|pictured|depicted|seen)\s+)?in\s+(?:this|the)\s+{_IMAGE_NOUNS}\b",
            re.IGNORECASE)

    def find(self, question: str) -> TypeMatch | None:
        """The earliest type phrase in `question` (ambiguous phrases included, flagged), or None."""
        m = self._pattern.search(question)
        if m is None:
            return None
        noun = m.group("n1") or m.group("n2")
        t, is_plural, amb = self.surface[noun.lower()]
        return TypeMatch(type=t, start=m.start(), end=m.end(), phrase=m.group(0), noun=noun,
                         plural=is_plural, ambiguous=amb)

    def normalise(self, value: Any) -> str | None:
        """A free-form type label (LLM reply, KB category) mapped into the vocabulary, or None."""
        if not isinstance(value, str):
            return None
        v = value.strip().lower()
        if v in self.types:
            return v
        hit = self.surface.get(v)
        return hit[0] if hit and not hit[2] else None


@dataclass
class TypeTag:
    """The outcome of tagging one sample. `type` is None when excluded (see `excluded`)."""

    sample_id: str
    type: str | None
    source: str | None = None  # phrase | llm | kb | url_map
    match: TypeMatch | None = None
    excluded: str | None = None  # ambiguous_reference | no_type
    notes: list[str] = field(default_factory=list)


class EntityTypeReply(BaseModel):
    """What the LLM tagger must return."""

    type: str
    reason: str = ""


def _llm_messages(sample: Sample, vocab: TypeVocabulary) -> list[dict]:
    title = sample.entity.title if sample.entity and sample.entity.title else ""
    return ENTITY_TYPE.messages(labels_raw=", ".join(vocab.types), question_raw=sample.question, entity_raw=title)


async def llm_type(client: Any, sample: Sample, vocab: TypeVocabulary) -> tuple[str | None, str]:
    """Ask the tagger role; returns (type or None, note). Errors and invalid replies are notes,
    never a default type."""
    res = await client.chat(_llm_messages(sample, vocab), schema=EntityTypeReply,
                            prompt_version=ENTITY_TYPE.id)
    if res.status != "ok":
        return None, f"llm_{res.status}: {res.reason}"
    data = res.data if isinstance(res.data, dict) else {}
    raw = data.get("type")
    t = vocab.normalise(raw)
    if t is None:
        return None, "llm_none" if str(raw).strip().lower() == "none" else f"llm_invalid: type {raw!r} not in vocabulary"
    return t, "llm_ok"


def kb_type(sample: Sample, vocab: TypeVocabulary, *, kb: Any = None,
            url_types: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The KB category of the sample's entity: the url -> type map first, then Article.meta["type"]."""
    url = sample.entity.url if sample.entity and sample.entity.url else None
    if not url:
        return None, None
    key = canonical_url(url)
    if url_types:
        t = vocab.normalise(url_types.get(key) or url_types.get(url) or url_types.get(canonical_url(url)))
        if t:
            return t, "url_map"
    if kb is not None:
        art = kb.get(key)
        if art is not None:
            t = vocab.normalise(art.meta.get("type"))
            if t:
                return t, "kb"
    return None, None


def tag_phrase(sample: Sample, vocab: TypeVocabulary) -> TypeTag:
    """Phrase matching only (no model, no KB)."""
    m = vocab.find(sample.question)
    if m is None:
        return TypeTag(sample.id, None)
    if m.ambiguous:
        return TypeTag(sample.id, None, match=m, excluded="ambiguous_reference",
                       notes=[f"ambiguous phrase {m.phrase!r}"])
    return TypeTag(sample.id, m.type, source="phrase", match=m)


async def tag_samples_async(samples: list[Sample], vocab: TypeVocabulary, *, client: Any = None,
                            kb: Any = None, url_types: Mapping[str, str] | None = None,
                            concurrency: int = 8) -> list[TypeTag]:
    """Tag every sample: phrase -> LLM (if a client is given) -> KB category. Untyped samples end
    with `excluded="no_type"`; the LLM is only asked when the question names no type."""
    tags = [tag_phrase(s, vocab) for s in samples]
    if url_types:
        url_types = {canonical_url(k): v for k, v in url_types.items()}
    todo = [i for i, t in enumerate(tags) if t.type is None and t.excluded is None]
    if client is not None and todo:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                try:
                    t, note = await llm_type(client, samples[i], vocab)
                except Exception as e:  # a broken client is a note, not a crash
                    t, note = None, f"llm_error: {type(e).__name__}: {e}"
            tags[i].notes.append(note)
            if t:
                tags[i].type, tags[i].source = t, "llm"

        await asyncio.gather(*(one(i) for i in todo))
    for i in todo:
        if tags[i].type is None:
            t, src = kb_type(samples[i], vocab, kb=kb, url_types=url_types)
            if t:
                tags[i].type, tags[i].source = t, src
            else:
                tags[i].excluded = "no_type"
    return tags


def tag_samples(samples: list[Sample], vocab: TypeVocabulary, **kw: Any) -> list[TypeTag]:
    """Synchronous wrapper around `tag_samples_async`."""
    return asyncio.run(tag_samples_async(samples, vocab, **kw))
