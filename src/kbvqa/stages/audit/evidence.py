"""Evidence for the audit: which text a sample is checked against, and the rules answer match.

Evidence units are the sample's own evidence when the dataset provides it, else the sections of the
entity's KB article. The rules match finds an answer (or each `&&` part) stated in a text: dates and
numbers by value, text by normalised word-bounded phrase, country names and demonyms as equivalents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kbvqa.data import matching as mt
from kbvqa.data.schema import Answer, Sample

SectionLabel = Literal["entailed", "contradicted", "not_supported"]


@dataclass
class EvidenceUnit:
    text: str
    section_id: str | None
    title: str | None
    source: str  # sample | kb
    url: str | None = None

    def dump(self) -> dict[str, Any]:
        return {"section_id": self.section_id, "title": self.title, "source": self.source}


def _usable(text: str | None) -> bool:
    return bool(text and text.strip() and text.strip() != "0")


def sample_evidence(sample: Sample) -> list[EvidenceUnit]:
    return [EvidenceUnit(e.text, e.section_id, e.section_title, "sample", e.url)
            for e in sample.evidence if _usable(e.text)]


def kb_evidence(sample: Sample, kb: Any) -> tuple[list[EvidenceUnit], str | None]:
    """The entity article's sections, or ([], reason) when the KB cannot provide them."""
    url = sample.entity.url if sample.entity else None
    if kb is None:
        return [], "no_kb"
    if not url:
        return [], "missing_kb"  # nothing to look up: same outcome as an absent article
    art = kb.get(url)
    if art is None:
        return [], "missing_kb"
    units = [EvidenceUnit(s.text, str(s.index), s.title, "kb", art.url) for s in art.sections if _usable(s.text)]
    return units, (None if units else "missing_kb")


# ------------------------------------------------------------------------------- rules answer match


@dataclass
class Match:
    span: str  # the evidence text that states the answer, as written
    kind: str  # phrase | equivalent | number | date


def match_part(part: str, text: str) -> Match | None:
    """Does `text` state `part` (one answer or one `&&` part)? Dates and numbers by value, text by
    normalised word-bounded phrase (country names and demonyms are equivalent)."""
    d = mt.parse_date(part)
    if d is not None:
        for f in mt.find_dates(text):
            if mt.date_matches(d, f):
                return Match(f.text, "date")
        if d.precision > 1:
            return None
    q = mt.parse_quantity(part)
    if q is not None and d is None:
        for f in mt.find_quantities(text):
            if mt.same_value(q, f) and mt.units_compatible(q.unit, f.unit):
                return Match(f.number_text if q.unit is None else f.text, "number")
    span = mt.find_phrase(text, part)
    if span is not None:
        return Match(span, "phrase")
    eq = mt.contains_equivalent(text, part)
    if eq is not None:
        return Match(mt.find_phrase(text, eq) or eq, "equivalent")
    span = mt.find_near_phrase(text, part)
    if span is not None:
        return Match(span, "spelling")
    items = mt.list_items(part)
    if len(items) > 1:
        found = [m for m in (match_part(i, text) for i in items) if m]
        if len(found) >= 2 and 3 * len(found) >= 2 * len(items):  # most items of a list answer
            return Match("; ".join(m.span for m in found), "list")
    return None


def undecidable(answers: list[Answer]) -> bool:
    """Yes/no answers are never written verbatim in evidence: the rules cannot judge them."""
    return bool(answers) and all(mt.norm(a.text) in ("yes", "no") for a in answers)


def match_answer(answer: Answer, text: str) -> list[Match] | None:
    """One Match per part when every part of the answer is stated in `text`, else None."""
    parts = [p for p in (answer.parts if answer.parts else [answer.text]) if p.strip()]
    if not parts:
        return None
    out = []
    for p in parts:
        m = match_part(p, text)
        if m is None:
            return None
        out.append(m)
    return out


_MAX_WORDS = ("maximum", "max", "up to", "at most", "oldest", "highest", "largest", "longest", "tallest",
              "heaviest", "top speed", "most", "greatest", "biggest")
_MIN_WORDS = ("minimum", "at least", "smallest", "shortest", "lowest", "youngest", "earliest")


def numeric_candidates(question: str, answer: Answer, text: str) -> list[tuple[mt.Quantity, float]]:
    """Quantities in `text` that plausibly state the same quantity as the numeric `answer`: same
    unit as the answer or the question (or neither says), in a sentence that shares a content word
    with the question, and close in value (or a range that contains it). Returns (quantity,
    relative distance), 0 for a range containing the value."""
    q = mt.parse_quantity(answer.text)
    if q is None or answer.parts:
        return []
    qu = mt.question_unit(question)
    want_unit = q.unit or (qu[0] if qu else None)
    cues = mt.content_words(question)
    out = []
    for sent in mt.sentences(text):
        if not (cues & mt.content_words(sent)) and want_unit is None:
            continue
        for f in mt.find_quantities(sent):
            if want_unit is not None and f.unit != want_unit:
                continue
            if want_unit is None and f.unit is not None and f.dim != "time" and not f.dim.startswith("count"):
                continue
            if f.unit is None and f.low == f.high and 1000 <= f.low <= 2100 and not 1000 <= q.low <= 2100:
                continue  # a bare year is not this quantity
            if f.is_range and not q.is_range and f.low <= q.low <= f.high:
                out.append((f, 0.0))
                continue
            center = (f.low + f.high) / 2
            ref = (q.low + q.high) / 2
            if ref == 0:
                continue
            rel = abs(center - ref) / abs(ref)
            if rel <= 0.5:
                out.append((f, rel))
    return out


def rules_section_label(question: str, answers: list[Answer], text: str) -> tuple[SectionLabel, str]:
    for a in answers:
        m = match_answer(a, text)
        if m:
            return "entailed", f"states {a.text!r} as {'; '.join(x.span for x in m)!r}"
    for a in answers:
        cands = [c for c, _ in numeric_candidates(question, a, text)
                 if not mt.same_value(c, mt.parse_quantity(a.text))]  # type: ignore[arg-type]
        if cands:
            return "contradicted", f"states {cands[0].text!r} for the same quantity, not {a.text!r}"
    return "not_supported", "no answer alternative is stated"


def evidence_for(sample: Sample, audit: dict[str, Any], kb: Any) -> list[EvidenceUnit]:
    """The evidence units stage 1 looked at (sample evidence and/or the KB article), for later stages."""
    v = audit.get("stages", {}).get("verify", {})
    src = v.get("evidence_source") or ""
    units: list[EvidenceUnit] = []
    if "sample" in src:
        units += sample_evidence(sample)
    if "kb" in src:
        units += kb_evidence(sample, kb)[0]
    if not v:  # stage 1 did not run: same choice it would make
        units = sample_evidence(sample) or kb_evidence(sample, kb)[0]
    return units
