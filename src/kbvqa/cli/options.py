"""Typer flags for a job's options class (kbvqa.runner.options.JobOptions).

`option(Opts, "max_turns", min=1, help=...)` is a typer option whose default is None — "not given", so
the config file or the class default applies — and whose help ends with the class default, read from
the class: the default is written once, in the options class. `flags(Opts, values)` picks a command's
parameters that are settings of `Opts` (its other parameters, such as `--out` or `--json`, are the
command's own), ready for `Opts.build(table, **flags)`.

A command module that must start without the runner (`kbvqa.cli.score` also serves `score infoseek`,
which imports neither the runner nor the judge stages) cannot import its options class when it is
loaded: it declares plain `typer.Option(None, ...)` flags and `@app.command(cls=with_defaults("module:Class"))`,
which appends the same "Default X." to their help when --help is shown, importing the class only then.
"""

from __future__ import annotations

import importlib
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping

import typer
from pydantic import BaseModel
from typer.core import TyperCommand

if TYPE_CHECKING:  # the runner is imported by the command that runs, not by the module that declares it
    from kbvqa.runner.options import JobOptions

__all__ = ["default_of", "flags", "option", "with_defaults"]


def default_of(options: type[BaseModel], path: str) -> Any:
    """The class default of the field at dotted `path` (a sub-model's default instance is walked)."""
    model: Any = options
    *parents, leaf = path.split(".")
    for p in parents:
        field = model.model_fields[p]
        model = field.annotation
    field = model.model_fields[leaf]
    return None if field.is_required() else field.get_default(call_default_factory=True)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def _help_with_default(options: type[JobOptions], name: str, help: str) -> str:
    paths = options.flag_paths().get(name)
    if not paths:
        raise KeyError(f"{options.__name__} has no setting {name!r}")
    default = default_of(options, paths[0])
    if default not in (None, (), [], {}, ""):
        help = f"{help} Default {_shown(default)}.".strip()
    return help


def option(options: type[JobOptions], name: str, *decls: str, help: str = "", **kw: Any) -> Any:
    """A typer option for the setting `name` of `options` (a flag name: a leaf field or an alias);
    `decls` default to `--<name>`. Default None: a value appears only when the flag is given."""
    help = _help_with_default(options, name, help)
    return typer.Option(None, *(decls or ("--" + name.replace("_", "-"),)), help=help, **kw)


def with_defaults(target: str) -> type[TyperCommand]:
    """A command class whose --help ends each flag that is a setting of the options class `target`
    ("module:Class") with the class default, as `option` does; the class is imported only when the
    help is shown. For commands whose module must not import the runner when it is loaded."""

    class _WithDefaults(TyperCommand):
        def format_help(self, ctx: Any, formatter: Any) -> None:
            module, _, name = target.partition(":")
            options = getattr(importlib.import_module(module), name)
            settings = options.flag_paths()
            for param in self.params:
                if param.name in settings and not getattr(param, "_default_shown", False):
                    param.help = _help_with_default(options, param.name, getattr(param, "help", None) or "")
                    param._default_shown = True  # type: ignore[attr-defined]
            super().format_help(ctx, formatter)

    return _WithDefaults


def flags(options: type[JobOptions], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `values` (a command's parameters) that are settings of `options`."""
    names = options.flag_paths()
    return {k: v for k, v in values.items() if k in names}
