"""The stage contract shared by every pipeline and the runner.

A stage is a name, a version, a pydantic config and `async run(record, ctx) -> record`. Records are
JSON-ready dicts with a string `id` (usually a dumped Sample or Prediction), so the runner can stream,
resume and hand them to Ray without knowing their type. Stages never open files or sockets: `ctx`
gives them the model roles, the KB and a logger.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

from kbvqa.data.schema import Usage


class Invalid(Exception):
    """A model reply (or other input) could not be interpreted. The record ends `invalid` with this
    reason, is retried on resume, and is never given a default label."""


class StageConfig(BaseModel):
    """Base for stage configs; subclasses add typed fields."""


@dataclass
class Context:
    """What a stage may touch. `roles` maps a role name (verifier, judge, answerer, ...) to a model
    client (or a list of clients); `kb` is a KB store (kb.base.KnowledgeBase) or None. `usage`
    accumulates tokens, cost and calls over a run so the runner can put them in the manifest."""

    roles: dict[str, Any] = field(default_factory=dict)
    kb: Any = None
    config: dict[str, Any] = field(default_factory=dict)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("kbvqa"))
    usage: Usage = field(default_factory=Usage)

    def add_usage(self, usage: Usage | dict[str, Any] | None) -> Usage:
        """Add one call's (or one record's) usage to the run total and return the new total.

        Call it from the event-loop thread (stages and async clients do): the update is a plain
        read-modify-write with no lock, which is safe there because asyncio never switches tasks
        inside it. A dict is validated as a Usage so a typo'd field fails loudly."""
        if usage is None:
            return self.usage
        if not isinstance(usage, Usage):
            usage = Usage.model_validate(usage)
        self.usage = self.usage.add(usage)
        return self.usage

    def role(self, name: str) -> Any:
        if name not in self.roles:
            raise KeyError(f"model role {name!r} is not configured (configured: {sorted(self.roles)})")
        return self.roles[name]


class Stage:
    """Subclass and implement `run`. `prompts` names the registered prompts (stages.prompts) the stage
    may send; `prompt_versions` turns them into {id: sha256} so the run manifest records their hashes."""

    name: ClassVar[str] = "stage"
    version: ClassVar[str] = "1"
    config_model: ClassVar[type[StageConfig]] = StageConfig
    prompts: ClassVar[tuple[Any, ...]] = ()

    def __init__(self, config: StageConfig | None = None):
        self.config = config or self.config_model()

    def prompt_versions(self) -> dict[str, str]:
        return {p.id: p.sha256 for p in self.prompts}

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError
