"""Importing nvFuser: ``nvfuser_direct`` or a one-line reason why it is unusable here.

Kept apart from the executor so that ``resolve_executor`` and error messages can
explain a missing or mismatched nvFuser without importing anything heavy. A
wheel built for another torch typically fails with an undefined C++ symbol;
the installed distribution's name (``nvfuser-cu130-torch210``) says which torch
it targets, and the reason names both versions.
"""
from __future__ import annotations

import re

import torch

from ..errors import MissingDependencyError

__all__ = ["import_nvfuser", "unavailable_reason", "require_nvfuser"]

_cache: dict = {}


def _wheel_torch_version() -> str | None:
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover
        return None
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        m = re.match(r"nvfuser.*torch(\d)(\d+)", name)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    return None


def import_nvfuser():
    """(module, None) or (None, one-line reason)."""
    if "result" not in _cache:
        try:
            import nvfuser_direct
            _cache["result"] = (nvfuser_direct, None)
        except Exception as e:  # noqa: BLE001 - any import failure means 'not usable'
            _cache["result"] = (None, _explain(e))
    return _cache["result"]


def _explain(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
    if isinstance(e, ModuleNotFoundError) and getattr(e, "name", "") == "nvfuser_direct":
        return "nvfuser_direct is not installed"
    built_for = _wheel_torch_version()
    here = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if "undefined symbol" in text or (built_for and built_for != here):
        return (f"the installed nvFuser wheel was built for torch {built_for or '(another version)'}, "
                f"this is torch {here} ({type(e).__name__}: {text})")
    return f"{type(e).__name__}: {text}"


def unavailable_reason() -> str | None:
    return import_nvfuser()[1]


def require_nvfuser():
    """nvfuser_direct, or MissingDependencyError saying why not and what to do."""
    mod, why = import_nvfuser()
    if mod is None:
        raise MissingDependencyError(
            f"executor='nvfuser' needs nvFuser, but it cannot be used here: {why}. Install the nvFuser wheel "
            "that matches your torch and CUDA (e.g. pip install nvfuser-cu130-torch210 for torch 2.10 + CUDA 13), "
            "or use executor='inductor' (executor='auto' picks it by itself).")
    return mod
