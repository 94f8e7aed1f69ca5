"""Audit stage 1: evidence verification.

Each evidence unit (the sample's own evidence when the dataset provides it, else each section of the
entity's KB article) gets a label per verifier: entailed / contradicted / not_supported. A verifier's
sample label is entailed if any unit is, else contradicted if any unit is, else not_supported. N
verifiers are combined by a consensus policy: `all` (the paper's default: the sample counts as
unsupported only when every verifier fails to find support), `any` (unsupported as soon as one
verifier fails to find support) or `majority`.

The rules verifier is always available; other verifiers are model roles from `ctx.roles` that
implement `SectionVerifier`. This module also holds the small record helpers all audit stages share
(the `audit` object lives beside the Sample fields in a record, so it is split off before validation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from kbvqa.data.schema import Answer, Sample
from kbvqa.stages import matching as mt
from kbvqa.stages.base import Context, Invalid, Stage, StageConfig
from kbvqa.stages.prompts import VERIFY_SECTION

RULES_VERSION = "1"
SectionLabel = Literal["entailed", "contradicted", "not_supported"]
_ACTION_RANK = {"keep": 0, "repair": 1, "drop": 2}

# ------------------------------------------------------------------------------------ record helpers


def split_record(record: dict[str, Any]) -> tuple[Sample, dict[str, Any]]:
    """(Sample, audit dict) from a record; the audit dict is created on first use and remembers the
    question and answers as they were before any audit stage touched them."""
    rec = dict(record)
    audit = dict(rec.pop("audit", None) or {})
    rec.pop("status", None)
    rec.pop("error", None)
    try:
        sample = Sample.model_validate(rec)
    except Exception as exc:  # a malformed record is an input error with its id, not a label
        raise ValueError(f"record {record.get('id')!r} is not a valid Sample: {exc}") from exc
    if "question_before" not in audit:
        audit["question_before"] = sample.question
        audit["answers_before"] = [a.model_dump(mode="json") for a in sample.answers]
        audit.setdefault("action", "keep")
        audit.setdefault("tags", [])
        audit.setdefault("reasons", [])
        audit.setdefault("stages", {})
    return sample, audit


def join_record(sample: Sample, audit: dict[str, Any]) -> dict[str, Any]:
    out = sample.dump()
    out["audit"] = audit
    return out


def escalate(audit: dict[str, Any], action: str, reason: str | None = None) -> None:
    """Raise the sample's action (keep < repair < drop); never lowers it."""
    if _ACTION_RANK[action] > _ACTION_RANK[audit.get("action", "keep")]:
        audit["action"] = action
    if reason and reason not in audit["reasons"]:
        audit["reasons"].append(reason)


def add_tag(audit: dict[str, Any], tag: str) -> None:
    if tag not in audit["tags"]:
        audit["tags"].append(tag)


def provenance(stage: Stage) -> dict[str, Any]:
    return {"backend": "rules", "model": None, "version": f"{stage.name}@{stage.version}"}


# ---------------------------------------------------------------------------------------- evidence


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


@runtime_checkable
class SectionVerifier(Protocol):
    """What a model role must offer to act as a verifier (the model layer provides adapters).
    `verify_section` returns {"label": entailed|contradicted|not_supported, "rationale": str}."""

    async def verify_section(self, question: str, answers: list[str], title: str, text: str) -> dict[str, Any]: ...


def _combine(labels: list[str]) -> str:
    if "entailed" in labels:
        return "entailed"
    if "contradicted" in labels:
        return "contradicted"
    return "not_supported"


def consensus(verdicts: list[str], policy: str) -> str:
    """Combine per-verifier sample labels. `all`: entailed unless every verifier says otherwise
    (the paper's rule); `any`: entailed only if every verifier says entailed; `majority`: entailed
    if more than half say so. A non-entailed result is contradicted when a verifier says so."""
    ent = sum(v == "entailed" for v in verdicts)
    ok = {"all": ent >= 1, "any": ent == len(verdicts), "majority": ent * 2 > len(verdicts)}[policy]
    if ok:
        return "entailed"
    return "contradicted" if "contradicted" in verdicts else "not_supported"


class VerifyConfig(StageConfig):
    verifiers: list[str] = Field(default_factory=lambda: ["rules"],
                                 description="'rules' and/or model role names (a role may hold several "
                                             "clients; each counts as one verifier)")
    consensus: Literal["all", "any", "majority"] = "all"
    use_sample_evidence: bool = True
    fallback_to_kb: bool = True  # sample evidence does not entail -> also scan the KB article
    max_sections: int = 0  # 0 = every section
    llm: Literal["auto", "on", "off"] = "auto"  # add role `llm_role` as verifier(s): when configured / required / never
    llm_role: str = "verifier"
    rules_settle: bool = True  # a rules entailment is final: model verifiers are not asked
    stop_at_entailed: bool = True  # a model verifier stops at its first entailed section
    max_section_chars: int = 0  # 0 = whole sections go to the model


class VerifyStage(Stage):
    """Stage 1. With model verifiers configured, the rules verifier (when listed) runs first and
    settles, without any model call: samples with no evidence (missing_kb / no_evidence) and, when
    `rules_settle`, samples where the rules find an answer alternative stated word-bounded in a
    section. Under the default consensus `all` that second shortcut changes nothing but cost (one
    entailing verifier already makes the sample entailed); under `any`/`majority` set
    `rules_settle = false` to let the models overrule a rules match."""

    name = "verify"
    version = "2"
    config_model = VerifyConfig
    prompts = (VERIFY_SECTION,)

    def __init__(self, config: VerifyConfig | None = None):
        super().__init__(config)
        self.config: VerifyConfig


    def _verifiers(self, ctx: Context) -> list[tuple[str, Any]]:
        """(label, client) pairs in config order; 'rules' has client None."""
        from kbvqa.stages.llm_audit import expand, resolve_role

        cfg = self.config
        out: list[tuple[str, Any]] = []
        for v in cfg.verifiers:
            out += [("rules", None)] if v == "rules" else expand(v, ctx.role(v))
        if cfg.llm_role not in cfg.verifiers:
            role = resolve_role(ctx, cfg.llm, cfg.llm_role)
            if role is not None:
                out += expand(cfg.llm_role, role)
        if not out:
            raise ValueError("verify: no verifiers configured")
        return out

    def _rules_label(self, sample: Sample, units: list[EvidenceUnit]) -> dict[str, Any]:
        sections = []
        for u in units:
            label, why = rules_section_label(sample.question, sample.answers, u.text)
            sections.append({**u.dump(), "label": label, "rationale": why})
        return {"verifier": "rules", "backend": "rules", "model": None, "version": f"{self.name}@{self.version}",
                "label": _combine([s["label"] for s in sections]), "sections": sections}

    async def _model_label(self, vname: str, role: Any, sample: Sample, units: list[EvidenceUnit],
                           ctx: Context) -> dict[str, Any]:
        from kbvqa.stages.llm_audit import llm_verifier_label

        if isinstance(role, SectionVerifier):  # a ready-made adapter (tests, custom verifiers)
            prov = {"backend": getattr(role, "backend", type(role).__name__),
                    "model": getattr(role, "model", None), "version": getattr(role, "prompt_version", None)}
            sections = []
            for u in units:
                reply = await role.verify_section(sample.question, sample.answer_texts, u.title or "", u.text)
                label = reply.get("label") if isinstance(reply, dict) else None
                if label not in ("entailed", "contradicted", "not_supported"):
                    raise Invalid(f"verifier {vname!r} returned no usable label: {reply!r:.200}")
                sections.append({**u.dump(), "label": label, "rationale": str(reply.get("rationale", ""))})
            return {"verifier": vname, **prov, "label": _combine([s["label"] for s in sections]),
                    "sections": sections}
        if not hasattr(role, "chat"):
            raise TypeError(f"role {vname!r} cannot verify sections (needs chat() or verify_section())")
        return await llm_verifier_label(vname, role, sample, units, ctx, stop_at_entailed=self.config.stop_at_entailed,
                                        max_chars=self.config.max_section_chars)

    async def _verify_units(self, sample: Sample, units: list[EvidenceUnit], ctx: Context,
                            verifiers: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
        """Per-verifier results over `units`, and whether the rules settled it (models not asked)."""
        from kbvqa.stages.llm_audit import gather_strict

        results: list[dict[str, Any] | None] = [None] * len(verifiers)
        for i, (name, client) in enumerate(verifiers):
            if client is None:
                results[i] = self._rules_label(sample, units)
        rules_entailed = any(r is not None and r["label"] == "entailed" for r in results)
        models = [(i, n, c) for i, (n, c) in enumerate(verifiers) if c is not None]
        if models and rules_entailed and self.config.rules_settle:
            return [r for r in results if r is not None], True
        got = await gather_strict([self._model_label(n, c, sample, units, ctx) for _, n, c in models])
        for (i, _, _), r in zip(models, got):
            results[i] = r
        return [r for r in results if r is not None], False

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sample, audit = split_record(record)
        cfg = self.config
        verifiers = self._verifiers(ctx)
        units: list[EvidenceUnit] = sample_evidence(sample) if cfg.use_sample_evidence else []
        source, missing = "sample", None
        if not units:
            units, missing = kb_evidence(sample, ctx.kb)
            source = "kb"
        if cfg.max_sections:
            units = units[:cfg.max_sections]
        if not units:
            verdict = {"label": "not_supported", "reason": missing or "no_evidence", "evidence_source": None,
                       "rationale": "no evidence text to verify against", "verifiers": [],
                       "settled_by": "rules", **provenance(self)}
            audit["stages"][self.name] = verdict
            return join_record(sample, audit)
        results, settled = await self._verify_units(sample, units, ctx, verifiers)
        label = consensus([r["label"] for r in results], cfg.consensus)
        if label != "entailed" and source == "sample" and cfg.fallback_to_kb:
            kb_units, _ = kb_evidence(sample, ctx.kb)
            if cfg.max_sections:
                kb_units = kb_units[:cfg.max_sections]
            if kb_units:
                kb_results, settled = await self._verify_units(sample, kb_units, ctx, verifiers)
                by_name = {k["verifier"]: k for k in kb_results}
                for r in results:
                    k = by_name.get(r["verifier"])
                    if k is not None:
                        r["sections"] += k["sections"]
                        r["label"] = _combine([s["label"] for s in r["sections"]])
                label = "entailed" if settled else consensus([r["label"] for r in results], cfg.consensus)
                source = "sample+kb"
        entailed = sorted({(s["source"], s["section_id"]) for r in results for s in r["sections"]
                           if s["label"] == "entailed"}, key=str)
        models = [n for n, c in verifiers if c is not None]
        audit["stages"][self.name] = {
            "label": label, "consensus": cfg.consensus, "evidence_source": source,
            "entailed_sections": [list(e) for e in entailed],
            "rationale": f"{sum(r['label'] == 'entailed' for r in results)}/{len(results)} verifiers found support"
                         + (f"; rules match settled it, model verifiers {models} not asked" if settled else ""),
            "settled_by": "rules" if settled or not models else "consensus",
            "verifiers": results, **provenance(self),
        }
        return join_record(sample, audit)


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
