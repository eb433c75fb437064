"""Where am I? Rank, world size and device for code running on a rank.

The same call works in a labcore worker (``Cluster.run``, ``%%ranks``) and in a
process started by torchrun or SLURM, so per-rank code (benchmarks included)
is written once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    """What a rank knows about itself."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: "object"  # torch.device; annotated loosely so this module imports without torch


_current: RankInfo | None = None


def _set_current(info: RankInfo) -> None:
    """Called once by the labcore worker after ``init_process_group``."""
    global _current
    _current = info


def rank_info() -> RankInfo:
    """This rank's :class:`RankInfo`.

    Inside a labcore worker it is set at start-up; under torchrun it is read
    from torch.distributed and ``LOCAL_RANK``.

    Raises
    ------
    RuntimeError
        When called in a process that is not a rank (e.g. the notebook itself).
    """
    if _current is not None:
        return _current
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "rank_info() only works on a rank: call it inside a function given to "
            "Cluster.run, in a %%ranks cell, or in a script launched by torchrun "
            "after dist.init_process_group()."
        )
    backend = str(dist.get_backend())  # "nccl", or "cpu:gloo,cuda:nccl" for a group with both
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    on_gpu = device_backend(backend, "cuda") == "nccl"
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    return RankInfo(dist.get_rank(), dist.get_world_size(), local_rank, backend, device)


def device():
    """The torch.device this rank should put its tensors on (``cuda:k`` with NCCL, else cpu).

    A lab cluster on NCCL runs CPU tensors too (its group has gloo beside NCCL, see
    :func:`labcore.live.sysinfo.group_backend`); this is where the GPU's tensors go.
    """
    return rank_info().device


def device_backend(spec: str, device_type: str) -> str:
    """The backend that runs ``device_type`` tensors in a group whose backend string is ``spec``, or "".

    ``dist.get_backend()`` returns the whole string a group was made with: a lab rank on NCCL
    says ``"cpu:gloo,cuda:nccl"``, so comparing it with ``"nccl"`` is always False there. torch's
    own parse (``BackendConfig`` in torch/distributed/distributed_c10d.py) gives each device
    type its backend; a bare ``"nccl"`` serves cuda only, a bare ``"gloo"`` both.

    >>> device_backend("cpu:gloo,cuda:nccl", "cuda"), device_backend("cpu:gloo,cuda:nccl", "cpu")
    ('nccl', 'gloo')
    >>> device_backend("nccl", "cpu")
    ''
    """
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    return str(BackendConfig(Backend(spec)).get_device_backend_map().get(device_type, ""))


def backend_for(device_type: str) -> str:
    """The backend this rank's default group runs ``device_type`` tensors with ("nccl", "gloo", or "")."""
    import torch.distributed as dist

    return device_backend(str(dist.get_backend()), device_type)
