"""Audit stage 1: evidence verification.

Each evidence unit (the sample's own evidence when the dataset provides it, else each section of the
entity's KB article) gets a label per verifier: entailed / contradicted / not_supported. A verifier's
sample label is entailed if any unit is; contradicted only when every unit it read contradicts (the
authors' grounding judge; `contradicted = "any"` is kbvqa's earlier reading: one contradicting unit
is enough); else not_supported. N verifiers are combined by a consensus policy: `all` (the paper's:
the sample is unsupported only when every verifier fails to find support), `any` (unsupported as
soon as one verifier fails to find support) or `majority`.

Who decides (§4.1 step 1: "only instances that are consistently classified as Unsupported by both
verifiers are removed"). With model verifiers configured (role `verifier`, one client or several)
they alone vote: the rules verifier may only settle a sample before them when an answer alternative
is written word for word in a unit (`verbatim_match`), and never votes against them (its lenient
matches - most parts of a list, inflections, a section title - and its "contradicted" are recorded
with `counted: false`). With exactly one model verifier the stage says so ("one verifier: the paper
uses two"). Without any, the rules verifier decides alone: kbvqa's offline stand-in, not the paper's
protocol; its "contradicted" keeps kbvqa's targeted reading (a quantity of the same kind in a sentence
about the question), since a rules section label is not a section-level judgement.
`decided_by` (rules / llm / undecided) says which path made the call.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from kbvqa.data import matching as mt
from kbvqa.data.schema import Sample
from kbvqa.runner.stage import Context, Invalid, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.models.prompts.audit import VERIFY_SECTION
from kbvqa.stages.audit.classes import model_classes
from kbvqa.stages.audit.derive import correct_date, correct_string
from kbvqa.stages.audit.evidence import (EvidenceUnit, combine, expand_truncated, kb_evidence, match_answer,
                                         rules_section_label, sample_evidence)
from kbvqa.stages.audit.llm import expand, gather_strict, llm_verifier_label, resolve_role
from kbvqa.stages.audit.record import join_record, provenance, split_record


@runtime_checkable
class SectionVerifier(Protocol):
    """What a model role must offer to act as a verifier (the model layer provides adapters).
    `verify_section` returns {"label": entailed|contradicted|not_supported, "rationale": str}."""

    async def verify_section(self, question: str, answers: list[str], title: str, text: str) -> dict[str, Any]: ...


ONE_VERIFIER = "one verifier: the paper uses two"
RULES_ONLY = ("no model verifier: the rules-only audit is kbvqa's offline stand-in (the paper removes only "
              "what two model verifiers both find unsupported)")
_VERBATIM_KINDS = frozenset({"phrase", "number", "date"})


def verification_notice(n_models: int) -> str | None:
    """What a run with `n_models` model verifiers must say about itself (None: two or more)."""
    return RULES_ONLY if n_models == 0 else ONE_VERIFIER if n_models == 1 else None


def verbatim_match(sample: Sample, units: list[EvidenceUnit]) -> dict[str, Any] | None:
    """The one rules finding that may settle a sample before the model verifiers: an answer alternative
    (every `&&` part) written word for word, case and punctuation aside, in one unit's text (not its
    title), matched as that phrase, number or date. Yes/no answers never qualify."""
    for a in sample.answers:
        parts = [p for p in (a.parts or [a.text]) if p.strip()]
        if not parts or mt.norm(a.text) in ("yes", "no"):
            continue
        for u in units:
            m = match_answer(a, u.text, sample.question)
            if not m or any(x.kind not in _VERBATIM_KINDS for x in m):
                continue
            spans = [mt.find_phrase(u.text, p) for p in parts]
            if all(spans):
                return {"answer": a.text, "section_id": u.section_id, "span": "; ".join(s for s in spans if s)}
    return None


def counted(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verifier results that vote: with model verifiers present the rules verifier abstains
    (`counted: false`)."""
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
    rules_settle: bool = True  # a verbatim rules match is final: model verifiers are not asked
    # a verifier's sample label is contradicted when all units it read contradict (the authors') or any (kbvqa's)
    contradicted: Literal["all", "any"] = "all"
    stop_at_entailed: bool = True  # a model verifier stops at its first entailed section
    max_section_chars: int = 0  # 0 = whole sections go to the model


@register_stage
class VerifyStage(Stage):
    """Stage 1. With model verifiers configured, the rules settle without any model call only samples
    with no evidence (missing_kb / no_evidence: unsupported) and, when `rules_settle`, samples whose
    answer is written verbatim in a unit (`verbatim_match`); every other sample is decided by the
    model verifiers' consensus, the rules' label kept beside it without a vote. Under the default
    consensus `all` the verbatim shortcut changes nothing but cost (one entailing verifier already
    makes the sample entailed); under `any`/`majority` set `rules_settle = false` to let the models
    overrule it."""

    name = "verify"
    version = "4"
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
            if label == "not_supported":  # the same answer at another precision or in a shorter form
                other = next((r for a in sample.answers for r in (correct_date(a, u.text), correct_string(a, u.text))
                              if r), None)
                if other is not None:
                    label, why = "contradicted", other[1]
            sections.append({**u.dump(), "label": label, "rationale": why, **({"match": kind} if kind else {})})
        label = combine([s["label"] for s in sections], "any")  # kbvqa's targeted contradiction
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
            return {"verifier": vname, **prov, "label": combine([s["label"] for s in sections],
                                                                self.config.contradicted),
                    "sections": sections}
        if not hasattr(role, "chat"):
            raise TypeError(f"role {vname!r} cannot verify sections (needs chat() or verify_section())")
        return await llm_verifier_label(vname, role, sample, units, ctx, stop_at_entailed=self.config.stop_at_entailed,
                                        max_chars=self.config.max_section_chars,
                                        contradicted=self.config.contradicted)

    async def _verify_units(self, sample: Sample, units: list[EvidenceUnit], ctx: Context,
                            verifiers: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
        """Per-verifier results over `units`, and whether the rules settled it (models not asked).
        With model verifiers the rules' result never votes; it settles only a verbatim match."""
        results: list[dict[str, Any] | None] = [None] * len(verifiers)
        for i, (name, client) in enumerate(verifiers):
            if client is None:
                results[i] = self._rules_label(sample, units)
        models = [(i, n, c) for i, (n, c) in enumerate(verifiers) if c is not None]
        rules = [r for r in results if r is not None]
        if not models:
            return rules, False
        for r in rules:
            r["counted"] = False
        exact = verbatim_match(sample, units) if self.config.rules_settle and rules else None
        if exact is not None and not any(r.get("needs_model") for r in rules):
            for r in rules:
                r["verbatim"] = exact
            return rules, True
        got = await gather_strict([self._model_label(n, c, sample, units, ctx) for _, n, c in models])
        for (i, _, _), r in zip(models, got):
            results[i] = r
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
        models = [n for n, c in verifiers if c is not None]
        notice = verification_notice(len(models))
        about = {"model_verifiers": models, **({"notice": notice} if notice else {})}
        if not units and missing == "no_entity_url":
            # An article the sample does not name is not one the KB lacks: dropping it as unsupported
            # would empty a split whose rows carry only a Wikidata id (official InfoSeek JSONL).
            raise ValueError("the sample names no KB article (entity.url) and carries no evidence: the audit "
                             "cannot look its evidence up; give rows with the entity's wiki URL (E-VQA/ARA "
                             "files carry one; InfoSeek's entity_id is a Wikidata id)")
        if not units:
            verdict = {"label": "not_supported", "reason": missing or "no_evidence", "evidence_source": None,
                       "rationale": "no evidence text to verify against", "verifiers": [],
                       "settled_by": "rules", "decided_by": "rules", **about, **provenance(self)}
            audit["stages"][self.name] = verdict
            return join_record(sample, audit)
        results, settled = await self._verify_units(sample, units, ctx, verifiers)
        label = "entailed" if settled else consensus([r["label"] for r in counted(results)], cfg.consensus)
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
                        rule = "any" if r.get("backend") == "rules" else cfg.contradicted
                        r["label"] = combine([s["label"] for s in r["sections"]], rule)
                        for key in ("needs_model", "counted", "sections_total", "verbatim"):
                            if key in k:
                                r[key] = k[key]
                label = "entailed" if settled else consensus([r["label"] for r in counted(results)], cfg.consensus)
                source = "sample+kb"
        entailed = sorted({(s["source"], s["section_id"]) for r in results for s in r["sections"]
                           if s["label"] == "entailed"}, key=str)
        needs = next((r["needs_model"] for r in results if r.get("needs_model")), [])
        voting = counted(results)
        audit["stages"][self.name] = {
            "label": label, "consensus": cfg.consensus, "evidence_source": source,
            "entailed_sections": [list(e) for e in entailed],
            "rationale": f"{sum(r['label'] == 'entailed' for r in voting)}/{len(voting)} verifiers found support"
                         + (f"; the answer is written verbatim in the evidence: model verifiers {models} not asked"
                            if settled else "")
                         + (f"; {notice}" if notice and models else "")
                         + (f"; the rules cannot judge {needs}" if needs else ""),
            "settled_by": "rules" if settled or not models else "consensus",
            "decided_by": "rules" if settled or (not models and not needs) else "llm" if models else "undecided",
            **({"needs_model": needs} if needs else {}), **about,
            "verifiers": results, **provenance(self),
        }
        return join_record(sample, audit)
