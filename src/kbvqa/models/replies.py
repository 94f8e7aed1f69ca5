"""Strict reply models: the base class every LLM stage's reply schema derives from, the one
placeholder check, and the one reply interpreter (`interpret_reply`: parse, then validate against a
reply model or a JSON Schema) that the server client and the rules backend share.

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

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError, model_validator

from kbvqa.models.cache import schema_json
from kbvqa.models.jsonx import extract_json

__all__ = ["NonBlank", "Reply", "interpret_reply", "is_placeholder", "not_placeholder", "placeholder_reason",
           "validate_data"]

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


def _check_json_schema(value: Any, schema: dict, where: str = "$") -> None:
    """A small JSON-Schema subset check (type, required, enum, properties, items) for dict schemas;
    pydantic models get full validation instead."""
    t = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if t in types and not isinstance(value, types[t]):
        raise ValueError(f"{where}: expected {t}, got {type(value).__name__}")
    if t in ("number", "integer") and (isinstance(value, bool) or not isinstance(value, (int, float))
                                        or (t == "integer" and isinstance(value, float) and not value.is_integer())):
        raise ValueError(f"{where}: expected {t}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{where}: {value!r} not one of {schema['enum']}")
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            raise ValueError(f"{where}: missing required {missing}")
        for k, sub in (schema.get("properties") or {}).items():
            if k in value and isinstance(sub, dict):
                _check_json_schema(value[k], sub, f"{where}.{k}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            _check_json_schema(v, schema["items"], f"{where}[{i}]")


def validate_data(value: Any, schema: type[BaseModel] | dict | None) -> Any:
    """Validate parsed JSON against the requested schema; returns plain JSON or raises ValueError."""
    if schema is None:
        return value
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            return schema.model_validate(value).model_dump(mode="json")
        except ValidationError as e:
            errs = "; ".join(f"{'.'.join(map(str, er['loc'])) or '$'}: {er['msg']}" for er in e.errors()[:3])
            raise ValueError(f"schema {schema.__name__} validation failed: {errs}") from None
    body = schema_json(schema) or {}
    inner = body.get("schema", body) if "name" in body and "schema" in body else body
    _check_json_schema(value, inner)
    return value


def interpret_reply(text: str, schema: type[BaseModel] | dict | None) -> tuple[str, Any, str]:
    """(status, data, reason) for a reply text: think-stripped, then parsed and validated when a
    schema is requested. Never substitutes a default."""
    if schema is None:
        return ("ok", None, "") if text else ("invalid", None, "empty reply")
    try:
        value = extract_json(text)
    except ValueError as e:
        return "invalid", None, f"unparseable JSON: {e}"
    try:
        return "ok", validate_data(value, schema), ""
    except ValueError as e:
        return "invalid", None, str(e)
