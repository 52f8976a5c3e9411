#!/usr/bin/env python3
"""The two commands of trace_lab's README; each sets up what it needs first.

    python3 dev.py lab [--headless] [--port N]   # the lab: JupyterLab on the teaching notebooks
                                                 # --headless: run every example and notebook, write reports/
    python3 dev.py test [pytest args...]         # the test suite (CPU); exit 5 (no tests) is a failure
    python3 dev.py gpu-check [--system] [...]    # on a GPU machine: everything that must hold on CUDA, one command
                                                 # (benchmarks/gpu_check.py; --system: this python, no .venv)

Set-up: a virtual environment in .venv with torch (``TRACE_LAB_TORCH``, default
``torch==2.13.0``) and trace_lab installed editable with its lab and test extras.
It is redone only when pyproject.toml changes. On a machine with an NVIDIA GPU it
also looks for the nvFuser wheel built for that torch and CUDA
(``nvfuser-cu<CUDA>-torch<MAJOR><MINOR>``), installs it, checks it by running one
fusion, and says in one line what it chose (``TRACE_LAB_NVFUSER=0`` skips this);
without a GPU nothing changes.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
STAMP = VENV / ".trace_lab-installed"


def log(msg: str) -> None:
    print(f"[dev.py] {msg}", flush=True)


def pip(*args: str) -> None:
    cmd = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    log(" ".join(cmd[3:]))
    result = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    noise = "is neither a file nor a directory"
    out = "\n".join(line for line in result.stdout.splitlines() if noise not in line)
    if result.returncode != 0:
        print(out)
        sys.exit(f"[dev.py] pip failed ({result.returncode}); see the lines above")


def ensure_env() -> None:
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    if not PY.exists():
        log(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    have_torch = subprocess.run([str(PY), "-c", "import torch"], capture_output=True).returncode == 0
    if not have_torch:
        pip(os.environ.get("TRACE_LAB_TORCH", "torch==2.13.0"))
    pip("-e", ".[lab,test]")
    STAMP.write_text(wanted)


NVFUSER_STAMP = VENV / ".trace_lab-nvfuser"
# one fusion through nvFuser's direct bindings, checked against torch (prints OK or raises)
NVFUSER_CHECK = """
import torch
from nvfuser_direct import FusionDefinition, DataType
with FusionDefinition() as fd:
    a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    fd.add_output(fd.ops.mul(fd.ops.add(a, b), a))
x, y = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
(out,) = fd.execute([x, y])
torch.testing.assert_close(out, (x + y) * x)
print("OK")
"""


def has_nvidia_gpu() -> bool:
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and "GPU" in r.stdout


def nvfuser_wheel_for(torch_version: str, cuda: str | None) -> str | None:
    """The nvFuser wheel's name for a torch build ('2.10.0+cu130', '13.0') -> 'nvfuser-cu130-torch210'."""
    if not cuda:
        return None
    major, minor = torch_version.split("+")[0].split(".")[:2]
    return f"nvfuser-cu{cuda.replace('.', '')}-torch{major}{minor}"


def ensure_nvfuser() -> str | None:
    """On an NVIDIA GPU machine: install and check the nvFuser wheel matching the venv's torch, once;
    returns the one line said (None when there is no GPU or it was done before)."""
    if os.environ.get("TRACE_LAB_NVFUSER") == "0" or NVFUSER_STAMP.exists() or not has_nvidia_gpu():
        return None
    info = subprocess.run([str(PY), "-c", "import torch; print(torch.__version__); print(torch.version.cuda or '')"],
                          capture_output=True, text=True)
    torch_version, cuda = (info.stdout.split("\n") + ["", ""])[:2]
    wheel = nvfuser_wheel_for(torch_version.strip(), cuda.strip())
    if wheel is None:
        line = (f"nvFuser: torch {torch_version.strip()} is a CPU build; set TRACE_LAB_TORCH to a CUDA build of torch "
                "to use the GPU (executor 'auto' uses Inductor until then)")
    else:
        got = subprocess.run([str(PY), "-m", "pip", "install", "-q", "--pre", "--disable-pip-version-check", wheel],
                             capture_output=True, text=True)
        if got.returncode != 0:
            line = (f"nvFuser: no {wheel} on the package index (nvFuser wheels are built per torch release: README, "
                    f"'Versions'); executor 'auto' uses Inductor")
        else:
            check = subprocess.run([str(PY), "-c", NVFUSER_CHECK], capture_output=True, text=True)
            if check.returncode == 0 and check.stdout.strip().endswith("OK"):
                line = f"nvFuser: {wheel} installed for torch {torch_version.strip()}, and a fusion ran; executor 'auto' uses it"
            else:
                why = (check.stderr.strip().splitlines() or ["no output"])[-1][:200]
                line = f"nvFuser: {wheel} installed but a fusion did not run ({why}); executor 'auto' uses Inductor"
    log(line)
    NVFUSER_STAMP.write_text(line + "\n")
    return line


SYSTEM_PACKAGES = {"dot": "graphviz", "chromium": "chromium"}  # binary -> Debian package (graph + browser tests)


def ensure_system_packages() -> None:
    """Best effort: the `dot` binary and Chromium let the dot-path and browser tests run.

    Without root or apt-get they stay absent and those tests skip with a reason.
    """
    import shutil

    missing = [pkg for exe, pkg in SYSTEM_PACKAGES.items() if shutil.which(exe) is None]
    if not missing or os.environ.get("TRACE_LAB_NO_APT") or shutil.which("apt-get") is None or os.geteuid() != 0:
        return
    log(f"apt-get install {' '.join(missing)} (for the graph and browser tests)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    subprocess.run(["apt-get", "update", "-qq"], **quiet)
    if subprocess.run(["apt-get", "install", "-y", "-qq", *missing], **quiet).returncode != 0:
        log(f"could not install {' '.join(missing)}; the tests that need them will skip and say why")


def run(cmd: list[str], **kw) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, cwd=ROOT, env=env, **kw).returncode


def parallel_args(args: list[str]) -> list[str]:
    """pytest-xdist workers, one per core up to 4, unless the caller chose (-n, -p no:xdist, or a debugger).

    The suite is mostly single-threaded Python (Dynamo, the passes, notebook kernels, a browser), so two
    workers on CI's 2 cores take ~2/3 of the serial time. ``--dist loadscope`` keeps a module's tests
    (and its module-scoped fixtures, e.g. the distributed runs) in one worker.
    """
    if any(a == "-n" or a.startswith("-n") or a.startswith("--numprocesses") or "xdist" in a or a == "--pdb"
           for a in args):
        return []
    return ["-n", str(max(1, min(4, os.cpu_count() or 1))), "--dist", "loadscope"]


def cmd_test(args: list[str]) -> int:
    ensure_env()
    ensure_nvfuser()
    ensure_system_packages()
    rc = run([str(PY), "-m", "pytest", *parallel_args(args), *args])
    if rc == 5:
        print("[dev.py] pytest collected no tests: that is a failure here", flush=True)
        return 1
    return rc


def cmd_lab(args: list[str]) -> int:
    ensure_env()
    ensure_nvfuser()
    if "--headless" in args:
        rest = [a for a in args if a != "--headless"]
        return run([str(PY), "-m", "trace_lab.cli", "report", "--out", "reports", *rest])
    port = "8888"
    if "--port" in args:
        port = args[args.index("--port") + 1]
    extra = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers run as root
    if not os.environ.get("DISPLAY") and sys.platform.startswith("linux"):
        extra.append("--no-browser")  # headless machine: open the printed URL yourself
    log("starting JupyterLab on notebooks/01_fusion_and_peak_memory.ipynb (Ctrl-C to stop)")
    return run([str(PY), "-m", "jupyter", "lab", "--port", port, *extra,
                str(ROOT / "notebooks" / "01_fusion_and_peak_memory.ipynb")])


def cmd_gpu_check(args: list[str]) -> int:
    """The GPU check (benchmarks/gpu_check.py): the GPU tests, every teaching notebook on CUDA with its prose
    checks, every workload through every executor. ``--system`` runs it with this interpreter as it is (the GPU
    machine's recipe, ../shared/device, sets up its packages without a download); otherwise in .venv."""
    if "--system" in args:
        args = [a for a in args if a != "--system"]
        python = sys.executable
    else:
        ensure_env()
        ensure_nvfuser()
        python = str(PY)
    return run([python, str(ROOT / "benchmarks" / "gpu_check.py"), *args])


COMMANDS = {"lab": cmd_lab, "test": cmd_test, "gpu-check": cmd_gpu_check}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
