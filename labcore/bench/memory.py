"""Will a sweep fit? Per-rank buffer bytes, free memory per rank, and the largest size that fits.

Checked before anything is allocated: a size that cannot fit is a clear error,
and the default sweep stops at the largest size that does.

Example
-------
>>> from labcore.bench.memory import peak_bytes
>>> peak_bytes("all_reduce", 1 << 20, nranks=4, itemsize=4) // (1 << 20)   # send + recv + check scratch
18
"""
from __future__ import annotations

from labcore.bench import ops as _ops
from labcore.bench.verify import CHECK_BLOCK

# Scratch the block-wise data check needs (a few int64/float64 temporaries per block).
CHECK_SCRATCH = 8 * 8 * CHECK_BLOCK
# Share of the free memory a sweep may use: the notebook, the workers and the OS need the rest.
USABLE = 0.8


def peak_bytes(op: str, nbytes: int, nranks: int, itemsize: int, check: bool = True) -> int:
    """Most bytes one rank holds at once while measuring ``op`` at ``nbytes``."""
    name = _ops.op_name(op)
    if name == _ops.BARRIER:
        return 0
    spec = _ops.OPS[name]
    lay = spec.layout(nbytes, nranks, itemsize)
    # Out of place holds send and recv; in place one buffer of the larger size.
    return (lay.send + lay.recv) * itemsize + (CHECK_SCRATCH if check else 0)


def free_bytes_here() -> tuple[str, int]:
    """(device kind, free bytes) seen by the calling rank: its GPU's free memory, or host RAM."""
    import torch
    import torch.distributed as dist

    from labcore.live.context import backend_for, device

    # a lab rank on NCCL says "cpu:gloo,cuda:nccl": its GPU, not the host, holds the sweep's buffers
    if dist.is_initialized() and backend_for("cuda") == "nccl":
        free, _ = torch.cuda.mem_get_info(device())
        return "cuda", int(free)
    import psutil

    return "cpu", int(psutil.virtual_memory().available)


def per_rank_budget(kind: str, free: int, ranks_on_host: int) -> int:
    """Bytes one rank may use: a GPU is its own; host RAM is shared by the ranks on the host."""
    share = free if kind == "cuda" else free // max(1, ranks_on_host)
    return int(share * USABLE)


def local_budget(nranks: int) -> tuple[int, str]:
    """(bytes per rank, where) for ``nranks`` CPU ranks on this machine, asked before they start."""
    import psutil

    return (per_rank_budget("cpu", int(psutil.virtual_memory().available), nranks),
            f"host RAM shared by {nranks} ranks")


def largest_fitting(op: str, sizes: list[int], nranks: int, itemsize: int, budget: int,
                    check: bool = True) -> list[int]:
    """The prefix of ``sizes`` whose peak per-rank memory fits ``budget``."""
    return [s for s in sizes if peak_bytes(op, s, nranks, itemsize, check) <= budget]


def require_fit(op: str, nbytes: int, nranks: int, itemsize: int, budget: int,
                check: bool = True, where: str = "host RAM") -> None:
    """Raise MemoryError, saying what to do, when ``nbytes`` cannot fit in ``budget``."""
    need = peak_bytes(op, nbytes, nranks, itemsize, check)
    if need > budget:
        raise MemoryError(
            f"{op} at {nbytes} bytes needs {need / 2**20:.0f} MiB per rank but only "
            f"{budget / 2**20:.0f} MiB per rank can be used ({where}): lower max_bytes (-e), "
            "use fewer ranks, or free memory. Nothing was allocated.")
