"""Probe: nvFuser's ``add_output(out, alias_input=x)`` as trace_lab's in-place segments use it (session 32).

    python3 benchmarks/nvfuser_alias_probe.py      # GPU machine with nvfuser_direct

1. The raw API: an elementwise output written over an input of the same shape, and one reshaped to the input's
   shape first; ``execute`` returns the visible outputs only; the input holds the values torch computes.
2. trace_lab: a SwiGLU MLP (bf16), fusion="dataflow", executor="nvfuser", donate_inplace on: matches eager
   (outputs, gradients), which backward regions wrote over which inputs, predicted and measured peaks.
Each step prints as it ends, so a run cut short still says what it reached."""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

started = time.perf_counter()


def say(*a):
    print(f"[{time.perf_counter() - started:6.1f} s]", *a, flush=True)


from nvfuser_direct import DataType, FusionDefinition  # noqa: E402

x = torch.randn(64, 32, device="cuda")
y = torch.randn(64, 32, device="cuda")
want = x * 2 + y
with FusionDefinition() as fd:
    a = fd.define_tensor(sizes=[64, 32], strides=[32, 1], dtype=DataType.Float, static_sizes=True)
    b = fd.define_tensor(sizes=[64, 32], strides=[32, 1], dtype=DataType.Float, static_sizes=True)
    s = fd.ops.add(fd.ops.mul(a, fd.define_scalar(2.0, DataType.Double)), b)
    out = fd.ops.set(s)
    keep = fd.ops.mul(b, fd.define_scalar(-1.0, DataType.Double))
    fd.add_output(keep)
    fd.add_output(out, alias_input=a)
xa = x.clone()
res = fd.execute([xa, y])
say("same shape: returned", len(res), "outputs; input holds the result:", torch.allclose(xa, want),
    "; visible output right:", torch.allclose(res[0], -y))

with FusionDefinition() as fd2:
    a = fd2.define_tensor(sizes=[64, 32], strides=[32, 1], dtype=DataType.Float, static_sizes=True)
    flat = fd2.ops.reshape(a, [2048])
    out = fd2.ops.mul(flat, fd2.define_scalar(3.0, DataType.Double))
    fd2.add_output(fd2.ops.reshape(out, [64, 32]), alias_input=a)
xb = x.clone()
res = fd2.execute([xb])
say("reshaped: returned", len(res), "outputs; input holds the result:", torch.allclose(xb, x * 3))

import trace_lab  # noqa: E402
from examples.llama import MLP  # noqa: E402 - a SwiGLU feed-forward

for in_place in (True, False):
    torch.manual_seed(0)
    model = MLP(1024, 2730).to("cuda", torch.bfloat16)
    inp = torch.randn(4, 512, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    r = trace_lab.inspect(model, inp, fusion="dataflow", executor="nvfuser", runs=1, donate_inplace=in_place)
    over = [(g.name, g.details.get("in_place_over"), g.aliases) for g in r.traces("backward")[-1].compiled_regions.values()
            if g.details.get("in_place_over")]
    say(f"SwiGLU bf16 donate_inplace={in_place}: matches eager {r.ok}; written over: {over}; peaks (predicted, "
        "measured) MiB:", [(round(m["predicted_peak_above_inputs_bytes"] / 2**20, 2),
                            round((m["measured_peak_above_inputs_bytes"] or 0) / 2**20, 2)) for m in r.memory])
