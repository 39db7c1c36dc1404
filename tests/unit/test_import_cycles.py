"""No import cycles among traindeck's modules, deferred (in-function) imports included: a cycle hidden in a function
still ties two modules' designs together and breaks the first time someone moves the import to the top. The layers
contracts (pyproject's import-linter section) order the packages; this covers every pair of modules. Read with grimp,
the import graph import-linter itself builds."""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")


def _cycles(graph: object, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]  # type: ignore[attr-defined]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))  # type: ignore[attr-defined]
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = grimp.build_graph("traindeck", exclude_type_checking_imports=True, cache_dir=None)
    modules = {m for m in graph.modules if m.startswith(("traindeck.backend", "traindeck.gui"))}
    assert len(modules) > 200
    assert _cycles(graph, modules) == []


def test_the_supervisors_parts_import_no_cycle_even_for_type_checking() -> None:
    """The supervisor's parts (stopper, end of the run, process tracker, output drain) are objects it holds and
    hands what they need: none of them imports the supervisor back, not even for its type hints."""
    graph = grimp.build_graph("traindeck", exclude_type_checking_imports=False, cache_dir=None)
    modules = {m for m in graph.modules if m.startswith("traindeck.backend.runs.supervisor")}
    assert {"traindeck.backend.runs.supervisor.process", "traindeck.backend.runs.supervisor.run_end",
            "traindeck.backend.runs.supervisor.stop_sequence"} <= modules
    assert _cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return set(self.edges.get(module, ()))

    assert _cycles(Graph(), {"a", "b", "c", "d"}) == [["a", "b", "c"]]
