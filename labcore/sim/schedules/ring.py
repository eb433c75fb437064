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

from labcore.sim.trace import Layout, Schedule


def _order(ranks: int, order) -> np.ndarray:
    o = np.arange(ranks) if order is None else np.asarray(order, dtype=np.int64)
    if sorted(o.tolist()) != list(range(ranks)):
        raise ValueError(f"order must be a permutation of 0..{ranks - 1}")
    return o


def _ring_phase(o: np.ndarray, first_step: int, offset: int, reduce: bool):
    """p-1 steps; position i sends the chunk owned by position (i + offset - s) mod p."""
    p = o.size
    s = np.arange(p - 1)[:, None]
    i = np.arange(p)[None, :]
    step = np.broadcast_to(first_step + s, (p - 1, p))
    chunk = o[(i + offset - s) % p]
    return step, o[np.broadcast_to(i, (p - 1, p))], o[(i + 1) % p][None, :].repeat(p - 1, 0), chunk, reduce


def _assemble(collective, algorithm, ranks, nbytes, chunks, phases, layout, labels, root=0, params=None):
    parts = [ph for ph in phases if ph[0].size]
    cb = nbytes / chunks if collective != "all_to_all" else nbytes * ranks / chunks
    if parts:
        cols = [np.concatenate([np.ravel(ph[j]) for ph in parts]) for j in range(4)]
        red = np.concatenate([np.full(ph[0].size, ph[4], dtype=bool) for ph in parts])
    else:
        cols, red = [np.zeros(0, dtype=np.int64)] * 4, np.zeros(0, dtype=bool)
    n_steps = int(cols[0].max()) + 1 if cols[0].size else 0
    return Schedule(collective, algorithm, ranks, nbytes, chunks, *cols, np.full(cols[0].size, cb), red,
                    n_steps=n_steps, root=root, layout=layout, phases=tuple(labels[:n_steps]), params=params or {})


def ring_reduce_scatter(ranks: int, nbytes: float, order=None) -> Schedule:
    """Ring reduce-scatter: p-1 steps of n/p bytes; rank r ends with chunk r reduced."""
    o = _order(ranks, order)
    ph = _ring_phase(o, 0, -1, True)
    return _assemble("reduce_scatter", "ring", ranks, nbytes, ranks, [ph], Layout("ring", tuple(o.tolist())),
                     ["reduce-scatter"] * (ranks - 1))


def ring_all_gather(ranks: int, nbytes: float, order=None) -> Schedule:
    """Ring all-gather: p-1 steps of n/p bytes; every rank ends with every chunk."""
    o = _order(ranks, order)
    ph = _ring_phase(o, 0, 0, False)
    return _assemble("all_gather", "ring", ranks, nbytes, ranks, [ph], Layout("ring", tuple(o.tolist())),
                     ["all-gather"] * (ranks - 1))


def ring_all_reduce(ranks: int, nbytes: float, order=None) -> Schedule:
    """Ring all-reduce = ring reduce-scatter then ring all-gather: 2(p-1) steps of n/p bytes."""
    o = _order(ranks, order)
    phases = [_ring_phase(o, 0, -1, True), _ring_phase(o, ranks - 1, 0, False)]
    return _assemble("all_reduce", "ring", ranks, nbytes, ranks, phases, Layout("ring", tuple(o.tolist())),
                     ["reduce-scatter"] * (ranks - 1) + ["all-gather"] * (ranks - 1))


def chain_broadcast(ranks: int, nbytes: float, root: int = 0, pipeline: int = 8) -> Schedule:
    """Pipelined chain (ring) broadcast: the root's buffer cut in k pieces flows down the chain
    root, root+1, ...; p-1+k-1 steps of n/k bytes (NCCL's ring broadcast)."""
    k = max(1, int(pipeline))
    o = (root + np.arange(ranks)) % ranks
    hops = ranks - 1
    j, h = np.meshgrid(np.arange(k), np.arange(hops), indexing="ij")   # piece j crosses hop h at step j+h
    ph = (j + h, o[h], o[h + 1], j, False) if hops else (np.zeros(0, dtype=np.int64),) * 4 + (False,)
    return _assemble("broadcast", "chain", ranks, nbytes, k, [ph], Layout("ring", tuple(o.tolist())),
                     ["broadcast"] * (hops + k - 1), root=root, params={"pipeline": k})
