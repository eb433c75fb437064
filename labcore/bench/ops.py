"""The collectives the benchmark knows: how to run and check each.

One :class:`Op` per collective, as nccl-tests keeps one file per collective
(``src/*.cu``): the torch.distributed call and the exact expected output used by
the data check. What the collective *is* -- its names, nccl-tests program, byte
layout (counts from ``*GetCollByteCount``, split buffers rounded down to 16
bytes), bus-bandwidth factor, root, fewest ranks -- is read from its description
in :mod:`labcore.collectives`, the one place the bench, the simulator, replay,
the tuner and the recorder share.

Example
-------
>>> from labcore.bench.ops import OPS
>>> OPS["all_gather"].layout(nbytes=1000, nranks=4, itemsize=4)   # 250 elements -> 60 per rank
Counts(count=60, send=60, recv=240)
>>> OPS["all_gather"].layout(nbytes=32, nranks=4, itemsize=4).count   # 2 per rank rounds down to 0
0
>>> OPS["all_gather"].busbw_factor(4)
0.75
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from labcore import collectives
from labcore.bench.verify import expected_reduction, inputs
from labcore.collectives import Collective

# torch 2.13 renamed the tensor forms; the old names warn on every call, so
# prefer the new ones and fall back on older torch.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# nccl-tests rounds each rank's share of a split buffer down to this many bytes (labcore.collectives).
ALIGN_BYTES = collectives.ALIGN_BYTES

REDOPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
          "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}


@dataclass
class Ctx:
    """What a rank knows while running one size: who it is and what was asked."""

    rank: int
    nranks: int
    root: int
    redop: str  # the reduction the data is filled and checked for ("none": moves data only)
    dtype: torch.dtype
    count: int  # per-rank element count (nccl-tests' "count")
    torch_op: str = "sum"  # the reduction handed to torch (reductions only)

    @property
    def torch_redop(self):
        return REDOPS[self.torch_op]


@dataclass(frozen=True)
class Op:
    """One collective as the benchmark runs it.

    Attributes
    ----------
    spec : the collective (:class:`labcore.collectives.Collective`): ``name``, ``rooted``,
        ``split``, ``min_ranks``, ``power_of_two``, the layout and the bandwidth factors below
        are its.
    run : ``run(send, recv, ctx)`` issues the collective once.
    expect : ``expect(ctx, k)`` the exact output at element indices ``k`` of recv.
    checked_on : ``checked_on(ctx)`` whether this rank's recv buffer holds a result.
    copies : torch has no out-of-place form: the out-of-place run copies the input into
        the output buffer, then runs in place (labelled in every output).
    inplace_checked : False where nccl-tests does not check the in-place result
        (alltoall and sendrecv on one aliased buffer): #wrong is N/A there.
    """

    spec: Collective
    run: Callable
    expect: Callable
    checked_on: Callable = lambda ctx: True
    copies: bool = False
    inplace_checked: bool = True

    name = property(lambda self: self.spec.name)
    rooted = property(lambda self: self.spec.rooted)
    split = property(lambda self: self.spec.split)
    inplace = property(lambda self: self.spec.inplace)
    min_ranks = property(lambda self: self.spec.min_ranks)
    power_of_two = property(lambda self: self.spec.power_of_two)
    factor = property(lambda self: self.spec.busbw_factor)
    algbw_share = property(lambda self: self.spec.algbw_share)
    layout = property(lambda self: self.spec.counts)
    printed_size = property(lambda self: self.spec.printed_size)
    smallest_size = property(lambda self: self.spec.smallest_size)
    chunked = property(lambda self: self.spec.chunked)
    fill_redop = property(lambda self: self.spec.fill_redop)
    printed_redop = property(lambda self: self.spec.printed_redop)

    @property
    def kind(self) -> str:
        """"reduce" (takes a reduction op) or "copy" (moves data only)."""
        return "reduce" if self.spec.reduces else "copy"

    def busbw_factor(self, nranks: int) -> float:
        return self.spec.busbw_factor(nranks)

    def bandwidths(self, size: int, seconds: float, nranks: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes) of ``size`` bytes moved in ``seconds``."""
        algbw = size * self.algbw_share(nranks) / seconds / 1e9
        return algbw, algbw * self.factor(nranks)



def _everyone(ctx, k):
    return expected_reduction(range(ctx.nranks), k, ctx.redop, ctx.nranks, ctx.dtype)


def _chunk_source(ctx, k):
    """Output element k of a gathered buffer: element k % count of rank k // count."""
    return inputs(k // ctx.count, k % ctx.count, "none", ctx.nranks, ctx.dtype)


def _exchange(pairs):
    """Post every (send-or-recv, tensor, peer) at once and wait for all of them."""
    ops = [dist.P2POp(fn, tensor, peer) for fn, tensor, peer in pairs]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


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
    _exchange([(dist.isend, send, right), (dist.irecv, recv, left)])


def _run_hypercube(send, recv, ctx):
    """All-gather by recursive doubling, as nccl-tests' hypercube.cu: at step ``mask`` each rank
    swaps the ``mask`` chunks it holds with rank ``rank ^ mask``."""
    c, rank = ctx.count, ctx.rank
    mine = recv[rank * c:(rank + 1) * c]
    if mine.data_ptr() != send.data_ptr():
        mine.copy_(send)
    mask = 1
    while mask < ctx.nranks:
        held = rank & ~(mask - 1)
        wanted = held ^ mask
        peer = rank ^ mask
        _exchange([(dist.isend, recv[held * c:(held + mask) * c], peer),
                   (dist.irecv, recv[wanted * c:(wanted + mask) * c], peer)])
        mask <<= 1


def _op(name: str, run, expect, **bench) -> Op:
    return Op(collectives.describe(name), run, expect, **bench)


OPS: dict[str, Op] = {op.name: op for op in [
    _op("all_reduce", _run_all_reduce, _everyone, copies=True),
    _op("all_gather", _run_all_gather, _chunk_source),
    _op("reduce_scatter", _run_reduce_scatter, lambda ctx, k: _everyone(ctx, ctx.rank * ctx.count + k)),
    _op("broadcast", _run_broadcast, lambda ctx, k: inputs(ctx.root, k, "none", ctx.nranks, ctx.dtype), copies=True),
    _op("reduce", _run_reduce, _everyone, checked_on=lambda ctx: ctx.rank == ctx.root, copies=True),
    _op("all_to_all", _run_all_to_all,
        lambda ctx, k: inputs(k // ctx.count, ctx.rank * ctx.count + k % ctx.count, "none", ctx.nranks, ctx.dtype),
        inplace_checked=False),
    _op("gather", _run_gather, _chunk_source, checked_on=lambda ctx: ctx.rank == ctx.root),
    _op("scatter", _run_scatter, lambda ctx, k: inputs(ctx.root, ctx.rank * ctx.count + k, "none", ctx.nranks,
                                                       ctx.dtype)),
    _op("sendrecv", _run_sendrecv, lambda ctx, k: inputs((ctx.rank - 1) % ctx.nranks, k, "none", ctx.nranks, ctx.dtype),
        inplace_checked=False),
    _op("hypercube", _run_hypercube, _chunk_source),
]}

# Barrier moves no data: it is timed on its own (latency only) by the harness.
BARRIER = "barrier"
NAMES = [*OPS, BARRIER]


def op_name(name: str) -> str:
    """The lab's name for a collective the bench runs (also accepts nccl-tests' names such as ``alltoall_perf``)."""
    try:
        key = collectives.canonical(name)
    except ValueError:
        key = None
    if key not in NAMES:
        raise ValueError(f"unknown collective {name!r}; choose one of: {', '.join(NAMES)}")
    return key


def nccl_tests_program(name: str) -> str:
    """nccl-tests' program for a collective, e.g. ``alltoall_perf`` for ``all_to_all``."""
    key = op_name(name)
    return collectives.describe(key).program or f"{key}_perf"
