"""Named registries: pipelines, stages, executors, rerankers, encoders, tool backends, metrics, prompts.

One small class serves them all. Implementations register themselves with a decorator where they are
defined (`@RERANKERS.register("bm25")`); a registry also knows which modules hold its built-in
entries and imports them the first time anyone asks for a name, so the command line can offer
`--reranker {bm25,dense,...}` without restating the list and without importing every backend at
start-up. Third-party packages add entries through the entry-point group `kbvqa.<kind>`
(`[project.entry-points."kbvqa.reranker"] mine = "pkg.module:MyReranker"`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")
_ALL = object()  # _load(): every group

__all__ = ["Entry", "Registry", "UnknownName"]


class UnknownName(ValueError, KeyError):
    """A name no registry entry has; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    help: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """name -> object (a class, factory or value). `modules` are imported lazily to fill it.

    `modules` may also be grouped by the value of one info field (`group_by`): then a lookup filtered
    on that field (`names(family="infoseek")`) imports only that group's modules, so a command that
    needs one family of entries does not import every other family's dependencies.
    """

    def __init__(self, kind: str, modules: tuple[str, ...] | dict[str, tuple[str, ...]] = (), *,
                 group_by: str | None = None):
        if isinstance(modules, dict) != (group_by is not None):
            raise ValueError("grouped modules need group_by, and group_by needs grouped modules")
        self.kind = kind
        self._groups = modules if isinstance(modules, dict) else {None: modules}
        self._group_by = group_by
        self._entries: dict[str, Entry[T]] = {}
        self._loaded: set[str | None] = set()  # groups imported
        self._plugins_loaded = False
        self._plugin_names: set[str] = set()
        self._loading = False

    def register(self, name: str, *, help: str = "", **info: Any) -> Callable[[T], T]:
        """Decorator: `@REGISTRY.register("name")` above a class or function."""

        def deco(obj: T) -> T:
            self.add(name, obj, help=help, **info)
            return obj

        return deco

    def add(self, name: str, obj: T, *, help: str = "", **info: Any) -> T:
        old = self._entries.get(name)
        if old is not None and old.obj is not obj and old.obj != obj and name not in self._plugin_names:
            raise ValueError(f"{self.kind} {name!r} is already registered ({old.obj!r})")
        self._plugin_names.discard(name)  # a built-in module imported after the plugins still wins
        doc = help or (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
        self._entries[name] = Entry(name, obj, doc, dict(info))
        return obj

    def _load(self, group: Any = _ALL) -> None:
        """Import the built-in modules (all groups, or one) and the entry-point plugins, once each."""
        groups = list(self._groups) if group is _ALL else [group] if group in self._groups else []
        if self._loading or (self._plugins_loaded and self._loaded.issuperset(groups)):
            return
        self._loading = True  # a module being imported may itself ask for names
        try:
            for g in groups:
                for mod in self._groups[g]:
                    importlib.import_module(mod)
                self._loaded.add(g)
            if not self._plugins_loaded:
                for ep in metadata.entry_points(group=f"kbvqa.{self.kind}"):
                    if ep.name not in self._entries:
                        self.add(ep.name, ep.load())
                        self._plugin_names.add(ep.name)
                self._plugins_loaded = True
        finally:
            self._loading = False

    def get(self, name: str) -> T:
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        got = self._entries.get(name)
        if got is not None and name not in self._plugin_names:  # a built-in's entry is final
            return got
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownName(f"unknown {self.kind} {name!r} (known: {', '.join(self.names()) or 'none'})") from None

    def names(self, **where: Any) -> list[str]:
        """Registered names in registration order; `where` filters on info fields (kind="answer")."""
        self._load(where[self._group_by] if self._group_by in where else _ALL)
        return [e.name for e in self._entries.values() if all(e.info.get(k) == v for k, v in where.items())]

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        self._load()
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)
