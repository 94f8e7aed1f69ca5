"""Entity-type tagging for augmentation, as a stage.

Why: an intra-category distractor must be "the same kind of thing" as the anchor, and the rewritten
question must name that kind ("the bird on the left"). The type comes, in order, from

1. the question itself ("this <type>", "this specific|particular|pictured|shown <type>",
   "this type of <type>", E-VQA "these/those <type>s", "the <type> in this image"; earliest wins;
   E-VQA's vocabulary also reads a noun phrase's head, "this railway station", and "what kind of
   tree is this?"),
2. an optional LLM tagger (the `tagger` model role, answering with a type from the vocabulary),
3. the KB category (`Article.meta["type"]`) or a configured url -> type map (`url_types` resource).

The vocabulary is the sample's benchmark's (kbvqa.stages.augment.vocabularies: InfoSeek's twenty
types, kbvqa's E-VQA reconstruction), chosen from `Sample.dataset` unless `vocabulary` or `types`
says otherwise.

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
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from kbvqa.data.urls import canonical_url
from kbvqa.models.prompts.augment import ENTITY_TYPE
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import rejected
from kbvqa.runner.stage import Context, Invalid, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.audit.llm import ModelCallError
from kbvqa.stages.augment.vocabularies import INFOSEEK, VOCABULARIES, Vocabulary, vocabulary_name

__all__ = ["AMBIGUOUS_WORDS", "INFOSEEK_TYPES", "EntityTypeReply", "TagEntityType", "TagTypesConfig", "TypeMatch",
           "TypeTag", "TypeVocabulary", "kb_type", "llm_type", "plural", "tag_of", "tag_phrase"]

# The 19 InfoSeek types of the authors' script (place/location disabled there).
INFOSEEK_TYPES: tuple[str, ...] = INFOSEEK.types
AMBIGUOUS_WORDS: tuple[str, ...] = ("object", "place", "item", "thing", "location", "entity")
_IRREGULAR_PLURALS = {"fungus": "fungi", "fish": "fish", "aircraft": "aircraft", "cactus": "cacti",
                      "person": "people", "mouse": "mice", "goose": "geese", "species": "species",
                      "moss": "mosses", "city": "cities", "butterfly": "butterflies", "lily": "lilies"}
_MODIFIERS = r"(?:(?:specific|particular|pictured|shown|depicted)\s+)?"
_KIND = r"(?:(?:type|kind|species|variety|breed|model)\s+of\s+)?"
_IMAGE_NOUNS = r"(?:image|picture|photo|photograph)"
# words that end a noun phrase: never a modifier of the type noun ("this happen at ...")
_STOP = frozenset("the a an of in on at to for from with by and or but is was are were be been has have had do does "
                  "did it its this that these those which who whom what when where why how not as than".split())
# vocabulary nouns that are also common verbs: the first noun of a phrase, never its continuation
# ("does this bird fly", "does this tree bear fruit", "does this museum house ...")
_VERBAL = frozenset("fly flies bear bears pass passes cross crosses mine mines sound sounds fall falls plant plants "
                    "seal seals tick ticks duck ducks dove crow crows bug bugs flower flowers house houses lodge "
                    "lodges base mount mounts stream streams cascade cascades train trains trail trails dock docks "
                    "quarry shelter skipper harbor harbour park parks market markets wall walls bat bats".split())
_WORD = re.compile(r"([A-Za-z][A-Za-z-]*)(?=[^A-Za-z-]|$)\s*")


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
    added automatically so "these birds" and "those fungi" match. `modifiers` > 0 reads the head of a
    noun phrase: up to that many words before the first vocabulary noun, then the last of the nouns
    that follow it ("this nature reserve", "this railway station", "this church tower"). `is_this`
    also reads "what kind of <type> is this?" (the match is the final "this").
    """

    def __init__(self, types: Iterable[str] = INFOSEEK_TYPES, *, aliases: Mapping[str, str] | None = None,
                 ambiguous: Iterable[str] = AMBIGUOUS_WORDS, modifiers: int = 0, is_this: bool = False,
                 name: str = "custom"):
        self.name = name
        self.modifiers, self.is_this = int(modifiers), bool(is_this)
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
        self._det = re.compile(rf"\b{det}", re.IGNORECASE)
        self._is_this = re.compile(rf"\b(?:type|kind|species|variety|breed)\s+of\s+(?P<n3>{nouns})\s+(?:is|are)\s+"
                                   rf"(?P<d3>this|these)\b", re.IGNORECASE)

    @classmethod
    def named(cls, vocab: Vocabulary, *, aliases: Mapping[str, str] | None = None,
              ambiguous: Iterable[str] = AMBIGUOUS_WORDS) -> "TypeVocabulary":
        """A benchmark's vocabulary (kbvqa.stages.augment.vocabularies), `aliases` added on top."""
        return cls(vocab.types, aliases={**vocab.aliases, **(aliases or {})}, ambiguous=ambiguous,
                   modifiers=vocab.modifiers, is_this=vocab.is_this, name=vocab.name)

    def find(self, question: str) -> TypeMatch | None:
        """The earliest type phrase in `question` (ambiguous phrases included, flagged), or None."""
        found = [m for m in (self._find_plain(question), self._find_head(question), self._find_is_this(question))
                 if m is not None]
        return min(found, key=lambda m: (m.start, -m.end)) if found else None  # at one place, the longer

    def _match(self, noun: str, start: int, end: int, phrase: str, words: str | None = None) -> TypeMatch:
        t, is_plural, amb = self.surface[noun.lower()]
        return TypeMatch(type=t, start=start, end=end, phrase=phrase, noun=words or noun, plural=is_plural,
                         ambiguous=amb)

    def _find_plain(self, question: str) -> TypeMatch | None:
        m = self._pattern.search(question)
        if m is None:
            return None
        return self._match(m.group("n1") or m.group("n2"), m.start(), m.end(), m.group(0))

    def _find_is_this(self, question: str) -> TypeMatch | None:
        m = self._is_this.search(question) if self.is_this else None
        if m is None:
            return None
        return self._match(m.group("n3"), m.start("d3"), m.end("d3"), m.group("d3"), m.group("n3"))

    def _find_head(self, question: str) -> TypeMatch | None:
        """The earliest "this [modifier words] noun [nouns]" whose head is a vocabulary noun (or a
        two-word alias ending there, "opera house")."""
        if self.modifiers <= 0:
            return None
        for det in self._det.finditer(question):
            words: list[tuple[str, int, int]] = []
            pos = det.end()
            while len(words) < self.modifiers + 3:
                w = _WORD.match(question, pos)
                if w is None or w.group(1).lower() in _STOP:
                    break
                words.append((w.group(1), w.start(1), w.end(1)))
                pos = w.end()
            first = next((i for i, (w, _, _) in enumerate(words) if w.lower() in self.surface), None)
            if first is None or first > self.modifiers or (first > 0 and self.surface[words[first][0].lower()][2]):
                continue  # "this conflict take place" does not say "this place"
            head = first
            while (head + 1 < len(words) and words[head + 1][0].lower() in self.surface
                   and words[head + 1][0].lower() not in _VERBAL):
                head += 1
            noun = words[head][0]
            if head > 0 and f"{words[head - 1][0]} {noun}".lower() in self.surface:
                noun = f"{words[head - 1][0]} {noun}"
            end = words[head][2]
            return self._match(noun, det.start(), end, question[det.start():end],
                               question[words[0][1]:end] if head > 0 or first > 0 else None)
        return None

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
    """The type vocabulary and which model role (if configured) tags questions that name no type.

    `vocabulary`: `auto` gives each sample its benchmark's (E-VQA rows `evqa`, the rest `infoseek`;
    vocabularies.vocabulary_name), or one named vocabulary for every sample. `types` instead gives a
    vocabulary of one's own (read as InfoSeek's is: "this <type>"); `aliases` add surface nouns to
    either."""

    vocabulary: Literal["auto", "infoseek", "evqa"] = "auto"
    types: list[str] | None = None
    aliases: dict[str, str] = Field(default_factory=dict)
    ambiguous: list[str] = Field(default_factory=lambda: list(AMBIGUOUS_WORDS))
    role: str = "tagger"

    @model_validator(mode="after")
    def _one_vocabulary(self) -> "TagTypesConfig":
        if self.types is not None and self.vocabulary != "auto":
            raise ValueError(f"give a vocabulary ({self.vocabulary!r}) or your own types, not both")
        return self

    @classmethod
    def of(cls, vocab: TypeVocabulary, role: str | None = None) -> "TagTypesConfig":
        """The config for `vocab` (`role` None: the field's default)."""
        own = {"vocabulary": vocab.name} if vocab.name in VOCABULARIES else {"types": list(vocab.types)}
        return cls(**own, aliases=dict(vocab.aliases), ambiguous=list(vocab.ambiguous),
                   **({"role": role} if role is not None else {}))

    def vocabulary_name(self, dataset: str | None, sample_id: str = "") -> str:
        """The name of the vocabulary a sample of `dataset` gets (`custom` for one's own types)."""
        if self.types is not None:
            return "custom"
        return vocabulary_name(dataset, sample_id) if self.vocabulary == "auto" else self.vocabulary

    def vocabulary_by_name(self, name: str) -> TypeVocabulary:
        """The TypeVocabulary called `name` under this config's aliases and ambiguous words (built once:
        its pattern is compiled from every surface noun)."""
        return _vocabulary(name, tuple(self.types or ()), tuple(sorted(self.aliases.items())), tuple(self.ambiguous))

    def vocabulary_for(self, dataset: str | None, sample_id: str = "") -> TypeVocabulary:
        """The TypeVocabulary of a sample of `dataset`."""
        return self.vocabulary_by_name(self.vocabulary_name(dataset, sample_id))


@lru_cache(maxsize=32)
def _vocabulary(name: str, types: tuple[str, ...], aliases: tuple[tuple[str, str], ...],
                ambiguous: tuple[str, ...]) -> TypeVocabulary:
    if name == "custom":
        return TypeVocabulary(types, aliases=dict(aliases), ambiguous=ambiguous)
    return TypeVocabulary.named(VOCABULARIES[name], aliases=dict(aliases), ambiguous=ambiguous)


@register_stage
class TagEntityType(Stage):
    """Reads `id`, `question`, `dataset` (which vocabulary), `entity.url`, `entity.title`; writes
    `entity_type` ({type, source, match, excluded, notes, vocabulary}). Context: the optional `tagger` role, `ctx.kb` and the optional
    `url_types` resource (canonical url -> type) for the KB fallback."""

    name = "augment-entity-type"
    version = "2"  # 2: the vocabulary is the sample's benchmark's
    config_model = TagTypesConfig
    prompts = (ENTITY_TYPE,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        entity = record.get("entity") or {}
        question = record.get("question")
        if not isinstance(question, str):
            raise ValueError(f"sample {record['id']!r}: field 'question' must be a string, got {question!r}")
        vocab = self.config.vocabulary_for(record.get("dataset"), str(record.get("id", "")))
        tag = tag_phrase(record["id"], question, vocab)
        if tag.type is None and tag.excluded is None:
            failure = ""
            client = ctx.roles.get(self.config.role)
            if client is not None:
                t, note = await llm_type(client, question, entity.get("title") or "", vocab, ctx)
                tag.notes.append(note)
                if t:
                    tag.type, tag.source = t, "llm"
                elif note.startswith(("llm_error", "llm_invalid")):
                    failure = note
            if tag.type is None:
                t, src = kb_type(entity.get("url"), vocab, kb=ctx.kb, url_types=ctx.resource("url_types", None))
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
        return {**record, "entity_type": {**out, "vocabulary": vocab.name}}


def tag_of(line: Mapping[str, Any]) -> TypeTag:
    """The TypeTag of one output line of `TagEntityType`. A line that failed (the model could not
    tag it and the KB had no type) is excluded `no_type`, its note the model's failure as the stage
    raised it ("llm_error: ...", "llm_invalid: ...")."""
    sid = str(line["id"])
    if line.get("status", "ok") != "ok":
        reason = str(line.get("reason") or line.get("status"))
        return TypeTag(sid, None, excluded="no_type", notes=[reason.removeprefix(f"{ModelCallError.__name__}: ")])
    t = dict(line["entity_type"])
    t.pop("vocabulary", None)
    match = TypeMatch(**t["match"]) if t.get("match") else None
    return TypeTag(sid, t.get("type"), source=t.get("source"), match=match, excluded=t.get("excluded"),
                   notes=list(t.get("notes") or []))
