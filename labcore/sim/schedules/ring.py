"""Ring schedules: reduce-scatter, all-gather, all-reduce (= the two), pipelined chain broadcast.

A ring passes chunks to the next rank. Reduce-scatter: in step s the rank at
ring position i sends the chunk of position i-s-1 (mod p) to position i+1,
which adds its own; after p-1 steps every rank holds one fully reduced chunk
(its own). All-gather then circulates the finished chunks p-1 more steps.
Each step moves n/p bytes per rank, which is why the ring reaches the
bandwidth lower bound 2(p-1)/p n beta (Patarasuk and Yuan 2009).

Example
-------
>>> s = ring_all_reduce(3, 300)
>>> [(t.src, t.dst, t.chunk, t.op) for t in s.steps()[0]]
[(0, 1, 2, 'reduce'), (1, 2, 0, 'reduce'), (2, 0, 1, 'reduce')]
"""
from __future__ import annotations

import numpy as np

from labcore.sim.cost import default_pipeline
from labcore.sim.schedules._parts import Parts, ring_phase
from labcore.sim.trace import Layout, Schedule


def _order(ranks: int, order) -> np.ndarray:
    o = np.arange(ranks) if order is None else np.asarray(order, dtype=np.int64)
    if sorted(o.tolist()) != list(range(ranks)):
        raise ValueError(f"order must be a permutation of 0..{ranks - 1}")
    return o


def _ring(collective: str, ranks: int, nbytes: float, order, phases) -> Schedule:
    o = _order(ranks, order)
    parts, step = Parts(), 0
    for offset, reduce, label in phases:
        step = ring_phase(parts, o[None], o[None, :, None], step, offset, reduce, label)
    return parts.schedule(collective, "ring", ranks, nbytes, ranks, layout=Layout("ring", tuple(o.tolist())))


def ring_reduce_scatter(ranks: int, nbytes: float, order=None) -> Schedule:
    """Ring reduce-scatter: p-1 steps of n/p bytes; rank r ends with chunk r reduced.

    ``order`` is the ring (a permutation of the ranks), default 0, 1, ..., p-1.
    """
    return _ring("reduce_scatter", ranks, nbytes, order, [(-1, True, "reduce-scatter")])


def ring_all_gather(ranks: int, nbytes: float, order=None) -> Schedule:
    """Ring all-gather: p-1 steps of n/p bytes; every rank ends with every chunk."""
    return _ring("all_gather", ranks, nbytes, order, [(0, False, "all-gather")])


def ring_all_reduce(ranks: int, nbytes: float, order=None) -> Schedule:
    """Ring all-reduce = ring reduce-scatter then ring all-gather: 2(p-1) steps of n/p bytes."""
    return _ring("all_reduce", ranks, nbytes, order, [(-1, True, "reduce-scatter"), (0, False, "all-gather")])


def chain_broadcast(ranks: int, nbytes: float, root: int = 0, pipeline: int | None = None) -> Schedule:
    """Pipelined chain (ring) broadcast: the root's buffer cut in k = ``pipeline`` pieces flows
    down the chain root, root+1, ...; p-1+k-1 steps of n/k bytes (NCCL's ring broadcast)."""
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    o = (root + np.arange(ranks)) % ranks
    j, h = np.meshgrid(np.arange(k), np.arange(ranks - 1), indexing="ij")   # piece j crosses hop h at step j+h
    parts = Parts()
    parts.add(j + h, o[h], o[h + 1], j, False, label="broadcast")
    return parts.schedule("broadcast", "chain", ranks, nbytes, k, root=root,
                          layout=Layout("ring", tuple(o.tolist())), params={"pipeline": k})
