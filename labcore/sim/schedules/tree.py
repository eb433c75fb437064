"""Tree schedules: binomial broadcast and reduce, pipelined binary-tree and double-binary-tree all-reduce.

Binomial tree (MPICH's broadcast/reduce for short messages): in round k the
ranks that already hold the data (relative ranks below 2^k) send it to the
rank 2^k further; ceil(log2 p) rounds of the whole buffer.

Binary tree all-reduce (NCCL's Tree algorithm): the buffer is cut in k pieces
that flow up the tree (children reduce into their parent) and, once reduced at
the root, back down, pipelined so that many pieces are in flight: 2D + k - 1
steps of n/k bytes for a tree of depth D.

NCCL's tree (src/graph/trees.cc, NCCL 2.30.7): rank r's parent is found from
its lowest set bit b: r with b cleared and 2b set, or r with b cleared when that
is past the last rank; rank 0 is the root, with a single child. Leaves are the
odd ranks. The double binary tree runs a second tree, the mirror image
(r -> p-1-r) for even p or the same tree shifted by one rank for odd p, so a
rank that is a leaf in one tree is inside the other; each tree carries half
the data on its own channel (Sanders, Speck and Traeff 2009: two trees give up
to twice the bandwidth of one). NCCL builds these trees across *nodes* (one
rank per node, a chain inside each node); here they span all ranks, which is
NCCL's layout when every node has one GPU.

Example
-------
>>> nccl_tree_parents(8)
(-1, 2, 4, 2, 0, 6, 4, 6)
>>> binomial_broadcast(5, 100).n_steps
3
"""
from __future__ import annotations

import math

import numpy as np

from labcore.sim.cost import default_pipeline
from labcore.sim.schedules._parts import Parts
from labcore.sim.trace import Layout, Schedule


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


def depths(parents: tuple[int, ...]) -> np.ndarray:
    """Distance of every rank from the root."""
    d = np.zeros(len(parents), dtype=np.int64)
    for r in range(len(parents)):
        v = r
        while parents[v] >= 0:
            d[r] += 1
            v = parents[v]
    return d


def _pipelined_tree(parts: Parts, parents, pieces: np.ndarray, channel: int) -> None:
    """Reduce every piece up the tree, then broadcast it down, pipelined one step apart."""
    par = np.asarray(parents)
    child = np.flatnonzero(par >= 0)
    if child.size == 0:
        return
    d = depths(parents)
    D = int(d.max())
    j = np.arange(pieces.size)[:, None]
    # a rank at depth d sends piece j up at step j + D - d, after its children (one step deeper)
    parts.add(j + D - d[child][None], child[None], par[child][None], pieces[j], True, channel=channel,
              label="reduce up")
    # the parent at depth d-1 sends it down at step j + D + d - 1
    parts.add(j + D + d[child][None] - 1, par[child][None], child[None], pieces[j], False, channel=channel,
              label="broadcast down")


def tree_all_reduce(ranks: int, nbytes: float, pipeline: int | None = None) -> Schedule:
    """Binary-tree all-reduce (NCCL's tree), the buffer pipelined in k = ``pipeline`` pieces."""
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    parents = nccl_tree_parents(ranks)
    parts = Parts()
    _pipelined_tree(parts, parents, np.arange(k), 0)
    return parts.schedule("all_reduce", "tree", ranks, nbytes, k, layout=Layout("tree", parents=(parents,)),
                          params={"pipeline": k})


def double_tree_all_reduce(ranks: int, nbytes: float, pipeline: int | None = None) -> Schedule:
    """NCCL's double binary tree: two complementary trees, each with half the data in k pieces."""
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    t0 = nccl_tree_parents(ranks)
    t1 = mirrored_parents(t0)
    parts = Parts()
    _pipelined_tree(parts, t0, np.arange(k), 0)
    _pipelined_tree(parts, t1, k + np.arange(k), 1)
    return parts.schedule("all_reduce", "double_tree", ranks, nbytes, 2 * k, layout=Layout("tree", parents=(t0, t1)),
                          params={"pipeline": k})


def _binomial_parents(ranks: int, root: int) -> tuple[int, ...]:
    parents = [-1] * ranks
    for v in range(1, ranks):
        parents[(v + root) % ranks] = ((v - (1 << (v.bit_length() - 1))) + root) % ranks
    return tuple(parents)


def binomial_broadcast(ranks: int, nbytes: float, root: int = 0) -> Schedule:
    """Binomial-tree broadcast: ceil(log2 p) rounds, the whole buffer each."""
    parts = Parts()
    for k in range(math.ceil(math.log2(ranks)) if ranks > 1 else 0):
        v = np.arange(1 << k)
        v = v[v + (1 << k) < ranks]
        parts.add(k, (v + root) % ranks, (v + (1 << k) + root) % ranks, 0, False, label=f"round {k}")
    return parts.schedule("broadcast", "binomial", ranks, nbytes, 1, root=root,
                          layout=Layout("tree", parents=(_binomial_parents(ranks, root),)))


def binomial_reduce(ranks: int, nbytes: float, root: int = 0) -> Schedule:
    """Binomial-tree reduce: the broadcast's rounds in reverse, each receiver reducing."""
    rounds = math.ceil(math.log2(ranks)) if ranks > 1 else 0
    parts = Parts()
    for step, k in enumerate(reversed(range(rounds))):
        v = np.arange(1 << k)
        v = v[v + (1 << k) < ranks]
        parts.add(step, (v + (1 << k) + root) % ranks, (v + root) % ranks, 0, True, label=f"round {step}")
    return parts.schedule("reduce", "binomial", ranks, nbytes, 1, root=root,
                          layout=Layout("tree", parents=(_binomial_parents(ranks, root),)))
