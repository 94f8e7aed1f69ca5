"""Strict reply models: the base class every LLM stage's reply schema derives from, and the one
placeholder check.

Why: a lax reply model turns model noise into data. Seen in the field: a posedness schema with every
field optional accepted `{}` as "the question is clear", and an answerer accepted an echo of its
prompt's own example, `{"answer": "..."}`, as the answer "...". So every reply model

- names the fields the stage decides on as **required** (nullable where the prompt says "or null",
  but the key must be there);
- uses **closed label sets** (`Literal`) and strict scalars (`StrictBool`, `StrictInt`: "false" is
  not a boolean, "3" is not a passage number);
- **rejects placeholders copied from the prompt** in every string it holds (`placeholder_reason`):
  a value that is only an ellipsis ("...", "…"), a whole template slot ("<string>",
  "<one sentence>", "<string or null>"), or one of the reply model's own `placeholder_examples`
  (words the prompt's reply template shows as an example, e.g. "title" for the entity identifier).

A reply that fails any of this is `invalid` (the client's `interpret_reply`, or `ChatResult.reply`),
never a label and never an answer. Empty strings are not placeholders: where a field must say
something, the model uses `NonBlank`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, StringConstraints, model_validator

__all__ = ["NonBlank", "Reply", "is_placeholder", "not_placeholder", "placeholder_reason"]

#: A string the stage needs to say something: surrounding whitespace stripped, at least one character.
NonBlank = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

_ELLIPSIS = re.compile(r"^[\s.…·]*[.…][\s.…·]*$")  # "...", "…", ". . .", "……"
_SLOT = re.compile(r"^<[^<>]+>$")  # one whole template slot: "<string>", "<one sentence, quoting ...>"
_QUOTES = "\"'`“”‘’"


def placeholder_reason(value: str, examples: Iterable[str] = ()) -> str | None:
    """Why `value` is a placeholder copied from a prompt's reply template, or None when it is not.

    Checked on the stripped value (and without surrounding quotes, so '"..."' counts too); the
    comparison with `examples` ignores case. An empty string is not a placeholder (see `NonBlank`)."""
    v = value.strip().strip(_QUOTES).strip()
    if not v:
        return None
    if _ELLIPSIS.match(v):
        return "an ellipsis copied from the prompt's reply template"
    if _SLOT.match(v):
        return "a template slot copied from the prompt"
    folded = v.casefold()
    if any(folded == e.casefold() for e in examples):
        return "the example value of the prompt's reply template"
    return None


def is_placeholder(value: Any, examples: Iterable[str] = ()) -> bool:
    return isinstance(value, str) and placeholder_reason(value, examples) is not None


def not_placeholder(value: str, examples: Iterable[str] = (), *, field: str = "value") -> str:
    """`value` unchanged, or ValueError naming the field and the placeholder (for field validators)."""
    why = placeholder_reason(value, examples)
    if why is not None:
        raise ValueError(f"{field}: {value!r} is {why}, not a reply")
    return value


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """(location, string) for every string in a field value (lists, tuples and dict values too;
    nested reply models check themselves)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{where}.{k}")


class Reply(BaseModel):
    """Base of every LLM reply model (see the module docstring).

    Subclasses declare their fields strictly and may list `placeholder_examples`; the after-validator
    rejects a placeholder in any string field. Extra keys are ignored (models add commentary keys);
    a subclass that wants them refused sets `extra="forbid"`."""

    model_config = ConfigDict(extra="ignore", strict=True)

    placeholder_examples: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _no_placeholders(self) -> "Reply":
        for name in type(self).model_fields:
            for where, s in _strings(getattr(self, name), name):
                not_placeholder(s, self.placeholder_examples, field=where)
        return self
