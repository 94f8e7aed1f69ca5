"""The model side of the four audit stages: reply schemas, strict calls, and one helper per stage.

Stages run their rules first; these helpers are called only for what the rules leave open (each
stage's docstring says exactly which cases). Everything here goes through
`kbvqa.models.result.call_model` (the call's usage lands in the run's totals whatever happens) with a
prompt from `kbvqa.models.prompts` and a strict reply schema (`kbvqa.models.replies.Reply`):

- reply `ok` and valid for the schema → the typed reply;
- reply `invalid` (unparseable, wrong shape, missing field, unknown label, a placeholder copied from
  the prompt) → `Invalid`: the record ends invalid, is retried on resume and never gets a label by
  default;
- reply `error` (HTTP failure after the client's retries, timeout, deadline, cassette miss) → `ModelCallError`,
  a normal exception: the record ends `error` and is retried on resume.

Every model verdict carries its provenance: backend, model, prompt `name@version` and the prompt's
sha256, so an audited file says which instructions produced each decision.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
from typing import Any, ClassVar, Literal

from pydantic import StrictBool, model_validator

from kbvqa.data.schema import Answer, Sample
from kbvqa.data import matching as mt
from kbvqa.models import prompts as P
from kbvqa.models.prompts import audit as AP
from kbvqa.models.replies import Reply
from kbvqa.models.result import ModelCallError, call_model
from kbvqa.runner.stage import Context
from kbvqa.stages.audit.evidence import EvidenceUnit, Match, combine, match_answer

LLMMode = Literal["auto", "on", "off"]
QuestionTag = Literal["missing_attribute_constraint", "missing_temporal_scope", "missing_spatial_reference"]

__all__ = ["CorrectionReply", "FinalCheckReply", "ModelCallError", "PosednessReply", "SectionReply", "ask",
           "client_provenance", "evidence_payload", "expand", "gather_strict", "llm_correct", "llm_final_check",
           "llm_posedness", "llm_verifier_label", "minimal_edit", "rank_units", "resolve_role", "validate_correction",
           "wire_schema"]


# ------------------------------------------------------------------------------------ reply schemas
# Strict (kbvqa.models.replies): the fields a stage decides on are required, labels are closed sets,
# booleans are JSON booleans, and a placeholder copied from the prompt's reply template is invalid.


class SectionReply(Reply):
    label: Literal["entailed", "contradicted", "not_supported"]
    rationale: str = ""


class CorrectionReply(Reply):
    status: Literal["matched", "mismatched", "not_answerable"]
    answer: str | None = None
    evidence_quote: str = ""
    rationale: str = ""
    placeholder_examples: ClassVar[tuple[str, ...]] = ("null",)

    @model_validator(mode="after")
    def _mismatch_names_the_answer(self) -> "CorrectionReply":
        if self.status == "mismatched" and not (self.answer or "").strip():
            raise ValueError("status 'mismatched' needs the evidence's answer in `answer`")
        return self


class PosednessReply(Reply):
    """Both keys are required: `{}` is not "the question is clear" (the prompt asks for `tags`, empty
    when there is no problem, and `suggested_question`, null when there is none)."""

    tags: list[QuestionTag]
    suggested_question: str | None
    rationale: str = ""
    placeholder_examples: ClassVar[tuple[str, ...]] = ("null",)


class FinalCheckReply(Reply):
    leak: StrictBool
    answerable: StrictBool
    unique: StrictBool
    rationale: str = ""


# ------------------------------------------------------------------------------------------ calling


def resolve_role(ctx: Context, mode: str, name: str) -> Any:
    """The client (or list) filling role `name`, or None. `auto`: use it when configured; `on`:
    required (a missing role raises KeyError naming it); `off`: never."""
    if mode == "off" or not name:
        return None
    if mode == "on":
        return ctx.role(name)
    return ctx.roles.get(name)


def expand(name: str, value: Any) -> list[tuple[str, Any]]:
    """A role holding several clients (verifier = [a, b, c]) becomes verifier#1, verifier#2, ..."""
    if isinstance(value, (list, tuple)):
        return [(f"{name}#{i + 1}", c) for i, c in enumerate(value)]
    return [(name, value)]


def client_provenance(client: Any, prompt: P.Prompt | None = None) -> dict[str, Any]:
    prov = getattr(client, "provenance", None)
    out = {"backend": getattr(prov, "backend", None) or getattr(client, "backend", type(client).__name__),
           "model": getattr(prov, "model", None) or getattr(client, "model", None)}
    if prompt is not None:
        out.update(version=prompt.id, prompt=prompt.id, prompt_sha256=prompt.sha256)
    return out


@functools.cache
def wire_schema(schema: type[Reply]) -> dict[str, Any]:
    """The reply schema as JSON Schema, built once per class: the client sends it as
    response_format (and checks its shape); `ask` then validates strictly with the pydantic model.
    Building it per call cost ~0.7 ms of event-loop time per request at 160 req/s."""
    return {"name": schema.__name__, "schema": schema.model_json_schema()}


async def ask(client: Any, prompt: P.Prompt, schema: type[Reply], ctx: Context, **values: Any) -> Reply:
    """One strict model call: typed reply, or Invalid / ModelCallError (see the module docstring)."""
    if not hasattr(client, "chat"):
        raise TypeError(f"{client!r} is not a model client (needs async chat())")
    prov = client_provenance(client)
    reply, _ = await call_model(client, prompt.messages(**values), schema, ctx=ctx, schema=wire_schema(schema),
                                who=f"{prov['backend']}:{prov['model']} ({prompt.id})", prompt_version=prompt.id)
    return reply


def evidence_payload(units: list[EvidenceUnit], max_chars: int = 0) -> list[dict[str, str]]:
    """Sections as the model sees them. `max_chars` 0 = the whole text (no silent truncation)."""
    out = []
    for u in units:
        text = u.text if not max_chars else u.text[:max_chars]
        out.append({"section": u.title or "", "text": text})
    return out


# ------------------------------------------------------------------------------- stage 1: verify


def rank_units(sample: Sample, units: list[EvidenceUnit]) -> list[EvidenceUnit]:
    """Sections most likely to decide first (so a verifier that stops at the first entailed section
    asks few): by content words shared with the question and answers, stable otherwise."""
    if len(units) < 2:
        return list(units)
    cues = mt.content_words(sample.question) | {w for a in sample.answer_texts for w in mt.content_words(a)}
    scored = [(-len(cues & mt.content_words(u.text)), i, u) for i, u in enumerate(units)]
    return [u for _, _, u in sorted(scored, key=lambda x: (x[0], x[1]))]


async def llm_verifier_label(label: str, client: Any, sample: Sample, units: list[EvidenceUnit], ctx: Context,
                             *, stop_at_entailed: bool, max_chars: int = 0,
                             contradicted: str = "all") -> dict[str, Any]:
    """One model verifier over the sections, one call per section, shown every answer alias; sample
    label entailed if any section is, else contradicted when every section is (`contradicted="any"`:
    when one is), else not_supported."""
    sections = []
    for u in rank_units(sample, units):
        text = u.text if not max_chars else u.text[:max_chars]
        r = await ask(client, AP.VERIFY_SECTION, SectionReply, ctx, question=sample.question,
                      answers=sample.answer_texts, title=u.title or "", text=text)
        assert isinstance(r, SectionReply)
        sections.append({**u.dump(), "label": r.label, "rationale": r.rationale})
        if stop_at_entailed and r.label == "entailed":
            break
    combined = combine([s["label"] for s in sections], contradicted)
    return {"verifier": label, **client_provenance(client, AP.VERIFY_SECTION), "label": combined,
            "sections": sections, "sections_total": len(units)}


async def gather_strict(coros: list[Any]) -> list[Any]:
    """Run coroutines concurrently; all finish, then the first failure (in order) is raised."""
    res = await asyncio.gather(*coros, return_exceptions=True)
    for r in res:
        if isinstance(r, BaseException):
            raise r
    return res


# ------------------------------------------------------------------------------- stage 2: derive


def validate_correction(proposal: str, units: list[EvidenceUnit]) -> tuple[str, Match] | None:
    """(answer to store, match) when the evidence states `proposal`, else None. The stored answer
    is the evidence's own span (numbers, dates, spelling and case as written there); an equivalent
    form (a country for its adjective) or a list is kept as proposed."""
    proposal = (proposal or "").strip()
    if not proposal or not mt.norm(proposal):
        return None
    for u in units:
        m = match_answer(Answer(text=proposal), u.text)
        if m:
            if len(m) == 1 and m[0].kind in ("number", "date", "spelling", "phrase"):
                return m[0].span, m[0]
            return proposal, m[0]
    return None


async def llm_correct(client: Any, sample: Sample, units: list[EvidenceUnit], ctx: Context,
                      max_chars: int = 0) -> tuple[CorrectionReply, dict[str, Any]]:
    r = await ask(client, AP.CORRECT_ANSWER, CorrectionReply, ctx, question=sample.question,
                  answer_type=sample.answer_type or "unknown", answers=sample.answer_texts,
                  evidence=evidence_payload(units, max_chars))
    assert isinstance(r, CorrectionReply)
    return r, client_provenance(client, AP.CORRECT_ANSWER)


# ---------------------------------------------------------------------------- stage 3: posedness


def minimal_edit(before: str, after: str, min_similarity: float) -> str | None:
    """None when `after` is a minimal edit of `before`, else why not: it must keep most of the
    original wording (word-level similarity) and every content word of the original."""
    a, b = mt.norm(before).split(), mt.norm(after).split()
    if not b:
        return "empty suggestion"
    ratio = difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio()
    if ratio < min_similarity:
        return f"rewrites too much (word similarity {ratio:.2f} < {min_similarity})"
    lost = mt.content_words(before) - mt.content_words(after)
    if len(lost) > max(1, len(mt.content_words(before)) // 4):
        return f"drops words of the original: {sorted(lost)}"
    return None


async def llm_posedness(client: Any, sample: Sample, units: list[EvidenceUnit], ctx: Context,
                        max_chars: int = 0) -> tuple[PosednessReply, dict[str, Any]]:
    r = await ask(client, AP.POSEDNESS, PosednessReply, ctx, question=sample.question,
                  answers=sample.answer_texts,
                  evidence=evidence_payload(units, max_chars))
    assert isinstance(r, PosednessReply)
    return r, client_provenance(client, AP.POSEDNESS)


# ------------------------------------------------------------------------------ stage 4: leakage


async def llm_final_check(client: Any, sample: Sample, units: list[EvidenceUnit], ctx: Context,
                          max_chars: int = 0) -> tuple[FinalCheckReply, dict[str, Any]]:
    r = await ask(client, AP.FINAL_CHECK, FinalCheckReply, ctx, question=sample.question,
                  answer=" | ".join(sample.answer_texts), evidence=evidence_payload(units, max_chars))
    assert isinstance(r, FinalCheckReply)
    return r, client_provenance(client, AP.FINAL_CHECK)
