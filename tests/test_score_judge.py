"""SimpleQA-style judge: strict vs legacy parsing, error handling, metric formulas."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kbvqa.data.schema import Provenance, Verdict
from kbvqa.evaluate.judge import (PROMPT_VERSION, build_judge_messages, judge_answer, legacy_parse,
                                  simpleqa_metrics, strict_parse)


class FakeResult:
    def __init__(self, status: str, text: str | None = None, data: Any = None, reason: str = ""):
        self.status, self.text, self.data, self.reason = status, text, data, reason
        self.provenance = Provenance(backend="fake", model="fake-judge")


class FakeClient:
    """Answers every chat call with a fixed result and records the calls."""

    provenance = Provenance(backend="fake", model="fake-judge")

    def __init__(self, result: FakeResult):
        self.result = result
        self.calls: list[dict] = []

    async def chat(self, messages, *, schema=None, prompt_version="", **params):
        self.calls.append({"messages": messages, "schema": schema, "prompt_version": prompt_version, **params})
        return self.result


def run(coro):
    return asyncio.run(coro)


def test_legacy_parse_pitfall():
    assert legacy_parse("A") == "correct"
    assert legacy_parse("The grade is B") == "incorrect"
    # the original parser finds the C inside the word CORRECT -> not_attempted
    assert legacy_parse("CORRECT") == "not_attempted"
    assert legacy_parse("INCORRECT") == "not_attempted"
    assert legacy_parse("no letter here") == "not_attempted"
    # the strict parser refuses the same prose instead of guessing
    assert strict_parse("CORRECT") is None


def test_strict_parse():
    ok = strict_parse('{"label": "correct", "rationale": "matches"}')
    assert ok is not None and ok.label == "correct"
    fenced = strict_parse('```json\n{"label": "not_attempted", "rationale": "abstains"}\n```')
    assert fenced is not None and fenced.label == "not_attempted"
    assert strict_parse('{"label": "Correct", "rationale": ""}') is None  # wrong case
    assert strict_parse('Sure! {"label": "correct", "rationale": ""}') is None  # prose around it
    assert strict_parse('{"label": "correct", "extra": 1}') is None
    assert strict_parse("") is None


def test_judge_answer_ok_uses_schema_and_temperature_zero():
    client = FakeClient(FakeResult("ok", text='{"label": "incorrect", "rationale": "wrong city"}'))
    v = run(judge_answer(client, "Which city?", "Paris", "Lyon", sample_id="s1"))
    assert isinstance(v, Verdict)
    assert v.label == "incorrect" and v.value == 0.0 and v.rationale == "wrong city"
    assert v.judge is not None and v.judge.prompt_version == PROMPT_VERSION
    call = client.calls[0]
    assert call["temperature"] == 0.0 and call["prompt_version"] == PROMPT_VERSION
    assert call["schema"] is not None
    assert "Paris" in call["messages"][0]["content"] and "Lyon" in call["messages"][0]["content"]


def test_judge_answer_data_dict():
    client = FakeClient(FakeResult("ok", data={"label": "correct", "rationale": "same"}))
    v = run(judge_answer(client, "q", "a", "a"))
    assert v.label == "correct" and v.value == 1.0


def test_judge_answer_invalid_and_error():
    bad = run(judge_answer(FakeClient(FakeResult("ok", text="CORRECT")), "q", "a", "a"))
    assert bad.label == "invalid" and bad.value is None
    inv = run(judge_answer(FakeClient(FakeResult("invalid", text="???", reason="schema mismatch")), "q", "a", "a"))
    assert inv.label == "invalid" and "schema mismatch" in inv.rationale
    err = run(judge_answer(FakeClient(FakeResult("error", reason="HTTP 503 after retries")), "q", "a", "a"))
    assert err.label is None and err.rationale.startswith("error:") and "503" in err.rationale


def test_a_reply_the_judge_refuses_is_rejected_so_the_cache_forgets_it():
    """A reply the client took (status ok) but that is not the contract: the judge calls reject(),
    which is what keeps the response cache from serving it to --resume (ARCHITECTURE.md)."""
    res = FakeResult("ok", text="I think it is right.")
    reasons: list[str] = []
    res.reject = lambda why: (reasons.append(why), __import__("kbvqa.runner", fromlist=["Invalid"]).Invalid(why))[1]
    bad = run(judge_answer(FakeClient(res), "q", "a", "a"))
    assert bad.label == "invalid" and reasons == ["reply is not the JSON {label, rationale} object"]
    inv = FakeResult("invalid", text="???", reason="schema mismatch")  # refused by the client: never cached
    inv.reject = lambda why: reasons.append("should not be called")
    assert run(judge_answer(FakeClient(inv), "q", "a", "a")).label == "invalid" and len(reasons) == 1


def test_unknown_prompt_version():
    with pytest.raises(ValueError, match="unknown judge prompt version"):
        build_judge_messages("q", "a", "b", prompt_version="nope")


def test_simpleqa_metrics_formulas():
    labels = ["correct"] * 6 + ["incorrect"] * 2 + ["not_attempted"] * 1 + ["invalid"] + [None]
    m = simpleqa_metrics(labels)
    n = 11
    assert m["n"] == n
    assert m["correct"] == pytest.approx(6 / n)
    assert m["incorrect"] == pytest.approx(2 / n)
    assert m["not_attempted"] == pytest.approx(1 / n)
    assert m["invalid"] == pytest.approx(1 / n) and m["error"] == pytest.approx(1 / n)
    aga = (6 / n) / (8 / n)
    assert m["accuracy_given_attempted"] == pytest.approx(0.75) == pytest.approx(aga)
    assert m["f1"] == pytest.approx(2 * aga * (6 / n) / (aga + 6 / n))
    zero = simpleqa_metrics(["not_attempted", "invalid"])
    assert zero["accuracy_given_attempted"] == 0.0 and zero["f1"] == 0.0
    assert simpleqa_metrics([])["n"] == 0
    with pytest.raises(ValueError):
        simpleqa_metrics(["maybe"])
    # Verdicts are accepted directly
    assert simpleqa_metrics([Verdict(sample_id="x", metric="m", label="correct")])["correct"] == 1.0


def test_prompt_is_json_contract():
    content = build_judge_messages("q", "a", "b")[0]["content"]
    assert '"label"' in content and "not_attempted" in content and "significant figure" in content
    json.dumps(content)  # plain string, serialisable
