"""Diagnostic: cProfile of trace_lab's first call (llama 8 layers, full size, nvFuser), where the seconds go.

    python3 benchmarks/first_call_profile.py [strategy]      # on the GPU machine; prints two top-45 tables
Result of 2026-11-23 (H100): results/2026-11-23-h100-first-call-profile.txt."""
import cProfile, pstats, sys, time, io, os
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
sys.path.insert(0, os.getcwd())
import torch
import trace_lab
from examples import workloads

model, (x,) = workloads.make_llama(8)("cuda", "full")
jfn = trace_lab.jit(model, fusion=sys.argv[1] if len(sys.argv) > 1 else "dataflow", executor="nvfuser")
pr = cProfile.Profile()
t0 = time.perf_counter()
pr.enable()
out = jfn(x)
out.float().sum().backward()
torch.cuda.synchronize()
pr.disable()
print("first call", time.perf_counter() - t0)
for key in ("cumulative", "tottime"):
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats(key).print_stats(45)
    print(s.getvalue()[-9000:])
