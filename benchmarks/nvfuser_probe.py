"""Probe of the nvfuser_direct API on the GPU machine (what the executor relies on)."""
import torch
import nvfuser_direct as nvf
from nvfuser_direct import FusionDefinition, DataType

print("nvfuser", nvf.version(), "torch", torch.__version__, torch.cuda.get_device_name())
x = torch.randn(4, 8, device="cuda")
w = torch.randn(8, device="cuda")
d = torch.zeros(4, 8, device="cuda")
with FusionDefinition() as fd:
    a = fd.define_tensor(sizes=[4, 8], strides=[8, 1], dtype=DataType.Float, static_sizes=True)
    b = fd.define_tensor(sizes=[8], strides=[1], dtype=DataType.Float, static_sizes=True)
    dst = fd.define_tensor(sizes=[4, 8], strides=[8, 1], dtype=DataType.Float, static_sizes=True)
    bb = fd.ops.broadcast_in_dim(b, [1, 8], [1])
    y = fd.ops.mul(a, bb)
    s = fd.ops.sum(y, [1], True, DataType.Float)
    f = fd.ops.full([4, 1], fd.define_scalar(2.0, DataType.Float), DataType.Float)
    z = fd.ops.add(fd.ops.sub(y, s), f)
    print("has dtype():", hasattr(z, "dtype"), getattr(z, "dtype", lambda: None)() if hasattr(z, "dtype") else "")
    fd.add_output(z)
    fd.add_output(fd.ops.set(z), alias_input=dst)
outs = fd.execute([x, w, d])
ref = x * w - (x * w).sum(1, keepdim=True) + 2
print("n outputs returned (1 visible + 1 alias):", len(outs), "max err", (outs[0] - ref).abs().max().item(),
      "alias written:", torch.allclose(d, ref))
print(repr(fd)[:600])
cache = nvf.LruFusionCache(max_fusions=16)
print("LruFusionCache ok", cache)
