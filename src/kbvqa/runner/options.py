"""One options object per job: every flag and config-file setting of a run in one typed, validated value.

A job's options class (a `JobOptions` subclass: `AnswerOptions`, `AuditOptions`, ...) is the only place
its defaults are written. Its fields may be stage configs themselves (`agent: AgentConfig`), so a stage
receives exactly the object that was validated, never a copy rebuilt field by field. `build` makes it
once — the class defaults, under the job's table of the config file, under the flags that were given —
and validates it once; the pipeline hands it down unchanged, and `used()` is what the manifest records.

Flags are named after the fields' leaf names (`--max-turns` sets `agent.max_turns`); a class declares
`ALIASES` for a flag that sets another name or several fields, and `FLAGS` for a flag spelt differently
from its field. A bad value is an `OptionsError` naming the flag, or the file and key it came from.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from kbvqa.runner.config import did_you_mean, read_toml

__all__ = ["CallLimits", "JobOptions", "OptionsError", "RunOptions", "ModelFlags", "read_table"]

O = TypeVar("O", bound="JobOptions")


class OptionsError(ValueError):
    """A job's options are invalid; the message names the flag or the file and key to change."""


def read_table(path: str | Path | None, section: str) -> dict[str, Any]:
    """`[section]` of the TOML file at `path` as it is written (dotted sections nest: `answer.agent`),
    {} without a file or a table. Validation is the options class's, once, with the flags over it."""
    if path is None:
        return {}
    table: Any = read_toml(path, OptionsError)
    for part in section.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    if table is not None and not isinstance(table, dict):
        raise OptionsError(f"{path}: [{section}] must be a table")
    return copy.deepcopy(table or {})


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _groups(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every sub-model field's name -> its dotted paths (`web` -> agent.web)."""
    out: dict[str, list[str]] = {}
    for name, field in model.model_fields.items():
        if _is_model(field.annotation):
            out.setdefault(name, []).append(".".join((*prefix, name)))
            for sub, paths in _groups(field.annotation, (*prefix, name)).items():  # type: ignore[arg-type]
                out.setdefault(sub, []).extend(paths)
    return out


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> dict[str, list[tuple[str, ...]]]:
    """Every leaf field's name -> the paths it has (a sub-model's fields are walked, not the sub-model)."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for name, field in model.model_fields.items():
        if _is_model(field.annotation):
            for leaf, paths in _leaves(field.annotation, (*prefix, name)).items():  # type: ignore[arg-type]
                out.setdefault(leaf, []).extend(paths)
        else:
            out.setdefault(name, []).append((*prefix, name))
    return out


class JobOptions(BaseModel):
    """Base of a job's options. Unknown keys are errors; the object is frozen once built (its stage
    configs are handed to the stages as they are)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: dotted path -> the flag name that set it, for the paths set by flags rather than the file
    _flags: dict[str, str] = PrivateAttr(default_factory=dict)

    #: flag name (its field-style spelling, `blocked_domain`) -> the dotted paths it sets, for a flag whose
    #: leaf name is not unique in the tree or differs from the field's
    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: dotted path -> the command-line flag that sets it, where it is not `--<leaf name>`
    FLAGS: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def flag_paths(cls) -> dict[str, tuple[str, ...]]:
        """Flag name (as a Python identifier) -> the dotted paths it sets. A leaf name found at several
        paths is a flag only through ALIASES (so one flag never sets two fields by accident)."""
        out = {leaf: (".".join(paths[0]),) for leaf, paths in _leaves(cls).items() if len(paths) == 1}
        out.update({k: tuple(v) for k, v in cls.ALIASES.items()})
        return out

    @classmethod
    def flag_for(cls, path: str) -> str:
        """The command-line flag that sets the field at `path` (dotted)."""
        if path in cls.FLAGS:
            return cls.FLAGS[path]
        for name, paths in [*cls.ALIASES.items(), *cls.flag_paths().items()]:
            if path in paths:
                return "--" + name.replace("_", "-")
        return "--" + path.rsplit(".", 1)[-1].replace("_", "-")

    @classmethod
    def build(cls: type[O], file: Mapping[str, Any] | None = None, *, source: str | None = None,
              **flags: Any) -> O:
        """The options: the class defaults, under `file` (the job's config table, nested as written; run
        settings may stand at its top; `source` names it in errors), under `flags` (a None, or an empty
        list, is a flag not given)."""
        tree: dict[str, Any] = cls._lift_run_keys(copy.deepcopy(dict(file or {})))
        given: dict[str, str] = {}
        paths = cls.flag_paths()
        for name, value in flags.items():
            if value is None or (isinstance(value, (list, tuple)) and not value):
                continue
            targets = paths.get(name)
            if targets is None:  # a whole sub-model by its name (web={...}, episode=AgentConfig(...))
                groups = _groups(cls).get(name, [])
                if len(groups) != 1:
                    raise OptionsError(f"{cls.__name__} has no setting {name!r} "
                                       f"(settings: {', '.join(sorted(paths))})")
                targets = tuple(groups)
                if isinstance(value, Mapping):
                    value = {**cls._at(tree, groups[0]), **value}
            for path in targets:
                node = tree
                *parents, leaf = path.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                    if not isinstance(node, dict):
                        raise OptionsError(f"{source or 'config'}: {p} must be a table")
                node[leaf] = value
                given[path] = name
        try:
            built = cls.model_validate(tree)
        except ValidationError as exc:
            raise OptionsError(cls._explain(exc, given, source)) from None
        built._flags = given
        return built

    @classmethod
    def _lift_run_keys(cls, table: dict[str, Any]) -> dict[str, Any]:
        """`concurrency = 8` written at the top of a job's table means its `[<job>.run]` (every job alike)."""
        run = cls.model_fields.get("run")
        if run is None or not _is_model(run.annotation):
            return table
        lifted = {k: table.pop(k) for k in list(table)
                  if k not in cls.model_fields and k in run.annotation.model_fields}  # type: ignore[union-attr]
        if lifted:
            below = table.get("run")
            table["run"] = {**lifted, **(below if isinstance(below, dict) else {})}
        return table

    @staticmethod
    def _at(tree: Mapping[str, Any], path: str) -> dict[str, Any]:
        node: Any = tree
        for p in path.split("."):
            node = node.get(p) if isinstance(node, Mapping) else None
        return dict(node) if isinstance(node, Mapping) else {}

    @classmethod
    def _explain(cls, exc: ValidationError, given: Mapping[str, str], source: str | None) -> str:
        lines = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err.get("loc", ()) if not isinstance(p, int))
            if path in given or source is None:
                where = cls.flag_for(path) if path else cls.__name__
            else:
                where = f"{source}: {path}"
            if err.get("type") == "value_error":  # a validator's own sentence, naming what it was given
                lines.append(f"{where}: {str(err.get('msg')).removeprefix('Value error, ')}")
                continue
            shown = "" if err.get("type") in ("missing", "extra_forbidden") else f" (got {err.get('input')!r})"
            if err.get("type") == "extra_forbidden":  # a misspelt key: the closest one its table knows
                run = cls.model_fields.get("run")
                lifted = tuple(run.annotation.model_fields) if run is not None and _is_model(run.annotation) else ()
                shown = did_you_mean(cls, tuple(err.get("loc", ())), also=lifted)  # type: ignore[union-attr]
            lines.append(f"{where}: {err.get('msg')}{shown}")
        return "; ".join(lines)

    def given(self, path: str) -> bool:
        """Whether the field at `path` was set (by the file or a flag) rather than left at its default."""
        node: BaseModel = self
        *parents, leaf = path.split(".")
        for p in parents:
            if p not in node.model_fields_set:
                return False
            node = getattr(node, p)
        return leaf in node.model_fields_set

    def flags_under(self, group: str) -> list[str]:
        """The command-line flags given for fields under the dotted `group` (one that does not apply to
        this run is an error the job raises, never a setting silently ignored)."""
        return sorted({self.flag_for(path) for path in self._flags if path == group or path.startswith(group + ".")})

    def used(self) -> dict[str, Any]:
        """The options as the run used them, for its manifest (JSON values; paths as strings)."""
        return self.model_dump(mode="json")


class RunOptions(BaseModel):
    """What every record-by-record job takes: how much runs at once, how many records, whether the
    output is resumed. A job subclasses it to change a default (the answer job runs 4 at once)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(8, ge=1)
    limit: int | None = Field(None, ge=0)
    resume: bool = True
    allow_empty: bool = False  # an input with no samples is an error otherwise (kbvqa.data.formats.non_empty)


class CallLimits(BaseModel):
    """The call limits of a job's model roles (None: the role's own setting), as flags and file keys;
    `.limits()` = roles_from_flags keywords. A job whose model is chosen by other flags than
    `--llm/--model` (the judges: `--judge-base-url/--judge-model`) subclasses it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout: float | None = Field(None, gt=0)  # read timeout of one request, seconds
    connect_timeout: float | None = Field(None, gt=0)
    deadline: float | None = Field(None, gt=0)  # one call with all its retries, seconds
    structured_output: Literal["auto", "json_schema", "json_object", "off"] | None = None
    max_retries: int | None = Field(None, ge=0)

    def limits(self) -> dict[str, Any]:
        """The call limits as roles_from_flags keywords (unset ones left out)."""
        values = {"timeout": self.timeout, "connect_timeout": self.connect_timeout, "deadline": self.deadline,
                  "structured_output": self.structured_output, "max_retries": self.max_retries}
        return {k: v for k, v in values.items() if v is not None}


class ModelFlags(CallLimits):
    """The model-role flags every job with model roles takes: `--llm URL --model NAME` fill the job's
    roles with one client, `--config` adds the `[models.*]` roles, and the call limits (None: the role's
    own setting) apply to them (kbvqa.models.config.roles_from_flags)."""

    llm: str | None = None
    model: str | None = None
    api_key_env: str | None = None

    def roles(self, config: Path | None, *, fill: tuple[str, ...], concurrency: int,
              env: dict[str, str] | None = None) -> dict[str, Any]:
        """The job's model roles: `[models.*]` of `config`, then `--llm/--model` filling the roles in
        `fill` with one client of `concurrency` slots, these call limits over them (roles_from_flags)."""
        from kbvqa.models.config import roles_from_flags

        return roles_from_flags(config, llm=self.llm, model=self.model, api_key_env=self.api_key_env, fill=fill,
                                concurrency=concurrency, env=env, **self.limits())
