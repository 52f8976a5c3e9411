"""A fake process group of N ranks in this one process, for predicting what each rank of an FSDP run holds.

``trace_lab.predict(model, x, fsdp="zero3", world_size=N)`` captures and lowers the sharded programs of
one rank without N processes. The jit's ``fsdp=`` wants ``torch.distributed`` initialised, and the
collectives name their group; nothing is communicated (the programs run on the meta device, whose
functional collectives only make shapes). :func:`fake_group` gives both, torch's own fake backend
(``torch.testing._internal.distributed.fake_pg``: a ``FakeProcessGroup`` that hallucinates every
collective):

* no default process group: one is initialised with the ``"fake"`` backend and a ``FakeStore``
  (``rank`` of ``world_size``) and destroyed on exit, even when the body raises;
* a default process group exists (a real distributed job): it is left alone; a ``FakeProcessGroup``
  of ``world_size`` ranks is built beside it, registered under a name of its own (what the
  collectives resolve) and unregistered on exit. The user's group, its rank and size are untouched.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager

import torch
import torch.distributed as dist

from ..errors import TraceLabError

__all__ = ["fake_group"]

_NAMES = itertools.count()


def _fake_backend():
    """The fake backend registered with torch.distributed (the import registers it), and its store class."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as e:  # pragma: no cover - a torch built without distributed
        raise TraceLabError(f"predicting FSDP ranks needs torch.distributed's fake process group ({e})") from e
    return FakeStore


@contextmanager
def fake_group(world_size: int, rank: int = 0):
    """Yields the name of a fake process group of ``world_size`` ranks in which this process is ``rank``."""
    if not dist.is_available():
        raise TraceLabError("predicting FSDP ranks needs torch.distributed, which this torch build lacks")
    store_class = _fake_backend()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=store_class(), rank=rank, world_size=world_size)
        try:
            yield dist.group.WORLD.group_name
        finally:
            dist.destroy_process_group()
        return
    from torch._C._distributed_c10d import (FakeProcessGroup, ProcessGroup, _register_process_group,
                                            _unregister_process_group)

    name = f"trace_lab_predict_fake_{next(_NAMES)}"
    pg = ProcessGroup(store_class(), rank, world_size)
    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.CUSTOM,
                         FakeProcessGroup._create_internal(rank, world_size))
    pg._set_group_name(name)
    _register_process_group(name, pg)
    try:
        yield name
    finally:
        _unregister_process_group(name)
