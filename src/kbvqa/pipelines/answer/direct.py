"""The `direct` answer pipeline: single-pass answering, the no-retrieval baseline of seed 001 (Table 2,
Fig. 2). The `answerer` role (`--llm URL --model M`, or `[models.answerer]`) answers each sample from
its image(s) and question with no retrieval and no tools (kbvqa.stages.answer.direct), through the
same runner and in the same Prediction format as the other presets, so `kbvqa study retrieval-2x2`
and `study agent-tools --baseline-verdicts` can pair it with an agent run of the same model.

Without an answerer it refuses to start (there is no offline stand-in for a model's own knowledge),
and it takes no retrieval settings: an image index, or a retrieval or agent flag, given to it is an
error, not ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from kbvqa.pipelines import PIPELINES
from kbvqa.pipelines.answer.options import AnswerOptions
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context

NEEDS_ANSWERER = "--pipeline direct needs an answerer model: --llm URL --model NAME, or [models.answerer] in --config"


def build_direct_job(options: AnswerOptions, *, kb: Any = None, roles: Mapping[str, Any] | None = None,
                     index: Any = None, encoder: Any = None, image_root: Path | None = None) -> Job:
    """The direct Job: one DirectAnswer stage running with `options.direct`; `kb` is accepted (the
    command line may open one) but never read."""
    from kbvqa.stages.answer.direct import DirectAnswer

    roles = dict(roles or {})
    if roles.get("answerer") is None:
        raise ValueError(NEEDS_ANSWERER)
    if index is not None:
        raise ValueError("--pipeline direct answers without retrieval: drop --index")
    stage = DirectAnswer(options.direct)
    return Job([stage], Context(kb=kb, roles=roles, resources={"image_root": image_root}), description="direct",
               run_config={"pipeline": "direct", "retrieval": None, "tools": None, "options": options.used()})


PIPELINES.add("direct", build_direct_job, kind="answer", job=True, roles=("answerer",), options=("direct",),
              help="single pass: the answerer role answers from the image(s) and question, no retrieval, no tools")
