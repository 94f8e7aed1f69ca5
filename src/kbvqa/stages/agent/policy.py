"""Who decides the agent's next turn: a model (the `agent` role) or the embedded baseline policy.

Both write the same protocol text the loop parses, so the loop, tools, trajectory and tag checks are
identical whichever drives them. `ModelPolicy` sends the conversation to an OpenAI-compatible VLM
(`--protocol text`: the paper's tags with `<tool_response>` as a stop sequence; `--protocol tools`:
native tool calling). `BaselinePolicy` is an honest, deterministic baseline for offline runs and
tests: reverse image search → identify the entity → search → visit → extract a short answer → forward
image search for the entity → an interleaved answer with a valid tag. It is labelled
`producer.backend = "rules"` and is no substitute for a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kbvqa.data.schema import Article, Provenance, Sample, Section, Usage
from kbvqa.stages.agent.protocol import STOP, Turn, parse_turn
from kbvqa.stages.answer.extractive import extract_answer
from kbvqa.tools.base import tool_schemas

BASELINE_NAME = "baseline-policy"
BASELINE_VERSION = "1"


@dataclass
class Step:
    """One turn of an episode as the loop records it."""

    turn: int
    thought: str = ""
    tool: str | None = None
    arguments: Any = None  # as the model wrote them
    canonical: dict[str, Any] | None = None
    result: Any = None  # ToolResult
    problem: str | None = None
    final: bool = False  # the turn that gave the answer
    forced: bool = False  # the answer-only turn after the harness ended the tool phase
    notices: list[dict[str, str]] = field(default_factory=list)  # harness messages sent with this turn's request
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)


@dataclass
class PolicyReply:
    turn: Turn
    usage: Usage
    provenance: Provenance
    assistant_message: dict[str, Any]  # what goes back into the conversation
    tool_call_id: str | None = None  # native tool calling: the id the tool message must answer


class PolicyError(RuntimeError):
    """The model call failed (after the client's retries): the episode ends as an error record.
    `usage` is what the failed call still cost (its requests count in the run's totals)."""

    def __init__(self, message: str, usage: Usage | None = None):
        super().__init__(message)
        self.usage = usage


class ModelPolicy:
    def __init__(self, client: Any, protocol: str = "text", max_reply_tokens: int | None = 2048):
        self.client, self.protocol, self.max_reply_tokens = client, protocol, max_reply_tokens

    @property
    def provenance(self) -> Provenance:
        return self.client.provenance

    async def next(self, messages: list[dict[str, Any]], state: Any, prompt_version: str) -> PolicyReply:
        params: dict[str, Any] = {}
        if self.max_reply_tokens:
            params["max_tokens"] = self.max_reply_tokens
        if self.protocol == "tools":  # the forced last turn keeps the schemas (the history cites them) but closes them
            params.update(tools=tool_schemas(), tool_choice="none" if getattr(state, "final", False) else "auto")
        else:
            params["stop"] = [STOP]
        res = await self.client.chat(messages, prompt_version=prompt_version, **params)
        if res.status == "error":
            raise PolicyError(f"agent model call failed: {res.reason}", res.usage)
        if res.status == "invalid" and res.raw is None:  # a reply the client would not hand on (over max_tokens)
            return PolicyReply(Turn(problem=f"unusable reply: {res.reason}"), res.usage, res.provenance,
                               {"role": "assistant", "content": ""})
        msg = ((res.raw or {}).get("choices") or [{}])[0].get("message") or {}
        content = msg.get("content") if isinstance(msg.get("content"), str) else (res.text or "")
        thought = msg.get("reasoning_content") or ""
        if self.protocol == "tools":
            return self._native(msg, content, thought, res)
        turn = parse_turn(content, thought)
        if res.truncated and turn.answer is not None and "</answer>" not in turn.text:
            turn = Turn(thought=turn.thought, text=turn.text, problem="the reply was cut off at max_tokens inside "
                                                                       "the answer")
        return PolicyReply(turn, res.usage, res.provenance, {"role": "assistant", "content": turn.text})

    def _native(self, msg: dict[str, Any], content: str, thought: str, res: Any) -> PolicyReply:
        calls = msg.get("tool_calls") or []
        if calls:
            call = calls[0]
            fn = call.get("function") or {}
            turn = Turn(thought=parse_turn(content, thought).thought, text=content or "")
            try:
                args = fn.get("arguments")
                turn.tool, turn.arguments = fn.get("name"), json.loads(args) if isinstance(args, str) else (args or {})
            except ValueError as exc:
                turn.problem = f"the tool call's arguments are not valid JSON ({exc})"
            cid = call.get("id") or "call_0"
            message = {"role": "assistant", "content": content or None,
                       "tool_calls": [{"id": cid, "type": "function",
                                       "function": {"name": fn.get("name"), "arguments": fn.get("arguments") or "{}"}}]}
            return PolicyReply(turn, res.usage, res.provenance, message, tool_call_id=cid)
        turn = parse_turn(content, thought)
        if turn.answer is None and turn.problem and content.strip():  # native mode: plain text is the answer
            turn = Turn(thought=turn.thought, answer=parse_turn(f"<answer>{content}</answer>").answer, text=content)
        return PolicyReply(turn, res.usage, res.provenance, {"role": "assistant", "content": content})


def _evidence(visit_text: str) -> str:
    """The quoted evidence of a visited page's item text (the part between the boundary line and the
    summary): what the baseline extracts its short answer from."""
    body = visit_text.split("Evidence in page:", 1)[-1]
    return body.split("\n\nSummary:", 1)[0].strip()


def _fragment(text: str) -> bool:
    """One lowercase word without a digit: an extraction that caught a word, not an answer."""
    words = text.split()
    return len(words) == 1 and words[0][:1].islower() and not any(ch.isdigit() for ch in text)


class BaselinePolicy:
    """The embedded deterministic policy (see the module docstring)."""

    provenance = Provenance(backend="rules", model=f"{BASELINE_NAME}-v{BASELINE_VERSION}")

    async def next(self, messages: list[dict[str, Any]], state: Any, prompt_version: str) -> PolicyReply:
        text = self._decide(state)
        turn = parse_turn(text)
        return PolicyReply(turn, Usage(), self.provenance, {"role": "assistant", "content": turn.text})

    @staticmethod
    def _call(thought: str, name: str, arguments: dict[str, Any]) -> str:
        return (f"<think>{thought}</think>\n<tool_call>"
                f"{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>")

    @staticmethod
    def _results(state: Any, tool: str) -> list[Any]:
        return [s.result for s in state.steps if s.tool == tool and s.result is not None and s.result.status == "ok"]

    def _entity(self, state: Any) -> Any:
        """The best guess of the pictured entity: the top reverse-image hit, else the top search hit."""
        for tool in ("image_search", "search"):
            for r in self._results(state, tool):
                if r.items:
                    return r.items[0]
        return None

    def _decide(self, state: Any) -> str:
        tried = {s.tool for s in state.steps}
        q = state.sample.question
        if getattr(state, "final", False):  # the tools are closed: answer from what was found
            return self._final(state)
        if state.image is not None and "image_search" not in tried:
            return self._call("Identify the pictured entity first.", "image_search",
                              {"goal": "identify the entity in the picture"})
        entity = self._entity(state)
        if "search" not in tried:
            title = entity.title.split(" — ")[0] if entity else ""
            return self._call(f"The picture most likely shows {title or 'an unknown entity'}; look up the question.",
                              "search", {"query": [f"{title} {q}".strip()]})
        entity = self._entity(state)
        if entity is None:
            return self._final(state)
        if "visit" not in tried and entity.url:
            return self._call("Read the page about the entity for the answer.", "visit", {"url": [entity.url], "goal": q})
        title = entity.title.split(" — ")[0]
        if "text_to_image_search" not in tried:
            return self._call(f"{title} is the SUBJECT entity of the answer; find a picture of it.",
                              "text_to_image_search", {"query": title})
        return self._final(state)

    def _final(self, state: Any) -> str:
        """The answer from what the episode found so far."""
        entity = self._entity(state)
        if entity is None:
            return ("<think>Nothing identifies the entity.</think>\n"
                    "<answer>I could not identify what the picture shows, so I cannot answer.</answer>")
        title = entity.title.split(" — ")[0]
        return "<think>I have what I need.</think>\n<answer>" + self._answer(state, entity, title) + "</answer>"

    def _answer(self, state: Any, entity: Any, title: str) -> str:
        pages = [it for r in self._results(state, "visit") for it in r.items if not it.error]
        text = "\n".join(_evidence(it.text) for it in pages) or "\n".join(
            it.text for r in self._results(state, "search") for it in r.items)
        article = Article(url=entity.url or "", title=title, sections=[Section(index=0, title=title, text=text)])
        sample = Sample(id=state.sample.id, question=state.sample.question)
        short, evidence, _ = extract_answer(sample, article)
        if short and (_fragment(short) or short.casefold() in title.casefold()):
            short = None  # a lone lowercase word ("her", "gave"), or the entity's own name again
        # the first sentence is the answer attempt: the identified entity, and the value found for it
        lines = [f"This is {title}: {short}." if short else f"This is {title}."]
        if evidence is not None and evidence.text:
            lines.append(f"{title}: {evidence.text.strip()}")
        elif not short:
            lines[0] = f"This is {title}; I found nothing in what I read that answers the question."
        images = self._results(state, "text_to_image_search")
        if images and images[-1].items:
            lines.append(json.dumps({"query": title, "idx": 1}, ensure_ascii=False).join(("<image>", "</image>")))
        if entity.url:
            lines.append(f"Source: {entity.url}")
        return "\n".join(lines)
