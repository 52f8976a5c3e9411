"""dev.py on a GPU machine (issue 20 item 1): it looks for the nvFuser wheel built for the venv's torch and
CUDA, installs it, checks it with one fusion and says in one line what it chose; without a GPU nothing
changes. The machine here has no GPU, so the commands dev.py runs are answered by a stand-in that records
them (the real pip / nvidia-smi / fusion run on a GPU machine)."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def dev(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "NVFUSER_STAMP", tmp_path / "stamp")
    monkeypatch.delenv("TRACE_LAB_NVFUSER", raising=False)
    return mod


def machine(monkeypatch, dev, gpu=True, torch="2.13.0+cu130\n13.0", pip_ok=False, fusion="OK"):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if cmd[0] == "nvidia-smi":
            if not gpu:
                raise FileNotFoundError("nvidia-smi")
            return subprocess.CompletedProcess(cmd, 0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)\n", "")
        if cmd[1:3] == ["-c", "import torch; print(torch.__version__); print(torch.version.cuda or '')"]:
            return subprocess.CompletedProcess(cmd, 0, torch + "\n", "")
        if cmd[1:4] == ["-m", "pip", "install"]:
            return subprocess.CompletedProcess(cmd, 0 if pip_ok else 1, "", "" if pip_ok else "No matching distribution")
        if cmd[1] == "-c" and "FusionDefinition" in cmd[2]:
            ok = fusion == "OK"
            return subprocess.CompletedProcess(cmd, 0 if ok else 1, "OK\n" if ok else "", "" if ok else fusion)
        raise AssertionError(f"unexpected command {cmd}")

    monkeypatch.setattr(dev.subprocess, "run", run)
    return calls


def test_without_a_gpu_nothing_changes(dev, monkeypatch):
    calls = machine(monkeypatch, dev, gpu=False)
    assert dev.ensure_nvfuser() is None
    assert [c[0] for c in calls] == ["nvidia-smi"]


def test_no_wheel_for_this_torch_says_so_in_one_line(dev, monkeypatch):
    calls = machine(monkeypatch, dev, pip_ok=False)
    line = dev.ensure_nvfuser()
    assert line.startswith("nvFuser: no nvfuser-cu130-torch213 on the package index") and "Inductor" in line
    assert any("nvfuser-cu130-torch213" in c for c in calls[-1])
    assert dev.ensure_nvfuser() is None  # said once: the stamp keeps it from asking again


def test_a_wheel_that_runs_a_fusion_is_chosen(dev, monkeypatch):
    machine(monkeypatch, dev, torch="2.10.0+cu128\n12.8", pip_ok=True)
    line = dev.ensure_nvfuser()
    assert line == "nvFuser: nvfuser-cu128-torch210 installed for torch 2.10.0+cu128, and a fusion ran; executor 'auto' uses it"


def test_a_wheel_that_cannot_run_is_reported_with_the_reason(dev, monkeypatch):
    machine(monkeypatch, dev, torch="2.11.0+cu130\n13.0", pip_ok=True,
            fusion="ImportError: undefined symbol: _ZN3c104impl")
    line = dev.ensure_nvfuser()
    assert "nvfuser-cu130-torch211 installed but a fusion did not run (ImportError: undefined symbol" in line


def test_a_cpu_build_of_torch_on_a_gpu_machine(dev, monkeypatch):
    machine(monkeypatch, dev, torch="2.13.0+cpu\n")
    assert "is a CPU build" in dev.ensure_nvfuser()


def test_it_can_be_switched_off(dev, monkeypatch):
    calls = machine(monkeypatch, dev)
    monkeypatch.setenv("TRACE_LAB_NVFUSER", "0")
    assert dev.ensure_nvfuser() is None and calls == []


def test_the_check_script_is_python():
    spec = importlib.util.spec_from_file_location("dev_src", ROOT / "dev.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    compile(mod.NVFUSER_CHECK, "<check>", "exec")
