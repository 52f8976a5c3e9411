"""Diagnostic: where a steady-state step's host time goes (llama 8 layers, full size), for the missed targets.

    python3 benchmarks/steady_profile.py [strategy] [executor]   # on the GPU machine (default dataflow inductor)

Compiles and warms up, then profiles 5 steps two ways: cProfile (Python host time by function: the generated
program, region calls, AOTAutograd's wrappers, Dynamo's guards) and torch.profiler (host op time vs device
kernel time). Prints both tables and the step's count of kernel launches."""
import cProfile, io, os, pstats, sys, time
sys.path.insert(0, os.getcwd())
import torch
import trace_lab
from examples import workloads

strategy = sys.argv[1] if len(sys.argv) > 1 else "dataflow"
executor = sys.argv[2] if len(sys.argv) > 2 else "inductor"
model, (x,) = workloads.make_llama(8)("cuda", "full")
jfn = trace_lab.jit(model, fusion=strategy, executor=executor)


def step(f):
    out = f(x)
    out.float().sum().backward()
    model.zero_grad(set_to_none=True)


for _ in range(3):
    step(jfn)
torch.cuda.synchronize()
for name, f in (("eager", model), ("trace_lab", jfn)):
    t0 = time.perf_counter()
    for _ in range(10):
        step(f)
    host = (time.perf_counter() - t0) / 10
    torch.cuda.synchronize()
    print(f"{name}: host {host * 1e3:.2f} ms/step, with sync {(time.perf_counter() - t0) / 10 * 1e3:.2f} ms/step")
pr = cProfile.Profile()
pr.enable()
for _ in range(5):
    step(jfn)
pr.disable()
torch.cuda.synchronize()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
print(s.getvalue()[-7000:])
from torch.profiler import ProfilerActivity, profile

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        step(jfn)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(f"kernels per step: {len(kernels) / 5:.0f}; device busy per step: "
      f"{sum(e.device_time for e in kernels) / 5 / 1e3:.2f} ms")
