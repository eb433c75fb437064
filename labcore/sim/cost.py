"""Closed-form alpha-beta-gamma costs of every simulated algorithm, for both port models, and lower bounds.

Model (Hockney; as used by Thakur, Rabenseifner and Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005): sending
m bytes between two ranks takes alpha + m*beta, reducing m bytes takes m*gamma;
n ranks, S bytes (the size nccl-tests reports; notation as in notebook 02). In the code
below p is the number of ranks and n the bytes, as in MPICH's cost comments.

Port models (a property of the topology, :class:`labcore.sim.topology.Topology`):

* ``"multi"`` -- a rank's messages to different peers in one step travel at the same time
  (NVSwitch, the textbook full mesh): a step costs its slowest message.
* ``"single"`` -- a rank sends one message and receives one at a time (Thakur, Rabenseifner
  and Gropp): a step costs the busiest rank's messages one after another, out or in.

Each algorithm is described step by step (:func:`steps`): how many steps of a kind, and for
each kind the candidate costs ``(a, b, c)`` meaning ``a*alpha + b*beta + c*gamma``, of which
the step takes the largest. :func:`time` evaluates that; :func:`coefficients` returns the
sum ``(a, b, c)`` when it is linear (one candidate dominates in every step), so that a fit
(see :mod:`labcore.sim.calibration`) and the simulator share one formula.

With the uniform topology and contention off, the simulator's time for every algorithm
equals ``time(...)`` here to rounding, for either port model; the tests check it.

Example
-------
>>> coefficients("all_reduce", "ring", ranks=4, nbytes=1000)
(6, 1500.0, 750.0)
>>> round(time("all_reduce", "ring", 4, 1000, alpha=1e-6, beta=1e-9) * 1e6, 6)
7.5

The double binary tree on 16 ranks, 1 GiB, 10 GB/s links: with multi-port ranks it beats the
single-port bandwidth bound 2(n-1)/n S beta = 201.3 ms; with one port per rank it cannot.

>>> round(time("all_reduce", "double_tree", 16, 1 << 30, 0, 1e-10) * 1e3, 1)
55.2
>>> round(time("all_reduce", "double_tree", 16, 1 << 30, 0, 1e-10, ports="single") * 1e3, 1)
216.8
>>> round(lower_bound("all_reduce", 16, 1 << 30, beta=1e-10) * 1e3, 1)
201.3
"""
from __future__ import annotations

import functools
import math

import numpy as np

from labcore.sim.topology import Cut
from labcore.sim.tree_shapes import depths, tree_shapes

PIPELINE_SLICE = 512 << 10
MAX_PIPELINE = 256
HIERARCHICAL_PIECES = 16
PORT_MODELS = ("multi", "single")


def default_pipeline(nbytes: float) -> int:
    """Pieces a pipelined algorithm cuts the buffer into by default: one per 512 KiB, the slice
    NCCL's Simple protocol moves per step (NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8), at most 256.

    Example
    -------
    >>> default_pipeline(8), default_pipeline(4 << 20), default_pipeline(1 << 30)
    (1, 8, 256)
    """
    return int(min(MAX_PIPELINE, max(1, -(-int(nbytes) // PIPELINE_SLICE))))


def hierarchical_pipeline(nbytes: float) -> int:
    """Pieces of the hierarchical all-reduce by default: as :func:`default_pipeline`, at most 16
    (enough to keep the node and network phases overlapped; more only adds steps).

    Example
    -------
    >>> hierarchical_pipeline(8), hierarchical_pipeline(1 << 30)
    (1, 16)
    """
    return min(HIERARCHICAL_PIECES, default_pipeline(nbytes))


def hierarchical_stagger(gpus_per_node: int, nodes: int) -> int:
    """Steps between the starts of two pieces of the hierarchical all-reduce: one intra-node phase
    (g - 1 steps) when there are nodes to overlap it with, else 1."""
    return max(1, gpus_per_node - 1) if nodes > 1 else 1


def _fold(p: int) -> tuple[int, int]:
    """MPICH's power-of-two fold: (log2 p', 1 if there are extra ranks else 0)."""
    pp = 1 << (p.bit_length() - 1)
    return pp.bit_length() - 1, int(p > pp)


def tree_depth(ranks: int, gpus_per_node: int | None = None) -> int:
    """Depth D of NCCL's (double) binary tree on ``ranks`` ranks; across nodes of ``gpus_per_node``
    GPUs, the tree over nodes plus the chain inside a node."""
    return int(depths(tree_shapes(ranks, False, gpus_per_node)[0]).max())


def _step(count, *candidates) -> tuple:
    return (int(count), tuple((float(a), float(b), float(c)) for a, b, c in candidates))


def _same(count, messages: int, m: float, r: float, ports: str) -> tuple:
    """``count`` steps in which every rank sends and receives ``messages`` messages of m bytes
    (r of them reduced): the slowest one, or all of them one after another."""
    if ports == "single":
        return _step(count, (messages, messages * m, messages * r))
    return _step(count, (1, m, r))


def _ring(p, n, channels, reduce_steps, copy_steps, ports):
    m = n / (channels * p)
    return [_same(reduce_steps * (p - 1), channels, m, m, ports), _same(copy_steps * (p - 1), channels, m, 0, ports)]


def _tree_steps(p, n, k, double, g, channels, ports):
    trees = tree_shapes(p, double, g, np.tile(np.arange(p), (channels, 1)))
    m = n / (len(trees) * k)
    D = int(depths(trees[0]).max())
    if ports == "multi":        # every step has a message; the first D+k-1 also reduce
        return [_step(D + k - 1, (1, m, m)), _step(D, (1, m, 0))]
    S = 2 * D + k - 1
    out_n = np.zeros((S, p), dtype=np.int64)
    out_r, in_n, in_r = out_n.copy(), out_n.copy(), out_n.copy()
    j = np.arange(k)[:, None]
    for parents in trees:
        par = np.asarray(parents)
        child = np.flatnonzero(par >= 0)
        d = depths(parents)[child][None]
        up, down = j + D - d, j + D + d - 1
        for step, src, dst, red in ((up, child, par[child], 1), (down, par[child], child, 0)):
            s, a, b = np.broadcast_arrays(step, src[None], dst[None])
            np.add.at(out_n, (s, a), 1)
            np.add.at(in_n, (s, b), 1)
            np.add.at(out_r, (s, a), red)
            np.add.at(in_r, (s, b), red)
    table = []
    for s in range(S):
        cands = {(q, q * m, r * m) for q, r in zip(np.r_[out_n[s], in_n[s]], np.r_[out_r[s], in_r[s]]) if q}
        table.append(_step(1, *_undominated(cands)))
    return table


def _hierarchical_steps(p, n, g, k, ports):
    N = p // g
    a, b = g - 1, N - 1
    T = 2 * a + 2 * b
    if T == 0:
        return []
    mi, me = n / (k * g), n / (k * p)
    bounds = np.cumsum([0, a, b, b, a])            # phase t: RS intra, RS inter, AG inter, AG intra
    delay = hierarchical_stagger(g, N)
    table = []
    for s in range(delay * (k - 1) + T):
        t = s - delay * np.arange(k)
        q = [int(((t >= lo) & (t < hi)).sum()) for lo, hi in zip(bounds[:-1], bounds[1:])]
        msgs = [(1, (q[0] + q[3]) * mi, q[0] * mi)] if q[0] + q[3] else []
        msgs += [(1, (q[1] + q[2]) * me, q[1] * me)] if q[1] + q[2] else []
        if ports == "single":
            msgs = [tuple(map(sum, zip(*msgs)))]
        table.append(_step(1, *msgs))
    return table


def _nvls_steps(p, n, k, ports):
    seg = n / (k * p)
    table = []
    for s in range(k + 3):
        push = (1, n / k, n / k) if s < k else None            # reduced at the switch
        store = (1, seg, 0) if 2 <= s <= k + 1 else None
        fetch = (1, seg, 0) if 1 <= s <= k else None
        mcast = (1, (p - 1) * seg, 0) if 3 <= s <= k + 2 else None
        out, into = [x for x in (push, store) if x], [x for x in (fetch, mcast) if x]
        if ports == "single":
            cands = [tuple(map(sum, zip(*side))) for side in (out, into) if side]
        else:
            cands = out + into
        table.append(_step(1, *cands))
    return table


def _collnet_steps(m, k, g, ports):
    """In-network all-reduce with g > 1 GPUs a node, slices of m bytes: in step s piece s is
    scattered to the heads (g-1 messages a GPU, reduced there), piece s-1 goes up to the switch
    (reduced there), piece s-2 comes down, piece s-3 is broadcast from the heads (g-1 messages)."""
    table = []
    for s in range(k + 3):
        scatter, up, down, bcast = s < k, 1 <= s <= k, 2 <= s <= k + 1, 3 <= s <= k + 2
        if ports == "single":       # a GPU's messages out, and in, one after the other
            sent = (g - 1) * (scatter + bcast) + up
            got = (g - 1) * (scatter + bcast) + down
            cands = [(sent, sent * m, ((g - 1) * scatter + up) * m), (got, got * m, (g - 1) * scatter * m)]
        else:
            cands = [(1, m, m)] if scatter or up else [(1, m, 0)]
        table.append(_step(1, *cands))
    return table


def _undominated(cands) -> list:
    cands = sorted(set(cands), reverse=True)
    keep = []
    for c in cands:
        if not any(all(x >= y for x, y in zip(k, c)) for k in keep):
            keep.append(c)
    return keep


def _ring_form(collective, p, n, k, channels, ports, options):
    # ring reduce-scatter + ring all-gather [MPICH ring allgather, CS336: 2(N-1)S/(N W)]
    phases = {"all_reduce": (1, 1), "reduce_scatter": (1, 0), "all_gather": (0, 1)}[collective]
    return _ring(p, n, channels, *phases, ports)


def _bruck_form(collective, p, n, k, channels, ports, options):
    # [MPICH] Bruck / recursive halving: lgp alpha + (p-1)/p n beta (+ (p-1)/p n gamma)
    red = collective == "reduce_scatter"
    moved = [min(1 << r, p - (1 << r)) * n / p for r in range(math.ceil(math.log2(p)))]
    return [_step(1, (1, m, m if red else 0)) for m in moved]


def _chain_form(collective, p, n, k, channels, ports, options):
    # pipelined chain: p-1 hops, k pieces, one step apart
    k = default_pipeline(n) if k is None else k
    return [_step(p - 1 + k - 1, (1, n / k, 0))]


def _binomial_form(collective, p, n, k, channels, ports, options):
    # [MPICH] binomial: lgp (alpha + n beta) (+ n gamma per round for reduce)
    return [_step(math.ceil(math.log2(p)), (1, n, n if collective == "reduce" else 0))]


def _recursive_doubling_form(collective, p, n, k, channels, ports, options):
    # [MPICH] lgp (alpha + n beta + n gamma), plus a fold step before and a send-back step after
    L, extra = _fold(p)
    return [_step(L + extra, (1, n, n)), _step(extra, (1, n, 0))]


def _rabenseifner_form(collective, p, n, k, channels, ports, options):
    # [MPICH] 2 lgp alpha + 2 (p-1)/p n beta + (p-1)/p n gamma on p' ranks, plus fold/send-back
    L, extra = _fold(p)
    halves = [n / (2 << s) for s in range(L)]
    return ([_step(extra, (1, n, n))] + [_step(1, (1, m, m)) for m in halves]
            + [_step(1, (1, m, 0)) for m in reversed(halves)] + [_step(extra, (1, n, 0))])


def _tree_form(collective, p, n, k, channels, ports, options, double=False):
    # up then down the tree, pipelined: 2D + k - 1 steps of one piece; the first D + k - 1 reduce
    k = default_pipeline(n) if k is None else k
    return _tree_steps(p, n, k, double, options.get("gpus_per_node"), channels, ports)


def _hierarchical_form(collective, p, n, k, channels, ports, options):
    g = options.get("gpus_per_node")
    if not g or p % g:
        raise ValueError(f"hierarchical needs gpus_per_node dividing ranks={p}")
    k = hierarchical_pipeline(n) if k is None else k
    return _hierarchical_steps(p, n, int(g), k, ports)


def _in_network_form(collective, p, n, k, channels, ports, options):
    # k pieces up (reduced at the switch) and down, one step apart: k + 1 steps; with g GPUs a
    # node (CollNetDirect) a scatter to the heads before and a broadcast from them after: k + 3
    k = default_pipeline(n) if k is None else k
    g = int(options.get("gpus_per_node") or 1)
    if g == 1:
        return [_step(k, (1, n / k, n / k)), _step(1, (1, n / k, 0))]
    return _collnet_steps(n / (k * g), k, g, ports)


def _nvls_form(collective, p, n, k, channels, ports, options):
    # k pushes of n/k (reduced at the switch); each segment is fetched, stored back and multicast
    k = default_pipeline(n) if k is None else k
    return _nvls_steps(p, n, k, ports)


def _pairwise_form(collective, p, n, k, channels, ports, options):
    # [MPICH] pairwise: p-1 steps of n/p
    return [_step(p - 1, (1, n / p, 0))]


_FORMS = {
    ("all_reduce", "ring"): _ring_form, ("reduce_scatter", "ring"): _ring_form, ("all_gather", "ring"): _ring_form,
    ("all_gather", "bruck"): _bruck_form, ("reduce_scatter", "bruck"): _bruck_form,
    ("broadcast", "chain"): _chain_form,
    ("broadcast", "binomial"): _binomial_form, ("reduce", "binomial"): _binomial_form,
    ("all_reduce", "recursive_doubling"): _recursive_doubling_form,
    ("all_reduce", "rabenseifner"): _rabenseifner_form,
    ("all_reduce", "tree"): _tree_form,
    ("all_reduce", "double_tree"): functools.partial(_tree_form, double=True),
    ("all_reduce", "hierarchical"): _hierarchical_form,
    ("all_reduce", "in_network"): _in_network_form,
    ("all_reduce", "nvls"): _nvls_form,
    ("all_to_all", "pairwise"): _pairwise_form,
}
"""(collective, algorithm) -> its closed form, step by step (see :func:`steps`)."""


def steps(collective: str, algorithm: str, ranks: int, nbytes: float, ports: str = "multi", **options) -> list:
    """The algorithm step by step: a list of ``(count, candidates)``; each of the ``count`` steps
    costs the largest of its candidates ``a*alpha + b*beta + c*gamma``.

    Options are the schedule's: ``pipeline`` (k pieces) for chain/tree/switch/hierarchical
    algorithms, ``channels`` for rings and trees, ``gpus_per_node`` for hierarchical, for
    NCCL's multi-node trees and for in-network reduction across nodes; ``root`` and ``order``
    are accepted and ignored.

    Example
    -------
    >>> steps("all_reduce", "ring", 4, 1000)
    [(3, ((1.0, 250.0, 250.0),)), (3, ((1.0, 250.0, 0.0),))]
    """
    if ports not in PORT_MODELS:
        raise ValueError(f"ports must be one of {', '.join(PORT_MODELS)}, got {ports!r}")
    k = options.get("pipeline")
    channels = max(1, int(options.get("channels") or 1))
    if ranks == 1:
        return []
    form = _FORMS.get((collective, algorithm))
    if form is None:
        raise ValueError(f"no closed form for {collective}/{algorithm}")
    return form(collective, ranks, float(nbytes), None if k is None else max(1, int(k)), channels, ports, options)


def coefficients(collective: str, algorithm: str, ranks: int, nbytes: float, ports: str = "multi",
                 **options) -> tuple:
    """(a, b, c) with time = a*alpha + b*beta + c*gamma for ``algorithm`` (see :func:`steps`);
    ValueError when the time is not linear in them (then use :func:`time`)."""
    a = b = c = 0.0
    for count, cands in steps(collective, algorithm, ranks, nbytes, ports, **options):
        top = _undominated(cands)
        if len(top) > 1:
            raise ValueError(f"{collective}/{algorithm} with ports={ports!r}: the slowest message of a step "
                             "depends on alpha, beta and gamma; use cost.time()")
        a, b, c = a + count * top[0][0], b + count * top[0][1], c + count * top[0][2]
    return (int(a) if a == int(a) else a, b, c)


def time(collective: str, algorithm: str, ranks: int, nbytes: float, alpha: float, beta: float,
         gamma: float = 0.0, ports: str = "multi", **options) -> float:
    """Closed-form time in seconds (see :func:`steps`)."""
    return float(sum(count * max(a * alpha + b * beta + c * gamma for a, b, c in cands)
                     for count, cands in steps(collective, algorithm, ranks, nbytes, ports, **options)))


def cut_bytes(collective: str, ranks: int, members: int, nbytes: float, in_network: bool = False) -> tuple:
    """Bytes that must leave and enter a set of ``members`` of ``ranks`` ranks, in any algorithm.

    For a single rank these are Patarasuk and Yuan's bounds (JPDC 69(2), 2009: an all-reduce that
    reduces at the ranks must send and receive 2(n-1)/n S per rank, n ranks, S bytes); a set of
    ranks of which the ranks are 1/N acts as one party of an N-party collective (whatever its
    members do inside). A reducing switch lets an all-reduce party send its S once and receive the
    result once.

    Example
    -------
    >>> cut_bytes("all_reduce", 32, 8, 1000)        # one node of four
    (1500.0, 1500.0)
    """
    p, s, n = ranks, members, float(nbytes)
    if s >= p:
        return (0.0, 0.0)
    N = p / s
    if collective == "all_reduce":
        need = 2 * (N - 1) / N * n
        need = min(need, n) if in_network else need
        return (need, need)
    if collective == "reduce_scatter":
        return ((N - 1) / N * n, (N - 1) / N * n)
    if collective == "all_gather":
        return (n / N, (N - 1) / N * n)
    if collective == "all_to_all":
        return (s * (p - s) / p * n, s * (p - s) / p * n)
    return (n, n)        # broadcast, reduce: the root's side sends n, every other side receives n


def lower_bound(collective: str, ranks: int, nbytes: float, beta: float | None = None, alpha: float = 0.0,
                in_network: bool = False, cuts=None) -> float:
    """Least time of any algorithm: the larger of a bandwidth and a latency floor.

    Bandwidth: for every cut (a set of ranks with the bandwidth of the links out of and into it:
    ``topology.cuts()``), the bytes that must cross it (:func:`cut_bytes`) over its bandwidth.
    Without ``cuts``, one port of 1/``beta`` bytes/s per rank (busbw can never exceed the link
    bandwidth, nccl-tests doc/PERFORMANCE.md). Latency: ceil(log2 n) rounds of ``alpha`` (a value
    can at most double its reach per round), or one ``alpha`` through a reducing switch.

    Example
    -------
    >>> round(lower_bound("all_reduce", 4, 1000, beta=1e-9) * 1e9, 6)
    1500.0
    """
    if ranks == 1:
        return 0.0
    if cuts is None:
        cuts = [Cut(1, 1.0 / beta, 1.0 / beta, "one port")]
    wire = 0.0
    for cut in cuts:
        if ranks % cut.ranks:
            continue
        out, into = cut_bytes(collective, ranks, cut.ranks, nbytes, in_network)
        wire = max(wire, out / cut.out_bandwidth if out else 0.0, into / cut.in_bandwidth if into else 0.0)
    rounds = 1 if in_network else math.ceil(math.log2(ranks))
    return max(wire, rounds * alpha)


__all__ = ["steps", "coefficients", "time", "lower_bound", "cut_bytes", "default_pipeline",
           "hierarchical_pipeline", "hierarchical_stagger", "tree_depth"]
