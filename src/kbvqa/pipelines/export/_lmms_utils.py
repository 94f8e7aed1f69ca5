"""lmms-eval task functions for a kbvqa benchmark, written by `kbvqa export lmms-eval` (the YAML beside
this file names them with `!function utils.<name>`). Signatures as in lmms-eval's
lmms_eval/tasks/simplevqa/utils.py (@75571cf): doc_to_visual(doc), doc_to_text(doc,
lmms_eval_specific_kwargs=None), process_results(doc, results), aggregation(values).

Scoring is kbvqa's, imported from kbvqa.evaluate: InfoSeek's official per-item rules (plus the
official final score over the splits) or E-VQA exact match. A judged set (NoteVQA layout, open
answers) is not graded inside lmms-eval: each doc's metric records its id and prediction, and the
grade comes after the run (`kbvqa score convert-predictions <samples file> --method lmms-eval -r
samples.jsonl`, then `kbvqa score judge`), so a failed or unparseable judge call is counted as
`error` / `invalid` by kbvqa instead of falling back to exact match. This file is kbvqa's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SETTINGS: dict[str, Any] = json.loads((HERE / "kbvqa_export.json").read_text(encoding="utf-8"))
SAMPLES = HERE / SETTINGS["samples"]
_REFS: dict[str, Any] = {}


def _refs() -> Any:
    """The references, read once with kbvqa's loader for the benchmark's scorer."""
    if "refs" not in _REFS:
        if SETTINGS["scorer"] == "infoseek":
            from kbvqa.evaluate.io import load_infoseek_references

            _REFS["refs"] = load_infoseek_references(SAMPLES, keep_raw=False)
        elif SETTINGS["scorer"] == "evqa":
            from kbvqa.evaluate.evqa import load_evqa_references

            _REFS["refs"] = load_evqa_references(SAMPLES)
        else:
            _REFS["refs"] = {}
    return _REFS["refs"]


def kbvqa_doc_to_visual(doc: dict[str, Any]) -> list[Any]:
    """The doc's images (paths relative to this folder) as RGB PIL images."""
    from PIL import Image

    out = []
    for p in doc["images"]:
        with Image.open(HERE / p) as im:
            out.append(im.convert("RGB"))
    return out


def kbvqa_doc_to_text(doc: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None) -> str:
    kw = lmms_eval_specific_kwargs or {}
    return f"{kw.get('pre_prompt', '')}{doc['question']}{kw.get('post_prompt', '')}"


def kbvqa_doc_to_target(doc: dict[str, Any]) -> str:
    return doc["answers"][0] if doc["answers"] else ""


def kbvqa_process_results(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """One doc's prediction scored by kbvqa: {metric: {"id", "prediction", "correct", "status"}}."""
    from kbvqa.evaluate.io import PredictionRecord

    pred = results[0] if results else None
    pred = pred if isinstance(pred, str) or pred is None else str(pred)
    sid = doc["id"]
    row: dict[str, Any] = {"id": sid, "prediction": pred, "status": "ok"}
    if SETTINGS["scorer"] == "judge":
        return {"kbvqa_answered": {**row, "correct": None, "status": "needs_judge"}}
    refs = _refs()
    one = [PredictionRecord(sid, pred, 0)]
    if SETTINGS["scorer"] == "infoseek":
        from kbvqa.evaluate.infoseek import score_strict

        item = score_strict(one, {sid: refs[sid]}, per_item=True, time_leniency=False).items[0]
        row.update(correct=bool(item["correct"]), scorer="infoseek-official")
        return {"kbvqa_accuracy": row, "kbvqa_unscored": row, "kbvqa_infoseek_final": row}
    from kbvqa.evaluate.evqa import score_evqa

    item = score_evqa(one, {sid: refs[sid]}, per_item=True).items[0]
    row.update(correct=bool(item["correct"]), scorer="evqa-em")
    return {"kbvqa_accuracy": row, "kbvqa_unscored": row}


def kbvqa_aggregate_accuracy(values: list[dict[str, Any]]) -> float:
    """Correct / scored docs; a doc kbvqa could not score (status other than ok) is left out and
    counted by kbvqa_unscored, never taken as wrong."""
    scored = [v for v in values if v["status"] == "ok"]
    return sum(1 for v in scored if v["correct"]) / len(scored) if scored else float("nan")


def kbvqa_aggregate_count(values: list[dict[str, Any]]) -> int:
    """kbvqa_unscored: the docs kbvqa could not score."""
    return sum(1 for v in values if v["status"] != "ok")


def kbvqa_aggregate_answered(values: list[dict[str, Any]]) -> int:
    """kbvqa_answered (a judged set): docs with a non-empty prediction, waiting for kbvqa's judge."""
    return sum(1 for v in values if v["prediction"])


def kbvqa_aggregate_infoseek_final(values: list[dict[str, Any]]) -> float:
    """InfoSeek's official final score (harmonic mean over the splits) of these predictions."""
    from kbvqa.evaluate.infoseek import score_official
    from kbvqa.evaluate.io import PredictionRecord

    preds = [PredictionRecord(v["id"], v["prediction"], i) for i, v in enumerate(values)]
    return float(score_official(preds, _refs()).summary["final_score"])
