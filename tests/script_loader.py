"""Load one of the repository's scripts (benchmarks/*.py, dev.py, tests/conftest.py) as a module by its path.

The scripts are not a package; ``import gpu_check`` could find another module of that name on ``sys.path``
(tests/notebook/conftest.py beside tests/conftest.py), so tests load them from their file, each call a fresh
module."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None):
    """The module made from ``ROOT / relative`` (e.g. ``"benchmarks/gpu_check.py"``), executed afresh."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or "_script_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
