"""Tree shapes: NCCL's binary tree, its mirror, depths, and the multi-node tree with chains inside nodes.

A tree is a tuple ``parents`` with one entry per rank: the rank's parent, or -1 for the root.
Kept apart from the schedules so that the cost formulas can use the shapes without building
a schedule.

NCCL's binary tree (src/graph/trees.cc, NCCL 2.30.7): rank r's parent is found from its lowest set
bit b: r with b cleared and 2b set, or r with b cleared when that is past the last rank; rank 0 is
the root, with a single child, and the odd ranks are leaves. The double binary tree adds the
mirror image (r -> n-1-r) for an even number n of ranks, or the same tree shifted by one for odd n.

Across nodes NCCL builds these trees over the *nodes*, not the GPUs: inside a node the GPUs form a
chain, the first GPU of the chain (its head) is the node's member of the tree across nodes and
reaches the other nodes' heads through its NIC (src/graph/connect.cc). :func:`node_tree_parents`
builds that shape over ranks.

Example
-------
>>> nccl_tree_parents(8)
(-1, 2, 4, 2, 0, 6, 4, 6)
>>> node_tree_parents(nccl_tree_parents(2), nodes=[[0, 1, 2], [3, 4, 5]])
(-1, 0, 1, 0, 3, 4)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["nccl_tree_parents", "mirrored_parents", "depths", "node_tree_parents", "tree_shapes"]


def nccl_tree_parents(ranks: int) -> tuple[int, ...]:
    """Parent of every rank in NCCL's binary tree (-1 for the root, rank 0)."""
    parents = [-1] * ranks
    for r in range(1, ranks):
        low = r & -r
        up = (r ^ low) | (low << 1)
        parents[r] = up if up < ranks else r ^ low
    return tuple(parents)


def mirrored_parents(parents: tuple[int, ...]) -> tuple[int, ...]:
    """The second tree of NCCL's double binary tree: mirrored (even p) or shifted by one (odd p)."""
    p = len(parents)
    if p % 2 == 0:
        return tuple(-1 if parents[p - 1 - r] < 0 else p - 1 - parents[p - 1 - r] for r in range(p))
    return tuple(-1 if parents[(r - 1) % p] < 0 else (parents[(r - 1) % p] + 1) % p for r in range(p))


def depths(parents: Sequence[int]) -> np.ndarray:
    """Distance of every rank from the root."""
    d = np.zeros(len(parents), dtype=np.int64)
    for r in range(len(parents)):
        v = r
        while parents[v] >= 0:
            d[r] += 1
            v = parents[v]
    return d


def node_tree_parents(node_parents: Sequence[int], nodes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Rank-level parents of a tree across nodes with a chain inside every node.

    Parameters
    ----------
    node_parents : the tree over nodes (e.g. ``nccl_tree_parents(n_nodes)``).
    nodes : for every node, its ranks in chain order; the first is the node's head.
    """
    ranks = sum(len(chain) for chain in nodes)
    parents = [-1] * ranks
    for k, chain in enumerate(nodes):
        up = node_parents[k]
        parents[chain[0]] = nodes[up][0] if up >= 0 else -1
        for prev, r in zip(chain[:-1], chain[1:]):
            parents[r] = prev
    return tuple(parents)


def tree_shapes(ranks: int, double: bool, gpus_per_node: int | None = None, rings=None) -> list[tuple[int, ...]]:
    """The trees of every channel, channel-major: one tree per channel, or a pair for the double tree.

    ``gpus_per_node`` g > 1 builds NCCL's multi-node trees (over nodes, chained inside each node
    in the order of the channel's ring); ``rings`` is (channels, ranks), one ring per channel
    (default: one channel, ring 0..ranks-1).

    Example
    -------
    >>> tree_shapes(4, double=False, gpus_per_node=2)       # 2 nodes of 2: chains 0-1 and 2-3
    [(-1, 0, 0, 2)]
    """
    g = gpus_per_node or 1
    if ranks % g:
        raise ValueError(f"gpus_per_node={g} must divide ranks={ranks}")
    rings = np.arange(ranks)[None] if rings is None else np.asarray(rings)
    if g == 1:
        base = nccl_tree_parents(ranks)
        return ([base, mirrored_parents(base)] if double else [base]) * len(rings)
    node_tree = nccl_tree_parents(ranks // g)
    node_trees = [node_tree, mirrored_parents(node_tree)] if double else [node_tree]
    out = []
    for ring in rings.tolist():
        chains = [[r for r in ring if r // g == k] for k in range(ranks // g)]
        out += [node_tree_parents(t, chains) for t in node_trees]
    return out
