"""Question rewriting for augmented variants.

Why minimal: the paper keeps the annotated answer by construction, so the only change allowed is the
one that tells a reader which entity is meant. Intra-category questions get a spatial cue that
replaces the type phrase ("this vehicle" -> "the vehicle on the left"); inter-category questions stay
unchanged (the paper), with the with-position variant available as an option (the authors' release).
Questions that refer to the entity by pronoun are made explicit first ("When was it built?" ->
"When was this building built?"). Every rewrite is validated; a failed check is reported, never
silently repaired.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kbvqa.stages.augment.types import TypeMatch, TypeVocabulary, plural
from kbvqa.data.matching import contains

POSITIONS = ("left", "right", "top left", "top right", "bottom left", "bottom right")
_CUE_RE = re.compile(r"\b(?:on|in) the (?:top |bottom )?(?:left|right)\b", re.IGNORECASE)
_PRONOUN_RE = re.compile(r"\b(its|their|it|they|them)\b", re.IGNORECASE)
_BAD_GRAMMAR = re.compile(r"\b(the|a|an|this|these|those) (the|a|an|this|these|those)\b|\s{2,}|\s\?$",
                          re.IGNORECASE)


@dataclass
class Rewrite:
    text: str
    method: str  # replaced | appended | unchanged
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def cue(position: str) -> str:
    """'on the left' for a row layout, 'in the top left' for a grid cell."""
    if position not in POSITIONS:
        raise ValueError(f"unknown position {position!r}; known: {POSITIONS}")
    return f"on the {position}" if position in ("left", "right") else f"in the {position}"


def _match_case(template: str, replacement: str) -> str:
    return replacement[:1].upper() + replacement[1:] if template[:1].isupper() else replacement


def make_explicit(question: str, etype: str, vocab: TypeVocabulary) -> tuple[str, bool]:
    """Replace the first entity pronoun by "this <type>" (it), "this <type>'s" (its/their) or
    "these <types>" (they/them) when the question names no type phrase. Returns (question, changed)."""
    if vocab.find(question) is not None:
        return question, False
    m = _PRONOUN_RE.search(question)
    if m is None:
        return question, False
    word = m.group(1).lower()
    rep = {"its": f"this {etype}'s", "their": f"this {etype}'s", "it": f"this {etype}"}.get(word, f"these {plural(etype)}")
    rep = _match_case(m.group(1), rep)
    return question[:m.start()] + rep + question[m.end():], True


def with_cue(question: str, match: TypeMatch | None, etype: str, position: str) -> Rewrite:
    """Replace the type phrase by "the <noun> <cue>" (the noun phrase as written: "the railway station
    on the left"); without a phrase, append " for the <type> <cue>?" (the authors' fallback)."""
    c = cue(position)
    if match is not None:
        noun = match.noun if not match.ambiguous else etype
        rep = _match_case(match.phrase, f"the {noun} {c}")
        return Rewrite(question[:match.start] + rep + question[match.end:], "replaced")
    base = question.rstrip().rstrip("?").rstrip()
    return Rewrite(f"{base} for the {etype} {c}?", "appended")


def validate(original: str, rewritten: str, *, etype: str, vocab: TypeVocabulary,
             answers: Iterable[str] = (), expect_cue: str | None = None) -> list[str]:
    """Checks every rewrite must pass: exactly one cue (the expected one), no type phrase left,
    no answer introduced (word-bounded), no doubled determiners, ends with '?'."""
    errors = []
    if not rewritten.strip():
        return ["empty question"]
    cues = _CUE_RE.findall(rewritten)
    if expect_cue is not None:
        if len(cues) != 1:
            errors.append(f"expected exactly one spatial cue, found {len(cues)}")
        elif cues[0].lower() != expect_cue.lower():
            errors.append(f"cue {cues[0]!r} is not the expected {expect_cue!r}")
        left = vocab.find(rewritten)
        if left is not None:
            errors.append(f"type phrase {left.phrase!r} not consumed")
        elif not re.search(rf"\bthe (?:[\w'-]+ ){{1,4}}{re.escape(expect_cue)}", rewritten, re.IGNORECASE):
            errors.append("the cue does not follow 'the <type>'")
    for a in answers:
        if a and contains(rewritten, a) and not contains(original, a):
            errors.append(f"answer {a!r} leaks into the rewrite")
            break
    if _BAD_GRAMMAR.search(rewritten):
        errors.append("ungrammatical: doubled determiner or stray whitespace")
    # a question ends with '?'; a trailing parenthetical instruction the original had is allowed
    if not rewritten.rstrip().endswith("?") and (original.rstrip().endswith("?") or "?" not in rewritten):
        errors.append("does not end with '?'")
    return errors


def rewrite_positional(question: str, match: TypeMatch | None, etype: str, position: str,
                       vocab: TypeVocabulary, answers: Iterable[str] = ()) -> Rewrite:
    """The intra-category rewrite (also the with-position inter query), validated."""
    rw = with_cue(question, match, etype, position)
    rw.errors = validate(question, rw.text, etype=etype, vocab=vocab, answers=answers, expect_cue=cue(position))
    return rw


def prepare(question: str, etype: str, vocab: TypeVocabulary) -> tuple[str, TypeMatch | None, bool]:
    """The explicit anchor question and its type phrase: (question, match, made_explicit)."""
    explicit, changed = make_explicit(question, etype, vocab)
    m = vocab.find(explicit)
    return explicit, (m if m is not None and not m.ambiguous else None), changed
