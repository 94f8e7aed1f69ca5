"""Entity-type tagging for augmentation, as a stage.

Why: an intra-category distractor must be "the same kind of thing" as the anchor, and the rewritten
question must name that kind ("the bird on the left"). The type comes, in order, from

1. the question itself ("this <type>", "this specific|particular|pictured|shown <type>",
   "this type of <type>", E-VQA "these/those <type>s", "the <type> in this image"; earliest wins),
2. an optional LLM tagger (the `tagger` model role, answering with a type from the vocabulary),
3. the KB category (`Article.meta["type"]`) or a configured url -> type map (`url_types` resource).

Questions whose reference stays ambiguous once a second entity is in the picture ("this object",
"this place", ...) are excluded from every variant and counted, as the paper does.

Why a stage: with an LLM tagger, tagging is a per-record model job like the audit, so it runs
through the runner (resume, manifest with the prompt hash and the model, token/cost accounting,
one status per sample). The model never gives a default type: a failed call (`error`) or an
unusable reply (`invalid`) leaves the KB fallback to decide, and when that finds nothing either the
record ends `error`/`invalid` (retried on resume) and the augment pipeline counts the sample as
excluded `no_type`, with the model's failure as the note (`tag_of`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from pydantic import Field

from kbvqa.data.urls import canonical_url
from kbvqa.models.prompts.augment import ENTITY_TYPE
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import rejected
from kbvqa.runner.stage import Context, Invalid, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.audit.llm import ModelCallError

__all__ = ["AMBIGUOUS_WORDS", "INFOSEEK_TYPES", "EntityTypeReply", "TagEntityType", "TagTypesConfig", "TypeMatch",
           "TypeTag", "TypeVocabulary", "kb_type", "llm_type", "plural", "tag_of", "tag_phrase"]

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
        self.aliases = {k.lower(): v.lower() for k, v in (aliases or {}).items()}
        surface: dict[str, tuple[str, bool, bool]] = {}  # noun -> (type, plural, ambiguous)
        for a in self.ambiguous:
            surface[a] = (a, False, True)
            surface[plural(a)] = (a, True, True)
        for noun, t in {**{t: t for t in self.types}, **self.aliases}.items():
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


class EntityTypeReply(Reply):
    """What the LLM tagger must return: a non-blank `type` that is not the prompt's template slot
    (the vocabulary check is `llm_type`'s, since the vocabulary is configured per run)."""

    type: NonBlank
    reason: str = ""
    placeholder_examples: ClassVar[tuple[str, ...]] = ("label", "type", "one label from the list")


async def llm_type(client: Any, question: str, title: str, vocab: TypeVocabulary,
                   ctx: Context | None = None) -> tuple[str | None, str]:
    """Ask the tagger role; returns (type or None, note): `llm_ok`, `llm_none` (the model says no
    label fits), `llm_invalid: ...`, `llm_error: ...`. Failures are notes, never a default type; the
    call's tokens and cost go to `ctx`."""
    try:
        res = await client.chat(ENTITY_TYPE.messages(labels_raw=", ".join(vocab.types), question_raw=question,
                                                     entity_raw=title),
                                schema=EntityTypeReply, prompt_version=ENTITY_TYPE.id)
    except Exception as exc:  # a broken client is a note; the KB may still know the type
        return None, f"llm_error: {type(exc).__name__}: {exc}"
    if ctx is not None:
        ctx.add_usage(getattr(res, "usage", None))
    if res.status != "ok":
        return None, f"llm_{res.status}: {res.reason}"
    raw = (res.data if isinstance(res.data, dict) else {}).get("type")
    t = vocab.normalise(raw)
    if t is None:
        if str(raw).strip().lower() == "none":
            return None, "llm_none"
        return None, str(rejected(res, f"llm_invalid: type {raw!r} not in vocabulary"))  # not served again
    return t, "llm_ok"


def kb_type(url: str | None, vocab: TypeVocabulary, *, kb: Any = None,
            url_types: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The KB category of an entity url: the url -> type map (canonical keys) first, then
    Article.meta["type"]; (type, "url_map" | "kb") or (None, None)."""
    if not url:
        return None, None
    key = canonical_url(url)
    if url_types:
        t = vocab.normalise(url_types.get(key) or url_types.get(url))
        if t:
            return t, "url_map"
    if kb is not None:
        art = kb.get(key)
        if art is not None:
            t = vocab.normalise(art.meta.get("type"))
            if t:
                return t, "kb"
    return None, None


def tag_phrase(sample_id: str, question: str, vocab: TypeVocabulary) -> TypeTag:
    """Phrase matching only (no model, no KB)."""
    m = vocab.find(question)
    if m is None:
        return TypeTag(sample_id, None)
    if m.ambiguous:
        return TypeTag(sample_id, None, match=m, excluded="ambiguous_reference",
                       notes=[f"ambiguous phrase {m.phrase!r}"])
    return TypeTag(sample_id, m.type, source="phrase", match=m)


class TagTypesConfig(StageConfig):
    """The type vocabulary and which model role (if configured) tags questions that name no type."""

    types: list[str] = Field(default_factory=lambda: list(INFOSEEK_TYPES))
    aliases: dict[str, str] = Field(default_factory=dict)
    ambiguous: list[str] = Field(default_factory=lambda: list(AMBIGUOUS_WORDS))
    role: str = "tagger"

    @classmethod
    def of(cls, vocab: TypeVocabulary, role: str | None = None) -> "TagTypesConfig":
        """The config for `vocab` (`role` None: the field's default)."""
        return cls(types=list(vocab.types), aliases=dict(vocab.aliases), ambiguous=list(vocab.ambiguous),
                   **({"role": role} if role is not None else {}))


@register_stage
class TagEntityType(Stage):
    """Reads `id`, `question`, `entity.url`, `entity.title`; writes `entity_type` ({type, source,
    match, excluded, notes}). Context: the optional `tagger` role, `ctx.kb` and the optional
    `url_types` resource (canonical url -> type) for the KB fallback."""

    name = "augment-entity-type"
    version = "1"
    config_model = TagTypesConfig
    prompts = (ENTITY_TYPE,)

    def __init__(self, config: TagTypesConfig | None = None):
        super().__init__(config)
        c = self.config
        self.vocab = TypeVocabulary(c.types, aliases=c.aliases, ambiguous=c.ambiguous)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        entity = record.get("entity") or {}
        question = record.get("question")
        if not isinstance(question, str):
            raise ValueError(f"sample {record['id']!r}: field 'question' must be a string, got {question!r}")
        tag = tag_phrase(record["id"], question, self.vocab)
        if tag.type is None and tag.excluded is None:
            failure = ""
            client = ctx.roles.get(self.config.role)
            if client is not None:
                t, note = await llm_type(client, question, entity.get("title") or "", self.vocab, ctx)
                tag.notes.append(note)
                if t:
                    tag.type, tag.source = t, "llm"
                elif note.startswith(("llm_error", "llm_invalid")):
                    failure = note
            if tag.type is None:
                t, src = kb_type(entity.get("url"), self.vocab, kb=ctx.kb, url_types=ctx.resource("url_types", None))
                if t:
                    tag.type, tag.source = t, src
                elif failure.startswith("llm_invalid"):
                    raise Invalid(failure)  # the model's reply was unusable: retried on resume
                elif failure:
                    raise ModelCallError(failure)  # the call failed: retried on resume
                else:
                    tag.excluded = "no_type"
        out = asdict(tag)
        del out["sample_id"]
        return {**record, "entity_type": out}


def tag_of(line: Mapping[str, Any]) -> TypeTag:
    """The TypeTag of one output line of `TagEntityType`. A line that failed (the model could not
    tag it and the KB had no type) is excluded `no_type`, its note the model's failure as the stage
    raised it ("llm_error: ...", "llm_invalid: ...")."""
    sid = str(line["id"])
    if line.get("status", "ok") != "ok":
        reason = str(line.get("reason") or line.get("status"))
        return TypeTag(sid, None, excluded="no_type", notes=[reason.removeprefix(f"{ModelCallError.__name__}: ")])
    t = dict(line["entity_type"])
    match = TypeMatch(**t["match"]) if t.get("match") else None
    return TypeTag(sid, t.get("type"), source=t.get("source"), match=match, excluded=t.get("excluded"),
                   notes=list(t.get("notes") or []))
