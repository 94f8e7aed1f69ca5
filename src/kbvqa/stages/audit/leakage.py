"""Audit stage 4: leakage and consistency validation.

Checks on the final question/answer: (i) the question does not state the answer (normalised,
word-bounded, country/demonym aware; an answer offered as one option of a choice question "X or Y?"
is not a leak); (ii) the final answer is still stated in the evidence; (iii) the answer is unique (one
answer left, and the evidence does not state two values for the quantity).

§4.1 step 4: "any leakage-inducing edits are rolled back and rewritten conservatively". A question edit
made by stage 3 that leaks is rolled back to the question stage 3 received (tag `leak_rolled_back`),
then rewritten conservatively when the rules have an evidence-backed template repair for one of stage
3's tags that states no answer ("In what year ...", "... in metres", tag `leak_rewritten`); without
one the rolled-back question stays, its ambiguity tag kept for a reviewer (kbvqa's simplification: no
model is asked for a new wording, and the checker does not re-read the rewrite). "The revised question
yields a unique answer": a non-unique answer is tagged `not_unique` and kept, not repaired (kbvqa's
simplification). E-VQA samples are never removed here either (`evqa_keep_all`).
"""

from __future__ import annotations

from typing import Any, Literal

from kbvqa.data.schema import Answer
from kbvqa.data import matching as mt
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.models.prompts.audit import FINAL_CHECK
from kbvqa.stages.audit.evidence import evidence_for, leaked, match_answer
from kbvqa.stages.audit.llm import llm_final_check, resolve_role
from kbvqa.stages.audit.posedness import tag_question, unit_conflict
from kbvqa.stages.audit.record import add_tag, apply_policy, drop, join_record, provenance, split_record, update_flags


class LeakageConfig(StageConfig):
    on_leak: Literal["keep", "drop"] = "keep"  # what to do when even the unrepaired question leaks
    min_answer_chars: int = 1  # answers shorter than this are never reported as leaks
    recheck_support: bool = True
    llm: Literal["auto", "on", "off"] = "auto"  # final check by role `llm_role` when configured
    llm_role: str = "checker"
    on_not_answerable: Literal["drop", "keep"] = "drop"  # the checker finds the answer not in the evidence
    evqa_keep_all: bool = True  # E-VQA's fixed split keeps every question (§4.2): nothing is removed
    max_section_chars: int = 0


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


@register_stage
class LeakageStage(Stage):
    name = "leakage"
    version = "3"
    config_model = LeakageConfig
    prompts = (FINAL_CHECK,)

    def __init__(self, config: LeakageConfig | None = None):
        super().__init__(config)
        self.config: LeakageConfig


    def _rollback(self, sample: Any, audit: dict[str, Any], original: str, why: str, ctx: Context) -> None:
        """Back to the question stage 3 received, then the conservative rewrite: the rules' template
        repair of a tag stage 3 gave, when one exists and states no answer (tag `leak_rewritten`)."""
        sample.record_change(self.name, "question", sample.question, original, why, f"{self.name}@{self.version}")
        sample.question = original
        add_tag(audit, "leak_rolled_back")
        safe = self._conservative(sample, audit, ctx)
        if safe is not None:
            tag, question = safe
            sample.record_change(self.name, "question", original, question,
                                 f"conservative rewrite after the leaking edit: the template repair for {tag}",
                                 f"{self.name}@{self.version}")
            sample.question = question
            add_tag(audit, "leak_rewritten")

    def _conservative(self, sample: Any, audit: dict[str, Any], ctx: Context) -> tuple[str, str] | None:
        tags = set((audit["stages"].get("posedness") or {}).get("tags") or [])
        if not tags:
            return None
        units = evidence_for(sample, audit, ctx.kb)
        for item in tag_question(sample, units):
            cand = item.get("repair")
            if (item["tag"] in tags and cand and cand != sample.question
                    and not leaked(cand, sample.answers, self.config.min_answer_chars)
                    and not unit_conflict(cand, sample, units)):
                return item["tag"], cand
        return None

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """Rules settle: a word-bounded leak (rolled back when stage 3 caused it), the final-answer
        recheck and the uniqueness counts. The checker role (when configured) then reviews samples
        that are not dropped and have evidence: a leak it finds in a question stage 3 edited rolls
        the edit back (else answer_leak, per `on_leak`); not answerable → `on_not_answerable`; not
        unique → tag not_unique."""
        sample, audit = split_record(record)
        cfg = self.config
        apply_policy(sample, audit, cfg.evqa_keep_all)
        checks: dict[str, Any] = {}
        notes: list[str] = []

        leak = leaked(sample.question, sample.answers, cfg.min_answer_chars)
        pos = audit["stages"].get("posedness", {})
        if leak and pos.get("repaired") and pos.get("question_in") != sample.question:
            original = pos["question_in"]
            if not leaked(original, sample.answers, cfg.min_answer_chars):
                self._rollback(sample, audit, original, f"question repair leaked the answer {leak!r}; rolled back", ctx)
                notes.append(f"repair leaked {leak!r}: rolled back")
                leak = None
        checks["leak"] = leak
        if leak:
            add_tag(audit, "answer_leak")
            notes.append(f"question states the answer {leak!r}")
            if cfg.on_leak == "drop":
                drop(audit, "answer_leak")

        derive = audit["stages"].get("derive", {})
        support = audit.get("answer_support")
        if (cfg.recheck_support and support in ("supported", "mismatched") and sample.answers
                and derive.get("rationale") != "supported by the verifier consensus"
                and derive.get("label") != "unchecked"
                and audit.get("action") != "drop"):
            units = evidence_for(sample, audit, ctx.kb)
            ok = any(match_answer(a, u.text, sample.question, u.title) for a in sample.answers for u in units)
            checks["final_answer_supported"] = ok
            if not ok:
                add_tag(audit, "final_unsupported")
                notes.append("final answer is not stated in the evidence")
                drop(audit, "final_unsupported")

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

        extra: dict[str, Any] = {"settled_by": "rules"}
        client = resolve_role(ctx, cfg.llm, cfg.llm_role)
        units = evidence_for(sample, audit, ctx.kb) if client is not None else []
        if client is not None and audit.get("action") != "drop" and units and sample.answers and not leak:
            reply, prov = await llm_final_check(client, sample, units, ctx, cfg.max_section_chars)
            extra = {"settled_by": "llm", "llm": {**prov, **reply.model_dump()}}
            if reply.leak:
                original = pos.get("question_in")
                if original and original != sample.question and pos.get("repaired"):
                    self._rollback(sample, audit, original, f"checker: question edit leaks the answer "
                                                            f"({reply.rationale}); rolled back", ctx)
                    notes.append("checker found the edited question leaks: rolled back")
                    extra["llm"]["rolled_back"] = True
                else:
                    checks["leak"] = f"checker: {reply.rationale}"
                    add_tag(audit, "answer_leak")
                    notes.append("checker: question gives the answer away")
                    if cfg.on_leak == "drop":
                        drop(audit, "answer_leak")
            if not reply.answerable:
                add_tag(audit, "not_answerable")
                notes.append("checker: the evidence does not support the answer to this question")
                if cfg.on_not_answerable == "drop":
                    drop(audit, "not_answerable")
            if not reply.unique:
                checks["unique"] = False
                add_tag(audit, "not_unique")
                notes.append("checker: more than one answer fits")

        audit.setdefault("answer_support", "unsupported")
        audit["stages"][self.name] = {"label": "ok" if not notes else "issues", **checks,
                                      "rationale": "; ".join(notes) or "no leak; answer supported and unique",
                                      **provenance(self), **extra}
        update_flags(sample, audit)
        return join_record(sample, audit)

