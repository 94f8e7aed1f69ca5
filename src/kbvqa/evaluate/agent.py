"""Studies of search-agent runs: tool usage (seed 001 Table 4 shape) and failure categories (Table 5).

Who counts where. Every agent episode gets one outcome (`episode_outcome`): `correct`; one of the
non-correct outcomes `incorrect`, `not_attempted` (the judge's labels) or `no_answer` (the episode
ended with `answer: null`, whatever the verdicts say); or an outcome counted apart and never put in a
group or a category — `judge_invalid` (the short-answer judge's reply was unusable), `judge_error`
(its call failed), `unjudged` (the verdicts have no line for the episode) and `episode_error` /
`episode_invalid` (the agent record itself failed: no trajectory worth judging). Seed 001's "157
incorrect runs" are all 252 items less the 95 correct ones, so the non-correct outcomes together are
its population.

`tool_usage` reads agent predictions (with trajectories) and, when given, the judge's verdicts: calls
per tool per episode — every call the model made, repeated and over-quota ones included — overall, for
correct and non-correct episodes and — given a single-pass run's verdicts of the same model — for the
four groups of the with/without-retrieval 2x2 (Table 4); the useful-evidence hit rates over every call
and over ok calls (kbvqa.evaluate.agent_evidence: a judge's, or the offline verbatim rule); how many
episodes each termination ended, forced answers included (`termination_counts`); image-tag validity;
leakage flags.

`FailureCategory` is a judge stage run by the runner over the non-correct episodes: one strict-JSON
call per episode assigns T1-T4 (tool-related) or N1-N2 (non-tool), reading each step's thought, call,
result and notices. An unparseable or off-list reply is `invalid` and counted, never a category;
`failure_table` gives shares over every non-correct episode with "not categorised" as a row. The paper
defines only T3; the other wordings are kbvqa's and every result (and the prompt) says so
(`DEFINITIONS`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from pydantic import ConfigDict, Field

from kbvqa.data.formats import read_samples
from kbvqa.data.jsonl import read_jsonl
from kbvqa.evaluate.agent_evidence import EVIDENCE_CHARS, evidence_calls, useful_evidence
from kbvqa.models.prompts.agent import FAILURE_CATEGORIES, FAILURE_CATEGORY
from kbvqa.models.replies import Reply
from kbvqa.models.result import call_model
from kbvqa.runner.sinks import read_results
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage

SCORER = "kbvqa-agent-tools-v1"
TOOLS = ("search", "visit", "image_search", "text_to_image_search")
CATEGORIES = tuple(FAILURE_CATEGORIES)
NOT_CATEGORISED = "not categorised"  # Table 5's own row: the failure judge's reply was invalid or failed

#: The non-correct outcomes: seed 001 Table 5's population, and the "wrong" side of the 2x2.
NON_CORRECT = ("incorrect", "not_attempted", "no_answer")
#: Outcomes counted apart: never in a group, never categorised, never dropped.
APART = ("judge_invalid", "judge_error", "unjudged", "episode_error", "episode_invalid")

#: The 2x2 of seed 001 Table 4: (with tools correct, without tools correct) -> group. "Search helps",
#: "Search hurts" and "Both wrong" are the paper's names (§4.2); "Both correct" is kbvqa's. The
#: `retrieval_2x2` key says which cell of `kbvqa study retrieval-2x2` the group is.
PAIRED_GROUPS = {
    "both_correct": {"with_tools": True, "without_tools": True, "label": "Both correct",
                     "retrieval_2x2": "both_correct"},
    "search_helps": {"with_tools": True, "without_tools": False, "label": "Search helps", "retrieval_2x2": "only_with"},
    "search_hurts": {"with_tools": False, "without_tools": True, "label": "Search hurts",
                     "retrieval_2x2": "only_without"},
    "both_wrong": {"with_tools": False, "without_tools": False, "label": "Both wrong", "retrieval_2x2": "neither"},
}

#: What each figure means and where it comes from (put in every agent study result).
DEFINITIONS: dict[str, Any] = {
    "outcomes": {
        "correct": "the short-answer judge's label is correct",
        "incorrect": "the judge's label is incorrect",
        "not_attempted": "the judge's label is not_attempted (an answer that does not attempt the question)",
        "no_answer": "the episode ended with answer null (decided from the prediction, whatever the verdict)",
        "apart": "judge_invalid (unusable judge reply), judge_error (failed judge call), unjudged (no verdict line), "
                 "episode_error / episode_invalid (the agent record failed): counted, never grouped or categorised",
    },
    "non_correct": "incorrect + not_attempted + no_answer: seed 001 Table 5's population (its 157 'incorrect' runs "
                   "are the 252 items less the 95 correct); the no_answer handling is kbvqa's",
    "categories": {c: {"group": "tool-related" if c.startswith("T") else "non-tool", "definition": text,
                       "source": "seed 001 (names it: confirmation or anchoring loops)" if c == "T3"
                       else "kbvqa's reconstruction (seed 001 names only the T1-T4 / N1-N2 split and T3)"}
                   for c, text in FAILURE_CATEGORIES.items()},
    "share": "a category's share is of every non-correct episode (seed 001's denominator: 136 of 157, 111 of "
             "157); episodes the failure judge did not categorise (invalid reply, failed call) are the row 'not "
             "categorised'; share_of_categorised is beside",
    "paired_groups": "with tools = the agent run, without tools = a single-pass run of the same model (e.g. "
                     "`--pipeline direct`); correct = the judge's label correct, wrong = any non-correct outcome; "
                     "Search helps / Search hurts / Both wrong are seed 001's names, Both correct is kbvqa's. An "
                     "episode is in no group when either run has no grade for it (listed under `apart`): an agent "
                     "record that failed, an invalid or failed verdict, or a baseline run without a prediction. "
                     "`kbvqa score judge` grades a failed or missing prediction not_attempted, so `study "
                     "retrieval-2x2` on the same verdicts counts those items wrong; the group sizes then differ from "
                     "its cells (`retrieval_2x2` names the cell) by exactly the counts under `apart`",
}


def _mean(xs: list[int]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def _rate(hits: int, n: int) -> float:
    return round(hits / n, 6) if n else 0.0


def _pid(p: Mapping[str, Any]) -> str:
    return str(p.get("id") or p.get("sample_id"))


def episode_outcome(prediction: Mapping[str, Any], verdicts: Mapping[str, str | None]) -> str:
    """One agent episode's outcome (see the module docstring): correct, a NON_CORRECT outcome or an
    APART one. `verdicts` as `read_verdicts` gives them (None: the judge call failed)."""
    status = str(prediction.get("status", "ok"))
    if status != "ok":
        return "episode_invalid" if status == "invalid" else "episode_error"
    if not str(prediction.get("answer") or "").strip():
        return "no_answer"
    pid = _pid(prediction)
    if pid not in verdicts:
        return "unjudged"
    label = verdicts[pid]
    if label is None:
        return "judge_error"
    if label in ("correct", "incorrect", "not_attempted"):
        return label
    return "judge_invalid"


def _baseline_side(label: str | None, known: bool) -> bool | str:
    """A single-pass run's verdict as one side of the 2x2: True / False, or why it is set apart."""
    if not known:
        return "baseline_unjudged"
    if label == "missing":
        return "baseline_no_prediction"
    if label is None:
        return "baseline_judge_error"
    if label == "invalid":
        return "baseline_judge_invalid"
    return label == "correct"


#: How an episode ended (meta.termination), by who ended it: the model (an answer), a budget, or a guard.
#: A budget or guard stop is followed by a forced answer turn (AgentConfig.forced_answer).
ENDINGS = {"answer": "answered", "turn_budget": "budget", "token_budget": "budget", "cost_budget": "budget",
           "wall_time": "budget", "repeated_behaviour": "guard", "format_error": "guard",
           "tool_unavailable": "guard"}
#: Calls the harness answered without running the tool: counted as calls (the model made them), shown apart.
NOT_RUN = ("repeated", "quota")


def _termination_of(prediction: Mapping[str, Any]) -> str:
    """The termination an episode is counted under: meta.termination, or the record's failure."""
    status = str(prediction.get("status", "ok"))
    if status != "ok":
        return f"episode_{status}"
    return str((prediction.get("meta") or {}).get("termination") or "unknown")


def _ended_by(end: str) -> str:
    """Who ended an episode of termination `end` (ENDINGS; a failed record's is "error")."""
    return ENDINGS.get(end, "error" if end.startswith("episode_") else "other")


def termination_counts(predictions: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How many episodes each termination ended, with the forced answers it led to and the episodes left
    without an answer, and the same grouped by who ended them (answered / budget / guard / error), so a
    reader sees whether budgets shaped the tables."""
    rows: dict[str, Counter[str]] = {}
    for p in predictions:
        end = _termination_of(p)
        row = rows.setdefault(end, Counter())
        row["episodes"] += 1
        row["forced_answer"] += bool((p.get("meta") or {}).get("forced_answer")) and bool(
            str(p.get("answer") or "").strip())
        row["no_answer"] += not str(p.get("answer") or "").strip()
    by: Counter[str] = Counter()
    for end, row in rows.items():
        by[_ended_by(end)] += row["episodes"]
    ordered = sorted(rows.items(), key=lambda kv: (-kv[1]["episodes"], kv[0]))
    return {"rows": [{"termination": end, "ended_by": _ended_by(end),
                      **{k: row[k] for k in ("episodes", "forced_answer", "no_answer")}} for end, row in ordered],
            "by": {k: by[k] for k in ("answered", "budget", "guard", "error", "other") if by[k] or k != "other"},
            "forced_answers": sum(r["forced_answer"] for r in rows.values())}


def tool_usage(predictions: Iterable[Mapping[str, Any]], answers: Mapping[str, list[str]],
               verdicts: Mapping[str, str | None] | None = None,
               baseline: Mapping[str, str | None] | None = None, *, base: Path | None = None,
               evidence: Mapping[str, str] | None = None, evidence_judge: str | None = None,
               evidence_chars: int = EVIDENCE_CHARS) -> dict[str, Any]:
    """Table 4-shaped statistics over agent predictions (runner lines with `trajectory`).

    `answers` maps a sample id to its reference answer and aliases; `verdicts` maps it to the
    judge's label of the agent's answer (correct / incorrect / not_attempted / invalid / None for an
    error); `baseline` (with `verdicts`) the judge's label of a single-pass answer of the same model
    ("missing" where that run had no prediction), which splits the episodes into the 2x2 groups.
    Every call the model made counts, repeated and over-quota ones too (the harness answered them
    without running the tool: `not_run`). Useful evidence (kbvqa.evaluate.agent_evidence): `base` is
    the predictions file's folder (observation artifacts), `evidence` the evidence judge's verdicts by
    call id (`evidence_judge` names it); without them, the offline rule measure."""
    if baseline is not None and verdicts is None:
        raise ValueError("the with/without-tools groups need the agent run's verdicts too (--verdicts)")
    predictions = list(predictions)
    per_tool: dict[str, list[int]] = {t: [] for t in TOOLS}
    statuses_by_tool: dict[str, Counter[str]] = {t: Counter() for t in TOOLS}
    other_tools: Counter[str] = Counter()
    by_group: dict[str, dict[str, list[int]]] = {g: {t: [] for t in TOOLS} for g in ("correct", "not_correct")}
    paired: dict[str, dict[str, list[int]]] = {g: {t: [] for t in TOOLS} for g in PAIRED_GROUPS}
    outcomes: Counter[str] = Counter()
    paired_apart: Counter[str] = Counter()
    terminations: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    tags = {"total": 0, "valid": 0}
    violations: Counter[str] = Counter()
    leak_steps = leak_episodes = n = 0
    for p in predictions:
        n += 1
        statuses[str(p.get("status", "ok"))] += 1
        pid = _pid(p)
        meta = p.get("meta") or {}
        terminations[_termination_of(p)] += 1
        steps = p.get("trajectory") or []
        counts = Counter(s.get("tool") for s in steps if s.get("tool"))
        for s in steps:
            if s.get("tool") in statuses_by_tool:
                statuses_by_tool[s["tool"]][str(s.get("status") or "unknown")] += 1
            elif s.get("tool"):
                other_tools[str(s["tool"])] += 1
        for t in TOOLS:
            per_tool[t].append(counts.get(t, 0))
        if verdicts is not None:
            outcome = episode_outcome(p, verdicts)
            outcomes[outcome] += 1
            group = "correct" if outcome == "correct" else "not_correct" if outcome in NON_CORRECT else None
            if group:
                for t in TOOLS:
                    by_group[group][t].append(counts.get(t, 0))
            if baseline is not None:
                side = _baseline_side(baseline.get(pid), pid in baseline)
                if group is None:
                    paired_apart[f"agent_{outcome}"] += 1
                elif isinstance(side, str):
                    paired_apart[side] += 1
                else:
                    cell = next(g for g, d in PAIRED_GROUPS.items()
                                if d["with_tools"] == (group == "correct") and d["without_tools"] == side)
                    for t in TOOLS:
                        paired[cell][t].append(counts.get(t, 0))
        prov = meta.get("provenance") or {}
        tags["total"] += int(prov.get("tags") or 0)
        tags["valid"] += int(prov.get("valid") or 0)
        violations.update(v.get("kind") for v in prov.get("violations") or [])
        leaks = sum(1 for s in steps if s.get("leak"))
        leak_steps += leaks
        leak_episodes += bool(leaks)
    calls = {t: {"calls": sum(per_tool[t]), "ok": statuses_by_tool[t]["ok"],
                 "not_run": {k: statuses_by_tool[t][k] for k in NOT_RUN},
                 "by_status": dict(statuses_by_tool[t].most_common())} for t in TOOLS}
    out: dict[str, Any] = {
        "scorer": SCORER, "n": n, "status": dict(statuses), "terminations": dict(terminations.most_common()),
        "ending": termination_counts(predictions),
        "calls_per_episode": {t: _mean(v) for t, v in per_tool.items()},
        "calls": calls, "other_tool_calls": dict(other_tools),
        "useful_evidence": useful_evidence(evidence_calls(predictions, base, evidence_chars), answers, evidence,
                                           evidence_judge, evidence_chars),
        "tags": {**tags, "valid_rate": _rate(tags["valid"], tags["total"]), "violations": dict(violations)},
        "leak": {"steps": leak_steps, "episodes": leak_episodes},
        "note": "calls count every call the model made: repeated and over-quota calls too, which the harness "
                "answered without running the tool (not run); calls / episode x episodes = calls",
    }
    if verdicts is not None:
        out["outcomes"] = {k: outcomes[k] for k in ("correct", *NON_CORRECT, *APART)}
        out["calls_by_outcome"] = {g: {"n": len(v["search"]), **{t: _mean(x) for t, x in v.items()}}
                                   for g, v in by_group.items()}
    if baseline is not None:
        n_paired = sum(len(v["search"]) for v in paired.values())
        out["paired"] = {
            "n": n_paired,
            "groups": [{"group": g, **d, "n": len(paired[g]["search"]),
                        "pct": round(100.0 * len(paired[g]["search"]) / n_paired, 2) if n_paired else 0.0,
                        "calls_per_episode": {t: _mean(x) for t, x in paired[g].items()}}
                       for g, d in PAIRED_GROUPS.items()],
            "net_gain": len(paired["search_helps"]["search"]) - len(paired["search_hurts"]["search"]),
            "apart": dict(sorted(paired_apart.items())),
        }
    if verdicts is not None:
        out["definitions"] = {k: DEFINITIONS[k] for k in ("outcomes", "non_correct")}
        if baseline is not None:
            out["definitions"]["paired_groups"] = DEFINITIONS["paired_groups"]
    return out


# --------------------------------------------------------------------------------------- failures


class FailureReply(Reply):
    model_config = ConfigDict(extra="forbid")
    category: Literal["T1", "T2", "T3", "T4", "N1", "N2"]
    rationale: str


#: Characters of each step's thought the failure judge reads. T3 is about the hypotheses the agent holds,
#: which its thoughts state; 800 keeps a typical thought whole (the agent stores up to 2,000) while a
#: 30-turn episode stays near 8k tokens for the judge. kbvqa's value.
THOUGHT_CHARS = 800


class FailureConfig(StageConfig):
    role: str = "judge"
    observation_chars: int = 300  # of each step's observation shown to the judge
    thought_chars: int = Field(THOUGHT_CHARS, ge=0)  # of each step's thought shown to the judge (0: none)


def _clip(text: Any, chars: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= chars else flat[:chars].rstrip() + " [...]"


def trajectory_summary(steps: list[dict[str, Any]], observation_chars: int = 300,
                       thought_chars: int = THOUGHT_CHARS) -> str:
    """The episode as the failure judge reads it: each step's thought (the agent's reasoning, up to
    `thought_chars`), its tool call and status, unusable replies, and the harness's notices
    (repetition, budget, forced answer) on the step they came with."""
    lines = []
    for s in steps:
        for notice in s.get("notices") or []:
            text = " ".join(str(notice.get("text", "")).split())[:observation_chars]
            lines.append(f"{s.get('turn')}. harness notice ({notice.get('kind')}): {text}")
        if thought_chars and str(s.get("thought") or "").strip():
            lines.append(f"{s.get('turn')}. thought: {_clip(s['thought'], thought_chars)}")
        if s.get("answer") and not s.get("tool"):
            lines.append(f"{s.get('turn')}. the agent answered{' (forced turn)' if s.get('forced') else ''}")
        if s.get("tool"):
            obs = " ".join(str(s.get("observation", "")).split())[:observation_chars]
            lines.append(f"{s['turn']}. {s['tool']}({s.get('arguments')}) -> {s.get('status')}: {obs}")
        elif s.get("problem"):
            lines.append(f"{s['turn']}. unusable reply: {s['problem']}")
    return "\n".join(lines) or "(no steps)"


_OUTCOME_TEXT = {
    "incorrect": "the short-answer judge graded the answer incorrect",
    "not_attempted": "the short-answer judge found that the answer does not attempt the question",
    "no_answer": "the agent gave no answer",
}


def _ending(record: Mapping[str, Any]) -> str:
    end = str(record.get("termination") or "unknown")
    text = "the agent answered on its own" if end == "answer" else f"the harness stopped the episode ({end})"
    if record.get("forced_answer"):
        text += "; it was then asked for a final answer with the tools closed"
    return text


@register_stage
class FailureCategory(Stage):
    """Records: {id, question, reference, answer, outcome, termination, forced_answer, trajectory};
    adds `failure` {category, rationale, judge}."""

    name = "agent-failure"
    version = "3"
    config_model = FailureConfig
    prompts = (FAILURE_CATEGORY,)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        client = ctx.role(self.config.role)
        outcome = record.get("outcome", "incorrect")
        reply, res = await call_model(client, FAILURE_CATEGORY.messages(
            question=record.get("question", ""), reference=record.get("reference", ""),
            outcome_raw=_OUTCOME_TEXT.get(outcome, outcome), ending_raw=_ending(record),
            answer=record.get("answer") or None,
            trajectory_raw=trajectory_summary(record.get("trajectory") or [], self.config.observation_chars,
                                              self.config.thought_chars)),
            FailureReply, ctx=ctx, who="failure-category judge", prompt_version=FAILURE_CATEGORY.id)
        return {**record, "failure": {"category": reply.category, "rationale": reply.rationale,
                                      "judge": res.provenance.model_dump(exclude_none=True)}}


def failure_records(predictions: Iterable[Mapping[str, Any]], references: Mapping[str, tuple[str, str]],
                    verdicts: Mapping[str, str | None],
                    outcomes: Counter[str] | None = None) -> Iterable[dict[str, Any]]:
    """Every non-correct episode (incorrect, not_attempted, no_answer) as a FailureCategory record.
    `references` maps an id to (question, reference answer). Each episode's outcome is added to
    `outcomes` when given, so the ones set apart are counted too."""
    for p in predictions:
        outcome = episode_outcome(p, verdicts)
        if outcomes is not None:
            outcomes[outcome] += 1
        if outcome not in NON_CORRECT:
            continue
        pid = _pid(p)
        meta = p.get("meta") or {}
        question, reference = references.get(pid, (meta.get("question", ""), ""))
        yield {"id": pid, "question": question, "reference": reference, "answer": p.get("answer"),
               "outcome": outcome, "termination": meta.get("termination"),
               "forced_answer": bool(meta.get("forced_answer")), "trajectory": p.get("trajectory") or []}


def failure_table(lines: Iterable[Mapping[str, Any]], outcomes: Mapping[str, int] | None = None,
                  ids: Iterable[str] | None = None) -> dict[str, Any]:
    """Counts per category (Table 5 shape), overall and per outcome. Shares are over every non-correct
    episode (seed 001: 136 of 157, 111 of 157), and the episodes the failure judge did not categorise —
    an invalid reply, a failed call, or no journal line yet — are a row of their own ("not categorised"),
    never dropped; `share_of_categorised` is beside. `outcomes`: every episode's outcome count (what went
    in and what was set apart); `ids`: the episodes of this population (older journal lines of episodes
    no longer in it, e.g. after new verdicts, are left out; an id without a line is not categorised)."""
    keep = set(ids) if ids is not None else None
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    by_outcome: dict[str, Counter[str]] = {c: Counter() for c in (*CATEGORIES, NOT_CATEGORISED)}
    for line in lines:
        rid = str(line.get("id"))
        if keep is not None and rid not in keep:
            continue
        seen.add(rid)
        status = line.get("status", "ok")
        cat = (line.get("failure") or {}).get("category") if status == "ok" else status
        counts[cat] += 1
        row = cat if cat in CATEGORIES else NOT_CATEGORISED
        by_outcome[row][str(line.get("outcome", "incorrect"))] += 1
    missing = len(keep - seen) if keep is not None else 0
    n = sum(counts.values()) + missing
    categorised = sum(counts[c] for c in CATEGORIES)
    not_categorised = n - categorised
    rows = [{"category": c, "n": counts[c], "share": _rate(counts[c], n),
             "share_of_categorised": _rate(counts[c], categorised),
             "by_outcome": {o: by_outcome[c][o] for o in NON_CORRECT}} for c in CATEGORIES]
    rows.append({"category": NOT_CATEGORISED, "n": not_categorised, "share": _rate(not_categorised, n),
                 "share_of_categorised": None, "by_outcome": {o: by_outcome[NOT_CATEGORISED][o] for o in NON_CORRECT},
                 "invalid": counts["invalid"], "error": counts["error"], "no_line": missing})
    tool = sum(counts[c] for c in CATEGORIES if c.startswith("T"))
    out: dict[str, Any] = {"n": n, "categorised": categorised, "not_categorised": not_categorised,
                           "invalid": counts["invalid"], "error": counts["error"], "no_line": missing,
                           "tool_related": tool, "non_tool": categorised - tool,
                           "tool_related_share": _rate(tool, n), "non_tool_share": _rate(categorised - tool, n),
                           "rows": rows}
    if outcomes is not None:
        out["episodes"] = sum(outcomes.values())
        out["outcomes"] = {k: int(outcomes.get(k, 0)) for k in ("correct", *NON_CORRECT)}
        out["apart"] = {k: int(outcomes.get(k, 0)) for k in APART}
    out["definitions"] = DEFINITIONS
    return out


# ------------------------------------------------------------------------------------------- files


def read_verdicts(path: str | Path, *, mark_missing: bool = False) -> dict[str, str | None]:
    """id -> judge label from `kbvqa score judge` output (its journal or --per-item file); a line
    that ended error/invalid maps to None/"invalid" — counted, never read as a grade. With
    `mark_missing`, a line whose prediction was missing (the run had none for that id) maps to
    "missing" rather than the judge's not_attempted."""
    out: dict[str, str | None] = {}
    for _, line in read_jsonl(path):
        rid = line.get("id") or line.get("sample_id") or line.get("data_id")
        if rid is None:
            continue
        status = line.get("status", "ok")
        label = (line.get("verdict") or {}).get("label") if isinstance(line.get("verdict"), dict) else line.get("label")
        if mark_missing and status == "ok" and line.get("missing") is True:
            label = "missing"
        out[str(rid)] = label if status == "ok" else ("invalid" if status == "invalid" else None)
    return out


def sample_answers(path: str | Path) -> dict[str, tuple[str, list[str]]]:
    """id -> (question, reference answer and aliases) from any benchmark file kbvqa reads."""
    return {s.id: (s.question, s.answer_texts) for s in read_samples(path)}


def agent_tools_study(predictions: str | Path, references: str | Path, verdicts: str | Path | None = None,
                      baseline_verdicts: str | Path | None = None, *, evidence: Mapping[str, str] | None = None,
                      evidence_judge: str | None = None, evidence_chars: int = EVIDENCE_CHARS) -> dict[str, Any]:
    """`kbvqa study agent-tools`: tool usage over an agent run (see `tool_usage`), as a study result;
    with `baseline_verdicts` (the judge's output for a single-pass run of the same model) also per
    group of the with/without-retrieval 2x2; with `evidence` (the useful-evidence judge's verdicts,
    kbvqa.pipelines.score.agent_tools) the judge's hit rates, else the rule's."""
    if baseline_verdicts is not None and verdicts is None:
        raise ValueError("--baseline-verdicts needs --verdicts (the agent run's verdicts) to form the 2x2")
    refs = sample_answers(references)
    res = tool_usage(read_results(predictions), {k: v[1] for k, v in refs.items()},
                     read_verdicts(verdicts) if verdicts is not None else None,
                     read_verdicts(baseline_verdicts, mark_missing=True) if baseline_verdicts is not None else None,
                     base=Path(predictions).parent, evidence=evidence, evidence_judge=evidence_judge,
                     evidence_chars=evidence_chars)
    return {"kind": "agent-tools", "predictions": str(predictions), "references": str(references),
            "verdicts": str(verdicts) if verdicts is not None else None,
            "baseline_verdicts": str(baseline_verdicts) if baseline_verdicts is not None else None, **res}
