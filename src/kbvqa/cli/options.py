"""Typer flags for a job's options class (kbvqa.runner.options.JobOptions).

`option(Opts, "max_turns", min=1, help=...)` is a typer option whose default is None — "not given", so
the config file or the class default applies — and whose help ends with the class default, read from
the class: the default is written once, in the options class. `flags(Opts, values)` picks a command's
parameters that are settings of `Opts` (its other parameters, such as `--out` or `--json`, are the
command's own), ready for `Opts.build(table, **flags)`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Mapping

import typer
from pydantic import BaseModel

from kbvqa.runner.options import JobOptions

__all__ = ["default_of", "flags", "option"]


def default_of(options: type[BaseModel], path: str) -> Any:
    """The class default of the field at dotted `path` (a sub-model's default instance is walked)."""
    model: Any = options
    *parents, leaf = path.split(".")
    for p in parents:
        field = model.model_fields[p]
        model = field.annotation
    return model.model_fields[leaf].get_default(call_default_factory=True)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def option(options: type[JobOptions], name: str, *decls: str, help: str = "", **kw: Any) -> Any:
    """A typer option for the setting `name` of `options` (a flag name: a leaf field or an alias);
    `decls` default to `--<name>`. Default None: a value appears only when the flag is given."""
    paths = options.flag_paths().get(name)
    if not paths:
        raise KeyError(f"{options.__name__} has no setting {name!r}")
    default = default_of(options, paths[0])
    if default not in (None, (), [], {}, ""):
        help = f"{help} Default {_shown(default)}.".strip()
    return typer.Option(None, *(decls or ("--" + name.replace("_", "-"),)), help=help, **kw)


def flags(options: type[JobOptions], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `values` (a command's parameters) that are settings of `options`."""
    names = options.flag_paths()
    return {k: v for k, v in values.items() if k in names}
