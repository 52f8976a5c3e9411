"""trace_lab's import graph: no cycles, and every module imports only its own stage or lower ones.

The graph is built with the standard library's ``ast`` over every module of trace_lab/:
each ``import`` / ``from ... import`` statement is an edge, at module level *and* inside
functions. A function-local import is still a dependency (it only runs later), and
hiding a cycle behind one is how the cycles this test guards against were written, so
it counts. ``from . import name`` resolves to the submodule ``name`` when there is one,
else to the package (its ``__init__``). Edges to a module's own ancestor packages count
too: ``from . import register_pass`` in ``passes/fusion.py`` is an edge to
``trace_lab.passes``, whose ``__init__`` imports ``fusion``, a cycle; that is why the
registry lives in ``passes/registry.py``, which both import. ``import trace_lab`` inside the
package is an edge to the public facade, which sits above everything. What is left out:

* the packages Python runs implicitly: importing ``trace_lab.ir.trace`` runs
  ``trace_lab/__init__`` and ``trace_lab/ir/__init__`` first, but only a statement that names
  a package (or imports a name from it) is an edge to it;
* imports of modules outside trace_lab (torch, the standard library, optional packages).

``importlib.import_module`` calls are not statements and are not seen; the package's
registries use plain import statements so that their edges show here.
"""
from __future__ import annotations

import ast
from pathlib import Path

import trace_lab

ROOT = Path(trace_lab.__file__).resolve().parent

# The stages, lowest first (docs/ARCHITECTURE.md). A module may import modules of its own stage
# or of lower ones, never of a higher one. A module's stage is that of the longest entry naming it
# or a package above it; every module must have one. The picture in ARCHITECTURE.md is the data
# flow (capture -> ir -> passes -> executors -> runtime -> run -> report); the order below is who
# may import whom, and differs from the arrows where the code's dependencies do:
#  - capture builds Programs of ir Traces and needs nothing else, so it sits just above ir;
#  - executors and runtime are one stage (executors run their programs through runtime's code);
#  - run makes records (compilation records, measurements) and report reads them, so run sits
#    below report; the entry points that do both for one call (inspect, the --baseline peers,
#    from_thunder) are the lab stage above report (trace_lab/lab/);
#  - distributed's sharding and collective measurement are used by run (jit's fsdp), lab (inspect)
#    and report (the timeline's measured communication), so it sits below them; its launcher
#    ships a rank's Report as plain data without importing the class.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("trace_lab.errors", "trace_lab.options", "trace_lab.torch_support")),
    ("ir", ("trace_lab.ir",)),
    ("capture", ("trace_lab.capture",)),
    ("analysis", ("trace_lab.analysis",)),
    ("passes", ("trace_lab.passes",)),
    ("executors/runtime", ("trace_lab.executors", "trace_lab.runtime")),
    ("distributed", ("trace_lab.distributed",)),
    ("run", ("trace_lab.run",)),
    ("report", ("trace_lab.report",)),
    ("lab", ("trace_lab.lab",)),
    ("front ends", ("trace_lab.notebook", "trace_lab.cli")),
    ("facade", ("trace_lab", "trace_lab.__main__")),  # trace_lab/__init__.py and python -m trace_lab
]


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
        names = [f"{base}.{a.name}" for a in node.names]
    out = set()
    for name in names:
        while name and name not in mods:  # a name imported from a module: the module
            name = name.rpartition(".")[0]
        if name and name != module:
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


def stage_of(module: str) -> int | None:
    """The index in STAGES of the longest entry that is ``module`` or a package above it."""
    best, best_len = None, -1
    for i, (_, entries) in enumerate(STAGES):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > best_len:
                best, best_len = i, len(entry)
    return best


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every edge from a module to one of a higher stage, as ``a (stage) -> b (stage)``."""
    def label(m):
        return f"{m} ({STAGES[stage_of(m)][0]})"

    return sorted(f"{label(a)} -> {label(b)}" for a, targets in graph.items() for b in targets
                  if stage_of(b) > stage_of(a))


def test_the_graph_sees_module_and_function_level_and_ancestor_imports():
    graph = import_graph()
    assert "trace_lab.ir.fx_util" in graph["trace_lab.ir.trace"]  # module level
    assert "trace_lab.executors.eager" in graph["trace_lab.executors.base"]  # the registry's loads, function-local
    assert "trace_lab.run.compare" in graph["trace_lab.lab.peers"]  # from ..run import compare: the submodule
    assert "trace_lab.run" not in graph["trace_lab.lab.peers"]  # ... and not the package
    assert "trace_lab.passes.registry" in graph["trace_lab.passes.fusion"]
    mods = _modules()
    # an ancestor package counts: from . import x (x defined in __init__), import trace_lab
    assert _targets("trace_lab.passes.fusion", mods["trace_lab.passes.fusion"],
                    ast.parse("from . import register_pass").body[0], mods) == {"trace_lab.passes"}
    assert _targets("trace_lab.cli", mods["trace_lab.cli"], ast.parse("import trace_lab").body[0], mods) == {"trace_lab"}
    assert _targets("trace_lab.run.jit", mods["trace_lab.run.jit"],
                    ast.parse("from .. import TraceLabError").body[0], mods) == {"trace_lab"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert upward_edges({"trace_lab.ir.trace": {"trace_lab.run.jit"}, "trace_lab.run.jit": {"trace_lab.ir"}}) == [
        "trace_lab.ir.trace (ir) -> trace_lab.run.jit (run)"]
    assert stage_of("trace_lab") > stage_of("trace_lab.cli") > stage_of("trace_lab.run.jit") > stage_of("trace_lab.ir")


def test_every_module_has_a_stage():
    assert not [m for m in _modules() if stage_of(m) is None], "modules STAGES does not place"


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_modules_import_only_their_own_stage_or_lower_ones():
    leaks = upward_edges(import_graph())
    assert not leaks, f"{len(leaks)} imports of a higher stage (STAGES, lowest first):\n" + "\n".join(leaks)
