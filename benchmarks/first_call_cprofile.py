"""Diagnostic for issue 27 item 3: one cold first call (forward + backward) of llama under cProfile, torch.compile
beside a trace_lab configuration, each in a fresh process with Inductor's and Triton's caches empty.

    source .device/setup.sh && python3 benchmarks/first_call_cprofile.py --out benchmarks/results/NAME   # GPU machine
    python3 benchmarks/first_call_cprofile.py --layers 2 --out /tmp/fc                                 # CPU smoke run

For each mode it writes ``<out>-<mode>.pstats`` (open with ``pstats.Stats``) and prints the wall time, the share of
it in a few named stages (Dynamo's tracing, AOTAutograd, Inductor's lowering, scheduling and code generation, the
wait for Triton kernels compiled in worker processes, the first run) and the top functions by cumulative time.
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

# (label, function-name substrings matched against "file:line(function)") of stages worth naming
STAGES = [
    ("Dynamo tracing", ("torch/_dynamo/convert_frame.py", "_compile_inner")),
    ("AOTAutograd (capture + partition)", ("torch/_functorch/aot_autograd.py", "aot_module_simplified")),
    ("min-cut partition", ("torch/_functorch/partitioners.py", "min_cut_rematerialization_partition")),
    ("Inductor compile_fx_inner", ("torch/_inductor/compile_fx.py", "compile_fx_inner")),
    ("Inductor GraphLowering.run", ("torch/_inductor/graph.py", "run")),
    ("Inductor codegen", ("torch/_inductor/graph.py", "codegen")),
    ("waiting for Triton workers", ("torch/_inductor/async_compile.py", "_wait_futures")),
    ("loading output code", ("torch/_inductor/codecache.py", "load_by_key_path")),
    ("autotuning at first run", ("torch/_inductor/runtime/triton_heuristics.py", "autotune_to_one_config")),
    ("trace_lab executor", ("trace_lab/executors/inductor.py", "compile")),
    ("trace_lab region compile", ("trace_lab/executors/inductor.py", "compile_region")),
    ("trace_lab workspace measurement", ("trace_lab/runtime/call_memory.py", "measure_workspace")),
    ("trace_lab passes", ("trace_lab/passes/registry.py", "run_passes")),
    ("gc.collect", ("~", "<built-in method gc.collect>")),
]


def _stage_seconds(stats: pstats.Stats) -> dict:
    """Cumulative seconds of the outermost call of each named stage (recursion counted once)."""
    out = {}
    for label, (file_part, func) in STAGES:
        total = 0.0
        for (fname, _line, fn), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
            if file_part in fname and fn == func or (file_part == "~" and fn == func):
                total = max(total, ct)  # the largest entry: the outermost frames of one function
        out[label] = round(total, 3)
    return out


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
    for label, seconds in _stage_seconds(stats).items():
        print(f"   {label:36s} {seconds:8.2f} s")
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
