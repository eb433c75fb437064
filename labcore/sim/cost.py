"""Closed-form alpha-beta-gamma costs of every simulated algorithm, and lower bounds.

Model (Hockney; as used by Thakur, Rabenseifner and Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005): sending
m bytes between two ranks takes alpha + m*beta, reducing m bytes takes m*gamma;
p ranks, n bytes (the size nccl-tests reports). Each function returns the
coefficients (a, b, c) of time = a*alpha + b*beta + c*gamma, so that a fit
(see :mod:`labcore.sim.calibration`) and the simulator share one formula.

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

PIPELINE_SLICE = 512 << 10
MAX_PIPELINE = 256


def default_pipeline(nbytes: float) -> int:
    """Pieces a pipelined algorithm cuts the buffer into by default: one per 512 KiB, the slice
    NCCL's Simple protocol moves per step (NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8), at most 256.

    Example
    -------
    >>> default_pipeline(8), default_pipeline(4 << 20), default_pipeline(1 << 30)
    (1, 8, 256)
    """
    return int(min(MAX_PIPELINE, max(1, -(-int(nbytes) // PIPELINE_SLICE))))


def _ring(p: int, n: float, phases: int, reduce_phases: int):
    # each phase: p-1 steps of n/p bytes [MPICH: ring allgather (p-1)a + (p-1)/p n b]
    return (phases * (p - 1), phases * (p - 1) * n / p, reduce_phases * (p - 1) * n / p)


def _pipeline(depth_steps: int, k: int, n: float, reduce_steps: int):
    # depth_steps + k - 1 steps of n/k bytes
    return (depth_steps + k - 1, (depth_steps + k - 1) * n / k, reduce_steps * n / k)


def _fold(p: int) -> tuple[int, int]:
    """MPICH's power-of-two fold: (log2 p', 1 if there are extra ranks else 0)."""
    pp = 1 << (p.bit_length() - 1)
    return pp.bit_length() - 1, int(p > pp)


def tree_depth(ranks: int, algorithm: str = "tree") -> int:
    """Depth D of NCCL's binary tree on ``ranks`` ranks (both trees of the double tree share it)."""
    from labcore.sim.schedules.tree import depths, nccl_tree_parents

    return int(depths(nccl_tree_parents(ranks)).max())


def coefficients(collective: str, algorithm: str, ranks: int, nbytes: float, **options) -> tuple:
    """(a, b, c) with time = a*alpha + b*beta + c*gamma for ``algorithm`` (see the module docstring).

    Options are the schedule's: ``pipeline`` (k pieces) for chain/tree/switch algorithms,
    ``gpus_per_node`` for hierarchical; ``root`` is accepted and ignored.
    """
    p, n = ranks, float(nbytes)
    k = options.get("pipeline")
    k = default_pipeline(n) if k is None else max(1, int(k))
    if p == 1:
        return (0, 0.0, 0.0)
    key = (collective, algorithm)
    if key == ("all_reduce", "ring"):
        # ring reduce-scatter + ring all-gather [MPICH ring allgather, CS336: 2(N-1)S/(N W)]
        return _ring(p, n, 2, 1)
    if key == ("reduce_scatter", "ring"):
        return _ring(p, n, 1, 1)
    if key == ("all_gather", "ring"):
        return _ring(p, n, 1, 0)
    if key in (("all_gather", "bruck"), ("reduce_scatter", "bruck")):
        # [MPICH] Bruck / recursive halving: lgp alpha + (p-1)/p n beta (+ (p-1)/p n gamma)
        rounds = math.ceil(math.log2(p))
        return (rounds, (p - 1) / p * n, (p - 1) / p * n if collective == "reduce_scatter" else 0.0)
    if key == ("broadcast", "chain"):
        # pipelined chain: p-1 hops, k pieces
        return _pipeline(p - 1, k, n, 0)
    if key in (("broadcast", "binomial"), ("reduce", "binomial")):
        # [MPICH] binomial: lgp (alpha + n beta) (+ n gamma per round for reduce)
        rounds = math.ceil(math.log2(p))
        return (rounds, rounds * n, rounds * n if collective == "reduce" else 0.0)
    if key == ("all_reduce", "recursive_doubling"):
        # [MPICH] lgp (alpha + n beta + n gamma), plus a fold step before and a send-back step after
        L, extra = _fold(p)
        return (L + 2 * extra, (L + 2 * extra) * n, (L + extra) * n)
    if key == ("all_reduce", "rabenseifner"):
        # [MPICH] 2 lgp alpha + 2 (p-1)/p n beta + (p-1)/p n gamma on p' ranks, plus fold/send-back
        L, extra = _fold(p)
        pp = 1 << L
        return (2 * L + 2 * extra, 2 * (pp - 1) / pp * n + 2 * extra * n, (pp - 1) / pp * n + extra * n)
    if key in (("all_reduce", "tree"), ("all_reduce", "double_tree")):
        # up then down the tree, pipelined: 2D + k - 1 steps of one piece; the first D + k - 1 reduce
        D = tree_depth(p)
        piece = n / k if algorithm == "tree" else n / (2 * k)
        return (2 * D + k - 1, (2 * D + k - 1) * piece, (D + k - 1) * piece)
    if key == ("all_reduce", "hierarchical"):
        g = options.get("gpus_per_node")
        if not g or p % g:
            raise ValueError(f"hierarchical needs gpus_per_node dividing ranks={p}")
        N = p // g
        return (2 * (g - 1) + 2 * (N - 1), 2 * (g - 1) * n / g + 2 * (N - 1) * n / p,
                (g - 1) * n / g + (N - 1) * n / p)
    if key == ("all_reduce", "in_network"):
        # k pieces up (reduced at the switch) and down, one step apart: k + 1 steps
        return (k + 1, (k + 1) * n / k, n)
    if key == ("all_reduce", "nvls"):
        # k steps led by a push of n/k (reduced at the switch); the pipeline then drains in three
        # steps whose largest message is a multicast of p-1 segments of n/(kp), or a single
        # segment (fetch/store) while no multicast is left
        seg = n / (k * p)
        tail = sum((p - 1 if k >= need else 1) for need in (3, 2, 0)) * seg
        return (k + 3, n + tail, n)
    if key == ("all_to_all", "pairwise"):
        # [MPICH] pairwise: p-1 steps of n/p
        return (p - 1, (p - 1) * n / p, 0.0)
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
    >>> round(lower_bound("all_reduce", 4, 1000, beta=1e-9) * 1e9, 6)
    1500.0
    """
    if ranks == 1:
        return 0.0
    factor = busbw_factor(collective, ranks)
    if in_network and collective == "all_reduce":
        factor = 1.0
    return max(nbytes * beta * factor, math.ceil(math.log2(ranks)) * alpha)
