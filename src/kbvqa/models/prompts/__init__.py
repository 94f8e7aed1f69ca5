"""Every prompt kbvqa sends: one versioned registry, the only place their wording lives.

Why a registry: a verdict is only reproducible if we know exactly which instructions produced it.
Every prompt has a name, a version and a sha256 over its text; stages put `name@version` and the
hash in each verdict's provenance and in the run manifest (`Stage.prompt_versions`). Changing the
wording of a prompt means bumping its version (a test pins every hash), so old and new verdicts are
never confused. The prompts themselves live in this package, one file per family (`audit`,
`answer`, `augment`, `judge`); importing the package registers all of them.

Prompts are `str.format` templates. Values are inserted as JSON strings where they come from the
data (question, answers, evidence), so quotes or braces in a question cannot break the layout; a
field whose name ends in `_raw` is inserted as written (for text the model should read verbatim).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from kbvqa.registry import Registry

JSON_ONLY = "Reply with one JSON object and nothing else."


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    system: str
    user: str
    fields: tuple[str, ...] = field(default=())
    system_fields: tuple[str, ...] = field(default=())  # filled into the system text (a template then)

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(f"{self.system}\n\x00\n{self.user}".encode("utf-8")).hexdigest()

    def _fill(self, template: str, names: tuple[str, ...], values: dict[str, Any]) -> str:
        filled = {k: (values[k] if isinstance(values[k], str) and k.endswith("_raw")
                      else json.dumps(values[k], ensure_ascii=False)) for k in names}
        return template.format(**filled)

    def _check(self, values: dict[str, Any]) -> None:
        declared = (*self.fields, *self.system_fields)
        missing = [f for f in declared if f not in values]
        extra = [k for k in values if k not in declared]
        if missing or extra:
            raise KeyError(f"prompt {self.id}: missing fields {missing}, unexpected {extra}")

    def render(self, **values: Any) -> str:
        """The user text with `values` filled in; every declared field must be given (no silent blanks)."""
        self._check(values)
        return self._fill(self.user, self.fields, values)

    def render_system(self, **values: Any) -> str:
        """The system text, with `system_fields` filled in when it is a template."""
        self._check(values)
        return self._fill(self.system, self.system_fields, values) if self.system_fields else self.system

    def messages(self, images: Iterable[str | Path] = (), **values: Any) -> list[dict[str, Any]]:
        """Chat messages: the system text (when there is one), then the user text with any images."""
        from kbvqa.models.images import user_message

        system = [{"role": "system", "content": self.render_system(**values)}] if self.system else []
        return [*system, user_message(self.render(**values), images)]

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "sha256": self.sha256}


PROMPTS: Registry[Prompt] = Registry("prompt", modules=("kbvqa.models.prompts.audit", "kbvqa.models.prompts.answer",
                                                        "kbvqa.models.prompts.augment", "kbvqa.models.prompts.agent",
                                                        "kbvqa.models.prompts.judge", "kbvqa.models.prompts.ivr12",
                                                        "kbvqa.models.prompts.reference",
                                                        "kbvqa.models.prompts.ablation",
                                                        "kbvqa.models.prompts.curate",
                                                        "kbvqa.models.prompts.direct"))


def register(p: Prompt) -> Prompt:
    PROMPTS.add(p.name, p)
    return p


def get(name: str) -> Prompt:
    """A prompt by name (`audit.verify_section`) or id (`audit.verify_section@1`)."""
    base, _, version = name.partition("@")
    p = PROMPTS.get(base)
    if version and p.version != version:
        raise KeyError(f"prompt {base!r} is at version {p.version}, not {version}")
    return p


def all_prompts() -> dict[str, Prompt]:
    return {e.name: e.obj for e in PROMPTS}
