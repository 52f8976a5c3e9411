"""Which torch releases trace_lab supports, checked once at import.

trace_lab reads torch internals that change between releases (AOTAutograd's
metadata, Inductor's compiled graph, fake tensors), so an older torch fails deep
inside capture with an error that names none of this. Importing trace_lab with a
torch older than ``OLDEST`` raises at once, saying what was found and what to
install; a torch newer than the newest tested one (``TESTED``) imports with a
one-line warning. ``TESTED`` lists where the suites ran: the CPU suite in CI and
the GPU tests and benchmarks on the GPU machine.
"""
from __future__ import annotations

import re
import warnings

OLDEST = (2, 10)
TESTED = {
    (2, 10): "the CPU suite, all of it (benchmarks/results/2026-11-26-cpu-torch210-suite-*-green.txt.gz); "
             "Thunder's tests in CI (dev.py test --thunder, lightning-thunder 0.2.6); dev.py's torch on a GPU "
             "machine, with nvFuser (the newest torch with nvFuser wheels; its choice unit-tested, not yet run on "
             "a GPU with a package index)",
    (2, 11): "GPU tests and benchmarks (H100/H200, CUDA 13); the CPU suite with known failures "
             "(benchmarks/results/2026-11-26-cpu-torch211-suite-60e61d3.txt: 16 failed, 481 passed; AOTAutograd "
             "keeps a backward's incoming gradient referenced, so backward peaks can measure one gradient above "
             "the prediction)",
    (2, 13): "the CPU suite (CI)",
    (2, 15): "the CPU suite (CUDA build on a CPU machine, benchmarks/results/2026-11-23-cpu-torch215-suite-*.txt)",
}

__all__ = ["OLDEST", "TESTED", "check_torch", "UnsupportedTorch", "backward_frees_gradients"]

# the first release whose AOTAutograd backward drops its references to the incoming gradients, so that one dies
# at its last use (2.10 and 2.11 keep it to the end of the backward; 2.12 was not tried:
# benchmarks/backward_gradient_refcount_probe.py)
FREES_GRADIENTS = (2, 13)


class UnsupportedTorch(ImportError):
    """The installed torch is older than trace_lab supports."""


def release(version: str) -> tuple[int, int]:
    """'2.13.0+cpu' -> (2, 13)."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise UnsupportedTorch(f"trace_lab cannot read torch's version {version!r}")
    return int(m.group(1)), int(m.group(2))


def backward_frees_gradients(version: str | None = None) -> bool:
    """Whether a compiled backward frees an incoming gradient at its last use on this torch (``version``: the
    installed one): the memory model's handover reads it (analysis/handover.py)."""
    if version is None:
        import torch

        version = torch.__version__
    return release(version) >= FREES_GRADIENTS


def check_torch(version: str) -> None:
    found = release(version)
    newest = max(TESTED)
    if found < OLDEST:
        raise UnsupportedTorch(
            f"trace_lab needs torch >= {OLDEST[0]}.{OLDEST[1]}, found torch {version}: install a newer torch "
            f"(pip install 'torch>={OLDEST[0]}.{OLDEST[1]}'; `python3 dev.py test` sets one up in .venv)")
    if found > newest:
        warnings.warn(f"trace_lab was tested with torch {', '.join(f'{a}.{b}' for a, b in sorted(TESTED))}; "
                      f"torch {version} is newer and untested", stacklevel=3)
