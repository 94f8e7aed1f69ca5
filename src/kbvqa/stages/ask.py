"""One model call for a stage that asks a role: the prompt, the reply model, the failure states, the
verdict cache. Every model-driven funnel stage (curation, reference construction, the benchmark
comparison's hops judge) asks through `ask`, and a stage that makes one call declares it once
(`Ask`, `OneCallStage`). It sits in stages/ so that any stage can; the pipelines' funnel module
(kbvqa.pipelines.funnel) holds what the funnels add on top.

Failure states, the same for every caller:
- no model configured for the stage's role → `NeedsModel` (the runner's: status `needs_model`, reason
  "NeedsModel: …", counted apart from errors; retried on `--resume`, so configuring a model later picks
  the item up);
- the call failed (HTTP, timeout, cassette miss) → `ModelCallFailed` → `error`;
- the model replied but not with the contract (not exactly one JSON value, a missing field, a score
  out of 1-5, a label off the list) → `Invalid` → `invalid`. Never a default verdict, never "keep".

A reply the stage refuses after parsing (an index past the list shown, a count the contract fixes:
`ask`'s `check`) is `invalid` too, and is refused through `ChatResult.reject`, so neither the
response cache nor a record-mode cassette serves it again and `--resume` asks the model anew; the
verdict cache stores a verdict only once its check has passed.

The single-pass answerer (kbvqa.stages.answer.direct) keeps its own call: it samples at the client's
temperature (a verdict here is asked at 0, so it repeats) and refuses a reply cut off at max_tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from kbvqa.data.kvstore import KVStore
from kbvqa.models.jsonx import extract_json
from kbvqa.models.prompts import Prompt
from kbvqa.models.result import ModelCallError, rejected
from kbvqa.runner.stage import Context, Invalid, NeedsModel, Stage

M = TypeVar("M", bound=BaseModel)


class ModelCallFailed(ModelCallError):
    """The model call itself failed: no reply to judge."""


def needs_model(what: str, role: str) -> NeedsModel:
    """The offline stop: `what` needs a model in `role`, and how to give it one."""
    return NeedsModel(f"{what} needs a model: configure the {role!r} role (--llm URL --model NAME, or "
                      f"[models.{role}] in --config) and run again with --resume")


class VerdictCache:
    """Model verdicts by what decides them (image sha256s, prompt hash, model, texts): a resumed
    item, or the same image pair in another item, is not asked again. On the shared KVStore; pickles
    as its path."""

    def __init__(self, path: str | Path):
        self.store = KVStore(path, table="reference_verdicts")

    @staticmethod
    def key(parts: Mapping[str, Any]) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()

    def get(self, parts: Mapping[str, Any]) -> Any:
        raw = self.store.get(self.key(parts))
        return None if raw is None else json.loads(raw)

    def put(self, parts: Mapping[str, Any], value: Any, label: str) -> None:
        self.store.put(self.key(parts), json.dumps(value, ensure_ascii=False), label=label)

    def labels(self) -> dict[str, int]:
        return self.store.labels()


@dataclass(frozen=True)
class Ask:
    """One call declared once: the prompt, the model its reply must parse into (None: plain text),
    what the call is named in every reason, and whether the item's images go with it."""

    prompt: Prompt
    reply_model: type[BaseModel] | None
    what: str
    images: bool = True


class OneCallStage(Stage):
    """A stage whose model work is one declared call (`asks`) to the role its config names
    (`config.role`): `prompts` follows from the declaration, so the manifest lists exactly what
    the stage sends, and `call` is `ask` with the prompt, reply model and name filled in."""

    asks: ClassVar[Ask]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "asks" in cls.__dict__ and "prompts" not in cls.__dict__:
            cls.prompts = (cls.asks.prompt,)

    async def call(self, ctx: Context, *, what: str | None = None, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """`ask(ctx, config.role, …)`; `what` replaces the declared name (to add the item's id)."""
        a = self.asks
        return await ask(ctx, self.config.role, a.prompt, a.reply_model,  # type: ignore[attr-defined]
                         what=what or a.what, **kwargs)


def require_role(ctx: Context, role: str, what: str) -> None:
    """Stop before any work (images fetched, calls spent) when `role` has no model."""
    if role not in ctx.roles:
        raise needs_model(what, role)


def model_id(client: Any) -> dict[str, Any]:
    """Who answered: the client's provenance (model, base URL, backend), for every verdict's record."""
    prov = getattr(client, "provenance", None)
    return prov.model_dump(exclude_none=True) if prov is not None else {"backend": type(client).__name__}


def strict_reply(text: str | None, reply_model: type[M], what: str) -> M:
    """The whole reply (optionally in one ``` fence) must be the JSON object `reply_model` describes."""
    try:
        return reply_model.model_validate(extract_json(text, strict=True))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "(reply)"
        raise Invalid(f"{what}: reply field {loc!r}: {first.get('msg')}") from None
    except ValueError as exc:
        raise Invalid(f"{what}: reply is not one JSON value ({exc})") from None


async def ask(ctx: Context, role: str, prompt: Prompt, reply_model: type[M] | None, *, what: str,
              images: Iterable[str | Path] = (), cache: VerdictCache | None = None,
              cache_parts: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
              check: Callable[[Any], None] | None = None, model_index: int | None = None,
              **values: Any) -> tuple[Any, dict[str, Any]]:
    """One model call under the failure states above. Returns (validated reply — a `reply_model`, or
    the text when `reply_model` is None — and the provenance of the verdict). Temperature 0 unless
    `params` say otherwise (verdicts should repeat). With `cache` and
    `cache_parts`, a verdict already given for the same parts, prompt and model is reused.

    `check(reply)` is the stage's own contract beyond the reply model (raise `Invalid` to refuse);
    a refused reply is rejected (`ChatResult.reject`: not served again by any cache) and not stored
    as a verdict. `model_index` picks one model of a role that lists several (the translation's
    checkers); otherwise such a role is an error."""
    client = ctx.roles.get(role)
    if client is None:
        raise needs_model(what, role)
    if isinstance(client, list):
        if model_index is None:
            raise ValueError(f"role {role!r} lists several models; this stage needs exactly one")
        client = client[model_index]
    prov = {**model_id(client), "prompt_version": prompt.id}
    parts = None
    if cache is not None and cache_parts is not None:
        parts = {**cache_parts, "prompt": prompt.sha256, "model": model_id(client)}
        hit = cache.get(parts)
        if hit is not None:
            reply = reply_model.model_validate(hit) if reply_model is not None else hit
            if check is not None:
                check(reply)
            return reply, {**prov, "cached": True}
    messages = await asyncio.to_thread(prompt.messages, list(images), **values)  # images are encoded here
    res = await client.chat(messages, schema=reply_model, prompt_version=prompt.id,
                            **{"temperature": 0.0, **(params or {})})
    ctx.add_usage(res.usage)
    if res.status == "error":
        raise ModelCallFailed(f"{what}: model call failed: {res.reason}")
    if res.status != "ok":
        raise Invalid(f"{what}: unusable reply: {res.reason}")
    try:
        if reply_model is None:
            reply: Any = (res.text or "").strip()
            if not reply:
                raise Invalid(f"{what}: empty reply")
            value: Any = reply
        else:
            reply = strict_reply(res.text, reply_model, what)
            value = reply.model_dump(mode="json")
        if check is not None:
            check(reply)
    except Invalid as exc:
        raise rejected(res, str(exc)) from None
    if parts is not None:
        cache.put(parts, value, label=prompt.name)  # type: ignore[union-attr]
    return reply, prov


async def gather_all(coros: Iterable[Any], what: str) -> list[Any]:
    """Run calls concurrently; when any failed, the item fails as a whole — `error` if a call failed
    (or the model is missing), else `invalid` — naming how many and the first reason. Verdicts that
    did arrive are cached, so a resumed item asks only for the rest."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if not failures:
        return list(results)
    for r in failures:
        if not isinstance(r, Exception):  # cancellation and the like must propagate
            raise r
    hard = [r for r in failures if not isinstance(r, Invalid)]
    first = hard[0] if hard else failures[0]
    note = f" ({len(failures)} of {len(results)} {what} failed; first: {first})" if len(failures) > 1 else ""
    if isinstance(first, NeedsModel):
        raise first
    if hard:
        raise ModelCallFailed(f"{first}{note}")
    raise Invalid(f"{first}{note}")


async def settle(coros: Iterable[Any]) -> list[tuple[str, Any]]:
    """Run calls concurrently and return each one's outcome without failing the item: ("ok", value),
    ("error", exc) for a failed call, ("invalid", exc) for an unusable reply. A missing model and
    cancellation still propagate: they are not outcomes of one call."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    out: list[tuple[str, Any]] = []
    for r in results:
        if isinstance(r, NeedsModel) or (isinstance(r, BaseException) and not isinstance(r, Exception)):
            raise r
        out.append(("invalid", r) if isinstance(r, Invalid) else ("error", r) if isinstance(r, Exception)
                   else ("ok", r))
    return out
