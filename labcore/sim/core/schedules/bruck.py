"""Logarithmic all-gather (Bruck) and its time-reverse, a logarithmic reduce-scatter, for any p.

Bruck all-gather (Bruck et al. 1997; MPICH's all-gather for short messages and
non-powers of two): in round k every rank r receives from rank r + 2^k all the
chunks that rank has collected so far (at most 2^k, fewer in the last round),
so after ceil(log2 n) rounds everybody holds every chunk of the n ranks. Cost:
ceil(log2 n) alpha + (n-1)/n S beta, the ring's bandwidth with log latency.

Run the same rounds backwards, with the arrows reversed and each receiver
adding instead of copying, and every chunk's contributions flow down the same
paths to its owner: a reduce-scatter with cost ceil(log2 n) alpha +
(n-1)/n S (beta + gamma), like MPICH's recursive halving but for any n.

Example
-------
>>> [(t.src, t.dst, t.chunk) for t in bruck_all_gather_schedule(3, 30).steps()[1]]
[(2, 0, 2), (0, 1, 0), (1, 2, 1)]
"""
from __future__ import annotations

import math

import numpy as np

from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts
from labcore.sim.core import steps
from labcore.sim.core.trace import Layout, Schedule


def _rounds(p: int):
    """(round, sender offset 2^k, chunks moved m) of Bruck's all-gather."""
    for k in range(math.ceil(math.log2(p)) if p > 1 else 0):
        yield k, 1 << k, min(1 << k, p - (1 << k))


def _bruck_form(collective, p, n, k, channels, ports, options):
    # [MPICH] Bruck / recursive halving: lgp alpha + (p-1)/p n beta (+ (p-1)/p n gamma)
    red = collective == "reduce_scatter"
    return [steps.step(1, (1, m * n / p, m * n / p if red else 0)) for _k, _d, m in _rounds(p)]


@algorithm("all_gather", "bruck", form=_bruck_form)
def bruck_all_gather_schedule(ranks: int, nbytes: float) -> Schedule:
    """Bruck all-gather: ceil(log2 n) rounds; round k moves min(2^k, n-2^k) chunks per rank."""
    p = ranks
    r = np.arange(p)[:, None]
    parts = Parts()
    for k, d, m in _rounds(p):
        j = np.arange(m)[None]
        parts.add(k, (r + d) % p, r, (r + d + j) % p, False, label=f"round {k}: from rank +{d}")
    return parts.schedule("all_gather", "bruck", p, nbytes, p, layout=Layout("mesh"))


@algorithm("reduce_scatter", "bruck", form=_bruck_form)
def bruck_reduce_scatter_schedule(ranks: int, nbytes: float) -> Schedule:
    """The all-gather's rounds in reverse order and direction, reducing: rank r ends with chunk r."""
    p = ranks
    r = np.arange(p)[:, None]
    rounds = list(_rounds(p))
    parts = Parts()
    for step, (_k, d, m) in enumerate(reversed(rounds)):
        j = np.arange(m)[None]
        parts.add(step, r, (r + d) % p, (r + d + j) % p, True, label=f"round {step}: to rank +{d}")
    return parts.schedule("reduce_scatter", "bruck", p, nbytes, p, layout=Layout("mesh"))
