"""Diagnostic: which allocations a batched Adam step makes on the device (predict said 4 stacks, measured 5)."""
import torch, sys
sys.path.insert(0, "tests")
from trace_lab import jit
from torch.profiler import profile, ProfilerActivity

def adam():
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g).cuda()) for s in [(256, 64)] * 6 + [(1000,)] * 4]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).cuda()
    return torch.optim.Adam(params, lr=1e-2, foreach=False)

for donate in (True, False):
    opt = adam()
    jfn = jit(opt.step, fusion="horizontal", executor="nvfuser", donate_inplace=donate)
    jfn()
    with jfn.measuring():
        jfn()
    print("donate", donate, "measured", jfn.measurements[-1].measured_peak_above_inputs)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    jfn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    for e in snap["device_traces"][0]:
        if e["action"] in ("alloc", "free_completed") and e["size"] >= 4000:
            fr = [f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in e["frames"] if "trace_lab" in f["filename"] or "<generated" in f["filename"] or "nvfuser" in f["filename"]][:3]
            print(" ", e["action"], e["size"], fr)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        jfn(); torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))
    for r in jfn.compilations():
        for n in r.all_notes():
            if "batched" in n or "place" in n:
                print("  note:", n[:300])
