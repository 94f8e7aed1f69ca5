"""The deterministic backend: a Python function standing in a model role slot.

Stages that have a rules implementation call that function directly; `RulesClient` exists so the
same function can also be configured as a role (`backend = "rules"`) and answer through the common
ChatResult contract, e.g. as a cheap first-pass verifier next to LLM verifiers.

A rule function takes one positional argument, the structured `payload=` the stage passed (or the
message list when no payload was given), and returns the answer data (JSON-ready). It signals an
unusable input by raising `kbvqa.models.result.Invalid` or ValueError (→ status "invalid").
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from pydantic import BaseModel

from kbvqa.data.schema import Provenance, Usage
from kbvqa.models.replies import validate_data
from kbvqa.models.result import ChatResult, Invalid

RuleFn = Callable[[Any], Any]
_REGISTRY: dict[tuple[str, str], RuleFn] = {}


def register_rule(role: str, name: str) -> Callable[[RuleFn], RuleFn]:
    """Decorator: make `fn` available as rules implementation `name` for `role`."""

    def deco(fn: RuleFn) -> RuleFn:
        key = (role, name)
        if key in _REGISTRY and _REGISTRY[key] is not fn:
            raise ValueError(f"rule {name!r} for role {role!r} is already registered "
                             f"({_REGISTRY[key].__module__}.{_REGISTRY[key].__qualname__})")
        _REGISTRY[key] = fn
        return fn

    return deco


def get_rule(role: str, name: str) -> RuleFn:
    try:
        return _REGISTRY[(role, name)]
    except KeyError:
        known = sorted(n for r, n in _REGISTRY if r == role)
        raise KeyError(f"no rules implementation {name!r} for role {role!r} "
                       f"(registered for {role}: {known or 'none'})") from None


def list_rules(role: str | None = None) -> list[tuple[str, str]]:
    return sorted(k for k in _REGISTRY if role is None or k[0] == role)


class RulesClient:
    """Wraps a rule function in the ModelClient contract (provenance backend="rules")."""

    backend = "rules"

    def __init__(self, name: str, fn: RuleFn):
        self.name = name
        self.fn = fn
        self.provenance = Provenance(backend="rules", model=name)
        self.total_usage = Usage()

    def __repr__(self) -> str:
        return f"RulesClient({self.name!r})"

    async def chat(self, messages: list[dict], *, schema: type[BaseModel] | dict | None = None,
                   prompt_version: str = "", payload: Any = None, **params: Any) -> ChatResult:
        t0 = time.perf_counter()
        prov = self.provenance.model_copy(update={"prompt_version": prompt_version or None})
        try:
            out = self.fn(payload if payload is not None else messages)
            if isinstance(out, BaseModel):
                out = out.model_dump(mode="json")
            data = validate_data(out, schema)
            status, reason = "ok", ""
        except (Invalid, ValueError) as e:
            data, status, reason = None, "invalid", f"rule {self.name}: {e}"
        except Exception as e:  # a bug in a rule is an error, not an answer
            data, status, reason = None, "error", f"rule {self.name} raised {type(e).__name__}: {e}"
        text = None if data is None else (data if isinstance(data, str) else json.dumps(data, ensure_ascii=False))
        usage = Usage(seconds=time.perf_counter() - t0, calls=1)
        self.total_usage = self.total_usage.add(usage)
        return ChatResult(status=status, text=text, data=data, reason=reason, usage=usage, provenance=prov)  # type: ignore[arg-type]

    async def aclose(self) -> None:
        return None
