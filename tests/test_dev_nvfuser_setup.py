"""dev.py on a GPU machine (issue 20 item 1, issue 25 item 3): without TRACE_LAB_TORCH it creates .venv with
torch 2.10 (the newest torch with nvFuser wheels) built for the driver's CUDA where the Python has nvFuser wheels,
installs the nvFuser wheel built for that torch and CUDA, checks it with one fusion and says in one line what it
chose and why; without a GPU nothing changes. The machine here has no GPU, so the commands dev.py runs are
answered by a stand-in that records them (the real pip / nvidia-smi / fusion run on a GPU machine): a driver,
a Python, and a package index that is PyPI alone (PyPI's torch 2.10 is its CUDA 12.8 build) unless
download.pytorch.org answers."""
from __future__ import annotations

import json
import subprocess

import pytest

from script_loader import load_script

NVFUSER_WHEELS = {"nvfuser-cu126-torch210", "nvfuser-cu128-torch210", "nvfuser-cu130-torch210"}
PYPI_TORCH = {"torch==2.10.*": "2.10.0+cu128\n12.8", "torch==2.13.0": "2.13.0\n13.0"}  # version, torch.version.cuda


@pytest.fixture
def dev(tmp_path, monkeypatch):
    mod = load_script("dev.py", "dev_under_test")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()  # .venv exists: ensure_env installs into it and creates nothing
    monkeypatch.setattr(mod, "VENV", venv)
    monkeypatch.setattr(mod, "PY", venv / "bin" / "python")
    monkeypatch.setattr(mod, "NVFUSER_STAMP", tmp_path / "stamp")
    monkeypatch.setattr(mod, "CHOICE", tmp_path / "choice")
    monkeypatch.setattr(mod, "python_version", lambda: (3, 12))
    for var in ("TRACE_LAB_NVFUSER", "TRACE_LAB_TORCH"):
        monkeypatch.delenv(var, raising=False)
    return mod


def machine(monkeypatch, dev, gpu=True, torch="2.13.0+cu130\n13.0", pip_ok=False, fusion="OK", driver="13.0",
            pytorch_index=False):
    """Fake nvidia-smi, pip and the venv's python. ``torch``: what the venv's torch reports until a torch is
    installed; ``pip_ok``: whether any nvFuser wheel installs (None: those in NVFUSER_WHEELS do);
    ``driver``: the driver's CUDA (None: nvidia-smi fails); ``pytorch_index``: download.pytorch.org answers."""
    calls, venv = [], {"torch": torch}

    def pip_install(args):
        if any(a.startswith("torch==") for a in args):
            spec = next(a for a in args if a.startswith("torch=="))
            if "--index-url" in args:
                if not pytorch_index:
                    return 1
                cu = args[args.index("--index-url") + 1].rsplit("/", 1)[-1]
                venv["torch"] = f"2.10.0+{cu}\n{cu[2:-1]}.{cu[-1]}"
            else:
                venv["torch"] = PYPI_TORCH[spec]
            return 0
        if args[0] == "-e":
            return 0
        (wheel,) = [a for a in args if a.startswith("nvfuser")]
        return 0 if (wheel in NVFUSER_WHEELS if pip_ok is None else pip_ok) else 1

    def run(cmd, **kw):
        calls.append(cmd)
        if cmd[0] == "nvidia-smi":
            if not gpu:
                raise FileNotFoundError("nvidia-smi")
            if driver is None:
                return subprocess.CompletedProcess(cmd, 9, "NVIDIA-SMI has failed because it couldn't communicate "
                                                           "with the NVIDIA driver.\n", "")
            if cmd == ["nvidia-smi", "-L"]:
                return subprocess.CompletedProcess(cmd, 0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)\n", "")
            return subprocess.CompletedProcess(cmd, 0, f"| NVIDIA-SMI 580.95.05  Driver Version: 580.95.05  "
                                                       f"CUDA Version: {driver}  |\n", "")
        if cmd[1:] == ["-c", "import torch"]:
            return subprocess.CompletedProcess(cmd, 1, "", "ModuleNotFoundError: No module named 'torch'")
        if cmd[1:3] == ["-c", "import torch; print(torch.__version__); print(torch.version.cuda or '')"]:
            return subprocess.CompletedProcess(cmd, 0, venv["torch"] + "\n", "")
        if cmd[1:4] == ["-m", "pip", "install"]:
            rc = pip_install([a for a in cmd[4:] if a not in ("-q", "--pre", "--disable-pip-version-check")])
            return subprocess.CompletedProcess(cmd, rc, "" if rc == 0 else "No matching distribution", "")
        if cmd[1] == "-c" and "FusionDefinition" in cmd[2]:
            ok = fusion == "OK"
            return subprocess.CompletedProcess(cmd, 0 if ok else 1, "OK\n" if ok else "", "" if ok else fusion)
        raise AssertionError(f"unexpected command {cmd}")

    monkeypatch.setattr(dev.subprocess, "run", run)
    return calls


def installs(calls):
    """What pip was asked to install, in order."""
    return [" ".join(a for a in c[4:] if a not in ("-q", "--pre", "--disable-pip-version-check"))
            for c in calls if c[1:4] == ["-m", "pip", "install"]]


def set_up(dev, capsys):
    """A fresh .venv as `dev.py test` makes it: its torch, trace_lab, nvFuser; the lines said about nvFuser."""
    dev.ensure_env()
    dev.ensure_nvfuser()
    return [ln for ln in capsys.readouterr().out.splitlines() if "nvFuser" in ln]


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
    mod = load_script("dev.py", "dev_src")
    compile(mod.NVFUSER_CHECK, "<check>", "exec")


# --- the torch .venv is created with (issue 25 item 3) ---

def plan(dev):
    return [(" ".join(args), nvfuser) for args, nvfuser, _ in dev.torch_plan()]


@pytest.mark.parametrize("driver,expected", [
    ("13.0", [("torch==2.10.* --index-url https://download.pytorch.org/whl/cu130 --timeout 20 --retries 1", True),
              ("torch==2.10.*", True)]),  # cu130 where PyTorch's index answers, else PyPI's cu128 build
    ("13.2", [("torch==2.10.* --index-url https://download.pytorch.org/whl/cu130 --timeout 20 --retries 1", True),
              ("torch==2.10.*", True)]),
    ("12.9", [("torch==2.10.*", True)]),  # PyPI's build is the one for this driver
    ("12.8", [("torch==2.10.*", True)]),
    ("12.6", [("torch==2.10.* --index-url https://download.pytorch.org/whl/cu126 --timeout 20 --retries 1", True),
              ("torch==2.13.0", False)]),  # PyPI's cu128 build does not run on a 12.6 driver
    ("12.4", [("torch==2.13.0", False)]),
])
def test_the_torch_build_follows_the_drivers_cuda(dev, monkeypatch, driver, expected):
    machine(monkeypatch, dev, driver=driver)
    assert plan(dev) == expected


def test_on_pypi_alone_a_cuda_13_machine_gets_pypis_torch_210_and_its_wheel_in_one_line(dev, monkeypatch, capsys):
    calls = machine(monkeypatch, dev, driver="13.0", pip_ok=None, pytorch_index=False)
    lines = set_up(dev, capsys)
    assert installs(calls) == [
        "torch==2.10.* --index-url https://download.pytorch.org/whl/cu130 --timeout 20 --retries 1",  # no answer
        "torch==2.10.*", "-e .[lab,test]", "nvfuser-cu128-torch210"]
    assert lines == ["[dev.py] nvFuser: nvfuser-cu128-torch210 installed for torch 2.10.0+cu128, and a fusion ran; "
                     "executor 'auto' uses it (torch 2.10, the newest torch with nvFuser wheels: "
                     "https://download.pytorch.org/whl/cu130 did not answer, so PyPI's, its CUDA 12.8 build, which "
                     "this driver runs (driver CUDA 13.0, Python 3.12); TRACE_LAB_NVFUSER=0: torch==2.13.0 with "
                     "Inductor)"]
    assert set_up(dev, capsys) == [] and len(installs(calls)) == 4  # done once


def test_where_pytorchs_index_answers_the_build_matches_the_driver(dev, monkeypatch, capsys):
    calls = machine(monkeypatch, dev, driver="13.0", pip_ok=None, pytorch_index=True)
    (line,) = set_up(dev, capsys)
    assert installs(calls)[-1] == "nvfuser-cu130-torch210" and len(installs(calls)) == 3
    assert "nvfuser-cu130-torch210 installed for torch 2.10.0+cu130, and a fusion ran" in line
    assert "its CUDA 13.0 build from https://download.pytorch.org/whl/cu130 (driver CUDA 13.0, Python 3.12)" in line


def test_a_cuda_128_driver_on_python_310(dev, monkeypatch, capsys):
    monkeypatch.setattr(dev, "python_version", lambda: (3, 10))
    calls = machine(monkeypatch, dev, driver="12.8", pip_ok=None)
    (line,) = set_up(dev, capsys)
    assert installs(calls) == ["torch==2.10.*", "-e .[lab,test]", "nvfuser-cu128-torch210"]
    assert "its CUDA 12.8 build from PyPI (driver CUDA 12.8, Python 3.10)" in line


def test_another_python_says_so_and_keeps_the_newest_torch_with_inductor(dev, monkeypatch, capsys):
    monkeypatch.setattr(dev, "python_version", lambda: (3, 11))
    calls = machine(monkeypatch, dev, driver="13.0", pip_ok=None)
    assert set_up(dev, capsys) == [
        "[dev.py] nvFuser: no wheel for Python 3.11 (they are built for 3.10 and 3.12; driver CUDA 13.0, "
        "Python 3.11); torch==2.13.0 with Inductor"]
    assert installs(calls) == ["torch==2.13.0", "-e .[lab,test]"]  # no nvFuser wheel asked for


def test_a_driver_older_than_any_wheels_cuda(dev, monkeypatch, capsys):
    calls = machine(monkeypatch, dev, driver="12.6", pip_ok=None, pytorch_index=False)
    (line,) = set_up(dev, capsys)
    assert installs(calls)[1:] == ["torch==2.13.0", "-e .[lab,test]"]
    assert "download.pytorch.org/whl/cu126 did not answer and PyPI's torch 2.10 is its CUDA 12.8 build" in line
    assert line.endswith("torch==2.13.0 with Inductor")


def test_no_driver_says_so(dev, monkeypatch, capsys):
    calls = machine(monkeypatch, dev, driver=None)
    (line,) = set_up(dev, capsys)
    assert line.startswith("[dev.py] nvFuser: none, nvidia-smi reads no driver (NVIDIA-SMI has failed")
    assert installs(calls) == ["torch==2.13.0", "-e .[lab,test]"]


def test_a_cpu_machine_is_unchanged(dev, monkeypatch, capsys):
    calls = machine(monkeypatch, dev, gpu=False)
    assert set_up(dev, capsys) == []
    assert installs(calls) == ["torch==2.13.0", "-e .[lab,test]"] and not dev.CHOICE.exists()


def test_switched_off_on_a_gpu_machine_the_newest_torch_and_inductor(dev, monkeypatch, capsys):
    monkeypatch.setenv("TRACE_LAB_NVFUSER", "0")
    calls = machine(monkeypatch, dev, driver="13.0", pip_ok=None)
    assert set_up(dev, capsys) == []
    assert installs(calls) == ["torch==2.13.0", "-e .[lab,test]"] and not [c for c in calls if c[0] == "nvidia-smi"]


def test_trace_lab_torch_is_installed_as_given_and_its_wheel_looked_for(dev, monkeypatch, capsys):
    monkeypatch.setenv("TRACE_LAB_TORCH", "torch==2.13.0")
    calls = machine(monkeypatch, dev, driver="13.0", pip_ok=None)
    (line,) = set_up(dev, capsys)
    assert installs(calls) == ["torch==2.13.0", "-e .[lab,test]", "nvfuser-cu130-torch213"]
    assert line.startswith("[dev.py] nvFuser: no nvfuser-cu130-torch213 on the package index")


def test_the_choice_is_kept_for_the_line(dev, monkeypatch, capsys):
    machine(monkeypatch, dev, driver="12.8", pip_ok=None)
    dev.ensure_env()
    assert json.loads(dev.CHOICE.read_text())["nvfuser"] is True


@pytest.mark.parametrize("skipped,rc", [(5, 1), (0, 0)])
def test_the_thunder_leg_fails_on_a_skip(dev, monkeypatch, tmp_path, skipped, rc):
    monkeypatch.setenv("TRACE_LAB_REQUIRE_THUNDER", "")  # restored after the test: cmd_test sets it
    junit = tmp_path / "venv-thunder" / "junit.xml"
    monkeypatch.setattr(dev, "THUNDER_VENV", junit.parent)
    monkeypatch.setattr(dev, "ensure_env", lambda *a, **k: tmp_path / "python")
    ran = []

    def pytest_run(cmd, **kw):
        ran.append(cmd)
        junit.parent.mkdir(exist_ok=True)
        junit.write_text(f'<testsuites><testsuite name="pytest" tests="6" skipped="{skipped}"/></testsuites>')
        return 0

    monkeypatch.setattr(dev, "run", pytest_run)
    assert dev.cmd_test(["--thunder"]) == rc
    assert ran[0][-1] == "tests/test_from_thunder.py" and dev.os.environ["TRACE_LAB_REQUIRE_THUNDER"] == "1"
