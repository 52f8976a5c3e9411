"""Where benchmark scripts keep their results: benchmarks/results/<date>-<device>-<kind>.json."""
from __future__ import annotations

import datetime
import json
import os
import sys

import torch

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_results(kind: str, device: str, rows: list, out: str | None = None, **meta) -> str:
    """Write rows plus device name, torch version and date as JSON; print and return the path."""
    out = out or os.path.join(RESULTS, f"{datetime.date.today()}-{device}-{kind}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    dev_name = torch.cuda.get_device_name() if device == "cuda" else device
    with open(out, "w") as f:
        json.dump({"device": dev_name, "torch": torch.__version__, **meta,
                   "date": str(datetime.date.today()), "rows": rows}, f, indent=2)
    print("wrote", out)
    return out


KNOWN_GPUS = ("h200", "h100", "a100", "l40s", "l4", "a10g", "b200")


def device_slug(name: str | None, count: int = 1) -> str:
    """The device part of a result file's name: ``h100`` for "NVIDIA H100 80GB HBM3", ``h200x2`` for two H200s,
    ``cpu`` for the CPU, ``nogpu`` for none; another GPU's name lowercased, "nvidia" dropped, only letters and
    digits, at most 24 characters. Taken from the device the run saw, so a name cannot claim another machine."""
    if not name:
        return "nogpu"
    low = name.lower()
    if low == "cpu":
        return "cpu"
    tag = next((k for k in KNOWN_GPUS if k in low), None)
    if tag is None:
        tag = "".join(c for c in low.replace("nvidia", "") if c.isalnum())[:24] or "gpu"
    return f"{tag}x{count}" if count > 1 else tag


def result_stem(template: str, device: str, commit: str | None, dirty: bool | None = False,
                date: str | None = None) -> tuple[str, str | None]:
    """(file name stem, note) from a ``--name`` template: ``{date}``, ``{device}`` (``device_slug``'s form) and
    ``{commit}`` (short hash, ``-dirty`` appended for a dirty tree) are filled in; a known GPU named in it
    (``h100``, ``h200x2``, ...: a part between ``-`` or ``_``) that is not ``device`` is replaced by ``device``,
    with a note saying so: a machine lent as one kind may be another, and a result's name must say where it
    ran."""
    import re

    date = date or datetime.date.today().isoformat()
    try:
        stem = template.format(date=date, device=device, commit=(commit or "nogit") + ("-dirty" if dirty else ""))
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"name {template!r}: only {{date}}, {{device}} and {{commit}} are filled in "
                         f"({type(e).__name__}: {e})") from None
    known = "|".join(KNOWN_GPUS)
    pattern = rf"(?<![A-Za-z0-9])(?:{known})(?:x\d+)?(?![A-Za-z0-9])"
    named = set(re.findall(pattern, stem))
    if not named or named == {device}:
        return stem, None
    fixed = re.sub(pattern, device, stem)
    return fixed, f"the name named {', '.join(sorted(named))} but the run is on {device}: wrote {fixed}"


def git_commit(root: str | None = None) -> dict:
    """{'commit': short HEAD, 'dirty': tracked files changed} of the checkout measured (None outside git).

    ``TRACE_LAB_COMMIT`` (set by whoever copies the working tree to a GPU machine, whose copy of .git
    may be stale) overrides it: the commit the copied tree was made from, with 'dirty' meaning
    uncommitted changes travelled with it (``TRACE_LAB_DIRTY=1``)."""
    import subprocess

    if os.environ.get("TRACE_LAB_COMMIT"):
        return {"commit": os.environ["TRACE_LAB_COMMIT"], "dirty": os.environ.get("TRACE_LAB_DIRTY") == "1"}

    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=20).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=20).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"commit": commit, "dirty": dirty}


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo), with the number of cores this process may use."""
    import platform

    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name or platform.processor() or platform.machine()} ({cores} cores)"


def package_version(*fragments: str) -> str | None:
    """Version of the first installed distribution whose name contains one of ``fragments``, without importing it."""
    from importlib import metadata

    for frag in fragments:
        for d in metadata.distributions():
            name = (d.metadata.get("Name") or "").lower()
            if frag in name:
                return f"{name} {d.version}"
    return None


def environment(with_gpu: bool = True) -> dict:
    """What a measurement ran on: GPU (name), host CPU model, torch / nvFuser / Thunder versions, date."""
    gpu = None
    if with_gpu and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    return {"gpu": gpu, "cpu": cpu_model(), "torch": torch.__version__,
            "nvfuser": package_version("nvfuser"), "thunder": package_version("lightning-thunder", "thunder"),
            "python": sys.version.split()[0],
            "date": datetime.datetime.now().isoformat(timespec="seconds")}
