"""Sharding: split a module's parameters across a process group, FSDP style.

Design: :func:`shard_module` replaces every parameter of a module by a flat,
padded 1-D shard (rank ``r`` of ``W`` holds elements ``[r*S, (r+1)*S)`` of the
flattened parameter padded to ``W*S``) and registers a parametrization on the
original name, so ``module.weight`` still reads as the full tensor:

    weight = torch.ops.trace_lab.fsdp_unshard(weight_shard, shape, numel, W, group_name)

``fsdp_unshard`` is a real custom op: run eagerly it all-gathers through
``torch.distributed`` (blocking), its backward is ``fsdp_reduce_grad``, which
reduce-scatters the full gradient and averages it over the group. Under
``torch.compile`` both ops are opaque, so the captured programs take the shards
as inputs and show one ``fsdp_unshard`` per parameter; the ``fsdp`` pass
(:mod:`trace_lab.passes.fsdp`) lowers them into torch's functional collectives
(``all_gather_into_tensor`` + ``wait_tensor``, ``reduce_scatter_tensor``), where
the scheduling passes and the liveness model can see them. The process group
travels as its name (``group.group_name``), the string the functional
collectives take; every rank creates groups in the same order, so names agree.

``module.parameters()`` then yields the shards (with ``.grad`` of shard shape
after a backward), so an optimizer built on them is a sharded (ZeRO) optimizer.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

from ..errors import TraceLabError
from ..capture.session import program_parts

__all__ = ["shard_module", "shard_parameters", "shard_of", "Unshard", "sharded_parameters", "gather_full_parameters",
           "group_name_of", "shard_for_jit", "check_fsdp_reached", "UNSHARD", "REDUCE_GRAD"]


def group_name_of(group=None) -> str:
    if not dist.is_available() or not dist.is_initialized():
        raise TraceLabError("torch.distributed is not initialised: call torch.distributed.init_process_group "
                            "(or run inside trace_lab.distributed.run_distributed) before sharding a module")
    return (group or dist.group.WORLD).group_name


def _group(group_name: str):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)


# -- the two custom ops -----------------------------------------------------------------------
@torch.library.custom_op("trace_lab::fsdp_unshard", mutates_args=())
def fsdp_unshard(shard: torch.Tensor, shape: list[int], numel: int, group_size: int,
                 group_name: str) -> torch.Tensor:
    """All-gather a flat padded shard and return the full parameter (eager path)."""
    full = shard.new_empty([shard.numel() * group_size])
    dist.all_gather_into_tensor(full, shard.contiguous(), group=_group(group_name))
    return full[:numel].view(shape)


@fsdp_unshard.register_fake
def _unshard_fake(shard, shape, numel, group_size, group_name):
    return shard.new_empty(shape)


@torch.library.custom_op("trace_lab::fsdp_reduce_grad", mutates_args=())
def fsdp_reduce_grad(grad: torch.Tensor, shard_numel: int, group_size: int, group_name: str) -> torch.Tensor:
    """Average a full gradient over the group and keep this rank's shard (eager path)."""
    flat = padded_flat(grad * (1.0 / group_size), shard_numel * group_size)
    out = grad.new_empty([shard_numel])
    dist.reduce_scatter_tensor(out, flat, group=_group(group_name))
    return out


@fsdp_reduce_grad.register_fake
def _reduce_grad_fake(grad, shard_numel, group_size, group_name):
    return grad.new_empty([shard_numel])


def _unshard_setup(ctx, inputs, output):
    shard, _shape, _numel, group_size, group_name = inputs
    ctx.shard_numel, ctx.group_size, ctx.group_name = shard.numel(), group_size, group_name


def _unshard_backward(ctx, grad):
    return fsdp_reduce_grad(grad.contiguous(), ctx.shard_numel, ctx.group_size, ctx.group_name), None, None, None, None


fsdp_unshard.register_autograd(_unshard_backward, setup_context=_unshard_setup)

UNSHARD = torch.ops.trace_lab.fsdp_unshard.default
REDUCE_GRAD = torch.ops.trace_lab.fsdp_reduce_grad.default


# -- layout helpers --------------------------------------------------------------------------
def padded_flat(t: torch.Tensor, padded_numel: int) -> torch.Tensor:
    flat = t.reshape(-1)
    if padded_numel > flat.numel():
        flat = torch.nn.functional.pad(flat, (0, padded_numel - flat.numel()))
    return flat.contiguous()


def shard_of(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s flat padded shard of ``t`` (a copy), as :func:`shard_module` lays it out."""
    per = max(1, math.ceil(t.numel() / world_size))
    return padded_flat(t.detach(), per * world_size)[rank * per:(rank + 1) * per].clone()


class Unshard(nn.Module):
    """Parametrization: flat shard -> full parameter (through ``fsdp_unshard``)."""

    def __init__(self, shape, numel: int, group_size: int, group_name: str):
        super().__init__()
        self.shape, self.numel = list(shape), int(numel)
        self.group_size, self.group_name = int(group_size), str(group_name)

    def forward(self, shard):
        return fsdp_unshard(shard, self.shape, self.numel, self.group_size, self.group_name)


def shard_module(module: nn.Module, group=None) -> nn.Module:
    """Shard every parameter of ``module`` across ``group`` (default: WORLD), in place (as torch's
    ``fully_shard`` does); returns it. ``trace_lab.jit(module, fsdp=...)`` calls it (:func:`shard_for_jit`).

    Every rank must call this with an identical module (same seed / same state):
    each keeps only its shard. Tied (shared) parameters are refused.
    """
    name = group_name_of(group)
    pg = group or dist.group.WORLD
    return shard_parameters(module, dist.get_rank(pg), dist.get_world_size(pg), name)


def shard_parameters(module: nn.Module, rank: int, world_size: int, group_name: str) -> nn.Module:
    """:func:`shard_module`'s layout for rank ``rank`` of ``world_size`` in the group named ``group_name``,
    in place, without asking ``torch.distributed`` who we are: ``trace_lab.predict(..., fsdp=, world_size=)``
    shards a meta-device twin of the user's module this way for a fake group of ``world_size`` ranks."""
    if sharded_parameters(module):
        raise TraceLabError("shard_module: the module is already sharded (shard_module was called on it, or on one of "
                            "its submodules, before); shard it once, from the root module")
    if any(parametrize.is_parametrized(m) for m in module.modules()):
        raise TraceLabError("shard_module: the module has parametrizations (e.g. weight_norm); sharding a "
                            "parametrized parameter is not supported")
    seen: dict[int, str] = {}
    for mod_name, mod in list(module.named_modules()):
        for pname, p in list(mod._parameters.items()):
            if p is None:
                continue
            full_name = f"{mod_name}.{pname}" if mod_name else pname
            if id(p) in seen:
                raise TraceLabError(f"shard_module: parameter {full_name!r} is tied to {seen[id(p)]!r}; "
                                    "tied parameters are not supported")
            seen[id(p)] = full_name
            shard = nn.Parameter(shard_of(p, rank, world_size), requires_grad=p.requires_grad)
            mod._parameters[pname] = shard
            parametrize.register_parametrization(mod, pname, Unshard(p.shape, p.numel(), world_size, group_name),
                                                 unsafe=True)
    return module


def _sharded_slots(module: nn.Module):
    """(original parameter name, owning module, parameter name) for every sharded parameter."""
    for mod_name, mod in module.named_modules():
        if parametrize.is_parametrized(mod):
            for pname, plist in mod.parametrizations.items():
                if any(isinstance(p, Unshard) for p in plist):
                    yield (f"{mod_name}.{pname}" if mod_name else pname), mod, pname


def sharded_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """{original parameter name: its local shard} for a module made by :func:`shard_module`."""
    return {full: mod.parametrizations[pname].original for full, mod, pname in _sharded_slots(module)}


def gather_full_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """{original name: full tensor}, all-gathered (collective: every rank must call it)."""
    with torch.no_grad():
        return {full: getattr(mod, pname).detach().clone() for full, mod, pname in _sharded_slots(module)}


# -- fsdp= on trace_lab.jit ---------------------------------------------------------------------
def _no_group_message(mode: str) -> str:
    return (f"fsdp={mode!r} shards parameters across a process group, and torch.distributed is not initialised: "
            "call torch.distributed.init_process_group(...) in every rank (or run inside "
            "trace_lab.distributed.run_distributed) before trace_lab.jit, or leave fsdp unset for a single-process "
            "run")


def shard_for_jit(fn, mode: str):
    """What ``trace_lab.jit(fn, fsdp=mode)`` does before compiling; returns ``fn``.

    As ``torch.distributed.fsdp.fully_shard(model)`` does, an ``nn.Module`` is sharded in
    place over the default (WORLD) process group by :func:`shard_module`, unless it already
    was; every rank must pass an identical module (same seed / state), and an optimizer
    must be built on ``model.parameters()`` after this call (they are then the shards).
    A function is compiled as given: it may read modules sharded with :func:`shard_module`
    (the notebook's ``--fsdp`` cells do); :func:`check_fsdp_reached` then checks, after a
    call, that sharded parameters reached its programs. No process group, a module without
    parameters or a module sharded only in part: :class:`TraceLabError` saying what to call.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise TraceLabError(_no_group_message(mode))
    if not isinstance(fn, nn.Module):
        return fn
    shards = {id(p) for p in sharded_parameters(fn).values()}
    plain = [n for n, p in fn.named_parameters() if id(p) not in shards]
    if not shards and not plain:
        raise TraceLabError(f"fsdp={mode!r}: {type(fn).__name__} has no parameters, so there is nothing to shard; "
                            "leave fsdp unset")
    if not shards:
        return shard_module(fn)
    if plain:
        more = f" and {len(plain) - 3} more" if len(plain) > 3 else ""
        raise TraceLabError(f"fsdp={mode!r}: {type(fn).__name__} is sharded only in part ({', '.join(plain[:3])}{more} "
                            "not sharded): trace_lab.distributed.shard_module shards every parameter of the module "
                            "it is given, so call it once on the root module, or pass the unsharded module to "
                            "trace_lab.jit, which shards it")
    return fn


def check_fsdp_reached(jfn) -> bool:
    """After a call of ``trace_lab.jit(fn, fsdp=...)``: raise :class:`TraceLabError` when its compiled
    forward programs read no sharded parameter (the run was not sharded at all); False while no
    forward program has been compiled yet (nothing to judge), True once one has and they do."""
    parts = [part for _, _, part in program_parts(jfn) if part.kind != "backward"]
    if not parts:
        return False
    if any(t.info.get("fsdp", {}).get("all_gathers") for part in parts for t in part.traces):
        return True
    mode = jfn.options.fsdp
    raise TraceLabError(
        f"fsdp={mode!r}: no sharded parameter reached the programs of {getattr(jfn.fn, '__name__', 'fn')!r}, so this "
        "run was not sharded. Pass the nn.Module itself to trace_lab.jit(model, fsdp=...) (it is sharded in place, "
        "as torch's fully_shard does), or shard the modules the function uses with "
        "trace_lab.distributed.shard_module(model) before calling it")
