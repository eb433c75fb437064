"""Hierarchical (two-level) all-reduce: reduce-scatter inside each node, all-reduce across
nodes, all-gather inside each node, pipelined.

With g ranks per node and N nodes (n = gN ranks, S bytes): a ring reduce-scatter among the g
ranks of every node leaves local rank l with slice l (S/g bytes) reduced over
its node; the N ranks with the same local rank then run a ring all-reduce of
that slice across nodes (S/n-byte chunks, over the slow network: on a machine
with one NIC per GPU each local rank uses its own NIC); a ring all-gather inside
each node spreads the result. The slow links carry 2(N-1)/N x S/g bytes per
rank instead of the flat ring's 2(n-1)/n x S.

Pipelining: the buffer is cut in k = ``pipeline`` pieces and piece j starts
g-1 steps (one intra-node phase) after piece j-1, so while one piece crosses the
network the next one is reduced inside the nodes: the NVLink and network phases
overlap, as in NCCL's pipelined multi-node algorithms, instead of waiting for
each other. A block of a node ring moves as one transfer of N chunks (``span``).

Example
-------
>>> hierarchical_all_reduce_schedule(8, 800, gpus_per_node=4, pipeline=1).n_steps   # 3 + 2 + 3
8
>>> hierarchical_all_reduce_schedule(8, 800, gpus_per_node=4, pipeline=3).n_steps   # two more pieces, 3 steps apart
14
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core import steps
from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts, ring_phase
from labcore.sim.core.trace import Layout, Schedule


HIERARCHICAL_PIECES = 16


def hierarchical_pipeline(nbytes: float) -> int:
    """Pieces of the hierarchical all-reduce by default: as :func:`labcore.sim.core.steps.default_pipeline`,
    at most 16 (enough to keep the node and network phases overlapped; more only adds steps).

    Example
    -------
    >>> hierarchical_pipeline(8), hierarchical_pipeline(1 << 30)
    (1, 16)
    """
    return min(HIERARCHICAL_PIECES, steps.default_pipeline(nbytes))


def hierarchical_stagger(gpus_per_node: int, nodes: int) -> int:
    """Steps between the starts of two pieces of the hierarchical all-reduce: one intra-node phase
    (g - 1 steps) when there are nodes to overlap it with, else 1."""
    return max(1, gpus_per_node - 1) if nodes > 1 else 1


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
        table.append(steps.step(1, *msgs))
    return table


def _hierarchical_form(collective, p, n, k, channels, ports, options):
    g = options.get("gpus_per_node")
    if not g or p % g:
        raise ValueError(f"hierarchical needs gpus_per_node dividing ranks={p}")
    k = hierarchical_pipeline(n) if k is None else k
    return _hierarchical_steps(p, n, int(g), k, ports)


def _hierarchical_transfers(p, k, c, g):
    g = g or p
    return k * 4 * p * max(p // g, g)


@algorithm("all_reduce", "hierarchical", form=_hierarchical_form, transfers=_hierarchical_transfers)
def hierarchical_all_reduce_schedule(ranks: int, nbytes: float, gpus_per_node: int | None = None,
                            pipeline: int | None = None) -> Schedule:
    """Two-level all-reduce; ``gpus_per_node`` must divide ``ranks`` (ranks r*g..r*g+g-1 share a node).

    ``pipeline``: pieces (default :func:`hierarchical_pipeline`). Chunk
    (j*g + l)*N + m is piece m (of N) of local rank l's slice of piece j.
    """
    g = gpus_per_node
    if g is None or g < 1 or ranks % g:
        raise ValueError(f"hierarchical all-reduce needs gpus_per_node, a divisor of ranks={ranks} "
                         "(simulate(..., gpus_per_node=g), or a topology built with nodes)")
    k = hierarchical_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    N = ranks // g
    nodes = np.arange(ranks).reshape(N, g)                  # nodes[node, local]
    inter = nodes.T                                         # inter[local, node]: the ring across nodes
    parts, delay = Parts(), hierarchical_stagger(g, N)
    for j in range(k):
        slices = (j * g + np.arange(g))[:, None] * N + np.arange(N)[None]     # slices[l, m] -> chunk
        intra_blocks = np.broadcast_to(slices[None, :, :1], (N, g, 1))        # block l = slice l, N chunks
        inter_blocks = slices[:, :, None]                                     # ring l, block m -> one chunk
        step = ring_phase(parts, nodes, intra_blocks, j * delay, -1, True, "intra-node reduce-scatter", span=N)
        step = ring_phase(parts, inter, inter_blocks, step, -1, True, "inter-node reduce-scatter")
        step = ring_phase(parts, inter, inter_blocks, step, 0, False, "inter-node all-gather")
        ring_phase(parts, nodes, intra_blocks, step, 0, False, "intra-node all-gather", span=N)
    return parts.schedule("all_reduce", "hierarchical", ranks, nbytes, ranks * k,
                          layout=Layout("hierarchical", order=tuple(range(g)),
                                        nodes=tuple((np.arange(ranks) // g).tolist())),
                          params={"gpus_per_node": g, "pipeline": k})
