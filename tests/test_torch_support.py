"""Importing trace_lab with an unsupported torch says so at once (issue 20 item 2)."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trace_lab import torch_support

ROOT = Path(__file__).resolve().parent.parent


def import_with_torch_version(version: str) -> subprocess.CompletedProcess:
    """``import trace_lab`` in a fresh interpreter whose torch reports ``version``."""
    code = f"import torch; torch.__version__ = {version!r}; import trace_lab; print('imported')"
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)


def test_an_older_torch_fails_at_import_with_what_to_do():
    p = import_with_torch_version("2.9.1+cu128")
    assert p.returncode != 0 and "imported" not in p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("trace_lab.torch_support.UnsupportedTorch: trace_lab needs torch >= 2.10, found torch 2.9.1+cu128")
    assert "pip install 'torch>=2.10'" in last


def test_a_newer_torch_imports_with_a_warning():
    p = import_with_torch_version("9.1.0")
    assert p.returncode == 0 and "imported" in p.stdout
    assert "torch 9.1.0 is newer and untested" in p.stderr


def test_the_oldest_and_newest_tested_releases_import_quietly():
    for version in ("2.10.0+cu128", "2.11.0+cu130", "2.13.0+cpu", "2.15.0+cu132"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch_support.check_torch(version)


def test_the_declared_range_matches_pyproject():
    text = (ROOT / "pyproject.toml").read_text()
    oldest = ".".join(map(str, torch_support.OLDEST))
    assert f'"torch>={oldest}"' in text
    assert torch_support.OLDEST == min(torch_support.TESTED)


def test_unreadable_version():
    with pytest.raises(torch_support.UnsupportedTorch, match="cannot read"):
        torch_support.check_torch("nightly")
