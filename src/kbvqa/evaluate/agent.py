"""Studies of search-agent runs: tool usage (seed 001 Table 4 shape) and failure categories (Table 5).

`tool_usage` reads agent predictions (with trajectories) and, when given, the short-answer judge's
verdicts: calls per tool per episode, overall and for correct / incorrect episodes; the
useful-evidence hit rate (the share of search / visit calls — and of their results — whose text
states a reference answer or alias); how episodes ended; image-tag validity; leakage flags.

`FailureCategory` is a judge stage run by the runner over the incorrect episodes: one strict-JSON
call per episode assigns T1 (evidence never found), T2 (found but misread), T3 (anchoring on a wrong
hypothesis), T4 (tool misuse or budget), N1 (knowledge/reasoning) or N2 (question/image
misunderstood). An unparseable or off-list reply is `invalid` and counted, never a category.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from pydantic import ConfigDict

from kbvqa.data.formats import read_samples
from kbvqa.data.jsonl import read_jsonl
from kbvqa.data.matching import answers_in_text
from kbvqa.models.prompts.agent import FAILURE_CATEGORY
from kbvqa.models.replies import Reply
from kbvqa.runner.stage import Context, Invalid, Stage, StageConfig
from kbvqa.stages import register_stage

SCORER = "kbvqa-agent-tools-v1"
TOOLS = ("search", "visit", "image_search", "text_to_image_search")
CATEGORIES = ("T1", "T2", "T3", "T4", "N1", "N2")
EVIDENCE_TOOLS = ("search", "visit")


def _mean(xs: list[int]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def _rate(hits: int, n: int) -> float:
    return round(hits / n, 6) if n else 0.0


def tool_usage(predictions: Iterable[Mapping[str, Any]], answers: Mapping[str, list[str]],
               verdicts: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """Table 4-shaped statistics over agent predictions (runner lines with `trajectory`).

    `answers` maps a sample id to its reference answer and aliases; `verdicts` maps it to the
    judge's label (correct / incorrect / not_attempted / invalid / None for an error)."""
    per_tool: dict[str, list[int]] = {t: [] for t in TOOLS}
    by_group: dict[str, dict[str, list[int]]] = {g: {t: [] for t in TOOLS} for g in ("correct", "incorrect")}
    terminations: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    hits = {t: {"calls": 0, "call_hits": 0, "items": 0, "item_hits": 0} for t in EVIDENCE_TOOLS}
    tags = {"total": 0, "valid": 0}
    violations: Counter[str] = Counter()
    leak_steps = leak_episodes = n = 0
    for p in predictions:
        n += 1
        statuses[str(p.get("status", "ok"))] += 1
        pid = str(p.get("id") or p.get("sample_id"))
        meta = p.get("meta") or {}
        terminations[str(meta.get("termination"))] += 1
        steps = p.get("trajectory") or []
        counts = Counter(s.get("tool") for s in steps if s.get("tool"))
        for t in TOOLS:
            per_tool[t].append(counts.get(t, 0))
        label = (verdicts or {}).get(pid)
        if label in by_group:
            for t in TOOLS:
                by_group[label][t].append(counts.get(t, 0))
        refs = answers.get(pid, [])
        for s in steps:
            tool = s.get("tool")
            if tool in hits and s.get("status") in ("ok", "empty"):
                item_texts = [it.get("text", "") for it in s.get("items") or []]
                found = answers_in_text(s.get("observation", "") + "\n" + "\n".join(item_texts), refs)
                hits[tool]["calls"] += 1
                hits[tool]["call_hits"] += bool(found)
                hits[tool]["items"] += len(item_texts)
                hits[tool]["item_hits"] += sum(1 for t in item_texts if answers_in_text(t, refs))
        prov = meta.get("provenance") or {}
        tags["total"] += int(prov.get("tags") or 0)
        tags["valid"] += int(prov.get("valid") or 0)
        violations.update(v.get("kind") for v in prov.get("violations") or [])
        leaks = sum(1 for s in steps if s.get("leak"))
        leak_steps += leaks
        leak_episodes += bool(leaks)
    out: dict[str, Any] = {
        "scorer": SCORER, "n": n, "status": dict(statuses), "terminations": dict(terminations.most_common()),
        "calls_per_episode": {t: _mean(v) for t, v in per_tool.items()},
        "hit_rate": {t: {**h, "call_rate": _rate(h["call_hits"], h["calls"]),
                         "item_rate": _rate(h["item_hits"], h["items"])} for t, h in hits.items()},
        "tags": {**tags, "valid_rate": _rate(tags["valid"], tags["total"]), "violations": dict(violations)},
        "leak": {"steps": leak_steps, "episodes": leak_episodes},
        "note": "hit rates read each step's stored observation (capped) and item snippets",
    }
    if verdicts is not None:
        out["calls_by_outcome"] = {g: {"n": len(v["search"]), **{t: _mean(x) for t, x in v.items()}}
                                   for g, v in by_group.items()}
    return out


# --------------------------------------------------------------------------------------- failures


class FailureReply(Reply):
    model_config = ConfigDict(extra="forbid")
    category: Literal["T1", "T2", "T3", "T4", "N1", "N2"]
    rationale: str


class FailureConfig(StageConfig):
    role: str = "judge"
    observation_chars: int = 300  # of each step's observation shown to the judge


def trajectory_summary(steps: list[dict[str, Any]], observation_chars: int = 300) -> str:
    lines = []
    for s in steps:
        if s.get("tool"):
            obs = " ".join(str(s.get("observation", "")).split())[:observation_chars]
            lines.append(f"{s['turn']}. {s['tool']}({s.get('arguments')}) -> {s.get('status')}: {obs}")
        elif s.get("problem"):
            lines.append(f"{s['turn']}. unusable reply: {s['problem']}")
    return "\n".join(lines) or "(no tool calls)"


@register_stage
class FailureCategory(Stage):
    """Records: {id, question, reference, answer, trajectory}; adds `failure` {category, rationale, judge}."""

    name = "agent-failure"
    version = "1"
    config_model = FailureConfig
    prompts = (FAILURE_CATEGORY,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        client = ctx.role(self.config.role)
        res = await client.chat(FAILURE_CATEGORY.messages(
            question=record.get("question", ""), reference=record.get("reference", ""),
            answer=record.get("answer") or "(no answer)",
            trajectory_raw=trajectory_summary(record.get("trajectory") or [], self.config.observation_chars)),
            schema=FailureReply, prompt_version=FAILURE_CATEGORY.id)
        ctx.add_usage(res.usage)
        if res.status == "error":
            raise RuntimeError(f"judge call failed: {res.reason}")
        try:
            reply = FailureReply.model_validate(res.data) if res.status == "ok" else None
        except ValueError:
            reply = None
        if reply is None:
            raise Invalid(f"failure-category reply unusable: {res.reason or 'not {category, rationale}'}")
        return {**record, "failure": {"category": reply.category, "rationale": reply.rationale,
                                      "judge": res.provenance.model_dump(exclude_none=True)}}


def failure_records(predictions: Iterable[Mapping[str, Any]], references: Mapping[str, tuple[str, str]],
                    verdicts: Mapping[str, str | None]) -> Iterable[dict[str, Any]]:
    """The episodes the judge graded incorrect, as FailureCategory records. `references` maps an id
    to (question, reference answer)."""
    for p in predictions:
        pid = str(p.get("id") or p.get("sample_id"))
        if verdicts.get(pid) != "incorrect":
            continue
        question, reference = references.get(pid, ((p.get("meta") or {}).get("question", ""), ""))
        yield {"id": pid, "question": question, "reference": reference, "answer": p.get("answer"),
               "trajectory": p.get("trajectory") or []}


def failure_table(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per category (Table 5 shape) with invalid and error lines counted, never dropped."""
    counts: Counter[str] = Counter()
    for line in lines:
        status = line.get("status", "ok")
        counts[(line.get("failure") or {}).get("category") if status == "ok" else status] += 1
    n = sum(counts.values())
    categorised = sum(counts[c] for c in CATEGORIES)
    rows = [{"category": c, "n": counts[c], "share": _rate(counts[c], categorised)} for c in CATEGORIES]
    tool = sum(counts[c] for c in CATEGORIES if c.startswith("T"))
    return {"n": n, "categorised": categorised, "invalid": counts["invalid"], "error": counts["error"],
            "tool_related": tool, "non_tool": categorised - tool, "rows": rows}


# ------------------------------------------------------------------------------------------- files


def read_verdicts(path: str | Path) -> dict[str, str | None]:
    """id -> judge label from `kbvqa score judge` output (its journal or --per-item file); a line
    that ended error/invalid maps to None/"invalid" — counted, never read as a grade."""
    out: dict[str, str | None] = {}
    for _, line in read_jsonl(path):
        rid = line.get("id") or line.get("sample_id") or line.get("data_id")
        if rid is None:
            continue
        status = line.get("status", "ok")
        label = (line.get("verdict") or {}).get("label") if isinstance(line.get("verdict"), dict) else line.get("label")
        out[str(rid)] = label if status == "ok" else ("invalid" if status == "invalid" else None)
    return out


def sample_answers(path: str | Path) -> dict[str, tuple[str, list[str]]]:
    """id -> (question, reference answer and aliases) from any benchmark file kbvqa reads."""
    return {s.id: (s.question, s.answer_texts) for s in read_samples(path)}


def agent_tools_study(predictions: str | Path, references: str | Path,
                      verdicts: str | Path | None = None) -> dict[str, Any]:
    """`kbvqa study agent-tools`: tool usage over an agent run (see `tool_usage`), as a study result."""
    refs = sample_answers(references)
    res = tool_usage((line for _, line in read_jsonl(predictions)), {k: v[1] for k, v in refs.items()},
                     read_verdicts(verdicts) if verdicts is not None else None)
    return {"kind": "agent-tools", "predictions": str(predictions), "references": str(references),
            "verdicts": str(verdicts) if verdicts is not None else None, **res}
