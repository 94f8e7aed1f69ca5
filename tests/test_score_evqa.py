"""E-VQA exact match, multi_answer IoU, `|` max, 2_hop reporting, loud errors, LLM-judge fallback."""

from __future__ import annotations

import json

import pytest

from kbvqa.data.schema import Provenance
from kbvqa.evaluate.evqa import (exact_match, load_bem, load_evqa_references, multi_answer_iou, score_evqa,
                                 LLMJudgeBackend)
from kbvqa.evaluate.io import PredictionRecord, ScoreInputError


def P(did, pred):
    return PredictionRecord(did, pred, 0)


CSV = (
    "data_id,question,answer,question_type\n"
    "a1,What bird?,The Blue Jay|Cyanocitta cristata,automatic\n"
    "a2,How many?,three,templated\n"
    "m1,Which colours?,red&&green&&blue,multi_answer\n"
    "m2,Which two?,oak&&ash|elm&&yew,multi_answer\n"
    "h1,Who designed it?,Gustave Eiffel,2_hop\n"
    "x1,Missing pred?,foo,automatic\n"
)


@pytest.fixture()
def refs(tmp_path):
    p = tmp_path / "evqa.csv"
    p.write_text(CSV, encoding="utf-8")
    return load_evqa_references(p)


def test_single_exact_match_and_alternatives(refs):
    assert exact_match(refs["a1"], "blue jay")
    assert exact_match(refs["a1"], "Cyanocitta cristata.")  # second | alternative
    assert not exact_match(refs["a1"], "a jay")
    assert exact_match(refs["a2"], "3")  # number words -> digits on both sides
    assert exact_match(refs["a2"], "The answer is three")


def test_multi_answer_iou(refs):
    parts = refs["m1"].norm[0]
    assert multi_answer_iou(parts, "red, green and blue") == 1.0
    assert multi_answer_iou(parts, "red & green") == pytest.approx(2 / 3)
    assert exact_match(refs["m1"], "red & green")  # IoU 2/3 >= 0.5
    assert multi_answer_iou(parts, "red, purple") == pytest.approx(1 / 4)
    assert not exact_match(refs["m1"], "red, purple")
    assert multi_answer_iou(parts, "red, green, purple, black") == pytest.approx(2 / 5)
    # max over | alternatives
    assert exact_match(refs["m2"], "elm and yew") and exact_match(refs["m2"], "oak, ash")
    assert not exact_match(refs["m2"], "oak, yew, pine")  # IoU 1/4 vs either alternative


def test_score_summary_coverage_and_two_hop(refs):
    preds = [P("a1", "Blue Jay"), P("a2", "four"), P("m1", "red, green"), P("m2", "pine"),
             P("h1", "Gustave Eiffel"), P("zz", "unknown id"), P("a2", "3")]
    res = score_evqa(preds, refs, per_item=True)
    s = res.summary
    assert s["scorer"] == "evqa-em"
    assert s["n"] == 6 and s["n_predicted"] == 5 and s["n_missing"] == 1
    assert s["n_unknown_ids"] == 1 and s["n_duplicate_predictions"] == 1  # last a2 ("3") wins
    assert s["correct"] == 4  # a1, a2, m1, h1
    assert s["accuracy"] == round(100 * 4 / 6, 2)
    assert s["by_question_type"]["2_hop"] == {"accuracy": 100.0, "correct": 1, "n": 1, "n_predicted": 1}
    assert s["accuracy_excluding_2_hop"] == 60.0 and s["n_excluding_2_hop"] == 5
    assert all(i["scorer"] == "evqa-em" for i in res.items)
    assert [i["data_id"] for i in res.items if i["missing"]] == ["x1"]


def test_empty_reference_is_loud(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("data_id,question,answer,question_type\nok,q,fine,automatic\nb7,q,The,automatic\n",
                 encoding="utf-8")
    with pytest.raises(ScoreInputError) as ei:
        load_evqa_references(p)
    msg = str(ei.value)
    assert "bad.csv:3" in msg and "b7" in msg and "empty" in msg


def test_unknown_question_type_and_missing_id(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("data_id,question,answer,question_type\nq1,q,x,infoseek\n", encoding="utf-8")
    with pytest.raises(ScoreInputError, match="unknown E-VQA question type"):
        load_evqa_references(p)
    p.write_text("question,answer,question_type\nq,x,automatic\n", encoding="utf-8")
    with pytest.raises(ScoreInputError, match="data_id"):
        load_evqa_references(p)


def test_kbvqa_jsonl_references(tmp_path):
    p = tmp_path / "r.jsonl"
    rows = [{"id": "k1", "question": "q", "question_type": "multi_answer",
             "answers": [{"text": "oak&&ash", "parts": ["oak", "ash"]}]},
            {"id": "k2", "question": "q", "question_type": "automatic", "answers": ["Mount Fuji"]}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    refs = load_evqa_references(p)
    assert refs["k1"].norm == [frozenset({"oak", "ash"})]
    assert exact_match(refs["k2"], "mount fuji")


def test_bem_not_available():
    with pytest.raises(RuntimeError, match="BEM backend not available"):
        load_bem("/nonexistent/bem")


class _Res:
    def __init__(self, status, data=None, reason=""):
        self.status, self.data, self.text, self.reason = status, data, None, reason
        self.provenance = Provenance(backend="fake", model="judge-x")


class FakeJudge:
    """Says 'correct' when the candidate contains 'jay', errors on 'boom', else 'incorrect'."""

    provenance = Provenance(backend="fake", model="judge-x")

    def __init__(self):
        self.n = 0

    async def chat(self, messages, *, schema=None, prompt_version="", **params):
        self.n += 1
        content = messages[0]["content"]
        answer = content.split("Answer to grade:")[1].split("\n")[0]
        if "boom" in answer:
            return _Res("error", reason="timeout")
        label = "correct" if "jay" in answer.lower() else "incorrect"
        return _Res("ok", data={"label": label, "rationale": "fake"})


def test_llm_judge_fallback(refs):
    judge = FakeJudge()
    backend = LLMJudgeBackend(judge)
    preds = [P("a1", "It looks like a blue jay bird"), P("a2", "3"), P("m1", "boom"), P("x1", "bar")]
    res = score_evqa(preds, refs, backend=backend, per_item=True)
    s = res.summary
    assert s["scorer"] == "evqa-em+llm-judge(judge-x)"
    assert judge.n == 3  # only EM failures with a prediction go to the judge (a1, m1, x1)
    items = {i["data_id"]: i for i in res.items}
    assert items["a1"]["correct"] and not items["a1"]["em"] and items["a1"]["scorer"] == backend.name
    assert items["a2"]["scorer"] == "evqa-em"
    assert items["m1"]["judge_label"] is None and not items["m1"]["correct"]
    assert s["judge"]["n_calls"] == 3 and s["judge"]["n_rescued"] == 1 and s["judge"]["n_error"] == 1
    assert s["n_em_correct"] == 1 and s["correct"] == 2
