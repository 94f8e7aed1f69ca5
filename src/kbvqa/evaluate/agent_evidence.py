"""Useful evidence (seed 001 §4.2, the hit rates beside Table 4): whether a search or visit call brought
information that supports the reference's answer.

The paper reports "useful-evidence hit rates" of 0.12% across 1,623 web-search calls and 5.69% across
334 page visits; those counts are every call of the tool in its Table 4, so the paper's denominator is
every call — failed, blocked, over-quota and repeated calls included (they brought no evidence).
kbvqa prints that rate and, beside it, the rate over the calls that returned results (status ok).

Two measures; every result names the one it used (`measure`):

- `judge` — the paper's quantity as kbvqa reads it (the paper does not say how a hit was decided): a
  judge role reads the question, the short reference and the call's observation text and answers
  strict JSON {supports, rationale}. An unusable reply is `invalid`, a failed call `error`; both are
  counted beside the rate, never a hit or a miss. Only calls with status ok and some text are asked;
  the others cannot hold evidence and are misses without a request. Verdicts are journalled (resume)
  and the model layer's response cache answers a question asked before.
- `rule` — offline and kbvqa's: the observation states a *key answer* verbatim (kbvqa.data.matching,
  normalised and word-bounded). A key answer is a reference answer of at most `KEY_ANSWER_WORDS`
  words, as InfoSeek's and E-VQA's answers are. A paragraph reference (NoteVQA's short references run
  to ~100 words) never appears verbatim in a page, so calls of such items are counted "needs a model"
  and the rule gives them no rate, never 0%.

The text checked is the call's whole observation: the trajectory keeps `AgentConfig.observation_chars`
(2,000) inline and the full text in `observation_file` (relative to the predictions file); that file is
read here, up to `EVIDENCE_CHARS` characters. A missing file falls back to the inline text and is
counted (`artifacts_missing`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from pydantic import ConfigDict, Field, StrictBool

from kbvqa.data.compare import word_count
from kbvqa.data.matching import answers_in_text
from kbvqa.models.prompts.agent import USEFUL_EVIDENCE
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import call_model
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage

__all__ = ["EVIDENCE_CHARS", "EVIDENCE_TOOLS", "EvidenceConfig", "EvidenceJudge", "KEY_ANSWER_WORDS",
           "evidence_calls", "judge_records", "key_answers", "read_evidence_verdicts", "useful_evidence"]

EVIDENCE_TOOLS = ("search", "visit")
#: Characters of one observation that are checked (rule) or shown to the judge. A page of search results
#: or a visit's goal-directed extract is a few thousand characters; 20,000 keeps whole pages while one
#: judge request stays near 6k tokens. kbvqa's value (the paper gives none).
EVIDENCE_CHARS = 20_000
#: A reference answer of at most this many words is a key answer the rule can look for verbatim (InfoSeek
#: and E-VQA answers are a few words; NoteVQA's short references average 107.5 words). kbvqa's value.
KEY_ANSWER_WORDS = 20


def key_answers(answers: Iterable[str]) -> list[str]:
    """The answers the verbatim rule can look for (see `KEY_ANSWER_WORDS`); [] for a paragraph reference."""
    return [a for a in answers if 0 < word_count(a) <= KEY_ANSWER_WORDS]


def _observation(step: Mapping[str, Any], base: Path | None, cap: int) -> tuple[str, str]:
    """The step's observation up to `cap` characters and where it came from (inline, artifact, or inline
    because the artifact is missing)."""
    text = str(step.get("observation") or "")
    rel = step.get("observation_file")
    if rel and base is not None:
        try:
            with (base / str(rel)).open(encoding="utf-8") as fh:
                return fh.read(cap), "artifact"
        except OSError:
            return text[:cap], "missing"
    if not text:  # an older trajectory without the text: the items' snippets are what it kept
        text = "\n".join(str(it.get("text") or "") for it in step.get("items") or [] if isinstance(it, dict))
    return text[:cap], "inline"


def evidence_calls(predictions: Iterable[Mapping[str, Any]], base: Path | None,
                   cap: int = EVIDENCE_CHARS) -> list[dict[str, Any]]:
    """Every search / visit call of every episode, whatever its status, with its observation text. The
    id names the episode, the turn and the text's hash, so a changed trajectory is judged again."""
    out = []
    for p in predictions:
        pid = str(p.get("id") or p.get("sample_id"))
        for s in p.get("trajectory") or []:
            if s.get("tool") not in EVIDENCE_TOOLS:
                continue
            text, source = _observation(s, base, cap)
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
            out.append({"id": f"{pid}#{s.get('turn')}:{digest}", "sample_id": pid, "turn": s.get("turn"),
                        "tool": s["tool"], "status": str(s.get("status") or "error"), "text": text,
                        "source": source})
    return out


def _askable(call: Mapping[str, Any]) -> bool:
    return call["status"] == "ok" and bool(call["text"].strip())


def judge_records(calls: Iterable[Mapping[str, Any]],
                  references: Mapping[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """The EvidenceJudge records: the calls that returned text. `references`: id -> (question, reference)."""
    out = []
    for c in calls:
        if _askable(c):
            question, reference = references.get(c["sample_id"], ("", ""))
            out.append({"id": c["id"], "sample_id": c["sample_id"], "turn": c["turn"], "tool": c["tool"],
                        "question": question, "reference": reference, "observation": c["text"]})
    return out


class EvidenceReply(Reply):
    model_config = ConfigDict(extra="forbid")
    supports: StrictBool
    rationale: NonBlank


class EvidenceConfig(StageConfig):
    role: str = "judge"
    evidence_chars: int = Field(EVIDENCE_CHARS, ge=1)  # of each observation shown to the judge


@register_stage
class EvidenceJudge(Stage):
    """Records: {id, sample_id, turn, tool, question, reference, observation}; the output line keeps
    everything but the observation text, and adds `evidence` {supports, rationale, judge}."""

    name = "agent-evidence"
    version = "1"
    config_model = EvidenceConfig
    prompts = (USEFUL_EVIDENCE,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        client = ctx.role(self.config.role)
        text = str(record.get("observation") or "")[: self.config.evidence_chars]
        reply, res = await call_model(client, USEFUL_EVIDENCE.messages(
            question=record.get("question", ""), reference=record.get("reference", ""),
            tool_raw=str(record.get("tool")), observation=text), EvidenceReply, ctx=ctx, who="evidence judge",
            prompt_version=USEFUL_EVIDENCE.id)
        slim = {k: v for k, v in record.items() if k != "observation"}
        return {**slim, "observation_chars": len(text),
                "evidence": {"supports": reply.supports, "rationale": reply.rationale,
                             "judge": res.provenance.model_dump(exclude_none=True)}}


def read_evidence_verdicts(lines: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """call id -> hit / miss / invalid / error from the EvidenceJudge journal (the last line of an id wins)."""
    out: dict[str, str] = {}
    for line in lines:
        status = str(line.get("status", "ok"))
        if status == "ok":
            out[str(line.get("id"))] = "hit" if (line.get("evidence") or {}).get("supports") is True else "miss"
        else:
            out[str(line.get("id"))] = "invalid" if status == "invalid" else "error"
    return out


def _rate(hits: int, n: int) -> float | None:
    return round(hits / n, 6) if n else None


def useful_evidence(calls: Iterable[Mapping[str, Any]], answers: Mapping[str, list[str]],
                    verdicts: Mapping[str, str] | None = None, judge: str | None = None,
                    chars: int = EVIDENCE_CHARS) -> dict[str, Any]:
    """Useful-evidence hit rates per tool (see the module docstring): with `verdicts` (EvidenceJudge's,
    by call id; `judge` names who gave them) the judge measure, else the rule measure. Rates are
    fractions, None where a denominator is 0 or the rule cannot apply ("needs a model")."""
    calls = list(calls)
    tools: dict[str, dict[str, Any]] = {}
    sources: Counter[str] = Counter(c["source"] for c in calls)
    for tool in EVIDENCE_TOOLS:
        mine = [c for c in calls if c["tool"] == tool]
        ok = [c for c in mine if c["status"] == "ok"]
        row: dict[str, Any] = {"calls": len(mine), "ok_calls": len(ok),
                               "by_status": dict(Counter(c["status"] for c in mine).most_common())}
        if verdicts is not None:
            got = Counter(verdicts.get(c["id"], "unjudged") if _askable(c) else "miss" for c in mine)
            row.update(hits=got["hit"], misses=got["miss"], invalid=got["invalid"], error=got["error"],
                       unjudged=got["unjudged"], rate=_rate(got["hit"], len(mine)),
                       ok_rate=_rate(got["hit"], len(ok)))
        else:
            checkable = [c for c in mine if key_answers(answers.get(c["sample_id"], []))]
            hits = sum(1 for c in checkable if answers_in_text(c["text"], key_answers(answers[c["sample_id"]])))
            ok_checkable = [c for c in checkable if c["status"] == "ok"]
            row.update(hits=hits, checkable=len(checkable), needs_model=len(mine) - len(checkable),
                       rate=_rate(hits, len(checkable)), ok_rate=_rate(hits, len(ok_checkable)),
                       ok_checkable=len(ok_checkable))
        tools[tool] = row
    out: dict[str, Any] = {"measure": "judge" if verdicts is not None else "rule",
                           "scorer": f"useful-evidence judge ({judge or 'judge'}, {USEFUL_EVIDENCE.id})"
                           if verdicts is not None else "kbvqa verbatim key-answer rule",
                           "evidence_chars": chars, "observation_sources": dict(sources), "tools": tools}
    if verdicts is None:
        out["needs_model"] = all(not t["checkable"] for t in tools.values()) and any(t["calls"] for t in tools.values())
        out["key_answer_words"] = KEY_ANSWER_WORDS
    out["definition"] = (
        "rate = hits / every call of the tool (error, blocked, quota and repeated calls included: seed 001's "
        "denominator, its 1,623 searches and 334 visits being every call); ok_rate = hits / calls with status ok. "
        + ("A hit: the judge found that the observation supports the reference's answer; invalid and failed "
           "verdicts are neither hits nor misses and are counted beside (kbvqa's reading of the paper's measure)."
           if verdicts is not None else
           f"Rule measure (kbvqa's, offline): a hit is a key answer (a reference answer of at most "
           f"{KEY_ANSWER_WORDS} words) stated verbatim in the observation; calls of items whose reference is a "
           "paragraph need a model (--judge-*) and are left out of the rule's denominators."))
    return out
