"""The project's modules import one another in one direction: no cycle, not even through an import
made inside a function (which only hides a cycle from Python until that function runs)."""

from __future__ import annotations

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project_modules() -> dict[str, str]:
    """Module name -> path, for the top-level modules and the packages' modules (``nets.heads``)."""
    paths = glob.glob(os.path.join(ROOT, "*.py")) + glob.glob(os.path.join(ROOT, "*", "__init__.py"))
    paths += [
        p
        for p in glob.glob(os.path.join(ROOT, "*", "*.py"))
        if os.path.exists(os.path.join(os.path.dirname(p), "__init__.py"))
    ]
    modules = {}
    for path in paths:
        rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        modules[rel.removesuffix(".__init__")] = path
    return modules


def imports_of(path: str, modules: set[str]) -> set[str]:
    """The project modules that the file at ``path`` imports, anywhere in it."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found & modules


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path that ends where it starts, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_the_cycle_finder_finds_a_cycle_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_module_of_the_project_imports_itself_back():
    modules = project_modules()
    graph = {name: imports_of(path, set(modules)) - {name} for name, path in modules.items()}
    assert "randomize" in graph["adr"] or "physics" in graph["adr"]  # the graph holds real edges
    assert find_cycle(graph) == []
