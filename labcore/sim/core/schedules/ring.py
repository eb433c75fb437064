"""Ring schedules: reduce-scatter, all-gather, all-reduce (= the two), pipelined chain broadcast and reduce.

A ring of n ranks passes chunks of an S-byte buffer to the next rank. Reduce-scatter: in step s
the rank at ring position i sends the chunk of position i-s-1 (mod n) to position i+1,
which adds its own; after n-1 steps every rank holds one fully reduced chunk
(its own). All-gather then circulates the finished chunks n-1 more steps.
Each step moves S/n bytes per rank, which is why the ring reaches the
bandwidth lower bound 2(n-1)/n S beta (Patarasuk and Yuan 2009).

Channels: NCCL runs several rings at once, each on its own slice of the buffer
and, across nodes, its own NICs. With ``channels=C`` the buffer is cut in C
slices and ring ``c`` (``order[c]``, by default the same ring for all) moves
slice c, on channel c: rank r's part of the buffer is chunks r*C .. r*C+C-1,
chunk r*C + c travelling on ring c.

Example
-------
>>> s = ring_all_reduce_schedule(3, 300)
>>> [(t.src, t.dst, t.chunk, t.op) for t in s.steps()[0]]
[(0, 1, 2, 'reduce'), (1, 2, 0, 'reduce'), (2, 0, 1, 'reduce')]
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts, ring_phase
from labcore.sim.core import steps
from labcore.sim.core.steps import default_pipeline
from labcore.sim.core.trace import Layout, Schedule


def orders(ranks: int, order=None, channels: int = 1) -> np.ndarray:
    """(channels, ranks) ring of every channel from ``order``: None (0..n-1), one permutation for all
    channels, or one per channel."""
    if not isinstance(channels, (int, np.integer)) or channels < 1:
        raise ValueError(f"channels must be a whole number of at least 1, got {channels!r}")
    o = np.arange(ranks)[None] if order is None else np.atleast_2d(np.asarray(order, dtype=np.int64))
    if o.shape[0] == 1:
        o = np.repeat(o, channels, axis=0)
    want = np.arange(ranks)
    if o.shape != (channels, ranks) or not (np.sort(o, axis=1) == want).all():
        raise ValueError(f"order must be a permutation of 0..{ranks - 1}, or one per channel ({channels})")
    return o


def _ring_form(collective, p, n, k, channels, ports, options):
    # ring reduce-scatter + ring all-gather [MPICH ring allgather, CS336: 2(N-1)S/(N W)]
    reduce_steps, copy_steps = {"all_reduce": (1, 1), "reduce_scatter": (1, 0), "all_gather": (0, 1)}[collective]
    m = n / (channels * p)
    return [steps.same(reduce_steps * (p - 1), channels, m, m, ports), steps.same(copy_steps * (p - 1), channels, m, 0, ports)]


def _chain_form(collective, p, n, k, channels, ports, options):
    # pipelined chain: p-1 hops, k pieces, one step apart (a reduce adds every piece it receives)
    k = default_pipeline(n) if k is None else k
    return [steps.step(p - 1 + k - 1, (1, n / k, n / k if collective == "reduce" else 0))]


def _ring_transfers(p, k, c, g):
    return 2 * p * p * c


def _ring(collective: str, ranks: int, nbytes: float, order, channels: int, phases) -> Schedule:
    o = orders(ranks, order, channels)
    C = o.shape[0]
    blocks = (o * C + np.arange(C)[:, None])[:, :, None]       # ring c, position i -> chunk o[c, i]*C + c
    parts, step = Parts(), 0
    for offset, reduce, label in phases:
        step = ring_phase(parts, o, blocks, step, offset, reduce, label, channel=np.arange(C))
    return parts.schedule(collective, "ring", ranks, nbytes, ranks * C, layout=Layout("ring", tuple(o[0].tolist())),
                          params={"channels": C}, distinct=True)


@algorithm("reduce_scatter", "ring", form=_ring_form, nccl="Ring", transfers=_ring_transfers)
def ring_reduce_scatter_schedule(ranks: int, nbytes: float, order=None, channels: int = 1) -> Schedule:
    """Ring reduce-scatter: n-1 steps of S/n bytes; rank r ends with its part (chunk r) reduced.

    ``order`` is the ring (a permutation of the ranks, or one per channel), default 0, 1, ..., n-1;
    ``channels`` rings run at once, each on 1/channels of the buffer.
    """
    return _ring("reduce_scatter", ranks, nbytes, order, channels, [(-1, True, "reduce-scatter")])


@algorithm("all_gather", "ring", form=_ring_form, nccl="Ring", transfers=_ring_transfers)
def ring_all_gather_schedule(ranks: int, nbytes: float, order=None, channels: int = 1) -> Schedule:
    """Ring all-gather: n-1 steps of S/n bytes; every rank ends with every chunk."""
    return _ring("all_gather", ranks, nbytes, order, channels, [(0, False, "all-gather")])


@algorithm("all_reduce", "ring", form=_ring_form, nccl="Ring", transfers=_ring_transfers)
def ring_all_reduce_schedule(ranks: int, nbytes: float, order=None, channels: int = 1) -> Schedule:
    """Ring all-reduce = ring reduce-scatter then ring all-gather: 2(n-1) steps of S/n bytes.

    Example
    -------
    >>> s = ring_all_reduce_schedule(4, 4096, channels=2)
    >>> s.chunks, s.n_channels, s.n_steps
    (8, 2, 6)
    """
    return _ring("all_reduce", ranks, nbytes, order, channels,
                 [(-1, True, "reduce-scatter"), (0, False, "all-gather")])


@algorithm("broadcast", "chain", form=_chain_form, nccl="Ring")
def chain_broadcast_schedule(ranks: int, nbytes: float, root: int = 0, pipeline: int | None = None) -> Schedule:
    """Pipelined chain (ring) broadcast: the root's buffer cut in k = ``pipeline`` pieces flows
    down the chain root, root+1, ...; n-1+k-1 steps of S/k bytes (NCCL's ring broadcast)."""
    return _chain("broadcast", ranks, nbytes, (root + np.arange(ranks)) % ranks, root, pipeline)


@algorithm("reduce", "chain", form=_chain_form, nccl="Ring")
def chain_reduce_schedule(ranks: int, nbytes: float, root: int = 0, pipeline: int | None = None) -> Schedule:
    """Pipelined chain (ring) reduce: k = ``pipeline`` pieces flow along the ring from root+1 and end at
    the root, each rank adding its own on the way; n-1+k-1 steps of S/k bytes (NCCL's ring reduce,
    its pipeline to the root: src/enqueue.cc ncclPatternPipelineTo, src/device/reduce.h)."""
    return _chain("reduce", ranks, nbytes, (root + 1 + np.arange(ranks)) % ranks, root, pipeline)


def _chain(collective: str, ranks: int, nbytes: float, o: np.ndarray, root: int, pipeline) -> Schedule:
    """k pieces down the chain ``o``, piece j crossing hop h at step j+h (reducing on a reduce)."""
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    j, h = np.meshgrid(np.arange(k), np.arange(ranks - 1), indexing="ij")
    parts = Parts()
    parts.add(j + h, o[h], o[h + 1], j, collective == "reduce", label=collective)
    return parts.schedule(collective, "chain", ranks, nbytes, k, root=root,
                          layout=Layout("ring", tuple(o.tolist())), params={"pipeline": k})
