"""Audit stage 3: question well-posedness (rules tagger + conservative template repairs).

Tags (the paper's three ambiguity patterns):
- missing_attribute_constraint: "how big/large", "what size" without saying which dimension; or a
  numerical question that names no unit while the evidence gives one;
- missing_temporal_scope: "when ..." without a granularity (year, month, season, date ...);
- missing_spatial_reference: "country or region", "city or region", "where ...", "which place".

A repair is made only when the evidence makes the missing constraint explicit (the unit the evidence
writes next to the answer; the one dimension word in the sentence stating the answer; the answer
itself being a year / month / season / country / continent), and only as a minimal template edit.
A repaired question (the rules' or a model's) must stay coherent with the answer: one that names a
unit of the answer's dimension other than the answer's own ("in months" for an answer in days) is
not applied (`repair_unit_conflict` / the model's suggestion rejected).
Everything else is tagged and left to a model repairer or a human.

Who decides (§4.1 step 3 tags ambiguity with a model): with the repairer role configured its tags
decide and the rules' tags are only proposals; without it the rules tag alone (kbvqa's offline
stand-in, where every "where ..." question is spatial).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from kbvqa.data.schema import Sample
from kbvqa.data import matching as mt
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.models.prompts.audit import POSEDNESS
from kbvqa.stages.audit.evidence import EvidenceUnit, evidence_for, leaked
from kbvqa.stages.audit.llm import llm_posedness, minimal_edit, resolve_role
from kbvqa.stages.audit.record import add_tag, escalate, join_record, provenance, split_record

_SIZE_RE = re.compile(r"\b(how (big|large)|what size|what is the size|how much does .* grow)\b", re.I)
_TIME_GRAIN = {"year", "years", "month", "months", "date", "season", "seasons", "century", "decade", "day",
               "days", "age", "period", "time", "hour", "week", "era"}
_SPATIAL_RE = re.compile(r"\b(country or region|region or country|city or region|region or city|"
                         r"country or city|which place|what place)\b|^\s*where\b", re.I)
_ATTRIBUTES = {"height": "height", "tall": "height", "high": "height", "length": "length", "long": "length",
               "wingspan": "wingspan", "diameter": "diameter", "weight": "weight", "weighs": "weight",
               "weigh": "weight", "mass": "weight", "width": "width", "wide": "width", "area": "area"}
_UNIT_NAMES = {"m": "metres", "km": "kilometres", "cm": "centimetres", "mm": "millimetres", "ft": "feet",
               "in": "inches", "mi": "miles", "kg": "kilograms", "g": "grams", "mg": "milligrams",
               "lb": "pounds", "t": "tonnes", "oz": "ounces", "km2": "square kilometres", "m2": "square metres",
               "mi2": "square miles", "ha": "hectares", "acre": "acres", "l": "litres", "m3": "cubic metres",
               "km3": "cubic kilometres", "km/h": "kilometres per hour", "mph": "miles per hour", "kn": "knots",
               "hp": "horsepower", "kw": "kilowatts", "year": "years", "month": "months", "week": "weeks",
               "day": "days", "hour": "hours", "minute": "minutes"}


class PosednessConfig(StageConfig):
    repair: bool = True  # apply the template repairs (tags are always written)
    llm: Literal["auto", "on", "off"] = "auto"  # ask role `llm_role` about what the rules leave open
    llm_role: str = "repairer"
    min_similarity: float = 0.6  # a model's suggested question must keep this much of the wording
    max_section_chars: int = 0


def _append_constraint(question: str, phrase: str) -> str:
    q = question.rstrip()
    if q.endswith("?"):
        return f"{q[:-1].rstrip()} {phrase}?"
    return f"{q} {phrase}"


def _answer_sentences(sample: Sample, units: list[EvidenceUnit]) -> list[str]:
    if not sample.answers:
        return []
    a = sample.answers[0].text
    out = []
    for u in units:
        for s in mt.sentences(u.text):
            if mt.contains(s, a) or (mt.parse_quantity(a) and any(
                    mt.same_value(q, mt.parse_quantity(a)) for q in mt.find_quantities(s))):  # type: ignore[arg-type]
                out.append(s)
    return out


def _evidence_unit(sample: Sample, units: list[EvidenceUnit]) -> str | None:
    """The single unit the evidence writes next to the answer's number, if exactly one."""
    if not sample.answers:
        return None
    q = mt.parse_quantity(sample.answers[0].text)
    if q is None:
        return None
    found = {f.unit for u in units for f in mt.find_quantities(u.text)
             if mt.same_value(q, f) and f.unit is not None and not (f.dim or "").startswith("count")
             and f.unit != "%"}
    if q.unit is not None:
        found = {q.unit} if q.unit in found or not found else found
    return found.pop() if len(found) == 1 else None


def unit_conflict(question: str, sample: Sample, units: list[EvidenceUnit]) -> str | None:
    """Why `question` asks for a different unit than the answer is in, or None: the question names a
    unit of the answer's dimension but not the answer's own ("... in months?" for "28 to 30 days").
    The answer's unit is the one it writes, or for a bare number the one the evidence writes next to
    it; no unit known, no conflict."""
    if not sample.answers:
        return None
    q = mt.parse_quantity(sample.answers[0].text)
    if q is None:
        return None
    unit = q.unit or _evidence_unit(sample, units)
    dim = mt.unit_dim(unit)
    if unit is None or dim is None:
        return None
    same_dim = [u for u, d in mt.units_named(question) if d == dim]
    if same_dim and unit not in same_dim:
        return f"the question asks in {same_dim[0]!r} but the answer is in {unit!r}"
    return None


def tag_question(sample: Sample, units: list[EvidenceUnit]) -> list[dict[str, Any]]:
    """Tags with a rationale and, where the evidence makes it explicit, a proposed question."""
    q = sample.question
    qn = mt.norm(q)
    words = set(qn.split())
    ans = sample.answers[0].text if sample.answers else ""
    found: list[dict[str, Any]] = []

    if _SIZE_RE.search(q):
        attrs = {_ATTRIBUTES[t.norm] for s in _answer_sentences(sample, units) for t in mt.tokenize(s)
                 if t.norm in _ATTRIBUTES}
        item = {"tag": "missing_attribute_constraint", "rationale": "asks for size without a dimension"}
        if len(attrs) == 1:
            item["repair"] = _append_constraint(q, f"in {attrs.pop()}")
        found.append(item)
    elif (sample.answer_type == "Numerical" or mt.parse_quantity(ans)) and mt.parse_date(ans) is None \
            and mt.question_unit(q) is None:
        unit = _evidence_unit(sample, units)
        if unit is not None and unit in _UNIT_NAMES:
            name = _UNIT_NAMES[unit]
            if mt.norm(name) not in qn and not (words & set(mt.norm(name).split())):
                found.append({"tag": "missing_attribute_constraint",
                              "rationale": f"numerical question names no unit; the evidence gives {unit!r}",
                              "repair": _append_constraint(q, f"in {name}")})

    if qn.startswith("when ") and not (words & _TIME_GRAIN):
        item = {"tag": "missing_temporal_scope", "rationale": "'when' without a granularity"}
        d = mt.parse_date(ans)
        an = mt.norm(ans)
        lead = re.match(r"\s*when\b", q, re.I)
        if lead:
            if d is not None and d.precision == 1 and re.fullmatch(r"\d{4}", ans.strip()):
                item["repair"] = "In what year" + q[lead.end():]
            elif d is not None and d.precision == 3:
                item["repair"] = "On what date" + q[lead.end():]
            elif an in mt.MONTHS and len(an) > 3:
                item["repair"] = "In which month" + q[lead.end():]
            elif an in mt.SEASONS:
                item["repair"] = "In which season" + q[lead.end():]
        found.append(item)

    m = _SPATIAL_RE.search(q)
    if m:
        item = {"tag": "missing_spatial_reference", "rationale": f"{m.group(0).strip()!r} leaves the granularity open"}
        phrase = (m.group(1) or "").lower()
        if phrase in ("country or region", "region or country"):
            if mt.norm(ans) in mt.COUNTRY_NAMES:
                item["repair"] = q[:m.start(1)] + "country" + q[m.end(1):]
            elif mt.norm(ans) in mt.CONTINENTS:
                item["repair"] = q[:m.start(1)] + "region" + q[m.end(1):]
        found.append(item)
    return found


@register_stage
class PosednessStage(Stage):
    name = "posedness"
    version = "3"
    config_model = PosednessConfig
    prompts = (POSEDNESS,)

    def __init__(self, config: PosednessConfig | None = None):
        super().__init__(config)
        self.config: PosednessConfig

    async def _llm(self, client: Any, sample: Sample, units: list[EvidenceUnit], audit: dict[str, Any],
                   ctx: Context, may_repair: bool) -> tuple[dict[str, Any], list[str], str | None]:
        """(llm verdict part, tags, accepted suggestion). A suggestion is accepted only as a minimal
        edit that does not state the answer."""
        reply, prov = await llm_posedness(client, sample, units, ctx, self.config.max_section_chars)
        llm = {**prov, "tags": list(reply.tags), "suggested_question": reply.suggested_question,
               "rationale": reply.rationale}
        sug = (reply.suggested_question or "").strip()
        if not sug or mt.norm(sug) == mt.norm(sample.question):
            return llm, list(reply.tags), None
        why = None
        if not reply.tags:
            why = "suggestion without a tag"
        elif leaked(sug, sample.answers) and not leaked(sample.question, sample.answers):
            why = "suggestion states the answer"
        else:
            why = minimal_edit(sample.question, sug, self.config.min_similarity)
        if why is None and unit_conflict(sug, sample, units) and not unit_conflict(sample.question, sample, units):
            why = f"unit: {unit_conflict(sug, sample, units)}"
        if why is None and not may_repair:
            why = "repairs disabled for this sample"
        if why is not None:
            llm["rejected"] = why
            add_tag(audit, "repair_rejected")
            return llm, list(reply.tags), None
        llm["accepted"] = True
        return llm, list(reply.tags), sug

    def _templates(self, sample: Sample, audit: dict[str, Any], units: list[EvidenceUnit],
                   found: list[dict[str, Any]], only: set[str] | None = None) -> list[str]:
        """Apply the rules' evidence-backed template repairs (of the tags in `only`, None: all), one
        after another; the tags repaired."""
        applied: list[str] = []
        for item in found:
            if only is not None and item["tag"] not in only:
                continue
            if "repair" in item and item["repair"] != sample.question:
                # repairs are computed on the original wording; apply them one after another
                new = tag_question(sample.model_copy(update={}), units)
                cand = next((n.get("repair") for n in new if n["tag"] == item["tag"]), None)
                conflict = unit_conflict(cand, sample, units) if cand else None
                if conflict and not unit_conflict(sample.question, sample, units):
                    item["rationale"] += f"; repair not applied ({conflict})"
                    add_tag(audit, "repair_unit_conflict")
                    continue
                if cand and cand != sample.question:
                    sample.record_change(self.name, "question", sample.question, cand,
                                         f"{item['tag']}: {item['rationale']}", f"{self.name}@{self.version}")
                    sample.question = cand
                    applied.append(item["tag"])
        return applied

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """Rules settle: dropped samples (not reviewed further), samples with no evidence behind
        their answer (not repaired). With the repairer role configured, every other sample goes to
        it and its tags decide: the rules' tags are only proposals (kept under `proposed`, not
        added); its suggested question is applied only when it is a minimal edit that does not state
        an answer, else the rules' template repair of a tag the model also gave. Without a model the
        rules' tags and template repairs stand alone (kbvqa's offline stand-in)."""
        sample, audit = split_record(record)
        units = evidence_for(sample, audit, ctx.kb)
        found = tag_question(sample, units)
        before = sample.question
        evidence_backed = audit.get("answer_support") in ("supported", "mismatched", None)
        may_repair = self.config.repair and audit.get("action") != "drop" and evidence_backed
        settled = audit.get("action") == "drop" or not evidence_backed or not units
        client = None if settled else resolve_role(ctx, self.config.llm, self.config.llm_role)
        extra: dict[str, Any] = {"settled_by": "rules"}
        rationale = "; ".join(i["rationale"] for i in found) or "no ambiguity pattern"
        if client is None:
            applied = self._templates(sample, audit, units, found) if may_repair else []
            tags = [i["tag"] for i in found]
        else:
            llm, tags, sug = await self._llm(client, sample, units, audit, ctx, may_repair)
            extra = {"settled_by": "llm", "llm": llm, "proposed": [i["tag"] for i in found]}
            applied = []
            if sug is not None:
                sample.record_change(self.name, "question", sample.question, sug,
                                     f"{', '.join(tags)}: {llm['rationale']}", llm["version"])
                sample.question = sug
                applied = list(tags)
            elif may_repair and tags:
                applied = self._templates(sample, audit, units, found, only=set(tags))
            rationale = f"model: {llm['rationale']}" if tags else f"model: clear ({llm['rationale']})"
        for t in tags:
            add_tag(audit, t)
        if applied:
            escalate(audit, "repair", "question_repaired")
        audit["stages"][self.name] = {
            "label": "ambiguous" if tags else "clear", "tags": tags,
            "repaired": applied, "question_in": before, "rationale": rationale,
            **provenance(self), **extra}
        return join_record(sample, audit)
