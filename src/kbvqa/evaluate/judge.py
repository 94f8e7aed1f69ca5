"""SimpleQA-style short-answer judge: correct / incorrect / not_attempted, with honest failure states.

Differences from the original grader (field-anchors §4.2), all deliberate:

* the reply is JSON ``{"label": ..., "rationale": ...}`` checked by a strict parser; anything else is
  the label ``"invalid"`` (never a silent default);
* a model/API failure is not a label at all: the Verdict has ``label=None`` and a rationale starting
  with ``"error:"``; `simpleqa_metrics` counts it under ``error``;
* temperature 0 by default (the original used 0.5, so grades were not reproducible);
* accuracy-given-attempted and F1 are returned, not only printed.

`legacy_parse` reproduces the original parser (first ``A|B|C`` anywhere, default C) so old numbers can
be re-derived – including its pitfall: a reply "CORRECT" contains a C and becomes not_attempted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Iterable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from kbvqa.data.schema import Provenance, Verdict
from kbvqa.models import prompts
from kbvqa.models.prompts.judge import SIMPLEQA

__all__ = [
    "PROMPT_VERSION", "JudgeReply", "build_judge_messages", "judge_answer", "strict_parse",
    "legacy_parse", "simpleqa_metrics", "ChatClient",
]

PROMPT_VERSION = SIMPLEQA.id
METRIC = "simpleqa-judge"
LABELS = ("correct", "incorrect", "not_attempted")



class JudgeReply(BaseModel):
    """The structured reply the judge must give."""

    model_config = ConfigDict(extra="forbid")

    label: Literal["correct", "incorrect", "not_attempted"]
    rationale: str = ""


class ChatClient(Protocol):
    """The model-role protocol (kbvqa.models.result.ModelClient); restated so tests can fake it."""

    provenance: Provenance

    async def chat(self, messages: list[dict], *, schema: Any = None, prompt_version: str = "",
                   **params: Any) -> Any: ...


def build_judge_messages(question: str, target: str, predicted: str, *,
                         prompt_version: str = PROMPT_VERSION) -> list[dict]:
    """The single user message for one grading call (versioned template)."""
    try:
        prompt = prompts.get(prompt_version)
    except KeyError:
        known = [p.id for p in prompts.all_prompts().values() if p.name.startswith("judge.")]
        raise ValueError(f"unknown judge prompt version {prompt_version!r}; known: {known}") from None
    return prompt.messages(question_raw=question, target_raw=target, predicted_raw=predicted)


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def strict_parse(reply: str | None) -> JudgeReply | None:
    """The whole reply (optionally inside one ``` fence) must be the JSON object; else None.

    No regex fishing for a label inside prose: a reply that is not exactly the contract is invalid.
    """
    if not reply:
        return None
    m = _FENCE.match(reply)
    body = m.group(1) if m else reply.strip()
    try:
        obj = json.loads(body)
        return JudgeReply.model_validate(obj)
    except (ValueError, ValidationError):
        return None


_LEGACY_RE = re.compile(r"(A|B|C)")
_LEGACY_MAP = {"A": "correct", "B": "incorrect", "C": "not_attempted"}


def legacy_parse(reply: str) -> str:
    """The original SimpleQA parser: first case-sensitive A, B or C anywhere; none -> not_attempted.

    Reproduced for re-deriving published numbers only. Pitfall: "CORRECT" matches the C and yields
    not_attempted; "INCORRECT" likewise.
    """
    m = _LEGACY_RE.search(reply or "")
    return _LEGACY_MAP[m.group(0)] if m else "not_attempted"


def _reply_from_data(data: Any) -> JudgeReply | None:
    if isinstance(data, JudgeReply):
        return data
    if isinstance(data, BaseModel):
        data = data.model_dump()
    try:
        return JudgeReply.model_validate(data)
    except ValidationError:
        return None


async def judge_answer(client: ChatClient, question: str, target: str, predicted: str, *,
                       prompt_version: str = PROMPT_VERSION, sample_id: str = "",
                       temperature: float = 0.0, **params: Any) -> Verdict:
    """Grade one answer. Label None + "error: ..." on a failed call; "invalid" on an unusable reply."""
    messages = build_judge_messages(question, target, predicted, prompt_version=prompt_version)
    res = await client.chat(messages, schema=JudgeReply, prompt_version=prompt_version,
                            temperature=temperature, **params)
    prov = getattr(res, "provenance", None) or getattr(client, "provenance", None)
    if prov is not None:
        prov = prov.model_copy(update={"prompt_version": prompt_version})
    status = getattr(res, "status", "error")
    if status == "error":
        return Verdict(sample_id=sample_id, metric=METRIC, label=None, value=None,
                       rationale=f"error: {getattr(res, 'reason', '') or 'model call failed'}", judge=prov)
    parsed = None
    if status == "ok":
        parsed = _reply_from_data(res.data) if getattr(res, "data", None) is not None else None
        if parsed is None:
            parsed = strict_parse(getattr(res, "text", None))
    if parsed is None:
        why = getattr(res, "reason", "") or "reply is not the JSON {label, rationale} object"
        return Verdict(sample_id=sample_id, metric=METRIC, label="invalid", value=None,
                       rationale=f"invalid: {why}", judge=prov)
    return Verdict(sample_id=sample_id, metric=METRIC, label=parsed.label,
                   value=1.0 if parsed.label == "correct" else 0.0, rationale=parsed.rationale, judge=prov)


def simpleqa_metrics(labels: Iterable[str | None | Verdict]) -> dict[str, float | int]:
    """SimpleQA aggregates over all n items (errors and invalid replies stay in the denominator).

    correct/incorrect/not_attempted/invalid/error are rates; accuracy_given_attempted =
    correct / (correct + incorrect) (0 if nothing attempted); f1 = harmonic mean of correct and
    accuracy_given_attempted (0 if both are 0).
    """
    counts: Counter[str] = Counter()
    n = 0
    for lab in labels:
        if isinstance(lab, Verdict):
            lab = lab.label
        if lab is None:
            lab = "error"
        if lab not in ("correct", "incorrect", "not_attempted", "invalid", "error"):
            raise ValueError(f"unknown judge label {lab!r}")
        counts[lab] += 1
        n += 1
    rate = {k: (counts[k] / n if n else 0.0) for k in ("correct", "incorrect", "not_attempted", "invalid", "error")}
    attempted = rate["correct"] + rate["incorrect"]
    aga = rate["correct"] / attempted if attempted > 0 else 0.0
    f1 = 2 * aga * rate["correct"] / (aga + rate["correct"]) if (aga + rate["correct"]) > 0 else 0.0
    return {**rate, "accuracy_given_attempted": aga, "f1": f1, "n": n,
            **{f"n_{k}": counts[k] for k in ("correct", "incorrect", "not_attempted", "invalid", "error")}}
