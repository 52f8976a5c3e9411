"""benchmarks/_placement.py: where a bench process ran (its CPUs, the CPU around its timed phase, NUMA nodes)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _placement  # noqa: E402
import bench  # noqa: E402


def test_cpulists_in_the_kernels_format():
    assert _placement.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert _placement.parse_cpulist("5") == [5]
    assert _placement.parse_cpulist("") == []


def test_numa_nodes_read_from_a_sysfs_tree(tmp_path):
    for node, cpus in ((0, "0-1"), (1, "2,3")):
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (tmp_path / "possible").write_text("0-1\n")  # not a node
    assert _placement.numa_nodes(tmp_path) == {0: [0, 1], 1: [2, 3]}
    assert _placement.numa_nodes(tmp_path / "absent") == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_the_current_cpu_is_one_this_process_may_use():
    assert _placement.current_cpu() in os.sched_getaffinity(0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_bench_run_records_where_it_timed_its_steps():
    row = bench.run_one({"name": "eager", "system": "eager", "bench": "memory", "device": "cpu", "size": "small",
                         "iters": 2})
    p = row["placement"]
    assert p["cpu"] in os.sched_getaffinity(0) and p["cpu_after"] in os.sched_getaffinity(0)
    assert p["allowed_cpus"] == len(os.sched_getaffinity(0)) and p["gpu_numa_node"] is None
    assert f"cpu {p['cpu']}->{p['cpu_after']}" in bench._progress(1, 1, {**row, "wall_s": 1.0}, 1.0)


def test_an_adam_run_checks_its_last_step_after_the_peak_step():
    """The Adam bench measures a step's peak (one step more, CUDA; on the CPU the step runs, unmeasured), and
    eager's reference takes as many steps: the last check still compares like with like."""
    row = bench.run_one({"name": "eager", "system": "eager", "bench": "adam", "device": "cpu", "size": "small",
                         "iters": 2})
    assert "mismatch_first_step" not in row and "mismatch_last_step" not in row, row
    assert row["peak_mib"] is None  # (CPU)
