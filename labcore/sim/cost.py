"""Closed-form alpha-beta-gamma costs of every simulated algorithm, and lower bounds.

Model (Hockney; as used by Thakur, Rabenseifner and Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005): sending
m bytes between two ranks takes alpha + m*beta, reducing m bytes takes m*gamma;
p ranks, n bytes (the size nccl-tests reports). Each function returns the
coefficients (a, b, c) of time = a*alpha + b*beta + c*gamma, so that a fit
(see :mod:`labcore.sim.calibrate`) and the simulator share one formula.

With the uniform topology and contention off, the simulator's time for every
algorithm equals ``time(...)`` here to rounding; the tests check it.

Example
-------
>>> coefficients("all_reduce", "ring", ranks=4, nbytes=1000)
(6, 1500.0, 750.0)
>>> time("all_reduce", "ring", 4, 1000, alpha=1e-6, beta=1e-9) * 1e6
7.5
"""
from __future__ import annotations

import math

from labcore.sim.collectives import busbw_factor


def _ring(p: int, n: float, phases: int, reduce_phases: int):
    # each phase: p-1 steps of n/p bytes [MPICH: ring allgather (p-1)a + (p-1)/p n b]
    return (phases * (p - 1), phases * (p - 1) * n / p, reduce_phases * (p - 1) * n / p)


def _pipeline(depth_steps: int, k: int, n: float, reduce_steps: int):
    # depth_steps + k - 1 steps of n/k bytes
    return (depth_steps + k - 1, (depth_steps + k - 1) * n / k, reduce_steps * n / k)


def coefficients(collective: str, algorithm: str, ranks: int, nbytes: float, **options) -> tuple:
    """(a, b, c) with time = a*alpha + b*beta + c*gamma for ``algorithm`` (see the module docstring).

    Options are the schedule's: ``pipeline`` (k pieces) for chain/tree algorithms,
    ``gpus_per_node`` for hierarchical.
    """
    p, n = ranks, float(nbytes)
    if p == 1:
        return (0, 0.0, 0.0)
    key = (collective, algorithm)
    if key == ("all_reduce", "ring"):
        return _ring(p, n, 2, 1)
    if key == ("reduce_scatter", "ring"):
        return _ring(p, n, 1, 1)
    if key == ("all_gather", "ring"):
        return _ring(p, n, 1, 0)
    if key in (("broadcast", "chain"), ("broadcast", "ring")):
        k = max(1, int(options.get("pipeline", 8)))
        return _pipeline(p - 1, k, n, 0)
    raise ValueError(f"no closed form for {collective}/{algorithm}")


def time(collective: str, algorithm: str, ranks: int, nbytes: float, alpha: float, beta: float,
         gamma: float = 0.0, **options) -> float:
    """Closed-form time in seconds (see :func:`coefficients`)."""
    a, b, c = coefficients(collective, algorithm, ranks, nbytes, **options)
    return a * alpha + b * beta + c * gamma


def lower_bound(collective: str, ranks: int, nbytes: float, beta: float, alpha: float = 0.0,
                in_network: bool = False) -> float:
    """Least time of any algorithm when each rank sends and receives at 1/beta bytes/s at once.

    Bandwidth term: busbw can never exceed the link bandwidth, i.e. time >= n*beta*busbw_factor
    (nccl-tests doc/PERFORMANCE.md; the all-reduce bound 2(p-1)/p n beta is Patarasuk and Yuan,
    JPDC 69(2), 2009). With ``in_network`` a reducing switch lets an all-reduce finish in
    n*beta. Latency term: ceil(log2 p) rounds of alpha (a value can at most double its
    reach per round). The bound is the larger of the two.

    Example
    -------
    >>> lower_bound("all_reduce", 4, 1000, beta=1e-9) * 1e9
    1500.0
    """
    if ranks == 1:
        return 0.0
    factor = busbw_factor(collective, ranks)
    if in_network and collective == "all_reduce":
        factor = 1.0
    return max(nbytes * beta * factor, math.ceil(math.log2(ranks)) * alpha)
