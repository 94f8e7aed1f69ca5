"""The one result type every model backend returns, the protocol stages code against, and
`call_model`, the one way a stage calls a model (usage accounted, failures typed).

A call ends in exactly one of three states, so nothing downstream has to guess:
`ok` (an answer, with `data` when a schema was asked for), `invalid` (the model replied but the reply
could not be used: unparseable or failed validation) and `error` (no reply: HTTP failure after retries,
timeout, cassette miss). An `error` or `invalid` result is never an answer and never gets a default label.

A fourth outcome belongs to the stage, not the client: an `ok` reply the stage refuses after parsing
(an index out of range, a count the contract fixes, a label off the list). The stage says so with
`raise result.reject(reason)`: whoever remembered the reply to serve it again (the response cache, a
record-mode cassette) forgets it, so a resumed run asks the model anew — while the run's own record
(the cassette) keeps the reply it saw, so a replay stays exact (ARCHITECTURE.md: "A rejected reply is
not remembered").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar, get_args, runtime_checkable
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from kbvqa.data.schema import Provenance, Usage

ChatStatus = Literal["ok", "invalid", "error"]
M = TypeVar("M", bound=BaseModel)

# How a server is asked for JSON replies (kbvqa.models.client); a setting of every model role.
StructuredOutput = Literal["auto", "json_schema", "json_object", "off"]
STRUCTURED_OUTPUT_MODES: tuple[str, ...] = get_args(StructuredOutput)


def normalize_base_url(base_url: str) -> str:
    """Apply the one base-URL rule: strip trailing '/', append '/v1' unless a `/v1` segment exists."""
    url = base_url.strip().rstrip("/")
    if not url:
        raise ValueError("base_url is empty")
    if not re.match(r"^https?://", url):
        raise ValueError(f"base_url must start with http:// or https:// (got {base_url!r})")
    try:
        path = urlsplit(url).path
    except ValueError as exc:  # e.g. an unclosed [IPv6 literal
        raise ValueError(f"base_url is not a valid URL: {base_url!r} ({exc})") from None
    if "/v1" not in [("/" + seg) for seg in path.split("/") if seg]:
        url += "/v1"
    return url


class Invalid(Exception):
    """A model reply (or other input) could not be interpreted. A record that raises it ends
    `invalid` with this reason, is retried on resume, and is never given a default label. Defined
    here, beside the reply states, because model adapters raise it; the runner re-exports it as part
    of the stage contract."""


class ModelCallError(RuntimeError):
    """A model call failed (no usable HTTP reply after retries, timeout, deadline, cassette miss): the
    record ends `error` and is retried on resume. Never an answer."""


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
    #: what to tell whoever would serve this reply again once a stage refuses it (not serialised)
    _on_reject: tuple[Callable[[str], None], ...] = PrivateAttr(default=())

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def on_reject(self, hook: Callable[[str], None]) -> "ChatResult":
        """Register `hook(reason)` to run if a stage rejects this reply (a cache forgetting its entry)."""
        self._on_reject = (*self._on_reject, hook)
        return self

    def reject(self, reason: str) -> Invalid:
        """The stage refuses this parsed reply: every store that would serve it again forgets it (each
        hook runs once), and the `Invalid` to raise is returned, so a stage writes
        `raise res.reject("why")`."""
        hooks, self._on_reject = self._on_reject, ()
        for hook in hooks:
            hook(reason)
        return Invalid(reason)

    def as_model(self, model: type[M]) -> M:
        """The validated `data` as an instance of `model`; raises ValueError unless status is ok."""
        if self.status != "ok":
            raise ValueError(f"no data: result is {self.status} ({self.reason})")
        return model.model_validate(self.data)

    def reply(self, model: type[M], who: str = "model") -> M:
        """The typed reply of a stage's call: `ModelCallError` when the call failed, `Invalid` when
        the reply is unusable or does not fit `model` (the record ends error / invalid; nothing is
        ever defaulted). `who` names the call in the reason ("vision", "verifier m (prompt@1)")."""
        if self.status == "error":
            raise ModelCallError(f"{who} call failed: {self.reason}")
        if self.status != "ok":
            raise Invalid(f"{who} reply unusable: {self.reason}")
        try:
            return model.model_validate(self.data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(map(str, first["loc"]))
            msg = first["msg"].removeprefix("Value error, ")
            raise self.reject(f"{who} reply unusable: does not fit {model.__name__}: "  # parsed, then refused
                              f"{loc + ': ' if loc else ''}{msg}") from None

    @property
    def truncated(self) -> bool:
        """The server cut the reply at max_tokens (finish_reason "length"): its text is incomplete."""
        choices = (self.raw or {}).get("choices") or [{}]
        return isinstance(choices[0], dict) and choices[0].get("finish_reason") == "length"


def rejected(result: Any, reason: str) -> Invalid:
    """`result.reject(reason)` for a ChatResult; a plain `Invalid(reason)` for anything else (a
    stage's test double): what a stage raises when it refuses a parsed reply."""
    reject = getattr(result, "reject", None)
    return reject(reason) if callable(reject) else Invalid(reason)


@runtime_checkable
class ModelClient(Protocol):
    """What a role slot holds: openai, rules and replay backends all satisfy it."""

    provenance: Provenance

    async def chat(self, messages: list[dict], *, schema: type[BaseModel] | dict | None = None,
                   prompt_version: str = "", **params: Any) -> ChatResult: ...


async def call_model(client: Any, messages: list[dict], model: type[M], *, ctx: Any, who: str = "model",
                     schema: type[BaseModel] | dict | None = None, prompt_version: str = "",
                     **params: Any) -> tuple[M, ChatResult]:
    """One stage's model call: (typed reply, result). What every LLM stage goes through, so that

    - the call's usage is added to `ctx` (anything with `add_usage`: the runner's Context) before
      anything can raise — failed, invalid and retried calls cost tokens and requests too, and the
      run's totals must match what the server received;
    - a failed call raises `ModelCallError` and an unusable reply `Invalid` (`ChatResult.reply`);
    - a reply the stage refuses after this returns is refused with `raise res.reject(reason)`, so
      it is not served again (the module docstring).

    `schema` is what goes on the wire (default: `model`; the audit sends a prebuilt JSON Schema
    dict); `params` go to `client.chat` (e.g. `payload=` for a rules client)."""
    res = await client.chat(messages, schema=model if schema is None else schema, prompt_version=prompt_version,
                            **params)
    if ctx is not None:
        ctx.add_usage(getattr(res, "usage", None))
    return res.reply(model, who), res
