"""The names a kbvqa.toml may hold, and the closest known name for one it may not: every job reads
its own table, so a misspelt table or key is refused here by name, with a suggestion, instead of being a
setting no job ever applies. Plain data and pydantic models only: the model-role loader (models) and the
job-table loader (runner.config) both use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

__all__ = ["AUDIT_TOP_LEVEL", "CONFIG_TABLES", "check_tables", "did_you_mean", "renamed_key"]


#: Every table a kbvqa.toml may hold: top-level name -> the names known one level down (None: whatever
#: is inside is its reader's to check — a job's options class or the model-role loader refuse unknown
#: keys themselves). A namespace shared by several jobs lists its jobs' tables, since a job that reads
#: `[score.judge]` would never see a `[score.jugde]`. docs/reference.md lists the same tables.
CONFIG_TABLES: dict[str, tuple[str, ...] | None] = {
    "models": None, "cache": None, "prompts": None,
    "answer": None, "audit": None, "retrieve": None, "augment": None, "reference": None, "curate": None,
    "score": ("judge", "ivr12", "evqa"), "study": ("agent-failures", "agent-tools", "image-ablation"), "data": ("compare",),
    "index": ("images", "text"), "kb": ("import",), "tools": ("web",), "executor": ("ray",),
}
#: The audit's older layout (`kbvqa.pipelines.audit._audit_table`): with no `[audit]` table, the file's
#: top level is the audit's table — its stage tables and settings (tests/test_config_typos.py keeps
#: this in step with AuditOptions).
AUDIT_TOP_LEVEL = ("verify", "derive", "posedness", "leakage", "stages", "run", "input", "kb", "out", "fmt",
                   "config", "skip_invalid", "llm_concurrency", "verifier_models", "concurrency", "limit", "resume",
                   "allow_empty")


def check_tables(doc: dict[str, Any], path: str | Path, error: Callable[[str], Exception] = ValueError) -> None:
    """Refuse a name no job reads, at the top of the file or one level into a shared namespace, naming
    it and the closest known one: a misspelt table is otherwise a setting silently not applied."""
    import difflib

    legacy = "audit" not in doc  # only then is the top level the audit's own table
    known = [*CONFIG_TABLES, *(AUDIT_TOP_LEVEL if legacy else ())]
    for name, value in doc.items():
        kind = "table" if isinstance(value, dict) else "key"
        if name not in known:
            shown = f"[{name}]" if kind == "table" else name
            close = difflib.get_close_matches(name, list(CONFIG_TABLES) if kind == "table" else known, n=1, cutoff=0.6)
            hint = (f"did you mean [{close[0]}]?" if close and close[0] in CONFIG_TABLES else
                    f"did you mean {close[0]}?" if close else
                    "settings go in a job's table, e.g. [answer], [audit], [score.judge]; the tables: "
                    + ", ".join(f"[{t}]" for t in CONFIG_TABLES))
            raise error(f"unknown {kind} {shown} in {path}; {hint}")
        children = CONFIG_TABLES.get(name)
        if children is None or not isinstance(value, dict):
            continue
        for child in value:
            if child not in children:
                close = difflib.get_close_matches(child, children, n=1, cutoff=0.6)
                hint = f"did you mean [{name}.{close[0]}]?" if close else \
                    "known: " + ", ".join(f"[{name}.{c}]" for c in children)
                raise error(f"unknown table [{name}.{child}] in {path}; {hint}")


def _sub_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds: itself, or inside Optional / a list / a dict's values."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _sub_model(arg)
        if found is not None:
            return found
    return None


def did_you_mean(model: type[BaseModel], loc: tuple[Any, ...] | list[Any], also: tuple[str, ...] = ()) -> str:
    """" (did you mean X?)" for an unknown key at pydantic's error location `loc` in `model`: the closest
    name the table it sits in knows (`also`: more names known at the top, e.g. the run keys a job's
    table may hold there); "" when none is close."""
    import difflib

    node: type[BaseModel] | None = model
    parts = [p for p in loc if not isinstance(p, int)]
    for part in parts[:-1]:
        field = node.model_fields.get(str(part)) if node is not None else None
        node = _sub_model(field.annotation) if field is not None else None
        if node is None:
            return ""
    if node is None or not parts:
        return ""
    names = [*node.model_fields, *(also if len(parts) == 1 else ())]
    close = difflib.get_close_matches(str(parts[-1]), names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def renamed_key(data: Any, old: str, new: str, *, convert: Callable[[Any], Any] = lambda v: v,
                conflict: str = "") -> Any:
    """A config written before a key was renamed reads as the new key (a pydantic `mode="before"`
    validator's body): `old`'s value, `convert`ed, becomes `new`'s; both given is refused with
    `conflict` (default: naming both) unless they agree."""
    if not isinstance(data, dict) or old not in data:
        return data
    data = dict(data)
    value = convert(data.pop(old))
    if new in data and data[new] != value:
        raise ValueError(conflict or f"{old} = {value!r} and {new} = {data[new]!r}: `{old}` is the old name of "
                                     f"{new}; keep one")
    data[new] = value
    return data
