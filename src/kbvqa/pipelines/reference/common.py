"""What every reference-construction stage shares: the one way to ask a model (strict JSON, cached
verdicts, honest failure states), the offline stop, and the per-stage counters the funnel sums.

Failure states, the same in every stage:
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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from kbvqa.data.kvstore import KVStore
from kbvqa.models.jsonx import extract_json
from kbvqa.models.prompts import Prompt
from kbvqa.models.result import rejected
from kbvqa.runner.stage import Context, Invalid, NeedsModel, StageConfig

M = TypeVar("M", bound=BaseModel)

#: Where the five-rule filter and the de-duplication run: on each tag of the synthesised draft, as
#: seed 001 App. C.2 describes it (the default), or on the candidates before synthesis, as §3.2 words it.
Placement = Literal["after_synthesis", "before_synthesis"]
PLACEMENTS: tuple[str, ...] = ("after_synthesis", "before_synthesis")


class ReferenceStageConfig(StageConfig):
    """Stage settings as `[reference.<stage>]` tables of a kbvqa.toml: a misspelt key is an error."""

    model_config = ConfigDict(extra="forbid")


class ModelCallFailed(RuntimeError):
    """The model call itself failed: no reply to judge."""


def needs_model(what: str, role: str) -> NeedsModel:
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


def model_id(client: Any) -> dict[str, Any]:
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


#: the pool name of the entity-search images (kbvqa.pipelines.reference.entities)
ENTITY_POOL = "entity_search"


def scored_pool(record: Mapping[str, Any], max_candidates: int | None = None) -> list[dict[str, Any]]:
    """The scored top-k followed by the entity-search additions: what the pre-synthesis filter
    checks. With `max_candidates`, at most that many in all (`fill_pool`)."""
    top = list((record.get("candidates") or {}).get("kept") or [])
    pool = [*top, *((record.get("entities") or {}).get("added") or [])]
    return pool if max_candidates is None else fill_pool(pool, max_candidates)[0]


def fill_pool(cands: list[dict[str, Any]], cap: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(at most `cap` candidates, in their given order; the ones left out). Seed 001 C.2 shows "up to
    ten candidate images"; how the entity-search images join them the paper does not say. kbvqa's
    reading: they count toward the ten, not on top of it, and they take their places first (each was
    searched because no candidate shows its entity; the best-scored first if they alone are more than
    `cap`), the scored top-k filling the rest in rank order."""
    entity = [x for x in cands if x.get("pool") == ENTITY_POOL]
    if len(entity) > cap:
        entity = sorted(entity, key=lambda x: -(x.get("overall") or 0))[:cap]  # stable: ties keep their order
    room = cap - len(entity)
    scored = [x for x in cands if x.get("pool") != ENTITY_POOL][:room]
    keep = {id(x) for x in (*entity, *scored)}
    return [x for x in cands if id(x) in keep], [x for x in cands if id(x) not in keep]


def synthesis_pool(record: Mapping[str, Any], placement: str, max_candidates: int = 10
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the candidates the synthesis may cite, those left out by the cap): what survived the
    pre-synthesis filter and de-duplication (`before_synthesis`), or the scored pool itself
    (`after_synthesis`, where the filter and de-duplication work on the draft's tags instead); at
    most `max_candidates` either way, entity-search images included (`fill_pool`)."""
    if placement == "before_synthesis":
        pool = list((record.get("dedup") or {}).get("kept") or [])
    else:
        pool = scored_pool(record)
    return fill_pool(pool, max_candidates)


def counts(**values: int | Mapping[str, int]) -> dict[str, Any]:
    """A stage's counters for the funnel: plain ints, or {reason: n} maps with zero entries removed."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        out[k] = {r: n for r, n in Counter(v).items() if n} if isinstance(v, Mapping) else int(v)
    return out


def stage_record(record: dict[str, Any], stage: str, payload: dict[str, Any], tally: dict[str, Any]) -> dict[str, Any]:
    """The record with this stage's output under its name and its counters under `funnel.<stage>`."""
    funnel = {**(record.get("funnel") or {}), stage: tally}
    return {**record, stage: payload, "funnel": funnel}
