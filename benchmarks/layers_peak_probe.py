"""Diagnostic: why fusion="layers" peaks above dataflow (llama, forward + backward, Inductor).

    python3 benchmarks/layers_peak_probe.py [layers] [dim]      # CPU or GPU; defaults 3 layers, d=64

For each strategy, with donation off, on and in place (``donate_inputs``, ``donate_inplace``; side by side in one run): the predicted and measured
peaks of both parts, then the backward's peak line explained
(``Report.explain_peak``): which buffers are alive there, by kind and source line, and how much of the handed-over
saved activations had been freed before it."""
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
from examples.llama import LlamaStack  # noqa: E402

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 3
dim = int(sys.argv[2]) if len(sys.argv) > 2 else 64
device = "cuda" if torch.cuda.is_available() else "cpu"
for fusion, donate in (("dataflow", False), ("dataflow", True), ("dataflow", "in place"), ("layers", False),
                       ("layers", True), ("layers", "in place")):
    torch.manual_seed(0)
    model = LlamaStack(layers=layers, dim=dim, heads=4).to(device)
    x = torch.randn(2, 32, dim, device=device)
    r = trace_lab.inspect(model, x, fusion=fusion, executor="inductor", runs=0, donate_inputs=bool(donate),
                          donate_inplace=donate == "in place")
    print(f"== {fusion}, donation {donate if isinstance(donate, str) else 'on' if donate else 'off'} "
          f"({device}, {layers} layers, d={dim}): "
          f"forward predicted {r.predicted_peak('forward')} "
          f"measured {r.measured_peak('forward')}; backward predicted {r.predicted_peak('backward')} "
          f"measured {r.measured_peak('backward')}")
    print(r.explain_peak("backward"))
