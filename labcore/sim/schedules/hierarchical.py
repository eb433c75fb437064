"""Hierarchical (two-level) all-reduce: reduce-scatter inside each node, all-reduce across
nodes, all-gather inside each node.

With g ranks per node and N nodes (p = gN): a ring reduce-scatter among the g
ranks of every node leaves local rank l with slice l (n/g bytes) reduced over
its node; the N ranks with the same local rank then run a ring all-reduce of
that slice across nodes (n/p-byte chunks, over the slow network); a ring
all-gather inside each node spreads the result. The slow links carry
2(N-1)/N x n/g bytes per rank instead of the flat ring's 2(p-1)/p x n.

Example
-------
>>> hierarchical_all_reduce(8, 800, gpus_per_node=4).n_steps   # 3 + 2 + 3
8
"""
from __future__ import annotations

import numpy as np

from labcore.sim.schedules._parts import Parts, ring_phase
from labcore.sim.trace import Layout, Schedule


def hierarchical_all_reduce(ranks: int, nbytes: float, gpus_per_node: int | None = None) -> Schedule:
    """Two-level all-reduce; ``gpus_per_node`` must divide ``ranks`` (ranks r*g..r*g+g-1 share a node).

    Chunk l*N + m is piece m of local rank l's slice.
    """
    g = gpus_per_node
    if g is None or g < 1 or ranks % g:
        raise ValueError(f"hierarchical all-reduce needs gpus_per_node, a divisor of ranks={ranks} "
                         "(simulate(..., gpus_per_node=g), or a topology built with nodes)")
    N = ranks // g
    nodes = np.arange(ranks).reshape(N, g)                  # nodes[node, local]
    slices = np.arange(ranks).reshape(g, N)                 # slices[local slice, piece] -> chunk
    parts = Parts()
    intra_blocks = np.broadcast_to(slices[None], (N, g, N))
    step = ring_phase(parts, nodes, intra_blocks, 0, -1, True, "intra-node reduce-scatter")
    inter = nodes.T                                         # inter[local, node]
    inter_blocks = slices[:, :, None]                       # ring l, block b -> chunk slices[l, b]
    step = ring_phase(parts, inter, inter_blocks, step, -1, True, "inter-node reduce-scatter")
    step = ring_phase(parts, inter, inter_blocks, step, 0, False, "inter-node all-gather")
    ring_phase(parts, nodes, intra_blocks, step, 0, False, "intra-node all-gather")
    return parts.schedule("all_reduce", "hierarchical", ranks, nbytes, ranks,
                          layout=Layout("hierarchical", order=tuple(range(g)),
                                        nodes=tuple((np.arange(ranks) // g).tolist())),
                          params={"gpus_per_node": g})
