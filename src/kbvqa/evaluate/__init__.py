"""Metrics and scorers (InfoSeek, E-VQA, short-answer judge, retrieval) and studies.

`METRICS` names every scorer with a one-line help, so the command line and configs offer the
registered names (`kbvqa score infoseek --mode {official,strict,reward}`) instead of restating them.
Each entry's `family` is the command that runs it; InfoSeek entries also carry their `mode` and
whether they need the raw reference aliases (`raw_aliases`, the reward mode).
"""

from kbvqa.registry import Registry

METRICS: Registry = Registry("metric", group_by="family", modules={
    "infoseek": ("kbvqa.evaluate.infoseek",), "evqa": ("kbvqa.evaluate.evqa",), "judge": ("kbvqa.evaluate.judge",),
    "retrieval": ("kbvqa.evaluate.retrieval",), "rubric": ("kbvqa.evaluate.ivr12",),
})


def infoseek_modes() -> list[str]:
    """The registered InfoSeek modes, in registration order (official first: the default)."""
    return [METRICS.entry(n).info["mode"] for n in METRICS.names(family="infoseek")]
