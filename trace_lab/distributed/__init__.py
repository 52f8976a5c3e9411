"""trace_lab.distributed: sharded parameters (FSDP) and multi-process runs.

    import trace_lab.distributed as tld
    run = tld.run_distributed(worker, nproc=2)     # gloo on CPU, NCCL on GPUs
    # inside a worker:
    jfn = trace_lab.jit(model, fsdp="zero3")        # shards model in place (shard_module: flat padded
                                                    # 1-D shards), collectives in the trace

See :mod:`.sharding` and :mod:`.launcher`; the passes are
:mod:`trace_lab.passes.fsdp` and :mod:`trace_lab.passes.sort_waits`.
"""
from .launcher import DistributedRun, RankResult, WorkerContext, current, free_port, run_distributed
from .sharding import gather_full_parameters, shard_module, shard_of, sharded_parameters

__all__ = ["run_distributed", "current", "DistributedRun", "RankResult", "WorkerContext", "free_port",
           "shard_module", "shard_of", "sharded_parameters", "gather_full_parameters"]
