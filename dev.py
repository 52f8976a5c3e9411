#!/usr/bin/env python3
"""The two commands of trace_lab's README; each sets up what it needs first.

    python3 dev.py lab [--headless] [--port N]   # the lab: JupyterLab on the teaching notebooks
                                                 # --headless: run every example and notebook, write reports/
    python3 dev.py test [pytest args...]         # the CI tier of the test suite (CPU); exit 5 (no tests) is a failure
    python3 dev.py test --full [...]             # the whole suite: also the tests marked full (tests/conftest.py)
    python3 dev.py setup [--thunder]             # only create .venv (or .venv-thunder) as the tests would
    python3 dev.py test --thunder [...]          # Thunder's tests in .venv-thunder (torch 2.10, lightning-thunder
                                                 # 0.2.6, CPU executors); a skipped test there is a failure
    python3 dev.py gpu-check [--system] [...]    # on a GPU machine: everything that must hold on CUDA, one command
                                                 # (benchmarks/gpu_check.py; --system: this python, no .venv)
    python3 dev.py gpu-check --forecast [--workers N] [--budget S]   # any machine: how long the check would take

Set-up: a virtual environment in .venv with torch and trace_lab installed editable
with its lab and test extras, redone only when pyproject.toml changes. The torch is
``TRACE_LAB_TORCH`` if set; else, on a machine with an NVIDIA GPU and Python 3.10 or
3.12, torch 2.10 (the newest torch with nvFuser wheels) built for the driver's CUDA,
with the nvFuser wheel built for that torch and CUDA (``nvfuser-cu<CUDA>-torch210``),
checked by running one fusion; else (``TRACE_LAB_NVFUSER=0``, no GPU, no wheel that
fits) the newest supported torch, ``torch==2.13.0``, with Inductor. On a GPU machine
it says in one line what it chose and why.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
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


def pip(*args: str, python: Path | None = None, check: bool = True) -> bool:
    cmd = [str(python or PY), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    log(" ".join(cmd[3:]))
    result = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    noise = "is neither a file nor a directory"
    out = "\n".join(line for line in result.stdout.splitlines() if noise not in line)
    if result.returncode != 0 and check:
        print(out)
        sys.exit(f"[dev.py] pip failed ({result.returncode}); see the lines above")
    return result.returncode == 0


NEWEST_TORCH = "torch==2.13.0"  # the newest supported torch: CPU machines, TRACE_LAB_NVFUSER=0, no nvFuser wheel
NVFUSER_TORCH = "torch==2.10.*"  # the newest torch with nvFuser wheels (nvfuser-cu126/cu128/cu130-torch210)
NVFUSER_PYTHONS = ((3, 10), (3, 12))  # the Pythons nvFuser's wheels are built for
NVFUSER_CUDAS = ((13, 0), (12, 8), (12, 6))  # torch 2.10's CUDA builds, each with an nvFuser wheel, newest first
PYPI_TORCH_CUDA = (12, 8)  # PyPI's torch 2.10 is its CUDA 12.8 build; the others are on PyTorch's own index
TORCH_INDEX = "https://download.pytorch.org/whl/cu{}{}"
CHOICE = VENV / ".trace_lab-torch-choice"  # why .venv has its torch: {"nvfuser": bool, "why": str}


def python_version() -> tuple[int, int]:
    return sys.version_info[:2]  # .venv is made from this interpreter


def driver_cuda() -> tuple[tuple[int, int] | None, str | None]:
    """The CUDA version the NVIDIA driver supports, from nvidia-smi's header ('CUDA Version: 13.0'), and what
    went wrong instead; (None, None) where there is no nvidia-smi (a machine without an NVIDIA GPU)."""
    try:
        r = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return None, None
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"nvidia-smi failed ({type(e).__name__})"
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", r.stdout)
    if r.returncode != 0 or m is None:
        why = ((r.stdout + r.stderr).strip().splitlines() or ["no output"])[0][:120]
        return None, f"nvidia-smi reads no driver ({why})"
    return (int(m.group(1)), int(m.group(2))), None


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def torch_plan() -> list[tuple[list[str], bool, str | None]]:
    """How .venv gets its torch: pip arguments to try in order, each with whether nvFuser is meant to come with
    it and why, in words (None: nothing to say, as on a machine without an NVIDIA GPU)."""
    if os.environ.get("TRACE_LAB_TORCH"):
        return [(shlex.split(os.environ["TRACE_LAB_TORCH"]), True, None)]
    if os.environ.get("TRACE_LAB_NVFUSER") == "0":
        return [([NEWEST_TORCH], False, None)]
    cuda, problem = driver_cuda()
    if cuda is None:
        why = problem and f"nvFuser: none, {problem}; {NEWEST_TORCH} with Inductor"
        return [([NEWEST_TORCH], False, why)]
    v = dotted
    py = python_version()
    found = f"driver CUDA {v(cuda)}, Python {v(py)}"
    if py not in NVFUSER_PYTHONS:
        return [([NEWEST_TORCH], False, f"nvFuser: no wheel for Python {v(py)} (they are built for 3.10 and 3.12; "
                                        f"{found}); {NEWEST_TORCH} with Inductor")]
    build = next((c for c in NVFUSER_CUDAS if cuda >= c), None)
    if build is None:
        return [([NEWEST_TORCH], False, f"nvFuser: no torch 2.10 build with an nvFuser wheel runs on driver CUDA "
                                        f"{v(cuda)} (the oldest is CUDA {v(NVFUSER_CUDAS[-1])}); "
                                        f"{NEWEST_TORCH} with Inductor")]
    chose = "torch 2.10, the newest torch with nvFuser wheels"
    if build == PYPI_TORCH_CUDA:
        return [([NVFUSER_TORCH], True, f"{chose}, its CUDA {v(build)} build from PyPI ({found})")]
    index = TORCH_INDEX.format(*build)
    plan = [([NVFUSER_TORCH, "--index-url", index, "--timeout", "20", "--retries", "1"], True,
             f"{chose}, its CUDA {v(build)} build from {index} ({found})")]
    unreachable = f"{index} did not answer"
    if cuda >= PYPI_TORCH_CUDA:
        plan.append(([NVFUSER_TORCH], True, f"{chose}: {unreachable}, so PyPI's, its CUDA {v(PYPI_TORCH_CUDA)} build, "
                                            f"which this driver runs ({found})"))
    else:
        plan.append(([NEWEST_TORCH], False, f"nvFuser: {unreachable} and PyPI's torch 2.10 is its CUDA "
                                            f"{v(PYPI_TORCH_CUDA)} build, newer than this driver ({found}); "
                                            f"{NEWEST_TORCH} with Inductor"))
    return plan


def install_torch(python: Path, choice: Path | None) -> None:
    """The first torch of torch_plan() that installs; why it was chosen is kept in ``choice`` for ensure_nvfuser."""
    plan = torch_plan()
    for i, (args, nvfuser, why) in enumerate(plan):
        if pip(*args, python=python, check=i == len(plan) - 1):
            if choice is not None and why is not None:
                choice.write_text(json.dumps({"nvfuser": nvfuser, "why": why}))
            return


def ensure_env(venv_dir: Path | None = None, packages: tuple[str, ...] = (), extras: str = "lab,test") -> Path:
    """The virtual environment ``venv_dir`` (.venv) with a torch (``packages`` if given, else install_torch) and
    trace_lab editable with ``extras``; returns its python. Redone only when pyproject.toml or ``packages`` change."""
    venv_dir = venv_dir or VENV
    python, stamp = venv_dir / "bin" / "python", venv_dir / STAMP.name
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + " ".join(packages).encode()).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == wanted:
        return python
    if not python.exists():
        log(f"creating {venv_dir}")
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    if packages:
        pip(*packages, python=python)
    elif subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0:
        install_torch(python, CHOICE if venv_dir == VENV else None)
    pip("-e", f".[{extras}]" if extras else ".", python=python)
    stamp.write_text(wanted)
    return python


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
    returns the one line said (None when there is no GPU or it was done before). Where install_torch chose
    the venv's torch, the line says why; where it chose a torch without nvFuser, the line is that reason."""
    if os.environ.get("TRACE_LAB_NVFUSER") == "0" or NVFUSER_STAMP.exists():
        return None
    choice = json.loads(CHOICE.read_text()) if CHOICE.exists() else None
    if choice is not None and not choice["nvfuser"]:
        line = choice["why"]
    elif not has_nvidia_gpu():
        return None
    else:
        line = nvfuser_line()
        if choice is not None:
            line += f" ({choice['why']}; TRACE_LAB_NVFUSER=0: {NEWEST_TORCH} with Inductor)"
    log(line)
    NVFUSER_STAMP.write_text(line + "\n")
    return line


def nvfuser_line() -> str:
    """Install the nvFuser wheel built for the venv's torch and CUDA, run one fusion; what came of it, in words."""
    info = subprocess.run([str(PY), "-c", "import torch; print(torch.__version__); print(torch.version.cuda or '')"],
                          capture_output=True, text=True)
    torch_version, cuda = (info.stdout.split("\n") + ["", ""])[:2]
    wheel = nvfuser_wheel_for(torch_version.strip(), cuda.strip())
    if wheel is None:
        return (f"nvFuser: torch {torch_version.strip()} is a CPU build; set TRACE_LAB_TORCH to a CUDA build of torch "
                "to use the GPU (executor 'auto' uses Inductor until then)")
    got = subprocess.run([str(PY), "-m", "pip", "install", "-q", "--pre", "--disable-pip-version-check", wheel],
                         capture_output=True, text=True)
    if got.returncode != 0:
        return (f"nvFuser: no {wheel} on the package index (nvFuser wheels are built per torch release: README, "
                f"'Versions'); executor 'auto' uses Inductor")
    check = subprocess.run([str(PY), "-c", NVFUSER_CHECK], capture_output=True, text=True)
    if check.returncode == 0 and check.stdout.strip().endswith("OK"):
        return (f"nvFuser: {wheel} installed for torch {torch_version.strip()}, and a fusion ran; "
                "executor 'auto' uses it")
    why = (check.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return f"nvFuser: {wheel} installed but a fusion did not run ({why}); executor 'auto' uses Inductor"


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
    # the checkout first, then what the caller had on PYTHONPATH (the GPU machine's recipe puts nvFuser there)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    # the lab's kernels: OpenMP threads sleep at a barrier instead of spinning, so a busy front end does not
    # multiply a small program's time (issue 26 item 3); a caller's own setting wins
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return subprocess.run(cmd, cwd=ROOT, env=env, **kw).returncode


def parallel_args(args: list[str]) -> list[str]:
    """pytest-xdist workers, one per core and one more, up to 4, unless the caller chose (-n, -p no:xdist, or a
    debugger).

    The suite is mostly single-threaded Python (Dynamo, the passes, notebook kernels, a browser), and its
    browser tests wait on the page about half of their time (the browser and teaching tests alone, two workers
    on CI's 2 cores: 537 s of wall time, 531 CPU-seconds), so CI's 2 cores get three workers. ``--dist loadscope`` keeps a module's tests (and its
    module-scoped fixtures, e.g. the distributed runs) in one worker, and, with tests/conftest.py's scheduler,
    each teaching notebook's tests (one execution of the notebook, tests/notebook/teaching_runs.py);
    ``--no-loadscope-reorder`` hands the scopes out in the order tests/conftest.py sorts them, longest first.
    """
    if any(a == "-n" or a.startswith("-n") or a.startswith("--numprocesses") or "xdist" in a or a == "--pdb"
           or a.startswith("--dist") for a in args):
        return []
    return ["-n", str(min(4, (os.cpu_count() or 1) + 1)), "--dist", "loadscope", "--no-loadscope-reorder"]


def cmd_test(args: list[str]) -> int:
    if "--thunder" in args:
        return cmd_test_thunder([a for a in args if a != "--thunder"])
    ensure_env()
    ensure_nvfuser()
    ensure_system_packages()
    rc = run([str(PY), "-m", "pytest", *parallel_args(args), *args])
    if rc == 5:
        print("[dev.py] pytest collected no tests: that is a failure here", flush=True)
        return 1
    return rc


THUNDER_VENV = ROOT / ".venv-thunder"
# lightning-thunder 0.2.6 supports torch up to 2.11; torch 2.10 is also the one with nvFuser wheels (CPU here)
THUNDER_PACKAGES = (NVFUSER_TORCH, "lightning-thunder==0.2.6", "pytest>=8")
THUNDER_TESTS = ["tests/test_from_thunder.py"]


def cmd_test_thunder(args: list[str]) -> int:
    """Thunder's tests (or ``args``) in .venv-thunder, where lightning-thunder imports: a test that skips there
    (TRACE_LAB_REQUIRE_THUNDER turns the skip for a Thunder that does not import into a failure) fails the run."""
    python = ensure_env(THUNDER_VENV, packages=THUNDER_PACKAGES, extras="")
    os.environ["TRACE_LAB_REQUIRE_THUNDER"] = "1"
    junit = THUNDER_VENV / "junit.xml"
    junit.unlink(missing_ok=True)
    tests = [] if any(a.startswith("tests") for a in args) else THUNDER_TESTS
    rc = run([str(python), "-m", "pytest", f"--junitxml={junit}", *tests, *args])
    if rc == 5:
        print("[dev.py] pytest collected no tests: that is a failure here", flush=True)
        return 1
    import xml.etree.ElementTree as ET

    suites = ET.parse(junit).getroot().iter("testsuite") if junit.exists() else []
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    if skipped:
        print(f"[dev.py] {skipped} test(s) skipped in the Thunder leg: that is a failure here", flush=True)
        return rc or 1
    return rc


def cmd_setup(args: list[str]) -> int:
    """Create the environment that ``dev.py test`` (with ``--thunder``: ``dev.py test --thunder``) runs in, and
    nothing else: .ci/run builds .venv-thunder this way while the suite runs."""
    if "--thunder" in args:
        ensure_env(THUNDER_VENV, packages=THUNDER_PACKAGES, extras="")
    else:
        ensure_env()
        ensure_nvfuser()
        ensure_system_packages()
    log(f"{THUNDER_VENV if '--thunder' in args else VENV} is ready")
    return 0


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


def gpu_check_args(args: list[str]) -> list[str]:
    """benchmarks/gpu_check.py's arguments: ``args``, then for its pytest the full tier too (``--full -m "(gpu or
    teaching) or (full and not browser)"``: the tests that left `dev.py test` for time, tests/conftest.py, but its
    browser tests, which need Chromium); pytest arguments the caller gave after ``--`` come after these (their own
    ``-m`` wins)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import TIER_ARGS

    full = list(TIER_ARGS)
    if "--" in args:
        i = args.index("--")
        return args[:i + 1] + full + args[i + 1:]
    return [*args, "--", *full]


def cmd_gpu_check(args: list[str]) -> int:
    """The GPU check (benchmarks/gpu_check.py): the GPU tests, every teaching notebook on CUDA with its prose
    checks, every workload through every executor, and the CPU suite's full tier (gpu_check_args). ``--system``
    runs it with this interpreter as it is (the GPU machine's recipe, ../shared/device, sets up its packages
    without a download); otherwise in .venv."""
    if "--system" in args:
        args = [a for a in args if a != "--system"]
        python = sys.executable
    else:
        ensure_env()
        ensure_nvfuser()
        python = str(PY)
    return run([python, str(ROOT / "benchmarks" / "gpu_check.py"), *gpu_check_args(args)])


COMMANDS = {"lab": cmd_lab, "test": cmd_test, "setup": cmd_setup, "gpu-check": cmd_gpu_check}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
