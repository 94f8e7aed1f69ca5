"""A kbvqa benchmark as an inspect_ai task, written by `kbvqa export inspect` (run it from this folder:
`inspect eval task.py --model <provider/model>`; for a judged set add `--model-role grader=<model>`).

Each sample is one user message (the query image(s), then the question); the target is the sample's
accepted answers; the scorer is kbvqa's for the benchmark (kbvqa_export.json names it), imported from
kbvqa.evaluate: InfoSeek's official per-item rules, E-VQA exact match (then BEM with bem_dir), or the
SimpleQA-style judge asked through inspect's `grader` role. A judge reply that is not the
{label, rationale} object (kbvqa's `invalid`) and a failed grader call (kbvqa's `error`) are unscored
(`Score.unscored`, left out of every metric, the reason in `Score.reason` and metadata), never
INCORRECT; a not-attempted answer is NOANSWER, which inspect's accuracy counts as 0 as kbvqa does.
This file is kbvqa's; it changes nothing in inspect_ai.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (ChatMessageSystem, ChatMessageUser, ContentImage, ContentText, GenerateConfig,
                              get_model)
from inspect_ai.scorer import (CORRECT, INCORRECT, NOANSWER, Score, SampleScore, Target, accuracy, metric, scorer,
                               stderr)
from inspect_ai.solver import TaskState, generate

HERE = Path(__file__).resolve().parent
SETTINGS: dict[str, Any] = json.loads((HERE / "kbvqa_export.json").read_text(encoding="utf-8"))
SAMPLES = HERE / SETTINGS["samples"]


def _records() -> list[dict[str, Any]]:
    with SAMPLES.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _answers(rec: dict[str, Any]) -> list[str]:
    from kbvqa.evaluate.io import kbvqa_alternatives

    return kbvqa_alternatives(rec.get("answers") or [], SAMPLES, 0)


def kbvqa_dataset() -> MemoryDataset:
    """The exported samples: image(s) then question as one user message; images relative to this file."""
    samples = []
    for rec in _records():
        content: list[Any] = [ContentImage(image=str(HERE / p)) for p in rec.get("images", [])]
        content.append(ContentText(text=rec["question"]))
        meta = {k: rec[k] for k in ("split", "question_type", "answer_type", "dataset") if rec.get(k) is not None}
        samples.append(Sample(id=rec["id"], input=[ChatMessageUser(content=content)], target=_answers(rec),
                              metadata={"question": rec["question"], **meta}))
    return MemoryDataset(samples, name=SETTINGS.get("name") or HERE.name)


def _verdict(correct: bool, answer: str, name: str, **meta: Any) -> Score:
    return Score(value=CORRECT if correct else INCORRECT, answer=answer,
                 metadata={"kbvqa_scorer": name, "kbvqa_status": "ok", **meta})


# --------------------------------------------------------------------------------------------------
# InfoSeek


@metric
def infoseek_official_final() -> Any:
    """The official InfoSeek final score (harmonic mean of the two splits' scores, as kbvqa's
    score_official computes it) over the samples scored."""
    def compute(scores: list[SampleScore]) -> float:
        from kbvqa.evaluate.infoseek import score_official
        from kbvqa.evaluate.io import PredictionRecord, load_infoseek_references

        refs = load_infoseek_references(SAMPLES, keep_raw=False)
        preds = [PredictionRecord(str(s.sample_id), s.score.answer, i) for i, s in enumerate(scores)]
        return float(score_official(preds, refs).summary["final_score"])

    return compute


@scorer(metrics=[accuracy(), stderr(), infoseek_official_final()])
def kbvqa_infoseek() -> Any:
    """InfoSeek's official per-item rules (kbvqa.evaluate.infoseek; no Time leniency)."""
    from kbvqa.evaluate.infoseek import score_strict
    from kbvqa.evaluate.io import PredictionRecord, load_infoseek_references

    refs = load_infoseek_references(SAMPLES, keep_raw=False)

    async def score(state: TaskState, target: Target) -> Score:
        sid = str(state.sample_id)
        answer = state.output.completion
        item = score_strict([PredictionRecord(sid, answer, 0)], {sid: refs[sid]}, per_item=True,
                            time_leniency=False).items[0]
        return _verdict(item["correct"], answer, "infoseek-official", data_split=item["data_split"],
                        question_type=item["question_type"])

    return score


# --------------------------------------------------------------------------------------------------
# E-VQA


@scorer(metrics=[accuracy(), stderr()])
def kbvqa_evqa(bem_dir: str | None = None) -> Any:
    """E-VQA exact match (kbvqa.evaluate.evqa), then BEM >= 0.5 when `bem_dir` names a local BEM model."""
    from kbvqa.evaluate.evqa import load_bem, load_evqa_references, score_evqa
    from kbvqa.evaluate.io import PredictionRecord

    refs = load_evqa_references(SAMPLES)
    backend = load_bem(bem_dir) if bem_dir else None

    async def score(state: TaskState, target: Target) -> Score:
        sid = str(state.sample_id)
        answer = state.output.completion
        res = score_evqa([PredictionRecord(sid, answer, 0)], {sid: refs[sid]}, backend=backend, per_item=True)
        item = res.items[0]
        if "judge_label" in item and item["judge_label"] in ("invalid", None):  # BEM gave no grade
            status = "invalid" if item["judge_label"] == "invalid" else "error"
            return Score.unscored(reason="grader_failed", answer=answer,
                                  metadata={"kbvqa_scorer": res.summary["scorer"], "kbvqa_status": status,
                                            "rationale": item.get("judge_rationale")})
        return _verdict(item["correct"], answer, res.summary["scorer"], question_type=item["question_type"],
                        em=item["em"])

    return score


# --------------------------------------------------------------------------------------------------
# SimpleQA-style judge


def _chat(messages: list[dict[str, Any]]) -> list[Any]:
    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser}
    return [kinds[m["role"]](content=m["content"]) for m in messages]


@scorer(metrics=[accuracy(), stderr()])
def kbvqa_judge(temperature: float = 0.0) -> Any:
    """The SimpleQA-style judge with kbvqa's prompts and strict parser (kbvqa.evaluate.judge), asked
    through the `grader` role (inspect falls back to the model under test when no grader is bound)."""
    from kbvqa.evaluate.judge import (METRIC, PARAGRAPH_PROMPT_VERSION, PROMPT_VERSION, build_judge_messages,
                                      gold_kind, strict_parse)

    refs = json.loads((HERE / SETTINGS["judge_references"]).read_text(encoding="utf-8"))

    async def score(state: TaskState, target: Target) -> Score:
        sid = str(state.sample_id)
        ref = refs[sid]
        answer = state.output.completion
        kind, why = gold_kind(ref["target"], ref.get("layout") or "")
        version = PARAGRAPH_PROMPT_VERSION if kind == "paragraph" else PROMPT_VERSION
        meta: dict[str, Any] = {"kbvqa_scorer": METRIC, "rubric": {"prompt": version, "gold": kind, "why": why}}
        if not answer:  # no answer: not attempted, no call (as `kbvqa score judge`)
            return Score(value=NOANSWER, answer=answer, explanation="no answer",
                         metadata={**meta, "kbvqa_status": "ok", "label": "not_attempted"})
        messages = build_judge_messages(ref["question"], ref["target"], answer, prompt_version=version)
        try:
            out = await get_model(role="grader").generate(_chat(messages), config=GenerateConfig(
                temperature=temperature))
            if out.error:
                raise RuntimeError(out.error)
        except Exception as exc:  # a failed grader call is kbvqa's `error`: no grade
            return Score.unscored(reason="grader_failed", answer=answer, explanation=f"error: {exc}",
                                  metadata={**meta, "kbvqa_status": "error", "label": None})
        reply = strict_parse(out.completion)
        if reply is None:  # kbvqa's `invalid`: the reply is not the {label, rationale} object
            return Score.unscored(reason="grader_failed", answer=answer,
                                  explanation="invalid: reply is not the JSON {label, rationale} object",
                                  metadata={**meta, "kbvqa_status": "invalid", "label": "invalid",
                                            "grader_reply": out.completion})
        value = {"correct": CORRECT, "incorrect": INCORRECT, "not_attempted": NOANSWER}[reply.label]
        return Score(value=value, answer=answer, explanation=reply.rationale,
                     metadata={**meta, "kbvqa_status": "ok", "label": reply.label})

    return score


@task
def kbvqa_benchmark(bem_dir: str | None = None, max_tokens: int | None = None) -> Task:
    """The exported benchmark with its kbvqa scorer (kbvqa_export.json: `scorer`)."""
    kind = SETTINGS["scorer"]
    chosen = {"infoseek": kbvqa_infoseek, "evqa": lambda: kbvqa_evqa(bem_dir), "judge": kbvqa_judge}[kind]()
    return Task(dataset=kbvqa_dataset(), solver=generate(), scorer=chosen,
                config=GenerateConfig(max_tokens=max_tokens) if max_tokens else GenerateConfig(),
                metadata={"kbvqa_export": SETTINGS})
