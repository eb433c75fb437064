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

from labcore.sim.cost import hierarchical_pipeline, hierarchical_stagger
from labcore.sim.schedules._parts import Parts, algorithm, ring_phase
from labcore.sim.trace import Layout, Schedule


@algorithm("all_reduce", "hierarchical")
def hierarchical_all_reduce_schedule(ranks: int, nbytes: float, gpus_per_node: int | None = None,
                            pipeline: int | None = None) -> Schedule:
    """Two-level all-reduce; ``gpus_per_node`` must divide ``ranks`` (ranks r*g..r*g+g-1 share a node).

    ``pipeline``: pieces (default :func:`labcore.sim.cost.hierarchical_pipeline`). Chunk
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
