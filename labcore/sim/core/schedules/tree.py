"""Tree schedules: binomial broadcast and reduce, pipelined binary-tree and double-binary-tree all-reduce.

Binomial tree (MPICH's broadcast/reduce for short messages): in round k the
ranks that already hold the data (relative ranks below 2^k) send it to the
rank 2^k further; ceil(log2 n) rounds of the whole buffer (n ranks, S bytes).

Binary tree all-reduce (NCCL's Tree algorithm): the buffer is cut in k pieces
that flow up the tree (children reduce into their parent) and, once reduced at
the root, back down, pipelined so that many pieces are in flight: 2D + k - 1
steps of S/k bytes for a tree of depth D.

NCCL's trees (see :mod:`labcore.sim.core.tree_shapes`): a binary tree with the odd ranks
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

from labcore.sim.core import steps
from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts
from labcore.sim.core.steps import default_pipeline
from labcore.sim.core.schedules.ring import orders
from labcore.sim.core.trace import Layout, Schedule
from labcore.sim.core.tree_shapes import depths, mirrored_parents, nccl_tree_parents, tree_shapes

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


def _tree_steps(p, n, k, double, g, channels, ports):
    trees = tree_shapes(p, double, g, np.tile(np.arange(p), (channels, 1)))
    m = n / (len(trees) * k)
    D = int(depths(trees[0]).max())
    if ports == "multi":        # every step has a message; the first D+k-1 also reduce
        return [steps.step(D + k - 1, (1, m, m)), steps.step(D, (1, m, 0))]
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
        table.append(steps.step(1, *steps.undominated(cands)))
    return table


def _tree_form(collective, p, n, k, channels, ports, options):
    # up then down the tree, pipelined: 2D + k - 1 steps of one piece; the first D + k - 1 reduce
    k = default_pipeline(n) if k is None else k
    return _tree_steps(p, n, k, False, options.get("gpus_per_node"), channels, ports)


def _double_tree_form(collective, p, n, k, channels, ports, options):
    k = default_pipeline(n) if k is None else k
    return _tree_steps(p, n, k, True, options.get("gpus_per_node"), channels, ports)


def _binomial_form(collective, p, n, k, channels, ports, options):
    # [MPICH] binomial: lgp (alpha + n beta) (+ n gamma per round for reduce)
    return [steps.step(math.ceil(math.log2(p)), (1, n, n if collective == "reduce" else 0))]


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


@algorithm("all_reduce", "tree", form=_tree_form, transfers=lambda p, k, c, g: 2 * p * k * c)
def tree_all_reduce_schedule(ranks: int, nbytes: float, pipeline: int | None = None, gpus_per_node: int | None = None,
                    channels: int = 1, order=None) -> Schedule:
    """Binary-tree all-reduce (NCCL's tree), the buffer pipelined in k = ``pipeline`` pieces.

    ``gpus_per_node``: NCCL's multi-node tree (over nodes, chains inside); ``channels`` trees at once,
    their chains following ``order`` (one ring per channel).
    """
    return _tree_all_reduce(ranks, nbytes, pipeline, gpus_per_node, channels, order, double=False)


@algorithm("all_reduce", "double_tree", form=_double_tree_form, nccl="Tree",
           transfers=lambda p, k, c, g: 4 * p * k * c)
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


@algorithm("broadcast", "binomial", form=_binomial_form)
def binomial_broadcast_schedule(ranks: int, nbytes: float, root: int = 0) -> Schedule:
    """Binomial-tree broadcast: ceil(log2 n) rounds, the whole buffer each."""
    parts = Parts()
    for k in range(math.ceil(math.log2(ranks)) if ranks > 1 else 0):
        v = np.arange(1 << k)
        v = v[v + (1 << k) < ranks]
        parts.add(k, (v + root) % ranks, (v + (1 << k) + root) % ranks, 0, False, label=f"round {k}")
    return parts.schedule("broadcast", "binomial", ranks, nbytes, 1, root=root,
                          layout=Layout("tree", parents=(_binomial_parents(ranks, root),)))


@algorithm("reduce", "binomial", form=_binomial_form)
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
