"""The runtime: how every executor runs a scheduled Trace.

* :mod:`.codegen` - the trace compiled to one Python function (ops, regions and
  constants bound as globals, ``del`` where the liveness model frees). Every
  executor (eager, Inductor, nvFuser), the CUDA-graph wrapper and the
  distributed wait hook run programs through it.
* :mod:`.interpreter` - node-by-node execution, kept only for per-line probes.
* :mod:`.wait_hook` - the hook a measuring tool installs to time each ``wait_tensor``.
* :mod:`.measure` - one call's peak memory (CUDA allocator stats / CPU profiler windows) and
  host/device time: what the run stage reports and the executors' workspace measurement use.
* :mod:`.call_memory` - one call's workspace on placeholder inputs (compiled regions, plain ops).
* :mod:`.op_scratch` - the scratch of a trace's ops, measured once per signature right after capture
  and kept as records on the Trace (``Trace.op_scratch``), which the liveness model reads.
"""
from .codegen import GeneratedProgram, generate, generate_region
from .interpreter import interpret
from .wait_hook import set_wait_hook

__all__ = ["GeneratedProgram", "generate", "generate_region", "interpret", "set_wait_hook"]
