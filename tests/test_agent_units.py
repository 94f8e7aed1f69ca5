"""Pure parts of the agent: the turn protocol, image-tag validation, the toolbox guards and cache."""

from __future__ import annotations

import asyncio
import json

import pytest

from kbvqa.stages.agent.protocol import parse_turn
from kbvqa.stages.agent.tags import short_answer, strip_tags, validate_tags
from kbvqa.tools.base import EpisodeInfo, SearchArgs, ToolItem, ToolResult, locale_for, tool_schemas, tools_block
from kbvqa.tools.cache import ToolCache
from kbvqa.tools.toolbox import ReplayMiss, Toolbox, blocked_domain


def tag(query, idx) -> str:
    return "<image>" + json.dumps({"query": query, "idx": idx}) + "</image>"


# ------------------------------------------------------------------------------------------ protocol

def test_turn_with_call_ignores_an_invented_tool_response():
    t = parse_turn('<think>look</think><tool_call>{"name": "search", "arguments": {"query": ["a"]}}</tool_call>'
                   '<tool_response>made up</tool_response><answer>no</answer>')
    assert (t.thought, t.tool, t.arguments, t.answer) == ("look", "search", {"query": ["a"]}, None)
    assert "made up" not in t.text


def test_turn_answer_and_problems():
    assert parse_turn("<think>ok</think><answer>Paris.</answer>").answer == "Paris."
    assert parse_turn("reasoning without tags</think><answer>X</answer>").thought == "reasoning without tags"
    assert "not valid JSON" in parse_turn("<tool_call>{oops</tool_call>").problem
    assert "name" in parse_turn('<tool_call>["search"]</tool_call>').problem
    assert "empty" in parse_turn("<answer>  </answer>").problem
    assert "plain text" in parse_turn("Sure, here you go").problem
    assert "empty reply" in parse_turn("").problem
    # the first block decides: an answer before a call is the answer
    assert parse_turn('<answer>A</answer><tool_call>{"name": "search"}</tool_call>').answer == "A"


# ---------------------------------------------------------------------------------------------- tags

CALLS = [{"query": "Eiffel Tower", "status": "ok", "items": [
    {"rank": 1, "image": "a.jpg", "sha256": "h1", "url": "u1"}, {"rank": 2, "image": "b.jpg", "sha256": "h2"}]},
    {"query": "Louvre", "status": "empty", "items": []}]


def test_valid_tags_resolve_to_their_images():
    prov, resolved = validate_tags(f"It is tall.\n{tag('Eiffel Tower', 2)}\nAnd old.", CALLS)
    assert prov == {"tags": 1, "valid": 1, "violations": []}
    assert resolved[0]["image"] == "b.jpg" and resolved[0]["sha256"] == "h2"


@pytest.mark.parametrize("text, kind", [
    ('<image>{"query": "Eiffel Tower"}</image>', "malformed_tag"),
    ('<image>{"query": "Eiffel Tower", "idx": true}</image>', "malformed_tag"),
    ("<image>not json</image>", "malformed_tag"),
    ('<image>{"query": "Eiffel Tower", "idx": 1}', "malformed_tag"),  # never closed
    (tag("Big Ben", 1), "no_prior_call"),
    (tag("eiffel  tower", 1), "query_mismatch"),
    (tag("Eiffel Tower", 3), "idx_out_of_range"),
    (tag("Eiffel Tower", 0), "idx_out_of_range"),
    (tag("Louvre", 1), "idx_out_of_range"),  # the call returned nothing
    (tag("Eiffel Tower", 1) + tag("Eiffel Tower", 1), "duplicate_image"),
])
def test_each_violation_kind(text, kind):
    prov, _ = validate_tags(text, CALLS)
    assert [v["kind"] for v in prov["violations"]] == [kind]


def test_short_answer_is_the_first_sentence_without_tags():
    text = f"{tag('Eiffel Tower', 1)}The tower is 330 m tall. It was built in 1889.\n{tag('Eiffel Tower', 2)}"
    assert short_answer(text) == "The tower is 330 m tall."
    assert strip_tags(text).startswith("The tower")
    assert short_answer(None) is None and short_answer(tag("x", 1)) is None


# ----------------------------------------------------------------------------------------- contract

def test_tool_schemas_and_prompt_block_agree():
    names = [s["function"]["name"] for s in tool_schemas()]
    assert names == ["search", "visit", "image_search", "text_to_image_search"]
    block = tools_block()
    assert block.startswith("<tools>") and all(f'"name": "{n}"' in block for n in names)


def test_canonical_arguments_and_locale():
    assert SearchArgs(query=["b  B", "a", "a"]).canonical() == {"query": ["a", "b b"]}
    assert SearchArgs.model_validate({"query": "one"}).query == ["one"]
    assert locale_for("这是什么蘑菇") == "zh" and locale_for("what mushroom") == "en"


class _Backend:
    name, version = "fake", "1"

    def __init__(self):
        self.calls = 0

    def describe(self):
        return {"backend": self.name}

    async def search(self, args, episode, ctx):
        self.calls += 1
        if args.query == ["down"]:
            return ToolResult(tool="search", status="error", reason="HTTP 503")
        items = [ToolItem(id="1", kind="page", rank=1, query=args.query[0], title="A", url="https://ok.org/a",
                          text="alpha"),
                 ToolItem(id="2", kind="page", rank=2, query=args.query[0], title="B",
                          url="https://www.xiaohongshu.com/post/1", text="the answer")]
        return ToolResult(tool="search", status="ok", items=items)


def _call(box, q):
    parsed = box.parse("search", {"query": [q]})
    return asyncio.run(box.call("search", *parsed, EpisodeInfo(record_id="r"), None))


def test_toolbox_guards_validates_and_caches(tmp_path):
    backend = _Backend()
    box = Toolbox(backend, ToolCache(tmp_path / "t.sqlite"), blocked_domains=("xiaohongshu.com",))
    assert box.parse("fly", {}).status == "error" and "unknown tool" in box.parse("fly", {}).reason
    assert "bad arguments" in box.parse("search", {"query": []}).reason
    assert "bad arguments" in box.parse("visit", {"url": ["u"] * 6, "goal": "g"}).reason
    r = _call(box, "q")
    assert r.status == "ok" and [it.title for it in r.items] == ["A"] and "the answer" not in r.text
    assert r.provenance["blocked_items"] == 1
    again = _call(box, "q")
    assert again.provenance["cached"] is True and backend.calls == 1
    down = _call(box, "down")
    assert down.status == "error" and "HTTP 503" in down.text
    _call(box, "down")
    assert backend.calls == 3  # an error is never cached: the second call went to the backend again
    assert blocked_domain("https://sub.xiaohongshu.com/x", ("xiaohongshu.com",)) == "xiaohongshu.com"
    assert blocked_domain("https://notxiaohongshu.com/x", ("xiaohongshu.com",)) is None


def test_replay_never_goes_live(tmp_path):
    cache = ToolCache(tmp_path / "t.sqlite")
    _call(Toolbox(_Backend(), cache), "recorded")
    backend = _Backend()
    replay = Toolbox(backend, ToolCache(tmp_path / "t.sqlite"), replay=True)
    assert _call(replay, "recorded").status == "ok"
    with pytest.raises(ReplayMiss):
        _call(replay, "not recorded")
    assert backend.calls == 0
