"""The executor and pass registries do not swallow errors of trace_lab's own modules.

Only a missing optional third-party package (nvfuser_direct, ...) becomes a message;
an ImportError raised inside one of the package's modules propagates as it is.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import pytest

from trace_lab.errors import MissingDependencyError
from trace_lab.executors import base, nvfuser_import
from trace_lab.options import Options


class _Failing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes importing ``module`` raise ``error`` from inside its body."""

    def __init__(self, module: str, error: BaseException):
        self.module, self.error = module, error

    def find_spec(self, fullname, path, target=None):
        if fullname == self.module:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise self.error


def _inject(monkeypatch, module: str, error: BaseException, registry: dict, key: str):
    """Forget ``module`` (and its registration) and make its next import raise ``error``."""
    monkeypatch.delitem(sys.modules, module, raising=False)
    parent, _, child = module.rpartition(".")
    monkeypatch.delattr(sys.modules[parent], child, raising=False)
    monkeypatch.delitem(registry, key, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Failing(module, error), *sys.meta_path])


@pytest.fixture
def clean_unavailable(monkeypatch):
    monkeypatch.setattr(base, "UNAVAILABLE", {})


def test_an_import_error_inside_the_nvfuser_executor_propagates(monkeypatch, clean_unavailable):
    bug = ImportError("cannot import name 'renamed' from 'trace_lab.executors.nvfuser_ops'",
                      name="trace_lab.executors.nvfuser_ops")
    _inject(monkeypatch, "trace_lab.executors.nvfuser", bug, base.EXECUTORS, "nvfuser")
    with pytest.raises(ImportError, match="renamed") as info:
        base.get_executor("eager")  # loading the registry runs into it, whichever executor is asked for
    assert info.value is bug
    assert "nvfuser" not in base.UNAVAILABLE


def test_a_missing_optional_package_makes_the_executor_unavailable_with_the_reason(monkeypatch, clean_unavailable):
    missing = ModuleNotFoundError("No module named 'nvfuser_direct'", name="nvfuser_direct")
    _inject(monkeypatch, "trace_lab.executors.nvfuser", missing, base.EXECUTORS, "nvfuser")
    assert type(base.get_executor("eager")).__name__ == "EagerExecutor"  # the others still load
    with pytest.raises(MissingDependencyError, match="executor='nvfuser' cannot be used here: nvfuser_direct"):
        base.get_executor("nvfuser")


def test_unknown_names_are_still_unknown(clean_unavailable):
    with pytest.raises(ValueError, match="unknown executor 'nope'"):
        base.get_executor("nope")


def test_without_nvfuser_direct_the_message_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvfuser_direct", None)  # import nvfuser_direct -> ModuleNotFoundError
    monkeypatch.setattr(nvfuser_import, "_cache", {})
    with pytest.raises(MissingDependencyError, match="executor='nvfuser' needs nvFuser.*not installed.*inductor"):
        base.get_executor("nvfuser")


@pytest.mark.parametrize("error", [
    ImportError("cannot import name 'wait_chain' from 'trace_lab.passes.collectives'", name="trace_lab.passes.collectives"),
    ModuleNotFoundError("No module named 'trace_lab.passes.sort_waits'", name="trace_lab.passes.sort_waits"),
], ids=["import-inside-the-pass", "the-pass-module-itself"])
def test_an_import_error_of_a_pass_module_propagates(monkeypatch, error):
    import trace_lab.passes as passes

    _inject(monkeypatch, "trace_lab.passes.sort_waits", error, passes.PASSES, "sort_waits")
    # before, a pass module that failed to import was left out of the pipeline without a word
    with pytest.raises(ImportError, match="wait_chain|sort_waits"):
        passes.pipeline_for(Options())
