"""Debug run: llama (small, f32) fwd+bwd under nvFuser with every segment checked against torch."""
import json
import sys

sys.path.insert(0, ".")
from examples.workloads import WORKLOADS  # noqa: E402
from tests.nvfuser_support import whole_program_region  # noqa: E402
from trace_lab.executors.nvfuser import NvFuserExecutor  # noqa: E402
from trace_lab.run.jit import jit  # noqa: E402
from trace_lab.passes import PASSES  # noqa: E402

PASSES["fusion"] = whole_program_region
for name in sys.argv[1:] or ["llama2"]:
    model, (x,) = WORKLOADS[name].make("cuda", "small")
    jfn = jit(model, fusion="dataflow", executor="nvfuser")
    jfn._executors["nvfuser"] = NvFuserExecutor(verify=True)
    jfn(x).float().sum().backward()
    mm = jfn._executors["nvfuser"].mismatches
    print(name, "mismatching segments:", len(mm))
    for m in mm[:4]:
        print(json.dumps({k: v for k, v in m.items() if k != "definition"})[:1500])
    if mm:
        print(mm[0]["definition"][:3000])
