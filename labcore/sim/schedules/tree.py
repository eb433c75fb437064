"""Tree schedules: binomial broadcast and reduce, pipelined binary-tree and double-binary-tree all-reduce.

Binomial tree (MPICH's broadcast/reduce for short messages): in round k the
ranks that already hold the data (relative ranks below 2^k) send it to the
rank 2^k further; ceil(log2 n) rounds of the whole buffer (n ranks, S bytes).

Binary tree all-reduce (NCCL's Tree algorithm): the buffer is cut in k pieces
that flow up the tree (children reduce into their parent) and, once reduced at
the root, back down, pipelined so that many pieces are in flight: 2D + k - 1
steps of S/k bytes for a tree of depth D.

NCCL's trees (see :mod:`labcore.sim.tree_shapes`): a binary tree with the odd ranks
as leaves, and for the double binary tree its mirror image, so that a rank that
is a leaf in one tree is inside the other; each tree carries half the data on
its own channel (Sanders, Speck and Traeff 2009: two trees give up to twice the
bandwidth of one). With ``gpus_per_node=g`` the trees are NCCL's multi-node
ones: built over the *nodes*, with the g GPUs of a node chained inside it (the
chain follows the channel's ring order; its first GPU talks to the other nodes).
Without it the trees span the ranks, which is NCCL's layout when every node
has one GPU. With ``channels=C`` the buffer is cut in C slices, each carried
by its own tree (or pair of trees) whose chains start at a different GPU: across
nodes every channel uses its own NICs.

Example
-------
>>> nccl_tree_parents(8)
(-1, 2, 4, 2, 0, 6, 4, 6)
>>> binomial_broadcast_schedule(5, 100).n_steps
3
"""
from __future__ import annotations

import math

import numpy as np

from labcore.sim.cost import default_pipeline
from labcore.sim.schedules._parts import Parts, algorithm
from labcore.sim.schedules.ring import orders
from labcore.sim.trace import Layout, Schedule
from labcore.sim.tree_shapes import depths, mirrored_parents, nccl_tree_parents, tree_shapes

__all__ = ["nccl_tree_parents", "mirrored_parents", "depths", "tree_shapes", "tree_all_reduce_schedule",
           "double_tree_all_reduce_schedule", "binomial_broadcast_schedule", "binomial_reduce_schedule"]


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


def _tree_all_reduce(ranks: int, nbytes: float, pipeline, gpus_per_node, channels, order, double: bool) -> Schedule:
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    trees = tree_shapes(ranks, double, gpus_per_node, orders(ranks, order, channels))
    parts = Parts()
    for t, parents in enumerate(trees):             # tree t carries chunks t*k .. t*k+k-1 on channel t
        _pipelined_tree(parts, parents, t * k + np.arange(k), t)
    per = 2 if double else 1
    g = gpus_per_node or 1
    if g > 1:
        layout = Layout("hierarchical", order=tuple(range(g)), nodes=tuple((np.arange(ranks) // g).tolist()),
                        parents=tuple(trees[:per]))
    else:
        layout = Layout("tree", parents=tuple(trees[:per]))
    return parts.schedule("all_reduce", "double_tree" if double else "tree", ranks, nbytes, len(trees) * k,
                          layout=layout, params={"pipeline": k, "channels": len(trees) // per,
                                                 "gpus_per_node": g}, distinct=True)


@algorithm("all_reduce", "tree")
def tree_all_reduce_schedule(ranks: int, nbytes: float, pipeline: int | None = None, gpus_per_node: int | None = None,
                    channels: int = 1, order=None) -> Schedule:
    """Binary-tree all-reduce (NCCL's tree), the buffer pipelined in k = ``pipeline`` pieces.

    ``gpus_per_node``: NCCL's multi-node tree (over nodes, chains inside); ``channels`` trees at once,
    their chains following ``order`` (one ring per channel).
    """
    return _tree_all_reduce(ranks, nbytes, pipeline, gpus_per_node, channels, order, double=False)


@algorithm("all_reduce", "double_tree")
def double_tree_all_reduce_schedule(ranks: int, nbytes: float, pipeline: int | None = None,
                           gpus_per_node: int | None = None, channels: int = 1, order=None) -> Schedule:
    """NCCL's double binary tree: two complementary trees, each with half the data in k pieces
    (options as :func:`tree_all_reduce_schedule`; every channel runs its own pair)."""
    return _tree_all_reduce(ranks, nbytes, pipeline, gpus_per_node, channels, order, double=True)


def _binomial_parents(ranks: int, root: int) -> tuple[int, ...]:
    parents = [-1] * ranks
    for v in range(1, ranks):
        parents[(v + root) % ranks] = ((v - (1 << (v.bit_length() - 1))) + root) % ranks
    return tuple(parents)


@algorithm("broadcast", "binomial")
def binomial_broadcast_schedule(ranks: int, nbytes: float, root: int = 0) -> Schedule:
    """Binomial-tree broadcast: ceil(log2 n) rounds, the whole buffer each."""
    parts = Parts()
    for k in range(math.ceil(math.log2(ranks)) if ranks > 1 else 0):
        v = np.arange(1 << k)
        v = v[v + (1 << k) < ranks]
        parts.add(k, (v + root) % ranks, (v + (1 << k) + root) % ranks, 0, False, label=f"round {k}")
    return parts.schedule("broadcast", "binomial", ranks, nbytes, 1, root=root,
                          layout=Layout("tree", parents=(_binomial_parents(ranks, root),)))


@algorithm("reduce", "binomial")
def binomial_reduce_schedule(ranks: int, nbytes: float, root: int = 0) -> Schedule:
    """Binomial-tree reduce: the broadcast's rounds in reverse, each receiver reducing."""
    rounds = math.ceil(math.log2(ranks)) if ranks > 1 else 0
    parts = Parts()
    for step, k in enumerate(reversed(range(rounds))):
        v = np.arange(1 << k)
        v = v[v + (1 << k) < ranks]
        parts.add(step, (v + (1 << k) + root) % ranks, (v + root) % ranks, 0, True, label=f"round {step}")
    return parts.schedule("reduce", "binomial", ranks, nbytes, 1, root=root,
                          layout=Layout("tree", parents=(_binomial_parents(ranks, root),)))
