"""Import direction: every kbvqa module imports only its own layer and the layers below it.

Layers, bottom to top (ARCHITECTURE.md, "Layers"):

    base      kbvqa/__init__.py, registry.py, progress.py, units.py
    data
    models | kb      the same rank, and neither imports the other
    runner
    stages | tools   the same rank; a stage may use tool types, a tool backend never imports a stage
    evaluate
    pipelines
    report    reads outputs and manifests: imports only data and runner (and base)
    demo
    cli

Every import counts, wherever it is written: at module level, inside a function (a lazy import is
still a dependency), under `if TYPE_CHECKING:`, an `importlib.import_module("kbvqa...")` with a
literal name, and the module names a `Registry(..., modules=(...))` imports on first use. The
failure message lists every offending edge as `file:line  importer -> imported  (layer -> layer)`.

A second test looks for import cycles among kbvqa modules: at module level a module can see a
half-initialised partner and fail depending on which of the two is imported first; and a cycle
closed by an import inside a function is the same cycle moved out of sight ("local import: avoid a
cycle"), so those count too. (A registry's module list is not part of a cycle: the registry imports
its modules on first use, after both are initialised; `TYPE_CHECKING` imports never run.)
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "kbvqa"

RANK = {"base": 0, "data": 1, "models": 2, "kb": 2, "runner": 3, "stages": 4, "tools": 4, "evaluate": 5,
        "pipelines": 6, "report": 7, "demo": 8, "cli": 9}
BASE_MODULES = {"kbvqa", "kbvqa.registry", "kbvqa.progress", "kbvqa.units"}
#: Layers allowed to import another layer of the same rank (importer -> imported).
SIDEWAYS_OK = {("stages", "tools")}
#: Layers restricted to an explicit list instead of "everything below".
ONLY = {"report": {"base", "data", "runner", "report"}}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def layer_of(module: str) -> str:
    if module in BASE_MODULES:
        return "base"
    top = module.split(".")[1]
    if top not in RANK:
        raise AssertionError(f"{module}: no layer for kbvqa.{top} (add it to RANK in {Path(__file__).name})")
    return top


def allowed(src: str, dst: str) -> bool:
    if src == dst:
        return True
    if src in ONLY:
        return dst in ONLY[src]
    if RANK[dst] < RANK[src]:
        return True
    return RANK[dst] == RANK[src] and (src, dst) in SIDEWAYS_OK


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    kind: str  # module | function | type-checking | importlib | registry

    def where(self) -> str:
        return f"{MODULES[self.importer].relative_to(SRC.parent)}:{self.line}"


def _resolve_relative(importer: str, module: str | None, level: int) -> str:
    is_pkg = MODULES[importer].name == "__init__.py"
    base = importer.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def _target(name: str) -> str | None:
    """The kbvqa module an imported dotted name lands in: the longest prefix that is a module."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in MODULES:
            return cand
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _str_constants(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def edges_of(module: str, source: str | None = None) -> list[Edge]:
    """The kbvqa imports of `module` (its file, or `source` as if it were that module's text)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source, filename=str(path))
    out: list[Edge] = []

    def add(name: str, line: int, kind: str) -> None:
        if name == "kbvqa" or name.startswith("kbvqa."):
            tgt = _target(name)
            if tgt is not None and tgt != module:
                out.append(Edge(module, tgt, line, kind))

    def visit(node: ast.AST, kind: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for child in ast.iter_child_nodes(node):
                visit(child, "function")
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, "type-checking")
            for child in node.orelse:
                visit(child, kind)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, kind)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, node.module, node.level) if node.level else (node.module or "")
            for alias in node.names:
                # `from pkg import sub` imports the submodule; `from mod import name` the module
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base, node.lineno, kind)
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if fname == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
                add(str(node.args[0].value), node.lineno, "importlib")
            if fname == "Registry":
                for kw in node.keywords:
                    if kw.arg == "modules":
                        for s in _str_constants(kw.value):
                            add(s, node.lineno, "registry")
        for child in ast.iter_child_nodes(node):
            visit(child, kind)

    for stmt in tree.body:
        visit(stmt, "module")
    return out


ALL_EDGES: list[Edge] = [e for m in MODULES for e in edges_of(m)]


def test_every_module_has_a_layer():
    assert {layer_of(m) for m in MODULES} <= set(RANK)


def test_imports_point_down():
    bad = [e for e in ALL_EDGES if not allowed(layer_of(e.importer), layer_of(e.imported))]
    lines = sorted(f"{e.where()}  {e.importer} -> {e.imported}  ({layer_of(e.importer)} -> "
                   f"{layer_of(e.imported)}, {e.kind} import)" for e in bad)
    assert not bad, f"{len(bad)} import(s) against the layer order:\n" + "\n".join(lines)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    where: dict[tuple[str, str], Edge] = {}
    for e in ALL_EDGES:
        if e.kind in ("module", "function"):
            graph[e.importer].add(e.imported)
            where.setdefault((e.importer, e.imported), e)
    cycles = _cycles(graph)
    msg = []
    for comp in cycles:
        inside = sorted(f"  {where[(a, b)].where()}  {a} -> {b} ({where[(a, b)].kind} import)"
                        for a in comp for b in graph[a] if b in comp)
        msg.append(f"cycle among {', '.join(comp)}:\n" + "\n".join(inside))
    assert not cycles, "import cycles:\n" + "\n".join(msg)


@pytest.mark.parametrize("src,dst,ok", [
    ("cli", "pipelines", True), ("pipelines", "cli", False), ("models", "kb", False), ("kb", "models", False),
    ("stages", "tools", True), ("tools", "stages", False), ("report", "evaluate", False), ("report", "runner", True),
    ("evaluate", "pipelines", False), ("demo", "report", True), ("data", "base", True), ("base", "data", False),
])
def test_layer_rules(src, dst, ok):
    assert allowed(src, dst) is ok


def test_the_scanner_sees_every_kind_of_import():
    """Module-level, lazy, TYPE_CHECKING, relative, importlib and registry imports are all edges."""
    src = ("from typing import TYPE_CHECKING\nimport importlib\nfrom kbvqa.models import config\n"
           "if TYPE_CHECKING:\n    from kbvqa.runner.stage import Context\n"
           "def f():\n    import kbvqa.pipelines.audit\n    from . import base\n    from ..evaluate import studies\n"
           "    importlib.import_module('kbvqa.cli.app')\n")
    got = {(e.imported, e.kind) for e in edges_of("kbvqa.kb.store", src)}
    assert got == {("kbvqa.models.config", "module"), ("kbvqa.runner.stage", "type-checking"),
                   ("kbvqa.pipelines.audit", "function"), ("kbvqa.kb.base", "function"),
                   ("kbvqa.evaluate.studies", "function"), ("kbvqa.cli.app", "importlib")}
    assert [allowed("kb", layer_of(m)) for m, _ in sorted(got)] == [False, False, True, False, False, False]
    kinds = {e.kind for e in ALL_EDGES}
    assert {"module", "function", "registry"} <= kinds
    stages_init = [e for e in ALL_EDGES if e.importer == "kbvqa.stages" and e.kind == "registry"]
    assert any(e.imported == "kbvqa.stages.audit.verify" for e in stages_init)


#: Packages of one layer that must not import each other: the two model-driven funnels share
#: kbvqa.pipelines.funnel (and kbvqa.stages.ask below it), so a change made for one family never
#: reaches the other unseen (issue 36).
APART = [("kbvqa.pipelines.curate", "kbvqa.pipelines.reference")]


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def crossings(edges: list[Edge], a: str, b: str) -> list[Edge]:
    """The edges from package `a` into package `b`, or from `b` into `a`."""
    return [e for e in edges if (_inside(e.importer, a) and _inside(e.imported, b))
            or (_inside(e.importer, b) and _inside(e.imported, a))]


@pytest.mark.parametrize("a,b", APART)
def test_sibling_funnels_never_import_each_other(a, b):
    bad = crossings(ALL_EDGES, a, b)
    lines = sorted(f"{e.where()}  {e.importer} -> {e.imported}  ({e.kind} import)" for e in bad)
    assert not bad, f"{a} and {b} import each other (share through kbvqa.pipelines.funnel):\n" + "\n".join(lines)


def test_the_sibling_check_sees_a_lazy_crossing():
    src = "def f():\n    from kbvqa.pipelines.reference.common import fill_pool\n"
    edges = edges_of("kbvqa.pipelines.curate.items", src)
    assert [(e.imported, e.kind) for e in crossings(edges, *APART[0])] == [
        ("kbvqa.pipelines.reference.common", "function")]
