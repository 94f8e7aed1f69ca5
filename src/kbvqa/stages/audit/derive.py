"""Audit stage 2: answer derivability and evidence-grounded correction.

Labels (the paper's Supported & Matched / Supported but Mismatched / Unsupported):
- supported: stage 1's consensus found the answer stated in the evidence;
- mismatched: the evidence states a different value for what the question asks (a number for the
  same quantity, a date at another precision, a shorter/longer form of the same name). The corrector
  rewrites the answer only to a span copied from the evidence; numbers as the evidence writes them,
  single value vs range as the question asks. Without such a span the sample is dropped with a reason;
- unsupported: nothing in the evidence bears on the answer (reason missing_kb when there was no
  article to read).

The filter policy (what to do with each label) is part of this stage's config.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from kbvqa.data.schema import Answer, Sample
from kbvqa.data import matching as mt
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.models.prompts.audit import CORRECT_ANSWER
from kbvqa.stages.audit.evidence import (_MAX_WORDS, _MIN_WORDS, EvidenceUnit, evidence_for, match_answer,
                                         numeric_candidates, undecidable)
from kbvqa.stages.audit.llm import llm_correct, resolve_role, validate_correction
from kbvqa.stages.audit.record import add_tag, escalate, join_record, provenance, split_record

_GENERIC_TAILS = ("architecture", "style", "municipality", "company", "corporation", "inc", "ltd", "limited",
                  "plc", "co")
_RANK_HEADS = ("genus", "family", "subfamily", "order", "suborder", "tribe", "class", "superfamily",
               "kingdom", "subkingdom", "phylum")
_RANGE_WORDS = ("range", "between", "from", "typical", "typically", "usually", "generally")
_MACHINE_DATE = re.compile(r"\d{4}(\s+\d{1,2}){1,2}")


class DeriveConfig(StageConfig):
    """Correction switches and the filter policy."""

    correct: bool = True
    keep_units: bool = False  # corrected numbers without their unit (the unit belongs in the question)
    prune_unsupported_alternatives: bool = True
    rewrite_machine_dates: bool = True  # "1989 10 27" -> the evidence's "27 October 1989"
    on_mismatched: Literal["repair", "drop", "keep"] = "repair"
    on_unsupported: Literal["drop", "keep"] = "drop"
    on_missing_kb: Literal["drop", "keep"] = "keep"
    llm: Literal["auto", "on", "off"] = "auto"  # ask role `llm_role` to correct what the rules cannot
    llm_role: str = "repairer"
    max_section_chars: int = 0  # 0 = whole sections go to the model


def _range_wanted(question: str) -> bool:
    q = f" {mt.norm(question)} "
    return any(f" {w} " in q for w in _RANGE_WORDS)


def _end_of(question: str) -> str | None:
    q = f" {mt.norm(question)} "
    if any(f" {mt.norm(w)} " in q for w in _MAX_WORDS):
        return "high"
    if any(f" {mt.norm(w)} " in q for w in _MIN_WORDS):
        return "low"
    return None


def _range_end_text(number_text: str, which: str) -> str:
    bits = [b.strip() for b in re.split(r"\s*(?:[-\u2010-\u2014\u2212]|\bto\b|\band\b)\s*", number_text) if b.strip()]
    return bits[-1] if which == "high" else bits[0]


def correct_numeric(question: str, answer: Answer, text: str, keep_units: bool) -> tuple[str, str] | None:
    """(corrected answer, rationale) from the closest evidence quantity, or None when there is none or
    two different values are equally close (ambiguous)."""
    cands = numeric_candidates(question, answer, text)
    if not cands:
        return None
    cands.sort(key=lambda c: c[1])
    best, dist = cands[0]
    rivals = {(c.low, c.high) for c, d in cands if d - dist < 0.02}
    if len(rivals) > 1:
        return None
    out = best.text if keep_units and best.unit else best.number_text
    if best.is_range:
        which = _end_of(question)
        if which and not _range_wanted(question):
            out = _range_end_text(best.number_text, which)
    return out, f"evidence states {best.text!r} for this quantity"


def correct_date(answer: Answer, text: str) -> tuple[str, str] | None:
    """The evidence states the answer's date only at a coarser precision (year for a full date)."""
    d = mt.parse_date(answer.text)
    if d is None or d.precision == 1:
        return None
    found = [f for f in mt.find_dates(text) if f.key[:f.precision] == d.key[:f.precision]]
    if not found:
        return None
    best = max(found, key=lambda f: f.precision)
    return best.text, f"evidence states the date only as {best.text!r}"


def _variants(ans: str) -> list[str]:
    out = []
    base = re.sub(r"\s*\([^)]*\)", "", ans).strip()
    if base and base != ans:
        out.append(base)
    toks = base.split()
    if len(toks) > 1 and toks[-1].lower().strip(".,") in _GENERIC_TAILS:
        out.append(" ".join(toks[:-1]))
    if len(toks) > 1 and toks[0].lower() in _RANK_HEADS:
        out.append(" ".join(toks[1:]))
    return [v for v in out if mt.content_words(v) or any(t.norm.isdigit() for t in mt.tokenize(v))]


def correct_string(answer: Answer, text: str) -> tuple[str, str] | None:
    """A stripped form of the answer (no parenthetical, no generic head such as 'architecture' or
    'Company') stated word-bounded in the evidence."""
    if answer.parts:
        return None
    for v in _variants(answer.text):
        span = mt.find_phrase(text, v)
        if span:
            return span, f"evidence states {span!r}, not {answer.text!r}"
    return None


@register_stage
class DeriveStage(Stage):
    name = "derive"
    version = "1"
    config_model = DeriveConfig
    prompts = (CORRECT_ANSWER,)

    def __init__(self, config: DeriveConfig | None = None):
        super().__init__(config)
        self.config: DeriveConfig

    def _set_answers(self, sample: Sample, new: list[Answer], reason: str) -> None:
        before = [a.model_dump(mode="json") for a in sample.answers]
        sample.answers = new
        sample.record_change(self.name, "answers", before, [a.model_dump(mode="json") for a in new], reason,
                             f"{self.name}@{self.version}")

    def _supported(self, sample: Sample, units: list[EvidenceUnit], audit: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        verdict: dict[str, Any] = {"label": "supported"}
        matched: list[tuple[Answer, list]] = []
        for a in sample.answers:
            for u in units:
                m = match_answer(a, u.text)
                if m:
                    matched.append((a, m))
                    break
        if not matched:  # a model verifier found support the rules cannot show: trust the consensus
            verdict["rationale"] = "supported by the verifier consensus"
            return verdict
        verdict["rationale"] = f"evidence states {matched[0][1][0].span!r}"
        new = [a for a, _ in matched]
        if cfg.prune_unsupported_alternatives and len(new) < len(sample.answers):
            dropped = [a.text for a in sample.answers if all(a is not b for b, _ in matched)]
            self._set_answers(sample, new, f"alternatives not stated in the evidence removed: {dropped}")
            add_tag(audit, "alternatives_pruned")
            escalate(audit, "repair", "alternatives_pruned")
        first, m = matched[0]
        if (cfg.rewrite_machine_dates and len(m) == 1 and m[0].kind == "date"
                and _MACHINE_DATE.fullmatch(first.text.strip()) and m[0].span != first.text):
            self._set_answers(sample, [Answer(text=m[0].span)] + [a for a in sample.answers if a is not first],
                              f"date written as the evidence writes it ({m[0].span!r})")
            add_tag(audit, "answer_format")
            escalate(audit, "repair", "answer_format")
        return verdict

    def _correct(self, sample: Sample, units: list[EvidenceUnit]) -> tuple[str, str] | None:
        for a in sample.answers:
            for fn in (lambda u: correct_date(a, u.text),
                       lambda u: correct_numeric(sample.question, a, u.text, self.config.keep_units),
                       lambda u: correct_string(a, u.text)):
                found = {r for u in units if (r := fn(u))}
                values = {mt.norm(v) for v, _ in found}
                if len(values) == 1:
                    return sorted(found)[0]
                if len(values) > 1:
                    return None  # sections disagree: no single evidence value
        return None

    def _unsupported(self, audit: dict[str, Any], reason: str, rationale: str) -> dict[str, Any]:
        audit["answer_support"] = "unsupported"
        add_tag(audit, "unsupported")
        if self.config.on_unsupported == "drop":
            escalate(audit, "drop", "unsupported")
        return {"label": "unsupported", "reason": reason, "rationale": rationale}

    def _mismatched(self, sample: Sample, audit: dict[str, Any], new_text: str | None, why: str,
                    reason: str | None = None) -> dict[str, Any]:
        """Mismatched: rewrite to `new_text` (a value the evidence states) per policy, or, with no
        value to rewrite to, drop with `reason`."""
        cfg = self.config
        audit["answer_support"] = "mismatched"
        add_tag(audit, "answer_mismatch")
        if new_text is None:
            if cfg.on_mismatched != "keep":
                escalate(audit, "drop", reason or "no_single_evidence_value")
            return {"label": "mismatched", "reason": reason or "no_single_evidence_value", "rationale": why}
        if cfg.on_mismatched == "repair":
            self._set_answers(sample, [Answer(text=new_text)], why)
            escalate(audit, "repair", "answer_corrected")
        elif cfg.on_mismatched == "drop":
            escalate(audit, "drop", "answer_mismatch")
        return {"label": "mismatched", "correction": new_text, "rationale": why}

    async def _llm_correct(self, client: Any, sample: Sample, units: list[EvidenceUnit], audit: dict[str, Any],
                           ctx: Context, rules_label: str, reason: str) -> dict[str, Any]:
        """The repairer proposes what the evidence says; a proposal is accepted only when the rules
        matcher finds it stated in the evidence (else the sample is dropped: correction_not_in_evidence)."""
        reply, prov = await llm_correct(client, sample, units, ctx, self.config.max_section_chars)
        llm = {**prov, "status": reply.status, "answer": reply.answer, "evidence_quote": reply.evidence_quote,
               "rationale": reply.rationale}
        current = {mt.norm(a) for a in sample.answer_texts}
        if reply.status == "mismatched" and reply.answer and mt.norm(reply.answer) not in current:
            ok = validate_correction(reply.answer, units)
            if ok is not None:
                new_text, m = ok
                why = f"repairer: evidence states {m.span!r} ({reply.rationale})"
                v = self._mismatched(sample, audit, new_text, why)
                llm["accepted"] = True
                return {**v, "settled_by": "llm", "llm": llm}
            add_tag(audit, "correction_rejected")
            llm["accepted"] = False
            v = self._mismatched(sample, audit, None,
                                 f"repairer proposed {reply.answer!r}, which the evidence does not state; dropped",
                                 "correction_not_in_evidence")
            if self.config.on_mismatched == "keep":  # the policy keeps mismatches, but this one is unverified
                escalate(audit, "drop", "correction_not_in_evidence")
            return {**v, "settled_by": "llm", "llm": llm}
        if reply.status == "matched":
            add_tag(audit, "repairer_disagrees")  # the verifiers did not find it: their consensus stands
        if rules_label == "contradicted":
            v = self._mismatched(sample, audit, None, "evidence states a different value but no single one "
                                 "to correct to (repairer: " + reply.status + ")")
        else:
            v = self._unsupported(audit, reason, f"no answer alternative is stated in the evidence "
                                                 f"(repairer: {reply.status})")
        return {**v, "settled_by": "llm", "llm": llm}

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """Rules settle: missing KB article; verifier consensus entailed (supported); yes/no answers no
        model verifier judged (unchecked, kept); a single correction value the rules find in the
        evidence (numbers, coarser dates, stripped names). Only the rest (unsupported, or contradicted
        without one value) goes to the repairer role when configured."""
        sample, audit = split_record(record)
        cfg = self.config
        v = audit["stages"].get("verify", {})
        units = evidence_for(sample, audit, ctx.kb)
        vlabel = v.get("label") or ("entailed" if any(any(match_answer(a, u.text) for a in sample.answers)
                                                      for u in units) else "not_supported")
        model_judged = any(r.get("backend") != "rules" for r in v.get("verifiers", []))
        if v.get("reason") in ("missing_kb", "no_kb") or (not units and not v):
            verdict = {"label": "unsupported", "reason": "missing_kb",
                       "rationale": "the entity's KB article is not available"}
            audit["answer_support"] = "unsupported"
            add_tag(audit, "missing_kb")
            if cfg.on_missing_kb == "drop":
                escalate(audit, "drop", "missing_kb")
        elif vlabel != "entailed" and undecidable(sample.answers) and not model_judged:
            # yes/no is never written verbatim: rules abstain rather than flag (a model verifier decides)
            verdict = {"label": "unchecked", "reason": "yes_no_answer",
                       "rationale": "yes/no answers cannot be checked by matching; not flagged"}
            audit["answer_support"] = "supported"
            add_tag(audit, "unchecked_by_rules")
        elif vlabel == "entailed":
            verdict = self._supported(sample, units, audit)
            audit["answer_support"] = "supported"
        else:
            fix = self._correct(sample, units) if cfg.correct else None
            client = resolve_role(ctx, cfg.llm, cfg.llm_role) if cfg.correct and units else None
            if fix is not None:
                verdict = self._mismatched(sample, audit, fix[0], fix[1])
            elif client is not None:
                verdict = await self._llm_correct(client, sample, units, audit, ctx, vlabel,
                                                  v.get("reason") or "not_in_evidence")
            elif vlabel == "contradicted":
                verdict = self._mismatched(sample, audit, None, "evidence states a different value but no "
                                           "single one to correct to")
            else:
                verdict = self._unsupported(audit, v.get("reason") or "not_in_evidence",
                                            "no answer alternative is stated in the evidence")
        verdict.setdefault("settled_by", "rules")
        audit["stages"][self.name] = {**provenance(self), **verdict}
        if "llm" in verdict:  # the model made the call: its provenance is the stage's
            audit["stages"][self.name].update({k: verdict["llm"][k] for k in ("backend", "model", "version")})
        return join_record(sample, audit)
