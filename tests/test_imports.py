"""No import cycle inside any package of cuda_agent, read from the sources.

For each package, the nodes are its own modules (``__init__`` included) and its subpackages, each
subpackage taken as one node (its insides are checked as a package of their own); an edge is an
import from one node to another, wherever it stands: at module level, inside a ``try``/``if``, or
inside a function (a late import hides a cycle from the interpreter, not from a reader), but not
under ``if TYPE_CHECKING``.  A cycle among them is a failure: at the top level that is a cycle
between layers (``sandbox`` -> ``agent`` -> ``sandbox``), inside ``sandbox`` one between its
modules (``build`` -> ``process`` -> ``isolation`` -> ``build``).  A registry whose built-in
plugins register themselves on import keeps its definitions in a module of their own
(``synth/compose/base.py``, ``sandbox/pool/backend.py``) so that the plugins import that, not the
module that lists them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "cuda_agent"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    p = SRC.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _imports(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _imports(node.orelse)
        else:  # every block below: if/else, try/except/finally, with, loops, functions, classes
            for block in (getattr(node, f, None) for f in ("body", "orelse", "finalbody", "handlers", "cases")):
                if isinstance(block, list):
                    yield from _imports([x for x in block if isinstance(x, ast.AST)])


def imported_modules(path: Path) -> set[str]:
    """The cuda_agent modules that ``path`` imports (full names)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("cuda_agent"))
            continue
        if node.level:
            base = package.split(".")
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not target.startswith("cuda_agent"):
            continue
        subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
        out.update(subs)
        if len(subs) < len(node.names):  # names defined in the module itself
            out.add(target)
    return out


def _packages() -> list[Path]:
    return sorted(p.parent for p in ROOT.rglob("__init__.py") if "templates" not in p.parts)


def _graph(pkg: Path) -> dict[str, set[str]]:
    """Nodes of package ``pkg`` -> the nodes they import."""
    prefix = _module_name(pkg / "__init__.py")

    def node_of(module: str) -> str | None:
        if module == prefix:
            return "__init__"
        if module.startswith(prefix + "."):
            return module[len(prefix) + 1:].split(".")[0]
        return None

    graph: dict[str, set[str]] = {}
    for f in pkg.rglob("*.py"):
        src_node = node_of(_module_name(f))
        if src_node is None:
            continue
        edges = graph.setdefault(src_node, set())
        for m in imported_modules(f):
            dst = node_of(m)
            if dst is not None and dst != src_node:
                edges.add(dst)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("pkg", _packages(), ids=lambda p: _module_name(p / "__init__.py"))
def test_no_import_cycle_inside_a_package(pkg):
    cycles = _cycles(_graph(pkg))
    assert not cycles, f"import cycles in {_module_name(pkg / '__init__.py')}: {cycles}"


def test_the_cycle_finder_finds_cycles():
    # the finder itself: a known cycle and a known chain (so the test above cannot pass vacuously)
    assert _cycles({"build": {"process"}, "process": {"isolation"}, "isolation": {"build"}, "check": {"build"}}) \
        == [["build", "isolation", "process"]]
    assert _cycles({"a": {"b"}, "b": {"c"}}) == []
    graph = _graph(ROOT / "sandbox")
    assert "results" in graph["check"] and "pool" in graph and "check" in graph["pool"]
    assert "launcher" in graph["isolation"]  # relative `from . import launcher` resolves to the module
    assert "process" in graph["inline_build"]  # an import inside a function counts


# the layers of docs/architecture.md, bottom up: a package imports only from layers below its own
LAYERS = [
    {"registry", "rules_profile", "tasks"},
    {"reward"},
    {"cliopts"},  # the options every command shares (--reward lists reward's schemes)
    {"sandbox"},
    {"synth", "agent", "eval", "ext"},
    {"train"},
    {"cli", "__init__"},
]


def test_no_upward_import_between_layers():
    layer = {node: i for i, nodes in enumerate(LAYERS) for node in nodes}
    graph = _graph(ROOT)
    assert set(graph) <= set(layer), f"a package or module without a layer: {sorted(set(graph) - set(layer))}"
    upward = [f"{a} -> {b}" for a, deps in sorted(graph.items()) for b in sorted(deps) if layer[b] >= layer[a]]
    assert not upward, f"imports that do not go down a layer: {upward}"
