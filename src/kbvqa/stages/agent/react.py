"""The AgenticInterleave ReAct loop (seed 001 §3.3) as one stage: one episode per record.

Each turn the policy (the `agent` role, or the embedded baseline) writes `<think>` and one tool call
or an answer; the harness runs the call through the Toolbox and answers with `<tool_response>`. The
harness — not the model — enforces the rules users of such agents asked for:

- budgets on turns (default 30, `DEFAULT_MAX_TURNS`: a safety limit, not the paper's ending), tokens,
  cost and wall time; one turn before a cap the model is told to answer now;
- one image_search per episode (a second is answered `quota`, not run);
- a loop guard: an identical call (same tool, same canonical arguments) is answered "not run:
  repeated"; an identical or near-identical call (word-set Jaccard ≥ `repeat_similarity` with one of
  the last `repeat_window` queries of the tool) is a repetition; the first repetition in a row is
  warned, `repeat_patience` (default 2) in a row end the tool phase `repeated_behaviour`. A call
  that merely returns nothing new (an empty search, results already seen) is no repetition: the model
  is told so and goes on (seed 001's system prompt lets it answer from its own knowledge);
- two unusable replies in a row (no call and no answer, or a call that does not parse) end the tool
  phase `format_error`; a tool backend failing N times in a row ends it `tool_unavailable`;
- every step records whether its observation contains a reference answer verbatim (leakage).

**The agent always gets to answer.** When the harness ends the tool phase (a budget, repetition,
unavailable tools, unusable replies), the policy gets one last turn with the tools closed and a
notice saying why (`FORCED_ANSWER`); what it answers is the prediction and `meta.forced_answer` is
true. `meta.termination` keeps the cause (`answer` when the model answered on its own). Only a model
that still gives no answer leaves `answer: null`. With `max_seconds`, the tool phase ends at
`1 - answer_reserve` of it, and every tool call gets what is left of the tool phase as its deadline,
so the forced turn runs inside the budget too. The tool phase also stops before a turn whose request
and full reply could pass `max_tokens` (`_projected_tokens`); only the forced turn's one request can
pass the token budget, and the cost budget by one reply.

Every message the harness adds to the conversation — budget warnings, repetition notices, "nothing
new", format-error feedback, the forced-answer prompt — is stored on the step whose request carried
it (`notices`), so the trajectory says why an episode ended without any server log.

Every episode says why it ended (`meta.termination`). An answer's image tags are validated against
the trajectory (`tags.validate_tags`). A failed model call is an `error` record (retried on resume),
never an answer.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kbvqa.data.matching import answers_in_text
from kbvqa.data.schema import Prediction, Sample, Usage
from kbvqa.models.prompts.agent import (ANSWER_NOW, FORCED_ANSWER, FORMAT_ERROR, GUIDED_QUESTION, NOTHING_NEW,
                                        REPEAT_WARNING, SYSTEM)
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.agent.policy import BaselinePolicy, ModelPolicy, PolicyError, PolicyReply, Step
from kbvqa.stages.agent.tags import short_answer, validate_tags
from kbvqa.tools.base import EpisodeInfo, ToolResult, file_sha256, locale_for, tools_block
from kbvqa.tools.toolbox import Toolbox

#: The default turn cap, a safety limit. Seed 001's loop ends on an answer or repeated behaviour, with no
#: turn cap; its agent averages about 8 search / visit / reverse-image calls an episode (Table 4: 6.19-6.59
#: searches, 1.31-1.34 visits, 0.60-0.66 image searches) plus one forward image search per SUBJECT entity,
#: so ~10-12 turns with the answer turn: the old default of 12 would have ended a real share of its
#: episodes. 30 is about three times that mean, so only runaway episodes reach it; `kbvqa study agent-tools`
#: counts the episodes each termination ended (kbvqa's value; the paper gives none).
DEFAULT_MAX_TURNS = 30

Termination = Literal["answer", "turn_budget", "token_budget", "cost_budget", "wall_time", "repeated_behaviour",
                      "format_error", "tool_unavailable"]


class AgentConfig(StageConfig):
    role: str = "agent"  # the model role that drives the loop; the baseline policy when not configured
    protocol: Literal["text", "tools"] = "text"
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1)  # a safety limit: see DEFAULT_MAX_TURNS
    max_tokens: int | None = Field(None, ge=1)  # prompt + completion tokens over the episode
    max_cost: float | None = Field(None, gt=0)
    max_seconds: float | None = Field(None, gt=0)
    max_reply_tokens: int | None = Field(2048, ge=1)
    image_search_quota: int = Field(1, ge=0)
    max_format_errors: int = Field(2, ge=1)
    repeat_window: int = Field(3, ge=1)  # recent calls a new query is compared with
    repeat_similarity: float = Field(0.8, gt=0, le=1)  # word-set Jaccard that makes a query a near-duplicate
    repeat_patience: int = Field(2, ge=1)  # repetitions in a row: the first warns, this many end the tool phase
    tool_failures: int = Field(3, ge=1)  # backend failures in a row that end the tool phase
    answer_reserve: float = Field(0.15, ge=0, lt=1)  # share of max_seconds kept for the forced answer turn
    forced_answer: bool = True  # a harness stop is followed by one answer-only turn
    thought_chars: int = Field(2000, ge=0)
    observation_chars: int = Field(2000, ge=0)  # kept inline; the full text goes to an artifact file
    today: str | None = None  # the date in the system prompt (fixed for exact replays); None = today (UTC)
    guided: bool = False  # reference construction (seed 001 §3.2): the short reference goes with the question
    leak_check: bool = True


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.casefold()))


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


class _Episode:
    """The mutable state of one episode (what the policy and the guards look at)."""

    def __init__(self, sample: Sample, image: Path | None, info: EpisodeInfo):
        self.sample, self.image, self.info = sample, image, info
        self.turn = 0
        self.toolbox: Toolbox | None = None
        self.recorded_stops: list[tuple[int, str]] = []  # replay: where the recorded run ran out of time
        self.steps: list[Step] = []
        self.messages: list[dict[str, Any]] = []
        self.usage = Usage()
        self.started = time.monotonic()
        self.seen_calls: dict[str, int] = {}  # canonical call -> turn
        self.seen_items: set[str] = set()
        self.stale = 0
        self.format_errors = 0
        self.tool_failures = 0
        self.image_searches = 0
        self.notices: list[dict[str, str]] = []  # harness messages for the next request the model reads
        self.unread: list[dict[str, str]] = []  # sent with a request the time budget cut off
        self.warned: set[str] = set()
        self.final = False  # the forced answer turn: tools are closed

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@register_stage
class AgentEpisode(Stage):
    """Reads ctx resources `toolbox` (a tools.toolbox.Toolbox), `image_root`, optional `artifacts`."""

    name = "agent"
    version = "1"
    config_model = AgentConfig
    prompts = (SYSTEM, GUIDED_QUESTION, FORMAT_ERROR, ANSWER_NOW, REPEAT_WARNING, NOTHING_NEW, FORCED_ANSWER)

    def __init__(self, config: AgentConfig | None = None):
        super().__init__(config)
        self.config: AgentConfig

    # -- set-up ---------------------------------------------------------------------------------
    def _policy(self, ctx: Context) -> Any:
        if self.config.role in ctx.roles:
            return ModelPolicy(ctx.role(self.config.role), self.config.protocol, self.config.max_reply_tokens)
        return BaselinePolicy()

    def _start(self, record: dict[str, Any], ctx: Context, policy: Any) -> _Episode:
        sample = Sample.model_validate({k: v for k, v in record.items() if k in Sample.model_fields})
        images = [ctx.image_path(i) for i in sample.images]  # every query image goes to the model,
        image = images[0] if images else None  # the first is the one reverse image search sends
        info = EpisodeInfo(record_id=sample.id, question=sample.question, image=image,
                           image_sha256=file_sha256(image) if image else None,
                           image_url=(sample.meta.get("image_urls") or [None])[0], locale=locale_for(sample.question))
        ep = _Episode(sample, image, info)
        if isinstance(policy, ModelPolicy):
            today = self.config.today or datetime.now(timezone.utc).date().isoformat()
            question = sample.question
            if self.config.guided:
                if not sample.answer_texts:
                    raise ValueError(f"sample {sample.id!r} has no short reference to guide the agent with")
                question = GUIDED_QUESTION.render(question_raw=sample.question, answer_raw=sample.answer_texts[0])
            ep.messages = SYSTEM.messages(images, question_raw=question,
                                          tools_block_raw=tools_block(), today_raw=today)
        return ep

    # -- budgets ----------------------------------------------------------------------------------
    def _tool_phase_seconds(self) -> float | None:
        """When the tool phase ends under `max_seconds` (the rest is the forced answer's reserve)."""
        c = self.config
        if c.max_seconds is None:
            return None
        return c.max_seconds * (1 - c.answer_reserve) if c.forced_answer else c.max_seconds

    def _over_budget(self, ep: _Episode, turn: int) -> Termination | None:
        c = self.config
        if turn > c.max_turns:
            return "turn_budget"
        limit = self._tool_phase_seconds()
        if self._out_of_time(ep, "before_turn", limit):
            return "wall_time"
        if c.max_tokens is not None and self._projected_tokens(ep) > c.max_tokens:
            return "token_budget"
        if c.max_cost is not None and ep.usage.cost >= c.max_cost:
            return "cost_budget"
        return None

    @staticmethod
    def _out_of_time(ep: _Episode, where: str, limit: float | None) -> bool:
        """Whether the time budget stops the episode at this point of its current turn. A replay does not
        re-measure time: it stops where the recorded run stopped (the cassette keeps that point)."""
        if ep.toolbox is not None and ep.toolbox.replay:
            return (ep.turn, where) in ep.recorded_stops
        if limit is None or ep.elapsed < limit:
            return False
        if ep.toolbox is not None:
            ep.toolbox.note_stop(ep.sample.id, ep.turn, where)
        return True

    async def _timed(self, ep: _Episode, where: str, call: Any, limit: float | None) -> Any:
        """Await `call` within the time `limit` (seconds into the episode); None when time runs out first."""
        if self._out_of_time(ep, where, limit):
            call.close()  # never started
            return None
        if limit is None or (ep.toolbox is not None and ep.toolbox.replay):
            return await call
        try:
            return await asyncio.wait_for(call, timeout=max(0.0, limit - ep.elapsed))
        except asyncio.TimeoutError:
            if ep.toolbox is not None:
                ep.toolbox.note_stop(ep.sample.id, ep.turn, where)
            return None

    def _projected_tokens(self, ep: _Episode) -> int:
        """Tokens the episode would have spent after one more tool-phase turn: what it spent, plus the next
        request's prompt (at least the last prompt and reply, which it re-sends) and a full reply. The
        tool phase stops before a turn that could pass `max_tokens`; only the forced answer turn can."""
        used = ep.usage.prompt_tokens + ep.usage.completion_tokens
        if not ep.steps:
            return used
        last = ep.steps[-1].usage
        return used + last.prompt_tokens + last.completion_tokens + (self.config.max_reply_tokens or 0)

    def _near_budget(self, ep: _Episode, turn: int) -> str | None:
        c = self.config
        limit = self._tool_phase_seconds()
        near = {"turns": turn >= c.max_turns,
                "time": limit is not None and ep.elapsed >= 0.8 * limit,
                "tokens": c.max_tokens is not None
                and ep.usage.prompt_tokens + ep.usage.completion_tokens >= 0.8 * c.max_tokens,
                "cost": c.max_cost is not None and ep.usage.cost >= 0.8 * c.max_cost}
        return next((k for k, v in near.items() if v and k not in ep.warned), None)

    # -- the loop -----------------------------------------------------------------------------------
    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        toolbox: Toolbox = ctx.resource("toolbox")
        policy = self._policy(ctx)
        ep = self._start(record, ctx, policy)
        ep.toolbox, ep.recorded_stops = toolbox, toolbox.recorded_stops(ep.sample.id)
        termination: Termination | None = None
        answer: str | None = None
        turn = 0
        while termination is None:
            turn += 1
            ep.turn = turn
            termination = self._over_budget(ep, turn)
            if termination:
                break
            budget = self._near_budget(ep, turn)
            if budget:
                ep.warned.add(budget)
                self._add_note(ep, "budget_warning", ANSWER_NOW.render(budget_raw=budget))
            notices = self._flush_note(ep)
            t0 = time.perf_counter()
            reply = await self._ask(policy, ep, ctx, self._tool_phase_seconds())
            if reply is None:
                termination = "wall_time"
                ep.unread = notices  # in the conversation, not yet answered: the forced turn's step shows them
                break
            step = self._new_step(ep, turn, reply, notices)
            if reply.turn.answer is not None:
                answer, termination, step.final = reply.turn.answer, "answer", True
            elif reply.turn.problem is not None:
                step.problem = reply.turn.problem
                ep.format_errors += 1
                ep.messages.append(reply.assistant_message)
                if ep.format_errors >= self.config.max_format_errors:
                    termination = "format_error"
                else:
                    self._add_note(ep, "format_error", FORMAT_ERROR.render(problem_raw=reply.turn.problem))
            else:
                ep.format_errors = 0
                termination = await self._tool_turn(reply, step, ep, toolbox, ctx)
            step.seconds = round(time.perf_counter() - t0, 4)
        forced = termination != "answer" and self.config.forced_answer
        if forced:
            # the turn after the last one taken (a turn stopped before it was asked is not counted)
            answer = await self._forced_turn(policy, ep, (ep.steps[-1].turn if ep.steps else 0) + 1, termination, ctx)
        return self._prediction(record, ep, policy, toolbox, termination, answer, forced, ctx)

    def _new_step(self, ep: _Episode, turn: int, reply: PolicyReply, notices: list[dict[str, str]]) -> Step:
        ep.usage = ep.usage.add(reply.usage)
        step = Step(turn=turn, thought=reply.turn.thought, usage=reply.usage, notices=notices)
        ep.steps.append(step)
        return step

    async def _forced_turn(self, policy: Any, ep: _Episode, turn: int, termination: Termination | None,
                           ctx: Context) -> str | None:
        """One answer-only turn after the harness ended the tool phase; its answer, or None."""
        ep.final, ep.turn = True, turn
        self._add_note(ep, "forced_answer", FORCED_ANSWER.render(reason_raw=self._stop_reason(termination)))
        notices = ep.unread + self._flush_note(ep)
        t0 = time.perf_counter()
        reply = await self._ask(policy, ep, ctx, self.config.max_seconds, where="forced_ask")
        if reply is None:  # even the reserve ran out waiting for the model: no answer
            ep.steps.append(Step(turn=turn, notices=notices, final=True, forced=True,
                                 problem="no reply within the wall-time budget"))
            return None
        step = self._new_step(ep, turn, reply, notices)
        step.forced = True
        answer = None
        if reply.turn.answer is not None:
            answer, step.final = reply.turn.answer, True
        elif reply.turn.tool is not None:  # tools are closed: the call is not run
            step.problem = f"a {reply.turn.tool} call after the tools were closed (not run)"
        else:
            step.problem = reply.turn.problem
        step.seconds = round(time.perf_counter() - t0, 4)
        return answer

    def _stop_reason(self, termination: Termination | None) -> str:
        c = self.config
        return {"turn_budget": f"the turn budget ({c.max_turns} turns) is used up",
                "token_budget": f"the token budget ({c.max_tokens} tokens) is used up",
                "cost_budget": f"the cost budget ({c.max_cost}) is used up",
                "wall_time": f"the time budget ({c.max_seconds} s) is nearly used up",
                "repeated_behaviour": "your recent calls repeated earlier ones",
                "format_error": "your last replies could not be used",
                "tool_unavailable": f"the tools failed {c.tool_failures} times in a row and are unavailable",
                }.get(str(termination), "the harness stopped the tool phase")

    async def _ask(self, policy: Any, ep: _Episode, ctx: Context, limit: float | None,
                   where: str = "ask") -> PolicyReply | None:
        """The policy's reply, or None when the wall-time `limit` (seconds into the episode) passes while
        waiting for it. A failed call's requests still count in the run's usage (then PolicyError)."""
        try:
            reply = await self._timed(ep, where, policy.next(ep.messages, ep, SYSTEM.id), limit)
        except PolicyError as exc:
            ctx.add_usage(exc.usage)
            raise
        if reply is not None:
            ctx.add_usage(reply.usage)
        return reply

    def _add_note(self, ep: _Episode, kind: str, text: str) -> None:
        ep.notices.append({"kind": kind, "text": text})

    def _flush_note(self, ep: _Episode) -> list[dict[str, str]]:
        """Harness notices reach the model as a user message (after a tool message, or on their own);
        returns them, for the step whose request carries them."""
        notices, ep.notices = ep.notices, []
        if not notices:
            return []
        note = "\n\n".join(n["text"] for n in notices)
        if ep.messages and ep.messages[-1].get("role") == "user" and isinstance(ep.messages[-1].get("content"), str):
            ep.messages[-1] = {**ep.messages[-1], "content": ep.messages[-1]["content"] + "\n\n" + note}
        else:
            ep.messages.append({"role": "user", "content": note})
        return notices

    async def _tool_turn(self, reply: PolicyReply, step: Step, ep: _Episode, toolbox: Toolbox,
                         ctx: Context) -> Termination | None:
        name, raw = reply.turn.tool or "", reply.turn.arguments
        step.tool, step.arguments = name, raw
        parsed = toolbox.parse(name, raw)
        stale_reason = None  # a repetition: counts towards the loop guard
        nothing_new = False  # information for the model, not a repetition
        if isinstance(parsed, ToolResult):  # unknown tool or bad arguments: the model reads why
            result = parsed
        else:
            args, canonical = parsed
            step.canonical = canonical
            key = f"{name}:{sorted(canonical.items())}"
            if name == "image_search" and ep.image_searches >= self.config.image_search_quota:
                result = ToolResult(tool=name, status="quota",
                                    reason=f"not run: image_search may be used {self.config.image_search_quota} "
                                           "time(s) per episode")
            elif key in ep.seen_calls:
                result = ToolResult(tool=name, status="repeated",
                                    reason=f"not run: you made this exact call in turn {ep.seen_calls[key]}")
                stale_reason = "an identical call"
            else:
                ep.seen_calls[key] = step.turn
                stale_reason = self._near_duplicate(name, canonical, ep)
                if name == "image_search":
                    ep.image_searches += 1
                result = await self._call_tool(toolbox, name, args, canonical, ep, ctx)
                if result is None:  # the time budget ran out inside the call (its retries included)
                    step.result = ToolResult(tool=name, status="error",
                                             reason="not finished within the episode's time budget (--max-seconds)")
                    self._observe(reply, step.result, ep)
                    return "wall_time"
                spent = Usage.model_validate(result.provenance.get("usage") or {})
                step.usage, ep.usage = step.usage.add(spent), ep.usage.add(spent)
                new = {it.id for it in result.items} - ep.seen_items
                ep.seen_items |= new
                nothing_new = result.status in ("ok", "empty") and not new and stale_reason is None
        step.result = result
        ep.tool_failures = ep.tool_failures + 1 if result.status == "error" and not isinstance(parsed, ToolResult) else 0
        self._observe(reply, result, ep)
        if nothing_new:
            self._add_note(ep, "nothing_new", NOTHING_NEW.render())
        if stale_reason is None:
            ep.stale = 0
        else:
            ep.stale += 1
            if ep.stale >= self.config.repeat_patience:
                return "repeated_behaviour"
            self._add_note(ep, "repeat_warning", REPEAT_WARNING.render(detail_raw=stale_reason))
        if ep.tool_failures >= self.config.tool_failures:
            return "tool_unavailable"
        return None

    async def _call_tool(self, toolbox: Toolbox, name: str, args: Any, canonical: dict[str, Any], ep: _Episode,
                         ctx: Context) -> ToolResult | None:
        """The tool's result, or None when the tool phase's time runs out first: under `max_seconds` a
        call gets what is left of the tool phase as its deadline, retries and slow pages included."""
        return await self._timed(ep, "tool", toolbox.call(name, args, canonical, ep.info, ctx),
                                 self._tool_phase_seconds())

    def _near_duplicate(self, name: str, canonical: dict[str, Any], ep: _Episode) -> str | None:
        """A query close to one of the last few calls of the same tool (word-set Jaccard)."""
        queries = canonical.get("query")
        if not queries:
            return None
        words = _words(" ".join(queries if isinstance(queries, list) else [queries]))
        recent = [s for s in ep.steps[:-1] if s.tool == name and s.canonical][-self.config.repeat_window:]
        for s in recent:
            q = s.canonical.get("query") or []
            if _jaccard(words, _words(" ".join(q if isinstance(q, list) else [q]))) >= self.config.repeat_similarity:
                return f"a query almost the same as turn {s.turn}'s"
        return None

    def _observe(self, reply: PolicyReply, result: ToolResult, ep: _Episode) -> None:
        text = result.text or f"[{result.tool}: {result.status}] {result.reason}"
        ep.messages.append(reply.assistant_message)
        if reply.tool_call_id is not None:
            ep.messages.append({"role": "tool", "tool_call_id": reply.tool_call_id, "content": text})
        else:
            ep.messages.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})

    # -- the output -----------------------------------------------------------------------------
    def _step_line(self, step: Step, ep: _Episode, ctx: Context) -> dict[str, Any]:
        c = self.config
        line: dict[str, Any] = {"turn": step.turn, "thought": step.thought[: c.thought_chars]}
        if step.final:
            line["answer"] = True
        if step.forced:
            line["forced"] = True
        if step.notices:
            line["notices"] = step.notices
        if step.problem:
            line["problem"] = step.problem
        if step.tool is not None:
            line.update(tool=step.tool, arguments=step.canonical if step.canonical is not None else step.arguments)
            if step.canonical is not None and step.arguments != step.canonical:
                line["arguments_as_written"] = step.arguments  # `arguments` is the loop guard's folded form
        r = step.result
        if r is not None:
            line.update(status=r.status, reason=r.reason,
                        items=[{k: v for k, v in it.model_dump().items() if v not in (None, "")}
                               | {"text": it.text[: c.observation_chars if r.tool == "visit" else 300]}
                               for it in r.items],
                        observation=r.text[: c.observation_chars],
                        provenance={k: v for k, v in r.provenance.items() if k != "usage"})
            if len(r.text) > c.observation_chars and ctx.resource("artifacts", None) is not None:
                line["observation_file"] = ctx.resource("artifacts").put(ep.sample.id, f"turn{step.turn:02d}_{r.tool}.txt",
                                                                         r.text)
            if self.config.leak_check and r.text:
                leaked = answers_in_text(r.text, ep.sample.answer_texts)
                if leaked:
                    line["leak"] = leaked
        line.update(seconds=step.seconds, usage=step.usage.model_dump())
        return line

    def _prediction(self, record: dict[str, Any], ep: _Episode, policy: Any, toolbox: Toolbox,
                    termination: Termination | None, answer: str | None, forced: bool,
                    ctx: Context) -> dict[str, Any]:
        trajectory = [self._step_line(s, ep, ctx) for s in ep.steps]
        searches = [{"query": (s.arguments or {}).get("query") if isinstance(s.arguments, dict) else None,
                     "status": s.result.status, "items": [it.model_dump() for it in s.result.items]}
                    for s in ep.steps if s.tool == "text_to_image_search" and s.result is not None]
        provenance, resolved = validate_tags(answer, searches)
        store = ctx.resource("artifacts", None)
        if store is not None:  # the embedded images travel with the run: its folder is their image root
            for r in resolved:
                src = r["image"]
                if src and "://" not in src and not src.startswith("data:") and Path(src).is_file():
                    r["source_image"] = src
                    r["image"] = store.put_file(ep.sample.id, f"image_{r['query']}_{r['idx']}{Path(src).suffix}",
                                                src)
        calls: dict[str, int] = {}
        for s in ep.steps:
            if s.tool:
                calls[s.tool] = calls.get(s.tool, 0) + 1
        meta = {"termination": termination, "forced_answer": forced, "turns": len(ep.steps),
                "provenance": {**provenance, "resolved": resolved}, "tool_calls": calls,
                "leak_steps": sum(1 for t in trajectory if t.get("leak")), "protocol": self.config.protocol,
                "tools": toolbox.backend.name, "question": ep.sample.question, "guided": self.config.guided,
                "seconds": round(ep.elapsed, 3)}
        pred = Prediction(sample_id=ep.sample.id, answer=answer, short_answer=short_answer(answer),
                          images=[r["image"] for r in resolved if r["image"]],
                          trajectory=trajectory, usage=ep.usage, producer=policy.provenance, meta=meta,
                          retrieved=list(dict.fromkeys(it.url for s in ep.steps if s.result is not None
                                                       for it in s.result.items if it.url)))
        return pred.record()
