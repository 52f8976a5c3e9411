"""Steady state of llama 8L, layers + Inductor with and without ``align_layer_saves`` beside torch.compile, in ONE
process with the three configurations' steps interleaved (40 rounds), then one profiled step each (kernels, device
time, host events).

Why: bench.py times each configuration in its own process; on a host-bound step its medians moved +-20% between
runs of one configuration (2026-11-27, H100), enough to read the alignment as a 1.2x regression. Interleaving in one
process takes the host's drift out of the comparison. First-iteration times printed here are not comparable (the
process's first compile pays the one-off costs; the later ones find Inductor's caches warm): use bench.py for those.

    source .device/setup.sh && python3 benchmarks/steady_interleaved.py   # on the GPU machine, ~80 s
"""
import sys, time, collections, statistics, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from examples import workloads
import trace_lab
from torch.profiler import profile, ProfilerActivity
make = workloads.make_llama(8)
model, (x,) = make("cuda", "full")
def build(kind):
    if kind == "tc":
        return torch.compile(model)
    return trace_lab.jit(model, fusion="layers", executor="inductor", align_layer_saves=(kind == "align"))
fns = {}
for k in ("align", "noalign", "tc"):
    t0 = time.perf_counter(); f = build(k)
    out = f(x); out.float().sum().backward(); model.zero_grad(set_to_none=True); torch.cuda.synchronize()
    print(k, "first", round(time.perf_counter() - t0, 2), "s", flush=True); fns[k] = f
def step(f):
    out = f(x); out.float().sum().backward(); model.zero_grad(set_to_none=True)
times = collections.defaultdict(list); host = collections.defaultdict(list)
for k in fns: [step(fns[k]) for _ in range(3)]
torch.cuda.synchronize()
for r in range(40):
    for k, f in fns.items():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(); t0 = time.perf_counter(); a.record(); step(f); b.record(); h = time.perf_counter() - t0
        torch.cuda.synchronize(); times[k].append(a.elapsed_time(b)); host[k].append(h * 1e3)
for k in fns:
    print(f"{k:8s} device ms median {statistics.median(times[k]):.3f} min {min(times[k]):.3f} max {max(times[k]):.3f}"
          f"  host ms median {statistics.median(host[k]):.3f}")
for k, f in fns.items():
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(f); torch.cuda.synchronize()
    ev = prof.events(); cuda = [e for e in ev if e.device_type == torch.autograd.DeviceType.CUDA]
    cpu = collections.Counter(e.name for e in ev if e.device_type != torch.autograd.DeviceType.CUDA)
    print(f"== {k}: {len(cuda)} kernels, {sum(e.device_time for e in cuda)/1e3:.2f} ms device; cpu events {sum(cpu.values())}")
    print("  ", ", ".join(f"{n}x{c}" for n, c in cpu.most_common(14)))
    if k != "tc":
        for p in f.programs:
            for part in p.parts:
                if part.compiled:
                    rt = part.compiled.region_table(); print("   part regions", len(rt))
