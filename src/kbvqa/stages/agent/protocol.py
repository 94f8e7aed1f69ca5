"""The agent's text protocol (seed 001 App. D): `<think>…</think>` then exactly one
`<tool_call>{"name": …, "arguments": …}</tool_call>` or `<answer>…</answer>`.

`parse_turn` is a pure function from a model reply to a Turn. Anything a model might emit after a
tool call (a hallucinated `<tool_response>`, a second call) is cut off — the harness, not the model,
writes tool responses. A reply with neither a call nor an answer, or a call whose JSON does not
parse, is a Turn with a `problem`: the loop shows the model the problem and counts it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kbvqa.models.jsonx import extract_json

STOP = "<tool_response>"  # stop sequence sent with every request
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)


@dataclass
class Turn:
    thought: str = ""
    tool: str | None = None
    arguments: Any = None
    answer: str | None = None
    problem: str | None = None
    text: str = ""  # the reply as kept in the conversation (cut after the call or the answer)


def cut_reply(text: str) -> str:
    """The reply up to the end of its first tool call or answer (looked for after the thinking), and
    nothing after a `<tool_response>` the model may have invented."""
    text = text.split(STOP, 1)[0]
    think_end = text.find("</think>")
    start = think_end + len("</think>") if think_end >= 0 else 0
    opens = [(i, tag) for tag in ("<tool_call>", "<answer>") if (i := text.find(tag, start)) >= 0]
    if not opens:
        return text
    pos, tag = min(opens)
    close = "</" + tag[1:]
    end = text.find(close, pos)
    return text if end < 0 else text[: end + len(close)]


def parse_turn(text: str | None, thought: str = "") -> Turn:
    """One model reply → Turn. `thought` is reasoning the server returned separately (reasoning_content)."""
    raw = cut_reply(text or "")
    if "<think>" not in raw and "</think>" in raw:  # templates that open the think block themselves
        head, body = raw.split("</think>", 1)
        thought = head.strip() or thought.strip()
    else:
        m = _THINK.search(raw)
        thought = (m.group(1).strip() if m else "") or thought.strip()
        body = _THINK.sub("", raw) if m else raw
    call, answer = _CALL.search(body), _ANSWER.search(body)
    if call and (not answer or call.start() < answer.start()):
        turn = Turn(thought=thought, text=raw)
        try:
            obj = extract_json(call.group(1))
        except ValueError as exc:
            turn.problem = f"the tool call is not valid JSON ({exc})"
            return turn
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            turn.problem = 'the tool call must be {"name": "<tool>", "arguments": {...}}'
            return turn
        turn.tool, turn.arguments = obj["name"], obj.get("arguments", {})
        return turn
    if answer:
        content = answer.group(1).strip()
        if not content:
            return Turn(thought=thought, text=raw, problem="the answer is empty")
        return Turn(thought=thought, answer=content, text=raw)
    what = "plain text" if body.strip() else "an empty reply"
    return Turn(thought=thought, text=raw, problem=f"{what}: neither a <tool_call> nor an <answer>")
