"""The collectives the benchmark knows: buffer sizes, busbw factor, how to run and check each.

One :class:`Op` per collective, as nccl-tests keeps one file per collective
(NT-S ``src/*.cu``): each owns its element counts, its bus-bandwidth factor
(nccl-tests ``doc/PERFORMANCE.md``), the torch.distributed call, and the exact
expected output used by the data check.

Sizes follow nccl-tests: ``count`` is the per-rank element count the
collective is called with and ``size`` is the larger of the send and receive
buffers of one rank, so ``algbw = size / time`` for every collective.

Example
-------
>>> from labcore.live.bench.ops import OPS
>>> op = OPS["all_gather"]
>>> op.layout(total=1024, nranks=4)          # (count, send elements, recv elements)
(256, 256, 1024)
>>> op.busbw_factor(4)
0.75
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from labcore.live.bench.verify import expected_reduction, inputs

# torch 2.13 renamed the tensor forms; the old names warn on every call, so
# prefer the new ones and fall back on older torch.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

REDOPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
          "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}


@dataclass
class Ctx:
    """What a rank knows while running one size: who it is and what was asked."""

    rank: int
    nranks: int
    root: int
    redop: str
    dtype: torch.dtype
    count: int  # per-rank element count (nccl-tests' "count")

    @property
    def torch_redop(self):
        return REDOPS[self.redop]


@dataclass(frozen=True)
class Op:
    """One collective.

    Attributes
    ----------
    name : the name used by ``sweep`` and the CLI.
    kind : "reduce" (takes a reduction op) or "copy" (moves data only).
    rooted : whether the collective has a root rank.
    chunked : whether buffers hold one ``count`` chunk per rank (all_gather & co).
    inplace : how the in-place run lays out its single buffer: "same" (send is recv),
        "send_in_recv" (send is this rank's chunk of recv), "recv_in_send", or "scratch"
        when the backends give wrong results on aliased buffers: the in-place run then
        copies the buffer to a scratch tensor and sends from it (labelled in every output).
    factor : busbw / algbw as a function of the number of ranks.
    run : ``run(send, recv, ctx)`` issues the collective once.
    expect : ``expect(ctx, k)`` the exact output at element indices ``k`` of recv.
    checked_on : ``checked_on(ctx)`` whether this rank's recv buffer holds a result.
    copies : set when torch has no out-of-place form: the out-of-place run copies
        the input into the output buffer, then runs in place (labelled in every output).
    """

    name: str
    kind: str
    rooted: bool
    chunked: bool
    inplace: str
    factor: Callable[[int], float]
    run: Callable
    expect: Callable
    checked_on: Callable = lambda ctx: True
    copies: bool = False

    def layout(self, total: int, nranks: int) -> tuple[int, int, int]:
        """(count, send elements, recv elements) for about ``total`` elements per rank buffer."""
        if not self.chunked:
            return total, total, total
        count = total // nranks
        big = count * nranks
        if self.name in ("all_gather", "gather"):
            return count, count, big
        if self.name in ("reduce_scatter", "scatter"):
            return count, big, count
        return count, big, big  # all_to_all

    def busbw_factor(self, nranks: int) -> float:
        return self.factor(nranks)

    def fill_redop(self, redop: str) -> str:
        return redop if self.kind == "reduce" else "none"


def _ring(n):
    return 2 * (n - 1) / n


def _spread(n):
    return (n - 1) / n


def _one(n):
    return 1.0


def _everyone(ctx, k):
    return expected_reduction(range(ctx.nranks), k, ctx.redop, ctx.nranks, ctx.dtype)


def _chunk_source(ctx, k):
    """Output element k of a gathered buffer: element k % count of rank k // count."""
    return inputs(k // ctx.count, k % ctx.count, "none", ctx.nranks, ctx.dtype)


def _run_all_reduce(send, recv, ctx):
    dist.all_reduce(recv, op=ctx.torch_redop)


def _run_broadcast(send, recv, ctx):
    dist.broadcast(recv, src=ctx.root)


def _run_reduce(send, recv, ctx):
    dist.reduce(recv, dst=ctx.root, op=ctx.torch_redop)


def _run_all_gather(send, recv, ctx):
    _all_gather(recv, send)


def _run_reduce_scatter(send, recv, ctx):
    _reduce_scatter(recv, send, op=ctx.torch_redop)


def _run_all_to_all(send, recv, ctx):
    dist.all_to_all_single(recv, send)


def _run_gather(send, recv, ctx):
    parts = list(recv.chunk(ctx.nranks)) if ctx.rank == ctx.root else None
    dist.gather(send, gather_list=parts, dst=ctx.root)


def _run_scatter(send, recv, ctx):
    parts = list(send.chunk(ctx.nranks)) if ctx.rank == ctx.root else None
    dist.scatter(recv, scatter_list=parts, src=ctx.root)


def _run_sendrecv(send, recv, ctx):
    # Every rank sends to its right neighbour and receives from its left one, concurrently.
    right, left = (ctx.rank + 1) % ctx.nranks, (ctx.rank - 1) % ctx.nranks
    ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


OPS: dict[str, Op] = {op.name: op for op in [
    Op("all_reduce", "reduce", False, False, "same", _ring, _run_all_reduce, _everyone, copies=True),
    Op("all_gather", "copy", False, True, "send_in_recv", _spread, _run_all_gather, _chunk_source),
    Op("reduce_scatter", "reduce", False, True, "recv_in_send", _spread, _run_reduce_scatter,
       lambda ctx, k: _everyone(ctx, ctx.rank * ctx.count + k)),
    Op("broadcast", "copy", True, False, "same", _one, _run_broadcast,
       lambda ctx, k: inputs(ctx.root, k, "none", ctx.nranks, ctx.dtype), copies=True),
    Op("reduce", "reduce", True, False, "same", _one, _run_reduce, _everyone,
       checked_on=lambda ctx: ctx.rank == ctx.root, copies=True),
    Op("all_to_all", "copy", False, True, "scratch", _spread, _run_all_to_all,
       lambda ctx, k: inputs(k // ctx.count, ctx.rank * ctx.count + k % ctx.count, "none",
                             ctx.nranks, ctx.dtype)),
    Op("gather", "copy", True, True, "send_in_recv", _spread, _run_gather, _chunk_source,
       checked_on=lambda ctx: ctx.rank == ctx.root),
    Op("scatter", "copy", True, True, "recv_in_send", _spread, _run_scatter,
       lambda ctx, k: inputs(ctx.root, ctx.rank * ctx.count + k, "none", ctx.nranks, ctx.dtype)),
    Op("sendrecv", "copy", False, False, "scratch", _one, _run_sendrecv,
       lambda ctx, k: inputs((ctx.rank - 1) % ctx.nranks, k, "none", ctx.nranks, ctx.dtype)),
]}

# Barrier moves no data: it is timed on its own (latency only) by the harness.
BARRIER = "barrier"
NAMES = [*OPS, BARRIER]


def canonical(name: str) -> str:
    """The lab's name for a collective (also accepts nccl-tests' names such as ``alltoall_perf``)."""
    key = name.lower().replace("-", "_").removesuffix("_perf")
    key = {"alltoall": "all_to_all", "allreduce": "all_reduce", "allgather": "all_gather",
           "reducescatter": "reduce_scatter", "send_recv": "sendrecv"}.get(key, key)
    if key not in NAMES:
        raise ValueError(f"unknown collective {name!r}; choose one of: {', '.join(NAMES)}")
    return key
