"""Diagnostic: the memory strategy's plan for Adam.step (8 parameters) with and without constant folding.

    python3 benchmarks/memory_strategy_probe.py [executor]     # GPU machine: nvfuser (default)

Prints, for each variant, the predicted peak of the fusion stage, the memory guard's rounds (what compiling
changed), the measured peak, and the program's lines around its peak."""
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.passes.fusion as fusion  # noqa: E402
from examples import workloads  # noqa: E402

executor = sys.argv[1] if len(sys.argv) > 1 else "nvfuser"
device = "cuda" if torch.cuda.is_available() else "cpu"
fold = fusion.fold_constants
for variant in ("folded", "not folded"):
    fusion.fold_constants = fold if variant == "folded" else (lambda t: t)
    step, _ = workloads.get("adam_step").make(device, n_params=8)
    r = trace_lab.inspect(step, fusion="memory", executor=executor, runs=1)
    stages = r.traces("forward")
    print(f"== {variant} ({executor}, {device}): predicted {r.predicted_peak('inference')} measured "
          f"{r.measured_peak('inference')}; stages {[ (t.stage, len(t.ops)) for t in stages]}")
    for rec in (r.compilations if isinstance(r.compilations, list) else []):
        guard = getattr(rec.compiled, "memory_guard", None)
        if guard is not None:
            print("guard: limit", guard.limit, "final", guard.final_peak, "rounds", len(guard.replans))
            for rp in guard.replans:
                print("   ", str(rp)[:600])
    text = str(stages[-1]).splitlines()
    at = next((i for i, l in enumerate(text) if "<- peak" in l), 0)
    print("\n".join(l[:240] for l in text[:3] + text[max(0, at - 25):at + 3]))
fusion.fold_constants = fold
