"""Diagnostic for issue 27 item 3: one cold first call (forward + backward) of llama under cProfile, torch.compile
beside a trace_lab configuration, each in a fresh process with Inductor's and Triton's caches empty.

    source .device/setup.sh && python3 benchmarks/first_call_cprofile.py --out benchmarks/results/NAME   # GPU machine
    python3 benchmarks/first_call_cprofile.py --layers 2 --out /tmp/fc                                 # CPU smoke run

For each mode it writes ``<out>-<mode>.pstats`` (open with ``pstats.Stats``) and prints the wall time, how many
modules the call imported (and how long compiling their source took), each package's own time (cProfile's tottime:
Dynamo's frame evaluation leaves cumulative times of the frames above it incomplete) and the top functions by
cumulative time.
cProfile slows Python-bound stages about 1.5-2x, so the walls here are longer than bench.py's: read the shares.
cProfile sees only the thread it runs in: the lab's modes run with ``TRACE_LAB_COMPILE_THREADS=1`` (regions compiled
one after another in the caller's thread, as the executor does with that setting), so their compiles are in the
profile; their walls are then longer than with the default 4 threads.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

def _by_package(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Seconds spent in each package's own code (cProfile's tottime summed; robust where a frame evaluator such as
    Dynamo's leaves cumulative times incomplete), largest first."""
    import re

    total: dict[str, float] = {}
    for (fname, _line, fn), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        path = fname.replace("\\", "/")
        if path == "~":
            key = "built-in " + fn[:50]
        elif "trace_lab/" in path:
            key = "trace_lab/" + path.split("trace_lab/")[-1].split("/")[0]
        else:
            m = re.search(r"site-packages/(torch/_?[a-z]+|[A-Za-z_]+)", path)
            key = m.group(1) if m else path.rsplit("/", 1)[-1]
        total[key] = total.get(key, 0.0) + tt
    return sorted(total.items(), key=lambda kv: -kv[1])


def _imports(stats: pstats.Stats) -> tuple[int, int, float]:
    """(modules executed during the call, of them torch's, seconds compiling module source: no cached bytecode)."""
    mods = [fname for (fname, _l, fn) in stats.stats if fn == "<module>"]
    source = sum(v[2] for (fname, _l, fn), v in stats.stats.items()
                 if fn == "<built-in method builtins.compile>")
    return len(mods), sum("site-packages/torch/" in f for f in mods), source


def child(mode: str, layers: int, out: str) -> None:
    import torch

    import trace_lab
    from examples import workloads

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, (x,) = workloads.make_llama(layers)(device, "full" if device == "cuda" else "small")
    if mode == "torch.compile":
        fn = torch.compile(model)
    else:
        strategy, executor = mode.split("-", 1)
        fn = trace_lab.jit(model, fusion=strategy, executor=executor)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    fn(x).float().sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    prof.disable()
    wall = time.perf_counter() - t0
    prof.dump_stats(f"{out}-{mode}.pstats")
    stats = pstats.Stats(prof)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
    print(f"== {mode}: first call {wall:.2f} s under cProfile ({device}, {layers} layers)")
    n, n_torch, source = _imports(stats)
    print(f"   modules imported during the call: {n} ({n_torch} of torch); compiling source (builtins.compile): "
          f"{source:.2f} s")
    for key, seconds in _by_package(stats)[:15]:
        print(f"   {key:44s} {seconds:8.2f} s (own time)")
    print(s.getvalue()[-9000:])
    print("RESULT " + json.dumps({"mode": mode, "wall_s": wall}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["torch.compile", "layers-inductor"])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", required=True, help="path prefix of the .pstats files")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.layers, args.out)
        return
    import shutil
    import subprocess
    import tempfile

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        cache = tempfile.mkdtemp(prefix="first-call-cprofile-")
        env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", TORCHINDUCTOR_CACHE_DIR=cache,
                   TRITON_CACHE_DIR=os.path.join(cache, "triton"), TRACE_LAB_COMPILE_THREADS="1")
        try:
            subprocess.run([sys.executable, __file__, "--child", mode, "--layers", str(args.layers), "--out", args.out],
                           env=env, check=False)
        finally:
            shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
