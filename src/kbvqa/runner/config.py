"""A job's settings table from a TOML file: the one loader behind `[audit]`, `[reference]`, `[curate]`
and `[executor.ray]`.

Every such table is a pydantic model whose stage configs forbid unknown keys, so a misspelt setting is
an error; every error names the file and the dotted key (`curate.rubric.min_score: ...`)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# the names a kbvqa.toml may hold live below the runner: the model-role loader checks them too
from kbvqa.data.config_tables import CONFIG_TABLES, check_tables, did_you_mean

M = TypeVar("M", bound=BaseModel)

__all__ = ["CONFIG_TABLES", "ExecutorTable", "RaySettings", "check_tables", "did_you_mean", "load_ray_settings",
           "load_table", "read_toml"]


def read_toml(path: str | Path, error: Callable[[str], Exception] = ValueError) -> dict[str, Any]:
    """The TOML document at `path`, its tables checked (`check_tables`); a missing or malformed file,
    or a table no job reads, raises `error(message)` naming it."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise error(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc})") from None
    check_tables(doc, path, error)
    return doc


def load_table(path: str | Path | None, section: str, model: type[M], *,
               error: Callable[[str], Exception] = ValueError,
               whole_file: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> M:
    """`[section]` of the TOML file at `path` validated as `model` (its defaults when `path` is None
    or the file has no such table). `whole_file`, when given, makes the table from the whole document
    when `[section]` is absent (the audit's older top-level layout). Problems raise `error(message)`."""
    if path is None:
        return model()
    doc = read_toml(path, error)
    table = doc.get(section)
    if table is None:
        table = whole_file(doc) if whole_file is not None else {}
    try:
        return model.model_validate(table or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join([section, *(str(p) for p in first.get("loc", ()))])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        hint = did_you_mean(model, first.get("loc", ())) if first.get("type") == "extra_forbidden" else ""
        raise error(f"{path}: {key}: {first.get('msg')}{hint}{more}") from None


class RaySettings(BaseModel):
    """`[executor.ray]` of a kbvqa.toml (`kbvqa --ray-config FILE`): the Ray executor's options; `init`
    goes to `ray.init` (runtime_env, namespace, num_cpus, ...) and to the manifest without secrets."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = None
    actors: int | None = Field(None, ge=1)
    calls_per_actor: int = Field(2, ge=1)
    batch_size: int | None = Field(None, ge=1)
    num_cpus_per_actor: float = Field(0.5, gt=0)
    init: dict[str, Any] = Field(default_factory=dict)

    def executor_options(self) -> dict[str, Any]:
        """The RayExecutor keywords this table sets (unset ones left to the executor's defaults)."""
        opts = self.model_dump(exclude_unset=True)
        if "init" in opts:
            opts["init_kwargs"] = opts.pop("init")
        return opts


class ExecutorTable(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ray: RaySettings = Field(default_factory=RaySettings)


def load_ray_settings(path: str | Path | None) -> RaySettings:
    """`[executor.ray]` of the TOML file at `path` (defaults without a file or table)."""
    return load_table(path, "executor", ExecutorTable).ray
