"""Small units of work with a typed config, run by the runner over records, grouped by family
(`audit/`, `answer/`, ...). `STAGES` names every stage class, so configs and the command line can
refer to stages by name (`[audit] stages = ["verify", "derive", ...]`)."""

from kbvqa.registry import Registry

STAGES: Registry = Registry("stage", modules=(
    "kbvqa.stages.audit.verify", "kbvqa.stages.audit.derive", "kbvqa.stages.audit.posedness",
    "kbvqa.stages.audit.leakage", "kbvqa.stages.answer.retrieve", "kbvqa.stages.answer.identify",
    "kbvqa.stages.answer.rerank", "kbvqa.stages.answer.extractive", "kbvqa.stages.answer.generate",
    "kbvqa.stages.answer.direct",
    "kbvqa.stages.agent.react", "kbvqa.stages.augment.types",
))


def register_stage(cls):
    """Class decorator: register a Stage subclass under its `name`, in its family (the folder)."""
    parts = cls.__module__.split(".")
    family = parts[2] if cls.__module__.startswith("kbvqa.stages.") else parts[1] if parts[0] == "kbvqa" else "external"
    STAGES.add(cls.name, cls, family=family)
    return cls
