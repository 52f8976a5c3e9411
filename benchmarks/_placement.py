"""Where a benchmark process ran on its host: the CPUs it may use, the CPU it was on around its timed phase, and
the NUMA nodes of the host and of its GPU.

Host-bound rows move between processes of one configuration far more than within one process: on 2026-11-29 (H200,
9c91e3d) memory + nvFuser's llama step read 21.2-22.4 ms in three bench processes and 13.5 ms in one process that
interleaved it with torch.compile (`steady_interleaved.py`); at 89fc309 the same row read 12.4, 20.1 and 12.9 ms.
Each bench row carries these figures so that such a spread can be read against where the process ran (Linux's
/proc and /sys; every figure is None where the host does not say).
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["parse_cpulist", "current_cpu", "numa_nodes", "gpu_numa_node", "placement"]


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` (the kernel's cpulist format) -> ``[0, 1, 2, 3, 8, 10, 11]``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def current_cpu() -> int | None:
    """The CPU this process last ran on (/proc/self/stat's ``processor`` field), or None."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 onwards
    return int(fields[36]) if len(fields) > 36 else None  # field 39, processor


def numa_nodes(root: Path = Path("/sys/devices/system/node")) -> dict[int, list[int]]:
    """NUMA node -> its CPUs ({} where the host does not list them)."""
    nodes = {}
    for d in sorted(root.glob("node[0-9]*")) if root.is_dir() else []:
        try:
            nodes[int(d.name[4:])] = parse_cpulist((d / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return nodes


def gpu_numa_node(device: int = 0) -> int | None:
    """The NUMA node of CUDA device ``device`` (its PCI device's ``numa_node``), or None."""
    try:
        import torch

        p = torch.cuda.get_device_properties(device)
        bus = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        node = int(Path(f"/sys/bus/pci/devices/{bus}/numa_node").read_text())
    except (AttributeError, OSError, ValueError, RuntimeError, AssertionError):
        return None
    return node if node >= 0 else None


def placement(cuda: bool) -> dict:
    """This process's placement now: allowed CPUs, the CPU it is on, the host's NUMA nodes and its GPU's."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = []
    nodes = numa_nodes()
    cpu = current_cpu()
    return {"allowed_cpus": len(allowed) or None, "cpu": cpu, "numa_nodes": len(nodes) or None,
            "cpu_numa_node": next((n for n, cpus in nodes.items() if cpu in cpus), None),
            "gpu_numa_node": gpu_numa_node() if cuda else None}
