"""Audit stage 2: answer derivability and evidence-grounded correction (§4.1 step 2).

Labels (the paper's Supported & Matched / Supported but Mismatched / Unsupported), from stage 1:
- supported (consensus entailed): the answer is left as annotated. Normalising its format -
  alternatives the evidence does not support pruned, InfoSeek's machine dates and numbers ("1989 10
  27", "28.0-30.0") and bare counts written as the evidence writes them, an official long country
  name written as the evidence's shorter one - is kbvqa's option (`normalise_formats`, off by
  default), tagged `format_normalised` and counted apart from corrections;
- mismatched (consensus contradicted: the evidence states a different value for what the question
  asks): corrected to a span copied from the evidence - the rules' single value first (a number for
  the same quantity, a range containing the value, a date at another precision, a shorter form of
  the name), else the repairer role's proposal when the evidence states it. Numbers as the evidence
  writes them, with its unit unless the question names it, single value vs range as the question
  asks. With no evidence value the sample is removed ("if no evidence-supported value can be derived,
  the instance is removed");
- unsupported (no verifier found support, or the entity's KB article is missing: "whether the
  evidence ... exists in the KB snapshot"): removed, never corrected (reason `not_in_evidence` /
  `missing_kb`; `truncated_evidence` when the answer is missing from evidence that was cut off and no
  full section was available: inconclusive, kept by default).

Several supported alternatives that are different answers (share no word) are tagged
`distinct_alternatives`: the answer is not unique. Every label other than supported, and every
change to the answers, is a flag (`audit.flags`).

Per-dataset policy (`evqa_keep_all`, on): E-VQA's fixed split keeps all 4,750 questions (§4.2: "most
edits happen in question constraints. Hence the fixed evaluation split remains 4,750 questions"), so
an E-VQA sample this stage would remove is kept as it is and tagged `kept_by_dataset_policy`, its
reason recorded (`record.drop`). InfoSeek's policy is the paper's removal above.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import field_validator, model_validator

from kbvqa.data.schema import Answer, Sample
from kbvqa.data import matching as mt
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.models.prompts.audit import CORRECT_ANSWER
from kbvqa.stages.audit.evidence import (EvidenceUnit, end_asked, evidence_for, match_answer, numeric_candidates,
                                         range_wanted, supporting_spans, undecidable)
from kbvqa.stages.audit.llm import llm_correct, resolve_role, validate_correction
from kbvqa.stages.audit.record import add_tag, apply_policy, drop, escalate, join_record, provenance, split_record, update_flags

_GENERIC_TAILS = ("architecture", "style", "municipality", "company", "corporation", "inc", "ltd", "limited",
                  "plc", "co")
_GENERIC_HEADS = ("municipality of",)
_RANK_HEADS = ("genus", "family", "subfamily", "order", "suborder", "tribe", "class", "superfamily",
               "kingdom", "subkingdom", "phylum")
_MACHINE_DATE = re.compile(r"\d{4}(\s+\d{1,2}){1,2}")
_MACHINE_NUMBER = re.compile(r"\d+\.\d*0\b")  # "28.0-30.0", "4.10": trailing zeros of a number dump
_BARE_DIGITS = re.compile(r"\d{4,}")


class DeriveConfig(StageConfig):
    """Correction switches and the filter policy (the defaults are the paper's)."""

    correct: bool = True
    # the evidence's unit on a corrected number: auto = on a range always, on a single value unless the
    # question already names that unit
    keep_units: Literal["auto", "always", "never"] = "auto"
    # kbvqa's format normalisation of supported answers (the paper leaves them as annotated): the
    # switch turns on the four rewrites below; each can also be set alone
    normalise_formats: bool = False
    prune_unsupported_alternatives: bool = False
    flag_distinct_alternatives: bool = True
    rewrite_machine_dates: bool = False  # "1989 10 27" -> the evidence's "27 October 1989"
    rewrite_number_format: bool = False  # "28.0-30.0" -> "28 to 30 days"; a bare "1010" -> the evidence's "1,010"
    rewrite_long_names: bool = False  # an official long name -> the shorter name the evidence writes
    on_mismatched: Literal["repair", "drop", "keep"] = "repair"
    on_unsupported: Literal["drop", "keep"] = "drop"
    on_missing_kb: Literal["drop", "keep"] = "drop"  # the paper: the evidence must exist in the KB snapshot
    evqa_keep_all: bool = True  # E-VQA's fixed split keeps every question (§4.2)
    on_truncated: Literal["drop", "keep"] = "keep"  # answer missing from cut-off evidence: inconclusive
    llm: Literal["auto", "on", "off"] = "auto"  # ask role `llm_role` to correct what the rules cannot
    llm_role: str = "repairer"
    max_section_chars: int = 0  # 0 = whole sections go to the model

    @model_validator(mode="after")
    def _normalise_all(self) -> "DeriveConfig":
        if self.normalise_formats:
            for k in ("prune_unsupported_alternatives", "rewrite_machine_dates", "rewrite_number_format",
                      "rewrite_long_names"):
                object.__setattr__(self, k, True)
        return self

    @field_validator("keep_units", mode="before")
    @classmethod
    def _bool_units(cls, v: Any) -> Any:  # older configs: keep_units = true | false
        return {True: "always", False: "never"}.get(v, v) if isinstance(v, bool) else v


def _range_end_text(number_text: str, which: str) -> str:
    bits = [b.strip() for b in re.split(r"\s*(?:[-\u2010-\u2014\u2212]|\bto\b|\band\b)\s*", number_text) if b.strip()]
    return bits[-1] if which == "high" else bits[0]


def evidence_number(question: str, q: mt.Quantity, keep_units: str = "auto", end: str | None = None) -> str:
    """A quantity from the evidence written as an answer: the evidence's digits and wording; its
    unit (keep_units auto) on a range always ("65–75 cm", not "65–75") and on a single value unless
    the question already names that unit ("How tall ... in metres?" - "41"); one end of a range when
    `end` is given; number words as digits when the question asks for a number ("four months" ->
    "4 months")."""
    unit_text = q.text[len(q.number_text):] if q.unit else ""
    single = not q.is_range or bool(end)
    keep = bool(q.unit) and (keep_units == "always" or (keep_units == "auto" and not (
        single and mt.question_names_unit(question, q.unit))))
    number = _range_end_text(q.number_text, end) if end and q.is_range else q.number_text
    out = (number + unit_text) if keep else number
    return mt.number_words_to_digits(out).strip() if mt.asks_number(question) else out.strip()


def correct_numeric(question: str, answer: Answer, text: str, keep_units: str | bool = "auto") -> tuple[str, str] | None:
    """(corrected answer, rationale) from the closest evidence quantity, or None when there is none or
    two different values are equally close (ambiguous). A range containing the answer's single value
    wins (distance 0): the answer becomes the range, unless the question asks one end of it."""
    if isinstance(keep_units, bool):
        keep_units = "always" if keep_units else "never"
    cands = numeric_candidates(question, answer, text)
    if not cands:
        return None
    cands.sort(key=lambda c: c[1])
    best, dist = cands[0]
    rivals = {(c.low, c.high) for c, d in cands if d - dist < 0.02}
    if len(rivals) > 1:
        return None
    which = end_asked(question) if best.is_range and not range_wanted(question) else None
    out = evidence_number(question, best, keep_units, which)
    why = (f"evidence states the range {best.text!r}, which contains {answer.text!r}" if dist == 0 and best.is_range
           and not which else f"evidence states {best.text!r} for this quantity")
    return out, why


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
    for head in _GENERIC_HEADS:
        if base.lower().startswith(head + " ") and len(base) > len(head) + 1:
            out.append(base[len(head) + 1:])
    if len(toks) > 1 and toks[0].lower() in _RANK_HEADS:
        out.append(" ".join(toks[1:]))
    return [v for v in out if mt.content_words(v) or any(t.norm.isdigit() for t in mt.tokenize(v))]


def correct_string(answer: Answer, text: str) -> tuple[str, str] | None:
    """A stripped form of the answer (no parenthetical, no generic head such as 'architecture',
    'Municipality' or 'Company') stated word-bounded in the evidence. (Where the evidence uses the
    stripped form to describe a building - "a Gothic hall church" - the answer is supported as it
    stands: `head_noun` match, no rewrite.)"""
    if answer.parts:
        return None
    for v in _variants(answer.text):
        span = mt.find_phrase(text, v)
        if span:
            return span, f"evidence states {span!r}, not {answer.text!r}"
    return None


def _content(a: Answer) -> set[str]:
    return {mt.stem(t.norm) for p in (a.parts or [a.text]) for t in mt.tokenize(p)
            if t.norm not in mt.STOPWORDS and (len(t.norm) > 1 or t.norm.isdigit())}


def distinct_answers(a: Answer, b: Answer) -> bool:
    """Two single-part alternatives that are different answers, not rewordings of one: no word in
    common and not equivalent names ("Paris" / "Invalides", not "Europe and Asia" / "Europe, Asia").
    Alternatives of a multi-part answer are partial lists of one answer: never distinct."""
    if a.parts or b.parts:
        return False
    wa, wb = _content(a), _content(b)
    if not wa or not wb or wa & wb:
        return False
    na, nb = mt.norm(a.text), mt.norm(b.text)
    return na not in mt.equivalent_forms(b.text) and nb not in mt.equivalent_forms(a.text)


@register_stage
class DeriveStage(Stage):
    name = "derive"
    version = "2"
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

    def _format_rewrite(self, sample: Sample, answer: Answer, m: list, unit: EvidenceUnit) -> str | None:
        """The evidence's own writing of a supported answer whose text is a machine format (dates
        "1989 10 27", numbers "28.0-30.0"), a bare count missing the evidence's separator ("1010" ->
        "1,010") or a country's official long name where the evidence writes a shorter one."""
        cfg = self.config
        if len(m) != 1 or answer.parts:
            return None
        text = answer.text.strip()
        if cfg.rewrite_machine_dates and m[0].kind == "date" and _MACHINE_DATE.fullmatch(text) and m[0].span != text:
            return m[0].span
        if cfg.rewrite_long_names and m[0].kind == "equivalent":
            short, long = mt.norm(m[0].span), mt.norm(text)
            if short != long and short in mt.COUNTRY_NAME_FORMS and long in mt.COUNTRY_NAME_FORMS and \
                    f" {long} ".startswith(f" {short} "):
                return m[0].span  # "United States of America" where the evidence says "United States"
        if not cfg.rewrite_number_format or m[0].kind != "number":
            return None
        q = mt.parse_quantity(text)
        f = next((f for f in mt.find_quantities(unit.text) if q is not None and mt.same_value(q, f)
                  and mt.units_compatible(q.unit, f.unit)), None)
        if q is None or f is None:
            return None
        if _MACHINE_NUMBER.search(text):
            return evidence_number(sample.question, f, cfg.keep_units)
        if f.unit is None and _BARE_DIGITS.fullmatch(text) and "," in f.number_text:
            return f.number_text
        return None

    def _supported(self, sample: Sample, units: list[EvidenceUnit], audit: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        verdict: dict[str, Any] = {"label": "supported"}
        matched: list[tuple[Answer, list, EvidenceUnit]] = []
        for a in sample.answers:
            for u in units:
                m = match_answer(a, u.text, sample.question, u.title)
                if m:
                    matched.append((a, m, u))
                    break
        if not matched:  # a model verifier found support the rules cannot show: trust the consensus
            verdict["rationale"] = "supported by the verifier consensus"
            return verdict
        verdict["rationale"] = f"evidence states {matched[0][1][0].span!r}"
        verdict["match"] = matched[0][1][0].kind
        supported = [a for a, _, _ in matched]
        unsupported = [a for a in sample.answers if all(a is not b for b in supported)]
        # only alternatives that are different answers are pruned; rewordings of a supported one stay
        prune = [a for a in unsupported if all(distinct_answers(a, b) for b in supported)]
        if cfg.prune_unsupported_alternatives and prune:
            keep = [a for a in sample.answers if all(a is not b for b in prune)]
            self._set_answers(sample, keep, f"alternatives not stated in the evidence removed: {[a.text for a in prune]}")
            add_tag(audit, "alternatives_pruned")
            add_tag(audit, "format_normalised")
            escalate(audit, "repair", "alternatives_pruned")
        if cfg.flag_distinct_alternatives and any(distinct_answers(a, b) for i, a in enumerate(supported)
                                                  for b in supported[i + 1:]):
            add_tag(audit, "distinct_alternatives")
            verdict["rationale"] += "; the evidence supports several different answers"
        first, m, unit = matched[0]
        new = self._format_rewrite(sample, first, m, unit)
        if new is not None and new != first.text:
            self._set_answers(sample, [Answer(text=new)] + [a for a in sample.answers if a is not first],
                              f"answer written as the evidence writes it ({new!r})")
            add_tag(audit, "answer_format")
            add_tag(audit, "format_normalised")
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
        if reason == "truncated_evidence":
            add_tag(audit, "truncated_evidence")
            if self.config.on_truncated == "drop":
                drop(audit, "truncated_evidence")
            return {"label": "unsupported", "reason": reason, "rationale": rationale}
        add_tag(audit, "unsupported")
        if self.config.on_unsupported == "drop":
            drop(audit, "unsupported")
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
                drop(audit, reason or "no_single_evidence_value")
            return {"label": "mismatched", "reason": reason or "no_single_evidence_value", "rationale": why}
        if cfg.on_mismatched == "repair":
            self._set_answers(sample, [Answer(text=new_text)], why)
            escalate(audit, "repair", "answer_corrected")
        elif cfg.on_mismatched == "drop":
            drop(audit, "answer_mismatch")
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
                drop(audit, "correction_not_in_evidence")
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
        """Rules settle: missing KB article (unsupported); verifier consensus entailed (supported, left
        as annotated); not_supported (unsupported: removed, no correction attempted); yes/no answers
        no model verifier judged (unchecked, kept); for a contradicted consensus a single correction
        value the rules find in the evidence (numbers, ranges, coarser dates, stripped names). Only a
        contradicted sample without one rules value goes to the repairer role when configured."""
        sample, audit = split_record(record)
        cfg = self.config
        apply_policy(sample, audit, cfg.evqa_keep_all)
        v = audit["stages"].get("verify", {})
        units = evidence_for(sample, audit, ctx.kb)
        vlabel = v.get("label") or ("entailed" if any(any(match_answer(a, u.text, sample.question, u.title)
                                                          for a in sample.answers) for u in units)
                                    else "not_supported")
        model_judged = any(r.get("backend") != "rules" for r in v.get("verifiers", []))
        needs = list(v.get("needs_model", []))
        truncated = any(u.truncated for u in units)
        if v.get("reason") in ("missing_kb", "no_kb") or (not units and not v):
            verdict = {"label": "unsupported", "reason": "missing_kb",
                       "rationale": "the entity's KB article is not available"}
            audit["answer_support"] = "unsupported"
            add_tag(audit, "missing_kb")
            if cfg.on_missing_kb == "drop":
                drop(audit, "missing_kb")
        elif vlabel != "entailed" and undecidable(sample.answers) and not model_judged:
            # yes/no is never written verbatim: rules abstain rather than flag (a model verifier decides)
            verdict = {"label": "unchecked", "reason": "yes_no_answer",
                       "rationale": "yes/no answers cannot be checked by matching; not flagged"}
            audit["answer_support"] = "supported"
            add_tag(audit, "unchecked_by_rules")
            needs.append("yes_no")
        elif vlabel == "entailed":
            verdict = self._supported(sample, units, audit)
            audit["answer_support"] = "supported"
        elif vlabel == "contradicted":  # Supported but Mismatched: corrected to what the evidence states
            fix = self._correct(sample, units) if cfg.correct else None
            client = resolve_role(ctx, cfg.llm, cfg.llm_role) if cfg.correct and units else None
            if fix is not None:
                verdict = self._mismatched(sample, audit, fix[0], fix[1])
            elif client is not None:
                verdict = await self._llm_correct(client, sample, units, audit, ctx, vlabel, "not_in_evidence")
            else:
                verdict = self._mismatched(sample, audit, None, "evidence states a different value but no "
                                           "single one to correct to")
        else:  # Unsupported: removed, never corrected
            reason = v.get("reason") or ("truncated_evidence" if truncated else "not_in_evidence")
            if reason == "truncated_evidence":
                verdict = self._unsupported(audit, reason, "no answer alternative is stated in the evidence, "
                                                           "which is cut off: inconclusive")
            else:
                verdict = self._unsupported(audit, reason, "no verifier found the answer in the evidence")
            if verdict.get("reason") == "truncated_evidence":
                needs.append("truncated_evidence")
        verdict.setdefault("settled_by", "rules")
        audit["stages"][self.name] = {**provenance(self), **verdict}
        if "llm" in verdict:  # the model made the call: its provenance is the stage's
            audit["stages"][self.name].update({k: verdict["llm"][k] for k in ("backend", "model", "version")})
        if verdict["settled_by"] == "llm" or v.get("decided_by") == "llm" or (model_judged and "yes_no" in needs):
            decided = "llm"
        else:
            decided = "undecided" if needs else "rules"
        audit["decided_by"] = decided
        if needs:
            audit["needs_model"] = needs
            for n in needs:
                add_tag(audit, f"needs_model:{n}")
        if audit["answer_support"] in ("supported", "mismatched") and units:
            spans = supporting_spans(sample, units)
            if not spans:  # support only a model verifier saw: its entailed sections and why
                spans = [{k: s.get(k) for k in ("section_id", "title", "source")} | {
                    "kind": "model", "verifier": r["verifier"], "span": None, "rationale": s.get("rationale")}
                    for r in v.get("verifiers", []) if r.get("backend") != "rules"
                    for s in r.get("sections", []) if s.get("label") == "entailed"]
            audit["evidence"] = spans
        update_flags(sample, audit)
        return join_record(sample, audit)
