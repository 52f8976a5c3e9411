"""Diagnostic for the missed peak target (issue 14): bytes the forward saves for the backward, trace_lab's capture vs
AOTAutograd partitioned after Inductor's own decomposition table (what torch.compile saves), llama 2 layers d=256 f32 on CPU.
    python3 benchmarks/saved_bytes_probe.py"""
import sys, os
sys.path.insert(0, os.getcwd())
import torch, trace_lab
from examples.workloads import LlamaStack
from functorch.compile import min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.decomposition import select_decomp_table

def make():
    torch.manual_seed(0)
    return LlamaStack(layers=2, dim=256, heads=4), torch.randn(2, 128, 256)

def nbytes(v):
    return v.untyped_storage().nbytes() if isinstance(v, torch.Tensor) else 0

saved = {}
def fw_rec(gm, ex):
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in out]
    saved["fw_out"] = [(n.name if isinstance(n, torch.fx.Node) else None, tuple(v.shape) if isinstance(v, torch.Tensor) else None, v.dtype if isinstance(v, torch.Tensor) else None, v.numel()*v.element_size() if isinstance(v, torch.Tensor) else 0) for n, v in zip(out, vals)]
    return gm
def bw_rec(gm, ex):
    return gm
m, x = make()
f = torch.compile(m, backend=aot_autograd(fw_compiler=fw_rec, bw_compiler=bw_rec, partition_fn=min_cut_rematerialization_partition, decompositions=select_decomp_table()))
f(x).sum().backward()
tc = saved["fw_out"]
n_params = len(list(m.parameters()))
print("inductor-decomp partition: fw outputs", len(tc), "bytes of saved outputs (parameters included)", sum(b for _, _, _, b in tc[1:]))
m2, x2 = make()
jfn = trace_lab.jit(m2, fusion="none", executor="eager")
jfn(x2).sum().backward()
tr = trace_lab.last_traces(jfn)[0]
out = tr.output_node.args[0]
ours = [(n.name, tuple(n.meta["val"].shape), n.meta["val"].dtype, n.meta["val"].numel()*n.meta["val"].element_size()) if isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor) else (None,None,None,0) for n in out]
print("trace_lab partition: fw outputs", len(ours), "bytes of saved outputs (parameters included)", sum(b for *_, b in ours[1:]))
# params are saved too in both (inputs): compare only non-placeholder outputs
ph = {n.name for n in tr.gm.graph.nodes if n.op == "placeholder"}
print("ours non-input saved bytes", sum(b for name, _, _, b in ours[1:] if name not in ph))
import collections
print("tc shapes", collections.Counter((s, str(d)) for _, s, d, _ in tc[1:]).most_common(8))
print("ours shapes", collections.Counter((s, str(d)) for name, s, d, _ in ours[1:] if name not in ph).most_common(8))
