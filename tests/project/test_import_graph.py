"""The import graph of qpinfer and qptables has no circles: arrows only point down.

Three checks:

* the graph of *module-level* imports (statements at the top of a module, also inside top-level
  ``if``/``try`` blocks; not ``if TYPE_CHECKING:``), read with :mod:`ast`, has no cycle;
* every module imports on its own in a fresh interpreter (a forked child of an interpreter that
  has imported neither package), so no module depends on another having been imported first;
* with the *lazy* imports (inside functions) added, the only cycles are the ones closed by an
  edge of :data:`KNOWN_LAZY_BACK_EDGES` -- a lazy import must not hide a new circle, and an entry
  that no longer closes one must be removed from the list.

An edge ``A -> qpinfer`` (``from qpinfer import x`` inside the package) counts as an arrow to
the package's ``__init__``, which imports most modules: import from the defining module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("qpinfer", "qptables")

#: Lazy imports that still close a circle, with the reason they are not broken yet. The test
#: fails if one of them no longer closes a circle (then delete it here).
KNOWN_LAZY_BACK_EDGES = {}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, ast.If):
            if not _is_type_checking(node):
                yield from _top_level(node.body)
                yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        else:
            yield node


def _targets(node: ast.AST, module: str, mods: dict[str, Path]) -> set[str]:
    """In-package modules an import statement imports (submodule if it is one, else module)."""
    out = set()
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: resolve against this module's package
            pkg = module.split(".")
            if not mods[module].name == "__init__.py":
                pkg = pkg[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        for alias in node.names:
            if f"{base}.{alias.name}" in mods:
                out.add(f"{base}.{alias.name}")
            elif base in mods:
                out.add(base)
    elif isinstance(node, ast.Import):
        out.update(a.name for a in node.names if a.name in mods)
    out.discard(module)
    return out


def _graph(lazy: bool) -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = ast.walk(tree) if lazy else _top_level(tree.body)
        edges: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= _targets(node, module, mods)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _describe(graph: dict[str, set[str]], comps: list[list[str]]) -> str:
    lines = []
    for comp in comps:
        members = set(comp)
        lines.append("; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in comp))
    return "\n".join(lines)


def test_cycle_finder_sees_a_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_module_level_imports_have_no_circle():
    graph = _graph(lazy=False)
    assert len(graph) > 40  # both packages were found
    comps = _cycles(graph)
    assert not comps, "module-level import circles:\n" + _describe(graph, comps)


def test_lazy_imports_hide_no_new_circle():
    graph = _graph(lazy=True)
    for src, dst in KNOWN_LAZY_BACK_EDGES:
        assert dst in graph[src], f"{src} no longer imports {dst}: drop it from the list"
        graph[src] = graph[src] - {dst}
    comps = _cycles(graph)
    assert not comps, "import circles closed by in-function imports:\n" + _describe(graph, comps)
    for src, dst in KNOWN_LAZY_BACK_EDGES:  # each entry still closes a circle
        with_edge = {m: set(e) for m, e in graph.items()}
        with_edge[src].add(dst)
        assert _cycles(with_edge), f"{src} -> {dst} closes no circle any more: drop it"


_FRESH_IMPORTS = """
import importlib, os, sys
n = int(sys.argv[1])
# the third-party modules the packages import, loaded once in the parent: each forked child
# then imports only the package's own modules (what the test is about), in milliseconds
for name in sys.argv[2 : 2 + n]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass  # an optional extra that is not installed: the child finds out the same way
assert not any(m.split(".")[0] in ("qpinfer", "qptables") for m in sys.modules)
running, failed = {}, []
for name in sys.argv[2 + n :]:
    if len(running) >= (os.cpu_count() or 1):  # one child per core at a time
        pid, status = os.wait()
        if status:
            failed.append(running[pid])
        del running[pid]
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException as exc:
            print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
            os._exit(1)
        os._exit(0)
    running[pid] = name
for pid, name in running.items():
    if os.waitpid(pid, 0)[1]:
        failed.append(name)
sys.exit(1 if failed else 0)
"""


def _third_party() -> list[str]:
    """The modules outside both packages that their module-level imports name (the standard
    library's included), in a stable order."""
    mods = _modules()
    out: set[str] = set()
    for path in mods.values():
        for node in _top_level(ast.parse(path.read_text(), filename=str(path)).body):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module)
    return sorted(m for m in out if m.split(".")[0] not in PACKAGES)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """Each module of both packages in its own forked child of an interpreter that has imported
    only third-party modules: none depends on another of ours having been imported first."""
    mods = sorted(m for m in _modules() if not m.endswith("__main__"))
    deps = _third_party()
    assert "numpy" in deps and not any(d.split(".")[0] in PACKAGES for d in deps)
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH_IMPORTS, str(len(deps)), *deps, *mods],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
