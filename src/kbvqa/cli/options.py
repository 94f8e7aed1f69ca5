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
A command without an options class whose default is a constant of such a module (the studies'
DEFAULT_RESAMPLES) reads it through `default_from` and shows it with `with_defaults(<parameter>="module:NAME")`.
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

__all__ = ["default_from", "default_of", "flags", "option", "with_defaults"]


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
    if isinstance(value, (list, tuple)):
        return ",".join(_shown(v) for v in value)
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


def _imported(target: str) -> Any:
    """The object `target` ("module:Name") names, its module imported now."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def default_from(target: str) -> Any:
    """A typer callback giving a flag that was left out (None) the module constant `target`
    ("module:NAME"), imported only then: the default stays written once, in that module."""

    def fill(ctx: Any, param: Any, value: Any) -> Any:
        return _imported(target) if value is None and not ctx.resilient_parsing else value

    return fill


def with_defaults(target: str | None = None, **constants: str) -> type[TyperCommand]:
    """A command class whose --help ends each flag that is a setting of the options class `target`
    ("module:Class") with the class default, as `option` does, and each flag named in `constants`
    (parameter name -> "module:NAME", read by `default_from`) with that constant; the modules are
    imported only when the help is shown. For commands whose module must not import the runner (or
    numpy) when it is loaded."""

    class _WithDefaults(TyperCommand):
        def format_help(self, ctx: Any, formatter: Any) -> None:
            options = _imported(target) if target is not None else None
            settings = options.flag_paths() if options is not None else {}
            for param in self.params:
                if getattr(param, "_default_shown", False):
                    continue
                help = getattr(param, "help", None) or ""
                if param.name in constants:
                    param.help = f"{help} Default {_shown(_imported(constants[param.name]))}.".strip()
                elif param.name in settings:
                    param.help = _help_with_default(options, param.name, help)  # type: ignore[arg-type]
                else:
                    continue
                param._default_shown = True  # type: ignore[attr-defined]
            super().format_help(ctx, formatter)

    return _WithDefaults


def flags(options: type[JobOptions], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `values` (a command's parameters) that are settings of `options`."""
    names = options.flag_paths()
    return {k: v for k, v in values.items() if k in names}
