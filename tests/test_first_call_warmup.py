"""Making a jit starts Inductor's one-off work before the first call's capture (issue 27, first iteration), as making
``torch.compile(fn)`` does: it imports Inductor's compile path, and on a CPU-only machine the C++ toolchain checks
(``cpu_vec_isa.valid_vec_isa_list``) run on a thread of their own; only when the options compile regions with
Inductor."""
import threading

import pytest
import torch

import trace_lab
from trace_lab.executors import inductor

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU warm-up: on CUDA the workers are warmed")


@pytest.fixture
def checks(monkeypatch):
    """Who ran the toolchain checks: the names of the threads that called them (the real checks still answer)."""
    from torch._inductor import cpu_vec_isa

    real, ran = cpu_vec_isa.valid_vec_isa_list, []

    def recorded():
        ran.append(threading.current_thread().name)
        return real()

    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", recorded)
    monkeypatch.setattr(inductor, "_CPU_TOOLCHAIN", None)
    return ran


def _step(x):
    return (x.sin() * 2 + 1).relu().sum()


def test_making_an_inductor_jit_checks_the_toolchain_on_its_own_thread(checks):
    x = torch.randn(8, 16)
    jfn = trace_lab.jit(_step, fusion="dataflow", executor="inductor")
    torch.testing.assert_close(jfn(x), _step(x))
    inductor._CPU_TOOLCHAIN.join(timeout=120)
    assert "trace_lab-cpu-toolchain" in checks, checks
    trace_lab.jit(_step, fusion="dataflow", executor="inductor")(x)
    assert checks.count("trace_lab-cpu-toolchain") == 1, "once per process"


def test_nothing_is_warmed_when_no_region_compiles_with_inductor(checks):
    x = torch.randn(8, 16)
    for options in ({"fusion": "dataflow", "executor": "eager"}, {"fusion": "none", "executor": "inductor"}):
        torch.testing.assert_close(trace_lab.jit(_step, **options)(x), _step(x))
    assert inductor._CPU_TOOLCHAIN is None and "trace_lab-cpu-toolchain" not in checks, checks


def test_the_checks_thread_imports_nothing_dynamo_also_imports():
    """The checks import Inductor's code cache and C++ builder (~900 modules, torch.distributed's among them) on first
    use; on the thread they raced Dynamo's imports of the same packages (a fresh environment's first call once failed
    with ModuleNotFoundError). In a fresh interpreter the thread must find them imported already."""
    import subprocess
    import sys

    code = """
import sys, threading
from torch._inductor import cpu_vec_isa
from trace_lab.executors import inductor
found = []
cpu_vec_isa.valid_vec_isa_list = lambda: found.append(
    (threading.current_thread().name, "torch._inductor.codecache" in sys.modules,
     "torch._inductor.cpp_builder" in sys.modules))
assert "torch._inductor.codecache" not in sys.modules  # else this test checks nothing
inductor.warm_cpu_toolchain()
inductor._CPU_TOOLCHAIN.join(timeout=120)
print(found)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[('trace_lab-cpu-toolchain', True, True)]", run.stdout + run.stderr[-2000:]


_IMPORTS_AT_MAKING = """
import sys
import trace_lab
before = "torch._inductor.compile_fx" in sys.modules
jfn = trace_lab.jit(lambda x: x.sin() + 1, fusion=FUSION, executor=EXECUTOR)
print(before, "torch._inductor.compile_fx" in sys.modules)
"""


@pytest.mark.parametrize("fusion,executor,imported", [("dataflow", "inductor", True), ("dataflow", "eager", False),
                                                      ("none", "inductor", False)])
def test_making_a_jit_imports_inductor_only_when_its_regions_compile_with_it(fusion, executor, imported):
    """What torch.compile(fn) imports when it is made (Inductor's compile path, ~2 s in a fresh process) is imported
    when a jit is made, not inside its first call, and only where its regions will compile with Inductor. Run in a
    fresh interpreter: this one has imported Inductor already."""
    import subprocess
    import sys

    code = _IMPORTS_AT_MAKING.replace("FUSION", repr(fusion)).replace("EXECUTOR", repr(executor))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["False", str(imported)], run.stdout + run.stderr[-2000:]
