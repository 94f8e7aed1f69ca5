"""Evidence for the audit: which text a sample is checked against, and the rules answer match.

Evidence units are the sample's own evidence when the dataset provides it, else the sections of the
entity's KB article. A unit cut off by its writer (ending in "..." or "…", as E-VQA's spans are after
~320 characters) is replaced by the full KB section it was cut from when the KB has it; otherwise it
stays marked `truncated`, and an answer missing from it is inconclusive, never plainly unsupported.

The rules match finds an answer (or each `&&` part) stated in a text. Each kind of match is a
separate rule, reported as `Match.kind`:

- `date`: the same date at the answer's precision ("1989 10 27" = "27 October 1989");
- `number`: the same value, same unit or one side without one ("1301" = "1,301 kg", "3" = "three");
  a number is matched only as a whole quantity, never as the end of a range ("7" is not in "6–7");
- `range_end`: the asked end of a range for a question asking a maximum/minimum ("up to 7" in "6–7");
- `range_parts`: a range answer whose two ends the evidence states separately (male and female
  ranges merged: "59–80 cm" from "59–64 cm" and "67–80 cm");
- `numbers`: an answer built from several numbers, each stated with a compatible unit;
- `phrase`: the normalised phrase, word-bounded (ordinals and possessives folded by the tokeniser);
- `equivalent`: an equivalent name (country/demonym, exonym, Saint/San, "X Empire" ~ "X");
- `inflection`: the same words up to plural/singular ("convicts" ~ "convict", "the Ottomans");
- `coordination`: a "modifier head" answer stated through a shared head ("tannic acid" in "tannic
  and gallic acids");
- `abbreviation`: one side abbreviates a word to its initial ("H. sapiens" ~ "Homo sapiens");
- `adjective`: a one-word place name written as its adjective ("Sonora" ~ "Sonoran desert");
- `month_range`: a month inside a stated month range ("August" in "July to September");
- `spelling`: a multi-word name with one word spelled differently;
- `head_noun`: a style answer "X architecture/style/cuisine" where the evidence uses X to describe a
  building or work ("a Gothic hall church"): the evidence supports the answer as it stands;
- `section_title`: the answer is the heading of the evidence's section (E-VQA questions generated
  from a section);
- `list`: most items of a list answer; a multi-part answer (`&&`) is stated when most of its parts
  are (at least two, and two thirds).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
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
    expanded: bool = False  # a truncated sample span replaced by the full KB section
    truncated: bool = field(default=False)

    def __post_init__(self) -> None:
        self.truncated = mt.is_truncated(self.text)

    def dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {"section_id": self.section_id, "title": self.title, "source": self.source}
        if self.truncated:
            out["truncated"] = True
        if self.expanded:
            out["expanded_from_kb"] = True
        return out


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
        return [], "no_entity_url"  # nothing to look up: not the KB's lack (stages.audit.verify refuses it)
    art = kb.get(url)
    if art is None:
        return [], "missing_kb"
    units = list(_article_units(art))
    return units, (None if units else "missing_kb")


_UNITS_CACHE: dict[int, tuple[Any, tuple[EvidenceUnit, ...]]] = {}


def _article_units(art: Any) -> tuple[EvidenceUnit, ...]:
    """An article's sections as evidence units, built once per article object (an in-memory KB
    hands out the same object every time; the cache holds the article, so its id is not reused)."""
    hit = _UNITS_CACHE.get(id(art))
    if hit is not None and hit[0] is art:
        return hit[1]
    units = tuple(EvidenceUnit(s.text, str(s.index), s.title, "kb", art.url) for s in art.sections if _usable(s.text))
    if len(_UNITS_CACHE) >= 4096:
        _UNITS_CACHE.clear()
    _UNITS_CACHE[id(art)] = (art, units)
    return units


def expand_truncated(units: list[EvidenceUnit], sample: Sample, kb: Any) -> list[EvidenceUnit]:
    """Truncated sample spans replaced by the full KB section they were cut from (a section of the
    entity's article, not itself truncated, that contains the span's text up to the ellipsis)."""
    if not any(u.truncated and u.source == "sample" for u in units):
        return units
    kb_units = [k for k in kb_evidence(sample, kb)[0] if not k.truncated]
    out = []
    for u in units:
        if u.truncated and u.source == "sample" and kb_units:
            head = mt.norm(mt.truncated_stem(u.text))
            full = next((k for k in kb_units if head and f" {head}" in f" {mt.norm(k.text)}"
                         and len(k.text) > len(mt.truncated_stem(u.text))), None)
            if full is not None:
                u = EvidenceUnit(full.text, u.section_id or full.section_id, u.title or full.title, "sample",
                                 u.url or full.url, expanded=True)
        out.append(u)
    return out


# ------------------------------------------------------------------------------- rules answer match


@dataclass
class Match:
    span: str  # the evidence text that states the answer, as written
    kind: str  # see the module docstring


_MAX_WORDS = ("maximum", "max", "up to", "at most", "oldest", "highest", "largest", "longest", "tallest",
              "heaviest", "top speed", "most", "greatest", "biggest")
_MIN_WORDS = ("minimum", "at least", "smallest", "shortest", "lowest", "youngest", "earliest")
_RANGE_WORDS = ("range", "between", "typical", "typically", "usually", "generally")
STYLE_HEADS = frozenset({"architecture", "style", "cuisine", "culture", "art", "design"})
_WORK_NOUNS = frozenset(mt.stem(w) for w in (
    "building", "castle", "church", "cathedral", "basilica", "chapel", "palace", "house", "mansion", "villa",
    "hall", "temple", "mosque", "synagogue", "shrine", "pagoda", "tower", "structure", "monastery", "abbey",
    "convent", "fort", "fortress", "citadel", "bridge", "station", "skyscraper", "facade", "façade",
    "interior", "manor", "residence", "edifice", "gate", "gateway", "dome", "complex", "courthouse", "theatre",
    "theater", "museum", "library", "hotel", "block", "villa", "cloister", "nave", "tomb", "mausoleum",
    "monument", "dish", "seasoning", "food", "staple", "recipe", "culinary", "architect", "painting")) | STYLE_HEADS


def end_asked(question: str | None) -> str | None:
    """'high' when the question asks a maximum ("up to", "tallest"), 'low' for a minimum, else None."""
    if not question:
        return None
    q = f" {mt.norm(question)} "
    if any(f" {mt.norm(w)} " in q for w in _MAX_WORDS):
        return "high"
    if any(f" {mt.norm(w)} " in q for w in _MIN_WORDS):
        return "low"
    return None


def range_wanted(question: str | None) -> bool:
    q = f" {mt.norm(question or '')} "
    return any(f" {w} " in q for w in _RANGE_WORDS)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


_SCALE_RE = re.compile(r"\b(thousands|millions|billions)\b", re.I)
_SCALES = {"thousands": 1e3, "millions": 1e6, "billions": 1e9}


def _match_quantity(q: mt.Quantity, text: str, question: str | None) -> Match | None:
    """A number or range answer stated in `text` (see `number`, `range_end`, `range_parts`). A
    question counting in a scale ("how many millions of coins") takes the answer in that scale."""
    found = mt.find_quantities(text)
    scaled = [q]
    sm = _SCALE_RE.search(question or "")
    if sm:
        k = _SCALES[sm.group(1).lower()]
        scaled.append(mt.Quantity(q.low * k, q.high * k, q.unit, q.dim, q.text, q.number_text, q.start, q.end))
    for f in found:
        if any(mt.same_value(x, f) for x in scaled) and mt.units_compatible(q.unit, f.unit):
            return Match(f.number_text if q.unit is None else f.text, "number")
    ok = [f for f in found if mt.units_compatible(q.unit, f.unit)]
    if not q.is_range:
        end = end_asked(question)
        if end and not range_wanted(question):
            for f in ok:
                if f.is_range and _close(f.high if end == "high" else f.low, q.low):
                    return Match(f.text, "range_end")
        return None
    lo = [f for f in ok if _close(f.low, q.low) or _close(f.high, q.low)]
    hi = [f for f in ok if _close(f.high, q.high) or _close(f.low, q.high)]
    for a in lo:
        for b in hi:
            if a is b:
                continue
            units = {x.unit for x in (a, b) if x.unit is not None}
            if q.unit is None and len(units) > 1:
                continue  # two different quantities that happen to share the numbers
            first, second = (a, b) if a.start <= b.start else (b, a)
            return Match(f"{first.text} … {second.text}", "range_parts")
    return None


_MONTH_RANGE_RE = re.compile(r"\b(" + "|".join(m for m in mt.MONTHS if len(m) > 3 or m == "may") + r")\.?\s*"
                             r"(?:to|through|until|till|-|\u2013|\u2014)\s*("
                             + "|".join(m for m in mt.MONTHS if len(m) > 3 or m == "may") + r")\b", re.I)


def _match_month_range(part: str, text: str) -> Match | None:
    """A month inside a month range the text states ("August" in "July to September")."""
    p = mt.norm(part)
    if p not in mt.MONTHS or len(p) <= 3 and p != "may":
        return None
    want = mt.MONTHS[p]
    for m in _MONTH_RANGE_RE.finditer(text):
        a, b = mt.MONTHS[m.group(1).lower()], mt.MONTHS[m.group(2).lower()]
        inside = a <= want <= b if a <= b else (want >= a or want <= b)  # a range over the new year
        if inside:
            return Match(m.group(0), "month_range")
    return None


def _match_numbers(part: str, text: str) -> Match | None:
    """An answer made of several numbers ("male 59–64 cm and female 67–80 cm"): every number stated
    with a compatible unit, and most of the answer's other words too."""
    qs = mt.find_quantities(part)
    if len(qs) < 2:
        return None
    found = mt.find_quantities(text)
    spans = []
    for a in qs:
        hit = next((f for f in found if mt.same_value(a, f) and mt.units_compatible(a.unit, f.unit)
                    and (a.unit is None or f.unit is not None or a.dim is None)), None)
        if hit is None:
            return None
        spans.append(hit.text)
    words = mt.content_words(re.sub(r"[\d.,]+", " ", part))
    if words and 2 * len(words & mt.content_words(text)) < len(words):
        return None
    return Match("; ".join(spans), "numbers")


def _match_head_noun(part: str, text: str) -> Match | None:
    """'X architecture/style/cuisine' where the text calls a building or work X ("a Gothic hall
    church", "a Japanese culinary staple", "in a highly eclectic style")."""
    words = mt.norm(part).split()
    if len(words) < 2 or words[-1] not in STYLE_HEADS:
        return None
    x = words[:-1]
    if not set(x) <= mt.vocab(text):
        return None
    text = unicodedata.normalize("NFC", text)
    toks = mt.tokenize(text)
    n = len(x)
    for i in range(len(toks) - n):
        if [t.norm for t in toks[i:i + n]] == x and mt.stem(toks[i + n].norm) in _WORK_NOUNS:
            return Match(text[toks[i].start:toks[i + n].end], "head_noun")
    return None


def match_part(part: str, text: str, question: str | None = None, title: str | None = None) -> Match | None:
    """Does `text` state `part` (one answer or one `&&` part)? See the module docstring for the
    kinds of match, tried in order from the strictest. (Cached: every stage asks the same
    questions of the same texts; a Match is never mutated.)"""
    return _match_part(part, text, question, title)


@lru_cache(maxsize=65536)
def _match_part(part: str, text: str, question: str | None, title: str | None) -> Match | None:
    d = mt.parse_date(part)
    if d is not None:
        for f in mt.find_dates(text):
            if mt.date_matches(d, f):
                return Match(f.text, "date")
        if d.precision > 1:
            return None
    q = mt.parse_quantity(part)
    if q is not None and d is None:
        return _match_quantity(q, text, question)
    if q is not None and mt.asks_number(question or ""):  # "1010" aircraft built: a count, not a year
        m = _match_quantity(q, text, question)
        if m is not None:
            return m
    m = _match_month_range(part, text)
    if m is not None:
        return m
    if not (mt.phrase_keys(part) & mt.vocab(text)):  # no word in common: only these can still match
        span = mt.find_adjective(text, part)
        if span is not None:
            return Match(span, "adjective")
        return Match(title, "section_title") if title and mt.norm(title) == mt.norm(part) else None
    span = mt.find_phrase(text, part)
    if span is not None:
        return Match(span, "phrase")
    eq = mt.contains_equivalent(text, part)
    if eq is not None:
        return Match(mt.find_phrase(text, eq) or eq, "equivalent")
    for form in mt.equivalent_forms(part) or [part]:
        span = mt.find_inflected(text, form)
        if span is not None:
            return Match(span, "inflection")
    for find, kind in ((mt.find_coordinated, "coordination"), (mt.find_abbreviated, "abbreviation"),
                       (mt.find_adjective, "adjective"), (mt.find_near_phrase, "spelling")):
        span = find(text, part)
        if span is not None:
            return Match(span, kind)
    m = _match_head_noun(part, text) or _match_numbers(part, text)
    if m is not None:
        return m
    if title and mt.norm(title) == mt.norm(part):
        return Match(title, "section_title")
    items = mt.list_items(part)
    if len(items) > 1:
        found = [m for m in (match_part(i, text, question) for i in items) if m]
        if len(found) >= 2 and 3 * len(found) >= 2 * len(items):  # most items of a list answer
            return Match("; ".join(m.span for m in found), "list")
    return None


def undecidable(answers: list[Answer]) -> bool:
    """Yes/no answers are never written verbatim in evidence: the rules cannot judge them."""
    return bool(answers) and all(mt.norm(a.text) in ("yes", "no") for a in answers)


def match_answer(answer: Answer, text: str, question: str | None = None, title: str | None = None) -> list[Match] | None:
    """One Match per part when every part of the answer is stated in `text`, else None. A
    multi-part answer (E-VQA `a&&b&&c`, scored by part overlap) is stated when most of its parts are
    (at least two and two thirds); the matches then list only the parts found."""
    parts = [p for p in (answer.parts if answer.parts else [answer.text]) if p.strip()]
    if not parts:
        return None
    out = []
    missing = 0
    for p in parts:
        m = match_part(p, text, question, title)
        if m is None:
            missing += 1
            if len(parts) < 3 or 3 * (len(parts) - missing) < 2 * len(parts):
                return None
            continue
        out.append(m)
    if missing:
        out.append(Match("", f"most_parts:{missing}_missing"))
    return out


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


def rules_section_label(question: str, answers: list[Answer], text: str,
                        title: str | None = None) -> tuple[SectionLabel, str, str | None]:
    """(label, rationale, match kind) of one evidence unit for the rules verifier."""
    for a in answers:
        m = match_answer(a, text, question, title)
        if m:
            return "entailed", f"states {a.text!r} as {'; '.join(x.span for x in m)!r}", m[0].kind
    for a in answers:
        cands = [c for c, _ in numeric_candidates(question, a, text)
                 if not mt.same_value(c, mt.parse_quantity(a.text))]  # type: ignore[arg-type]
        if cands:
            return "contradicted", f"states {cands[0].text!r} for the same quantity, not {a.text!r}", None
    return "not_supported", "no answer alternative is stated", None


def evidence_for(sample: Sample, audit: dict[str, Any], kb: Any) -> list[EvidenceUnit]:
    """The evidence units stage 1 looked at (sample evidence and/or the KB article), for later stages."""
    v = audit.get("stages", {}).get("verify", {})
    src = v.get("evidence_source") or ""
    units: list[EvidenceUnit] = []
    if "sample" in src:
        units += expand_truncated(sample_evidence(sample), sample, kb)
    if "kb" in src:
        units += kb_evidence(sample, kb)[0]
    if not v:  # stage 1 did not run: same choice it would make
        units = expand_truncated(sample_evidence(sample), sample, kb) or kb_evidence(sample, kb)[0]
    return units


# ------------------------------------------------------------------------- evidence span extraction


def supporting_spans(sample: Sample, units: list[EvidenceUnit]) -> list[dict[str, Any]]:
    """ARA step 3 by rules: for each unit that states an answer, the sentence(s) stating it, with
    where they sit in the unit. One entry per (unit, answer alternative) found, first match per
    sentence; the order is the units'."""
    out: list[dict[str, Any]] = []
    for u in units:
        for a in sample.answers:
            m = match_answer(a, u.text, sample.question, u.title)
            if not m:
                continue
            sents = []
            for x in m:
                if x.kind == "section_title":
                    continue
                probe = x.span.split(" … ")[0].split("; ")[0]
                s = next((s for s in mt.sentences(u.text) if probe and probe in s), None)
                if s is not None and s not in sents:
                    sents.append(s)
            span = " ".join(sents) if sents else (u.title or "")
            start = u.text.find(sents[0]) if sents else -1
            out.append({**u.dump(), "answer": a.text, "match": [x.span for x in m], "kind": m[0].kind,
                        "span": span, "start": start if start >= 0 else None,
                        "end": (start + len(span)) if start >= 0 and len(sents) == 1 else None})
            break
    return out


# Lives here, beside the other matching of answers against text, so that stage 3 (posedness) and
# stage 4 (leakage) both read it without importing each other.
def _is_choice_option(qn: str, form: str) -> bool:
    return f" {form} or " in qn or f" or {form} " in qn


def leaked(question: str, answers: list[Answer], min_chars: int = 1) -> str | None:
    """The answer (or `&&` part, or an equivalent form) the question states word-bounded, or None.
    Options of a choice question ("male or female?") are not leaks."""
    qn = f" {mt.norm(question)} "
    for a in answers:
        for part in (a.parts or [a.text]):
            if len(part.strip()) < min_chars:
                continue
            for form in mt.equivalent_forms(part):
                if form and f" {form} " in qn and not _is_choice_option(qn, form):
                    return part if form == mt.norm(part) else f"{part} (as {form!r})"
    return None


def combine(labels: list[str], contradicted: str = "all") -> str:
    """A verifier's sample label from its unit labels: entailed if any unit is; contradicted when all
    units are (`contradicted = "all"`, the authors' rule) or any is (`"any"`); else not_supported."""
    if "entailed" in labels:
        return "entailed"
    hit = all if contradicted == "all" else any
    if labels and hit(x == "contradicted" for x in labels):
        return "contradicted"
    return "not_supported"
