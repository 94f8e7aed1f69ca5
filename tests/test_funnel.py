"""The shared funnel pieces (kbvqa.stages.ask, kbvqa.pipelines.funnel, curate's AskStage) on their own:
the docs/architecture.md example stage against a scripted, imperfect model, and the stop counting."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from pydantic import StrictBool

from kbvqa.models.prompts import Prompt
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import ChatResult, Provenance
from kbvqa.pipelines.curate.common import AskStage, ModelStageConfig, Verdict, YesNoStage
from kbvqa.pipelines.funnel import count_stop, stage_summary
from kbvqa.runner.stage import Context, Invalid, NeedsModel
from kbvqa.stages.ask import Ask, ModelCallFailed

WATERMARK = Prompt(name="test.watermark", version="1", system="",
                   user="Title: {title}\nText: {text}\nIs there a watermark? JSON only.", fields=("title", "text"))


class WatermarkReply(Reply):
    watermarked: StrictBool
    reason: NonBlank


class Watermark(AskStage):  # docs/architecture.md's example, not registered
    name = "curate-watermark"
    version = "1"
    key = "watermark"
    config_model = ModelStageConfig
    asks = Ask(WATERMARK, WatermarkReply, "watermark check")

    def decide(self, reply: WatermarkReply, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:
        payload = {"watermarked": reply.watermarked, "reason": reply.reason, "judge": judge}
        return Verdict(payload, "watermarked", reply.reason) if reply.watermarked else Verdict(payload)


class WatermarkGate(YesNoStage):
    name = "curate-watermark-free"
    version = "1"
    key = "clean"
    asks = Ask(WATERMARK, WatermarkReply, "watermark check")
    answer_field, drop_reason = "watermarked", "has_no_watermark"


class Scripted:
    """Replies in turn from `script`: a dict (sent as JSON text), a raw string, or "ERROR"."""

    def __init__(self, *script: Any):
        self.script, self.sent = list(script), []
        self.provenance = Provenance(backend="scripted", model="m-1")

    async def chat(self, messages, *, schema=None, prompt_version="", **params):
        self.sent.append({"messages": messages, **params})
        r = self.script.pop(0)
        prov = self.provenance.model_copy(update={"prompt_version": prompt_version})
        if r == "ERROR":
            return ChatResult(status="error", reason="HTTP 503", provenance=prov)
        return ChatResult(status="ok", text=r if isinstance(r, str) else json.dumps(r), provenance=prov)


def post(rid: str = "p1") -> dict[str, Any]:
    return {"id": rid, "title": "A mug", "text": "What brand is this mug?"}


def run(stage: AskStage, client: Any | None, record: dict[str, Any]) -> dict[str, Any]:
    ctx = Context(roles={} if client is None else {"vision": client})
    return asyncio.run(stage.run(record, ctx))


def test_the_documented_stage_keeps_drops_and_never_defaults():
    stage = Watermark()
    assert stage.prompts == (WATERMARK,)  # one declaration: the manifest's prompts follow from `asks`
    client = Scripted({"watermarked": True, "reason": "a shop logo in the corner"},
                      {"watermarked": False, "reason": "clean"},
                      'Sure! {"watermarked": false, "reason": "x"}', {"watermarked": "no", "reason": "x"}, "ERROR")
    dropped = run(stage, client, post("a"))
    assert dropped["drop"] == {"stage": "watermark", "reason": "watermarked", "detail": "a shop logo in the corner"}
    assert dropped["curate"]["watermark"]["judge"]["model"] == "m-1"
    kept = run(stage, client, post("b"))
    assert "drop" not in kept and kept["curate"]["watermark"]["watermarked"] is False
    assert client.sent[0]["temperature"] == 0.0 and "What brand" in json.dumps(client.sent[0]["messages"])
    with pytest.raises(Invalid, match=r"watermark check \(c\): reply is not one JSON value"):
        run(stage, client, post("c"))
    with pytest.raises(Invalid, match="watermarked"):
        run(stage, client, post("d"))
    with pytest.raises(ModelCallFailed, match="HTTP 503"):
        run(stage, client, post("e"))
    with pytest.raises(NeedsModel, match="'vision' role"):
        run(stage, None, post("f"))


def test_one_call_stages_list_the_prompt_they_declare():
    from kbvqa.models.prompts.reference import CONSISTENCY_CHECK, SYNTHESIS
    from kbvqa.pipelines.reference.consistency import ConsistencyCheck
    from kbvqa.pipelines.reference.synthesis import Synthesis

    assert ConsistencyCheck.prompts == (CONSISTENCY_CHECK,) and Synthesis.prompts == (SYNTHESIS,)
    assert Synthesis.asks.reply_model is None  # plain text, the draft with its tags


def test_a_yes_no_stage_drops_on_false_with_the_models_reason():
    client = Scripted({"watermarked": False, "reason": "no mark"}, {"watermarked": True, "reason": "marked"})
    assert run(WatermarkGate(), client, post("a"))["drop"]["reason"] == "has_no_watermark"
    assert "drop" not in run(WatermarkGate(), client, post("b"))


def test_stops_are_counted_by_reason_with_one_example_each():
    lines = [{"id": "a", "status": "ok", "funnel": {"s": {"n": 2}}},
             {"id": "b", "status": "error", "reason": "NeedsModel: no vision"},
             {"id": "c", "status": "error", "reason": "ModelCallFailed: HTTP 503"},
             {"id": "d", "status": "invalid", "reason": "bad JSON"},
             {"id": "e", "status": "error", "reason": "ModelCallFailed: timeout"}]
    row = stage_summary("s", lines)
    assert row["stopped"] == {"needs_model": 1, "error": 2, "invalid": 1} and row["units"] == {"n": 2}
    assert row["examples"]["error"] == "c: ModelCallFailed: HTTP 503"
    stopped: Counter[str] = Counter()
    assert count_stop(lines[3], stopped, {}) == "invalid" and stopped == {"invalid": 1}
