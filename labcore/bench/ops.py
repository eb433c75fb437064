"""The collectives the benchmark knows: buffer sizes, bandwidths, how to run and check each.

One :class:`Op` per collective, as nccl-tests keeps one file per collective
(``src/*.cu``): each owns its element counts, its bus-bandwidth factor
(nccl-tests ``doc/PERFORMANCE.md``), the torch.distributed call and the exact
expected output used by the data check.

Counts are ported from nccl-tests 2.19.6 (github.com/NVIDIA/nccl-tests, commit
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432), ``*GetCollByteCount`` and ``*GetBw``:
a requested size of ``nbytes`` gives ``nbytes // itemsize`` elements; the
collectives that split a buffer across ranks (all_gather, reduce_scatter,
alltoall, gather, scatter, hypercube) give each rank ``elements // nranks``
rounded **down to a multiple of 16 bytes**, so small sizes give the size-0 rows
nccl-tests prints. The printed ``size`` is the larger of one rank's send and
receive buffers and ``count`` is the count passed to the NCCL call.

Example
-------
>>> from labcore.bench.ops import OPS
>>> OPS["all_gather"].layout(nbytes=1000, nranks=4, itemsize=4)   # 250 elements -> 60 per rank
Layout(count=60, send=60, recv=240)
>>> OPS["all_gather"].layout(nbytes=32, nranks=4, itemsize=4).count   # 2 per rank rounds down to 0
0
>>> OPS["all_gather"].busbw_factor(4)
0.75
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.distributed as dist

from labcore.bench.verify import expected_reduction, inputs

# torch 2.13 renamed the tensor forms; the old names warn on every call, so
# prefer the new ones and fall back on older torch.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

REDOPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
          "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}

# nccl-tests rounds each rank's share of a split buffer down to this many bytes.
ALIGN_BYTES = 16


class Layout(NamedTuple):
    """Elements of one size: the call's count, one rank's send and receive buffers."""

    count: int
    send: int
    recv: int


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
    """One collective.

    Attributes
    ----------
    name : the name used by ``sweep`` and the CLI.
    kind : "reduce" (takes a reduction op) or "copy" (moves data only).
    rooted : whether the collective has a root rank.
    split : send or receive buffer holds one ``count`` chunk per rank; the shape of the
        split buffer: "recv" (all_gather, gather, hypercube), "send" (reduce_scatter,
        scatter) or "both" (alltoall).
    inplace : how the in-place run lays out its one buffer (nccl-tests' in-place offsets):
        "same" (send is recv), "send_in_recv" (send is this rank's chunk of recv) or
        "recv_in_send" (recv is this rank's chunk of send).
    factor : busbw / algbw as a function of the number of ranks.
    run : ``run(send, recv, ctx)`` issues the collective once.
    expect : ``expect(ctx, k)`` the exact output at element indices ``k`` of recv.
    checked_on : ``checked_on(ctx)`` whether this rank's recv buffer holds a result.
    copies : torch has no out-of-place form: the out-of-place run copies the input into
        the output buffer, then runs in place (labelled in every output).
    inplace_checked : False where nccl-tests does not check the in-place result
        (alltoall and sendrecv on one aliased buffer): #wrong is N/A there.
    redop_column : what nccl-tests prints as redop: "op" (the -o reduction, also for
        sendrecv, which reduces nothing), "none", or "" (hypercube).
    algbw_share : bytes counted by algbw as a share of ``size`` (hypercube counts the
        n-1 chunks it receives, nccl-tests ``HyperCubeGetBw``).
    power_of_two : needs a power-of-two number of ranks (hypercube).
    """

    name: str
    kind: str
    rooted: bool
    split: str
    inplace: str
    factor: Callable[[int], float]
    run: Callable
    expect: Callable
    checked_on: Callable = lambda ctx: True
    copies: bool = False
    inplace_checked: bool = True
    redop_column: str = "none"
    algbw_share: Callable[[int], float] = lambda n: 1.0
    power_of_two: bool = False

    @property
    def chunked(self) -> bool:
        return self.split != ""

    def layout(self, nbytes: int, nranks: int, itemsize: int) -> Layout:
        """Element counts for a requested size of ``nbytes`` (nccl-tests' GetCollByteCount)."""
        elements = nbytes // itemsize
        if not self.chunked:
            return Layout(elements, elements, elements)
        base = (elements // nranks) & ~(max(1, ALIGN_BYTES // itemsize) - 1)
        whole = base * nranks
        if self.split == "recv":
            return Layout(base, base, whole)
        if self.split == "send":
            return Layout(base, whole, base)
        return Layout(base, whole, whole)

    def printed_size(self, nbytes: int, nranks: int, itemsize: int) -> int:
        """nccl-tests' "size" column for a requested size: the larger buffer, in bytes."""
        lay = self.layout(nbytes, nranks, itemsize)
        return max(lay.send, lay.recv) * itemsize

    def smallest_size(self, nranks: int, itemsize: int) -> int:
        """The smallest requested size that gives every rank at least one element."""
        if not self.chunked:
            return itemsize
        return nranks * max(itemsize, ALIGN_BYTES)

    def busbw_factor(self, nranks: int) -> float:
        return self.factor(nranks)

    def bandwidths(self, size: int, seconds: float, nranks: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes) of ``size`` bytes moved in ``seconds``."""
        algbw = size * self.algbw_share(nranks) / seconds / 1e9
        return algbw, algbw * self.factor(nranks)

    def fill_redop(self, redop: str) -> str:
        return redop if self.kind == "reduce" else "none"

    def printed_redop(self, redop: str) -> str:
        return redop if self.redop_column == "op" else self.redop_column


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


OPS: dict[str, Op] = {op.name: op for op in [
    Op("all_reduce", "reduce", False, "", "same", _ring, _run_all_reduce, _everyone, copies=True,
       redop_column="op"),
    Op("all_gather", "copy", False, "recv", "send_in_recv", _spread, _run_all_gather, _chunk_source),
    Op("reduce_scatter", "reduce", False, "send", "recv_in_send", _spread, _run_reduce_scatter,
       lambda ctx, k: _everyone(ctx, ctx.rank * ctx.count + k), redop_column="op"),
    Op("broadcast", "copy", True, "", "same", _one, _run_broadcast,
       lambda ctx, k: inputs(ctx.root, k, "none", ctx.nranks, ctx.dtype), copies=True),
    Op("reduce", "reduce", True, "", "same", _one, _run_reduce, _everyone,
       checked_on=lambda ctx: ctx.rank == ctx.root, copies=True, redop_column="op"),
    Op("all_to_all", "copy", False, "both", "same", _spread, _run_all_to_all,
       lambda ctx, k: inputs(k // ctx.count, ctx.rank * ctx.count + k % ctx.count, "none",
                             ctx.nranks, ctx.dtype), inplace_checked=False),
    Op("gather", "copy", True, "recv", "send_in_recv", _spread, _run_gather, _chunk_source,
       checked_on=lambda ctx: ctx.rank == ctx.root),
    Op("scatter", "copy", True, "send", "recv_in_send", _spread, _run_scatter,
       lambda ctx, k: inputs(ctx.root, ctx.rank * ctx.count + k, "none", ctx.nranks, ctx.dtype)),
    Op("sendrecv", "copy", False, "", "same", _one, _run_sendrecv,
       lambda ctx, k: inputs((ctx.rank - 1) % ctx.nranks, k, "none", ctx.nranks, ctx.dtype),
       inplace_checked=False, redop_column="op"),
    Op("hypercube", "copy", False, "recv", "send_in_recv", _one, _run_hypercube, _chunk_source,
       redop_column="", algbw_share=_spread, power_of_two=True),
]}

# Barrier moves no data: it is timed on its own (latency only) by the harness.
BARRIER = "barrier"
NAMES = [*OPS, BARRIER]


def canonical(name: str) -> str:
    """The lab's name for a collective (also accepts nccl-tests' names such as ``alltoall_perf``)."""
    key = str(name).lower().replace("-", "_").removesuffix("_mpi").removesuffix("_perf")
    key = {"alltoall": "all_to_all", "allreduce": "all_reduce", "allgather": "all_gather",
           "reducescatter": "reduce_scatter", "send_recv": "sendrecv"}.get(key, key)
    if key not in NAMES:
        raise ValueError(f"unknown collective {name!r}; choose one of: {', '.join(NAMES)}")
    return key


def nccl_tests_program(name: str) -> str:
    """nccl-tests' program for a collective, e.g. ``alltoall_perf`` for ``all_to_all``."""
    key = canonical(name)
    return {"all_to_all": "alltoall"}.get(key, key) + "_perf"
