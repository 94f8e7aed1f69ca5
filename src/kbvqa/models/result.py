"""The one result type every model backend returns, and the protocol stages code against.

A call ends in exactly one of three states, so nothing downstream has to guess:
`ok` (an answer, with `data` when a schema was asked for), `invalid` (the model replied but the reply
could not be used: unparseable or failed validation) and `error` (no reply: HTTP failure after retries,
timeout, cassette miss). An `error` or `invalid` result is never an answer and never gets a default label.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

from kbvqa.data.schema import Provenance, Usage

ChatStatus = Literal["ok", "invalid", "error"]
M = TypeVar("M", bound=BaseModel)


class Invalid(Exception):
    """A model reply (or other input) could not be interpreted. A record that raises it ends
    `invalid` with this reason, is retried on resume, and is never given a default label. Defined
    here, beside the reply states, because model adapters raise it; the runner re-exports it as part
    of the stage contract."""


class ChatResult(BaseModel):
    """Outcome of one chat call.

    `data` is plain JSON (dict/list/scalar) so a result survives the cache and cassettes unchanged;
    when the schema was a pydantic model, `data` is that model's `model_dump(mode="json")` and
    `as_model(Schema)` gives the typed object back. `usage` is what *this* call spent (zero tokens
    and `calls == 0` for cache and replay hits)."""

    status: ChatStatus
    text: str | None = None
    data: Any = None
    reason: str = ""
    usage: Usage = Field(default_factory=Usage)
    provenance: Provenance
    cached: bool = False
    raw: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_model(self, model: type[M]) -> M:
        """The validated `data` as an instance of `model`; raises ValueError unless status is ok."""
        if self.status != "ok":
            raise ValueError(f"no data: result is {self.status} ({self.reason})")
        return model.model_validate(self.data)


@runtime_checkable
class ModelClient(Protocol):
    """What a role slot holds: openai, rules and replay backends all satisfy it."""

    provenance: Provenance

    async def chat(self, messages: list[dict], *, schema: type[BaseModel] | dict | None = None,
                   prompt_version: str = "", **params: Any) -> ChatResult: ...
