"""trace_lab's import graph: no cycles, and the lower layers never import the upper ones.

The graph is built with the standard library's ``ast`` over every module of trace_lab/:
each ``import`` / ``from ... import`` statement is an edge, at module level *and* inside
functions. A function-local import is still a dependency (it only runs later), and
hiding a cycle behind one is how the cycles this test guards against were written, so
it counts. ``from . import name`` resolves to the submodule ``name`` when there is one,
else to the package. Two kinds of edge are left out, with reasons:

* an edge from a module to one of its own ancestor packages (``from . import register``
  in ``passes/fusion.py``): importing a submodule always runs its package's
  ``__init__`` first, so counting these would make every package with a non-empty
  ``__init__`` a cycle; the ``__init__``'s own edges to its submodules are counted;
* imports of modules outside trace_lab (torch, the standard library, optional packages).

``importlib.import_module`` calls are not statements and are not seen; the package's
registries use plain import statements so that their edges show here.
"""
from __future__ import annotations

import ast
from pathlib import Path

import trace_lab

ROOT = Path(trace_lab.__file__).resolve().parent
# the stages in data-flow order (docs/ARCHITECTURE.md): capture -> passes -> executors/runtime -> run -> view
LOWER = ("trace_lab.ir", "trace_lab.capture", "trace_lab.analysis", "trace_lab.passes", "trace_lab.runtime",
         "trace_lab.executors", "trace_lab.options")
UPPER = ("trace_lab.run", "trace_lab.report", "trace_lab.notebook", "trace_lab.distributed", "trace_lab.cli")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = ["trace_lab", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _targets(module: str, path: Path, node, mods) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(base + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" for a in node.names] + [base]
    out = set()
    for name in names:
        while name and name not in mods:  # a name imported from a module: the module
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            out.add(name)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {m: set() for m in mods}
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= _targets(module, path, node, mods)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_graph_sees_module_and_function_level_imports():
    graph = import_graph()
    assert "trace_lab.analysis.liveness" in graph["trace_lab.ir.trace"]  # function-local, in Trace.liveness
    assert "trace_lab.ir.fx_util" in graph["trace_lab.ir.trace"]  # module level
    assert "trace_lab.executors.eager" in graph["trace_lab.executors.base"]  # the registry's loads
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_lower_layers_do_not_import_report_notebook_or_distributed():
    def within(module, prefixes):
        return any(module == p or module.startswith(p + ".") for p in prefixes)

    leaks = sorted(f"{a} -> {b}" for a, targets in import_graph().items() if within(a, LOWER)
                   for b in targets if within(b, UPPER))
    assert not leaks, "lower layers import upper ones:\n" + "\n".join(leaks)
