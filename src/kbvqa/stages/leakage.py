"""Audit stage 4: leakage and consistency validation.

Checks on the final question/answer: (i) the question does not state the answer (normalised,
word-bounded, country/demonym aware; an answer offered as one option of a choice question "X or Y?"
is not a leak); (ii) the final answer is still stated in the evidence; (iii) the answer is unique (one
answer left, and the evidence does not state two values for the quantity). A question edit made by
stage 3 that introduces a leak is rolled back to the question stage 3 received.
"""

from __future__ import annotations

from typing import Any, Literal

from kbvqa.data.schema import Answer
from kbvqa.stages import matching as mt
from kbvqa.stages.base import Context, Stage, StageConfig
from kbvqa.stages.verify import (add_tag, escalate, evidence_for, join_record, match_answer, provenance,
                                 split_record)


class LeakageConfig(StageConfig):
    on_leak: Literal["keep", "drop"] = "keep"  # what to do when even the unrepaired question leaks
    min_answer_chars: int = 1  # answers shorter than this are never reported as leaks
    recheck_support: bool = True


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


def _distinct_answers(answers: list[Answer]) -> list[str]:
    """Answers that are not the same value written differently (or one containing the other)."""
    out: list[str] = []
    for a in answers:
        n = mt.norm(a.text)
        if not n:
            continue
        if any(n == o or f" {n} " in f" {o} " or f" {o} " in f" {n} " or n in mt.country_forms(o) for o in out):
            continue
        out.append(n)
    return out


class LeakageStage(Stage):
    name = "leakage"
    version = "1"
    config_model = LeakageConfig

    def __init__(self, config: LeakageConfig | None = None):
        super().__init__(config)
        self.config: LeakageConfig

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sample, audit = split_record(record)
        cfg = self.config
        checks: dict[str, Any] = {}
        notes: list[str] = []

        leak = leaked(sample.question, sample.answers, cfg.min_answer_chars)
        pos = audit["stages"].get("posedness", {})
        if leak and pos.get("repaired") and pos.get("question_in") != sample.question:
            original = pos["question_in"]
            if not leaked(original, sample.answers, cfg.min_answer_chars):
                sample.record_change(self.name, "question", sample.question, original,
                                     f"question repair leaked the answer {leak!r}; rolled back",
                                     f"{self.name}@{self.version}")
                sample.question = original
                add_tag(audit, "leak_rolled_back")
                notes.append(f"repair leaked {leak!r}: rolled back")
                leak = None
        checks["leak"] = leak
        if leak:
            add_tag(audit, "answer_leak")
            notes.append(f"question states the answer {leak!r}")
            if cfg.on_leak == "drop":
                escalate(audit, "drop", "answer_leak")

        derive = audit["stages"].get("derive", {})
        support = audit.get("answer_support")
        if (cfg.recheck_support and support in ("supported", "mismatched") and sample.answers
                and derive.get("rationale") != "supported by the verifier consensus"
                and derive.get("label") != "unchecked"
                and audit.get("action") != "drop"):
            units = evidence_for(sample, audit, ctx.kb)
            ok = any(match_answer(a, u.text) for a in sample.answers for u in units)
            checks["final_answer_supported"] = ok
            if not ok:
                add_tag(audit, "final_unsupported")
                notes.append("final answer is not stated in the evidence")
                escalate(audit, "drop", "final_unsupported")

        distinct = _distinct_answers(sample.answers)
        unique = len(distinct) <= 1
        verify = audit["stages"].get("verify", {})
        sec_labels = {s["label"] for r in verify.get("verifiers", []) if r.get("backend") == "rules"
                      for s in r.get("sections", [])}
        if {"entailed", "contradicted"} <= sec_labels and support == "supported":
            unique = False
            add_tag(audit, "conflicting_evidence")
            notes.append("evidence states the answer and also another value for the same quantity")
        if len(distinct) > 1:
            add_tag(audit, "not_unique")
            notes.append(f"{len(distinct)} different answers remain")
        checks["unique"] = unique

        audit.setdefault("answer_support", "unsupported")
        audit["stages"][self.name] = {"label": "ok" if not notes else "issues", **checks,
                                      "rationale": "; ".join(notes) or "no leak; answer supported and unique",
                                      **provenance(self)}
        return join_record(sample, audit)

