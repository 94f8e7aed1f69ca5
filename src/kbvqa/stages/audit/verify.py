"""Audit stage 1: evidence verification.

Each evidence unit (the sample's own evidence when the dataset provides it, else each section of the
entity's KB article) gets a label per verifier: entailed / contradicted / not_supported. A verifier's
sample label is entailed if any unit is, else contradicted if any unit is, else not_supported. N
verifiers are combined by a consensus policy: `all` (the paper's default: the sample counts as
unsupported only when every verifier fails to find support), `any` (unsupported as soon as one
verifier fails to find support) or `majority`.

The rules verifier is always available; other verifiers are model roles from `ctx.roles` that
implement `SectionVerifier`. Model verifiers run only where the rules cannot decide: a rules match
settles a sample (no model call) unless the sample belongs to a class the rules cannot judge
(`classes.model_classes`: taxonomy rank, answer role), in which case the rules' match abstains and the
model verifiers decide. `decided_by` (rules / llm / undecided) says which path made the call.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from kbvqa.data.schema import Sample
from kbvqa.runner.stage import Context, Invalid, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.models.prompts.audit import VERIFY_SECTION
from kbvqa.stages.audit.classes import model_classes
from kbvqa.stages.audit.evidence import (EvidenceUnit, expand_truncated, kb_evidence, rules_section_label,
                                         sample_evidence)
from kbvqa.stages.audit.llm import expand, gather_strict, llm_verifier_label, resolve_role
from kbvqa.stages.audit.record import join_record, provenance, split_record


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


def counted(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verifier results that vote: a rules match on a sample the rules cannot judge abstains
    when model verifiers are present (`counted: false`)."""
    return [r for r in results if r.get("counted", True)] or results


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


@register_stage
class VerifyStage(Stage):
    """Stage 1. With model verifiers configured, the rules verifier (when listed) runs first and
    settles, without any model call: samples with no evidence (missing_kb / no_evidence) and, when
    `rules_settle`, samples where the rules find an answer alternative stated word-bounded in a
    section. Under the default consensus `all` that second shortcut changes nothing but cost (one
    entailing verifier already makes the sample entailed); under `any`/`majority` set
    `rules_settle = false` to let the models overrule a rules match."""

    name = "verify"
    version = "3"
    config_model = VerifyConfig
    prompts = (VERIFY_SECTION,)

    def __init__(self, config: VerifyConfig | None = None):
        super().__init__(config)
        self.config: VerifyConfig


    def _verifiers(self, ctx: Context) -> list[tuple[str, Any]]:
        """(label, client) pairs in config order; 'rules' has client None."""
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
            label, why, kind = rules_section_label(sample.question, sample.answers, u.text, u.title)
            sections.append({**u.dump(), "label": label, "rationale": why, **({"match": kind} if kind else {})})
        label = _combine([s["label"] for s in sections])
        out = {"verifier": "rules", "backend": "rules", "model": None, "version": f"{self.name}@{self.version}",
               "label": label, "sections": sections}
        if label == "entailed":
            needs = model_classes(sample, [u.text for u in units],
                                  [s.get("match") for s in sections if s["label"] == "entailed"])
            if needs:
                out["needs_model"] = needs
        return out

    async def _model_label(self, vname: str, role: Any, sample: Sample, units: list[EvidenceUnit],
                           ctx: Context) -> dict[str, Any]:
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
        results: list[dict[str, Any] | None] = [None] * len(verifiers)
        for i, (name, client) in enumerate(verifiers):
            if client is None:
                results[i] = self._rules_label(sample, units)
        decisive = [r for r in results if r is not None and r["label"] == "entailed" and not r.get("needs_model")]
        models = [(i, n, c) for i, (n, c) in enumerate(verifiers) if c is not None]
        if models and decisive and self.config.rules_settle:
            return [r for r in results if r is not None], True
        got = await gather_strict([self._model_label(n, c, sample, units, ctx) for _, n, c in models])
        for (i, _, _), r in zip(models, got):
            results[i] = r
        for r in results:  # a rules match the rules cannot judge does not vote against the models
            if models and r is not None and r.get("needs_model") and r["label"] == "entailed":
                r["counted"] = False
        return [r for r in results if r is not None], False

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sample, audit = split_record(record)
        cfg = self.config
        verifiers = self._verifiers(ctx)
        units: list[EvidenceUnit] = expand_truncated(sample_evidence(sample), sample, ctx.kb) \
            if cfg.use_sample_evidence else []
        source, missing = "sample", None
        if not units:
            units, missing = kb_evidence(sample, ctx.kb)
            source = "kb"
        if cfg.max_sections:
            units = units[:cfg.max_sections]
        if not units:
            verdict = {"label": "not_supported", "reason": missing or "no_evidence", "evidence_source": None,
                       "rationale": "no evidence text to verify against", "verifiers": [],
                       "settled_by": "rules", "decided_by": "rules", **provenance(self)}
            audit["stages"][self.name] = verdict
            return join_record(sample, audit)
        results, settled = await self._verify_units(sample, units, ctx, verifiers)
        label = consensus([r["label"] for r in counted(results)], cfg.consensus)
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
                        for key in ("needs_model", "counted", "sections_total"):
                            if key in k:
                                r[key] = k[key]
                label = "entailed" if settled else consensus([r["label"] for r in counted(results)], cfg.consensus)
                source = "sample+kb"
        entailed = sorted({(s["source"], s["section_id"]) for r in results for s in r["sections"]
                           if s["label"] == "entailed"}, key=str)
        models = [n for n, c in verifiers if c is not None]
        needs = next((r["needs_model"] for r in results if r.get("needs_model")), [])
        voting = counted(results)
        audit["stages"][self.name] = {
            "label": label, "consensus": cfg.consensus, "evidence_source": source,
            "entailed_sections": [list(e) for e in entailed],
            "rationale": f"{sum(r['label'] == 'entailed' for r in voting)}/{len(voting)} verifiers found support"
                         + (f"; rules match settled it, model verifiers {models} not asked" if settled else "")
                         + (f"; the rules cannot judge {needs}" if needs else ""),
            "settled_by": "rules" if settled or not models else "consensus",
            "decided_by": "rules" if settled or (not models and not needs) else "llm" if models else "undecided",
            **({"needs_model": needs} if needs else {}),
            "verifiers": results, **provenance(self),
        }
        return join_record(sample, audit)
