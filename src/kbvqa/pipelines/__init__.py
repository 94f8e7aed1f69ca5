"""Pipelines compose stages into Jobs (audit, augment, answer, index, score, ...).

`PIPELINES` names the answer presets (`kbvqa answer --pipeline NAME`); each entry builds the stage
list of a `kbvqa.runner.job.Job`. New presets (the search agent) register here too.
"""

from kbvqa.registry import Registry

PIPELINES: Registry = Registry("pipeline", modules=("kbvqa.pipelines.answer.rag", "kbvqa.pipelines.answer.agent",
                                                    "kbvqa.pipelines.answer.direct"))
