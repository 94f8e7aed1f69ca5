"""Groups of flags that several commands share, declared once.

A group is a dataclass whose fields are typer options (`@flag_group`); a command names it as one
parameter, `bootstrap: Bootstrap = GROUP`, and `with_groups` (applied by `@command(app, name)`) puts
the group's flags in that place of the command's signature (so --help lists them where the parameter
stands) and hands the command one instance holding their values. Flag names, defaults, help and callbacks stay those of the fields:
a group changes how a command is written, never what it accepts or shows.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any, Callable, Optional, TypeVar

import typer

from kbvqa.cli.common import CONNECT_TIMEOUT, DEADLINE, MAX_RETRIES, STRUCTURED_OUTPUT, TIMEOUT

__all__ = ["GROUP", "ModelLimits", "command", "flag_group", "group_values", "make_flag_group", "ungrouped",
           "with_groups"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


class _Group:
    """The default of a parameter that stands for a flag group (expanded by `with_groups`)."""

    def __repr__(self) -> str:
        return "GROUP"


GROUP: Any = _Group()


def flag_group(cls: C) -> C:
    """A dataclass of typer options (field defaults) that commands take as one parameter."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls.__flag_group__ = True  # type: ignore[attr-defined]
    return cls


def make_flag_group(name: str, fields: list[tuple[str, Any, Any]]) -> type:
    """A flag group made from (name, type, typer option) triples: for groups whose help text the
    command composes (a judge study's --config names its own table)."""
    cls = dataclasses.make_dataclass(name, fields, frozen=True)
    cls.__flag_group__ = True  # type: ignore[attr-defined]
    return cls


def group_values(group: Any) -> dict[str, Any]:
    """The group's flags by parameter name."""
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}


def ungrouped(values: dict[str, Any]) -> dict[str, Any]:
    """A command's parameters (`locals()`) with each flag group replaced by its flags, as they were
    given: ready for `kbvqa.cli.options.flags(Options, ...)`."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if getattr(type(value), "__flag_group__", False):
            out.update(group_values(value))
        else:
            out[name] = value
    return out


def _flags_of(cls: type) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(cls)
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
            for f in dataclasses.fields(cls)]


def with_groups(func: F) -> F:
    """`func` with each flag-group parameter replaced by the group's flags, in its place; the command
    receives the group built from them. Apply below `@app.command` (typer reads the new signature)."""
    hints = typing.get_type_hints(func)
    groups: dict[str, tuple[type, list[str]]] = {}
    params: list[inspect.Parameter] = []
    for p in inspect.signature(func).parameters.values():
        kind = hints.get(p.name)
        if p.default is GROUP:
            if not getattr(kind, "__flag_group__", False):
                raise TypeError(f"{func.__name__}: {p.name} defaults to GROUP but {kind!r} is no flag group")
            flags = _flags_of(kind)  # type: ignore[arg-type]
            groups[p.name] = (kind, [f.name for f in flags])  # type: ignore[assignment]
            params += flags
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation)))
    names = [p.name for p in params]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise TypeError(f"{func.__name__}: parameters declared twice (a group's and the command's): {clash}")

    @functools.wraps(func)
    def command(**values: Any) -> Any:
        for name, (kind, fields) in groups.items():
            values[name] = kind(**{f: values.pop(f) for f in fields})
        return func(**values)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command  # type: ignore[return-value]


def command(app: typer.Typer, name: str, **kwargs: Any) -> Callable[[F], F]:
    """`@app.command(name, **kwargs)` over `@with_groups`: a command that takes flag groups."""

    def register(func: F) -> F:
        return app.command(name, **kwargs)(with_groups(func))

    return register


@flag_group
class ModelLimits:
    """The model-call limits of a command that calls a model (cli.common's TIMEOUT ... MAX_RETRIES)."""

    timeout: Optional[float] = TIMEOUT
    connect_timeout: Optional[float] = CONNECT_TIMEOUT
    deadline: Optional[float] = DEADLINE
    structured_output: Optional[str] = STRUCTURED_OUTPUT
    max_retries: Optional[int] = MAX_RETRIES
