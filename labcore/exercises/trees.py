"""Exercises for the trees part of notebook 03: binomial, binary and double binary trees.

- :data:`q_binomial_rounds`: rounds of a binomial-tree broadcast;
- :data:`q_tree_parent`: NCCL's binary tree, parent of a rank;
- :data:`q_double_tree_interior`: why two trees: ranks inside both trees;
- :data:`q_tree_vs_ring`: the size where the ring overtakes the double tree.

The right answers come from the simulator's own schedules and runs, so an
exercise and the animation next to it can never disagree.

Example
-------
>>> q_binomial_rounds.check(lambda n: (n - 1).bit_length())
Binomial broadcast rounds: correct! (21 cases passed)
"""
from __future__ import annotations

from labcore.exercises.core import FunctionExercise
from labcore.exercises.values import StatedValue

__all__ = ["q_binomial_rounds", "q_tree_parent", "q_double_tree_interior", "q_tree_vs_ring",
           "ring_overtakes_tree"]


def _binomial_rounds(n: int) -> int:
    from labcore.sim.core.schedules import build

    return build("broadcast", "binomial", n, 1024).n_steps


q_binomial_rounds = FunctionExercise(
    "Binomial broadcast rounds",
    "Write rounds(n): how many rounds a binomial-tree broadcast from one root to n ranks takes "
    "(in each round every rank that already has the data sends it to one rank that does not).",
    reference=_binomial_rounds,
    cases=[(n,) for n in range(1, 18)] + [(31,), (32,), (33,), (1000,)],
    hints=["Count how many ranks hold the data after each round: 1, 2, 4, ...",
           "The number of holders doubles every round, so you need the smallest k with 2**k >= n.",
           "ceil(log2(n)), which for integers is (n - 1).bit_length()."],
    solution="def rounds(n):\n    return (n - 1).bit_length()      # = ceil(log2 n), 0 for one rank",
    wrong_examples=[lambda n: n - 1, lambda n: max(0, n.bit_length() - 1)],
)


def _nccl_parent(rank: int, n: int) -> int:
    from labcore.sim.core.tree_shapes import nccl_tree_parents

    return nccl_tree_parents(n)[rank]


q_tree_parent = FunctionExercise(
    "NCCL's binary tree",
    "Write parent(rank, n): the parent of `rank` in NCCL's binary tree on n ranks (the solid tree of "
    "the double-tree animation), or -1 for the root. Rank 0 is the root, the odd ranks are leaves.",
    reference=_nccl_parent,
    cases=[(r, n) for n in (2, 3, 5, 8, 12, 16) for r in range(n)],
    hints=["Write the ranks in binary. Look at each rank's lowest set bit b (r & -r): leaves have b = 1.",
           "The parent clears b and sets the next bit up: (r ^ b) | (b << 1). Rank 2 -> 4, rank 6 -> 4, 4 -> 8.",
           "When (r ^ b) | (b << 1) is past the last rank, the parent is r ^ b (just clear b)."],
    solution="def parent(rank, n):\n"
             "    if rank == 0:\n"
             "        return -1\n"
             "    low = rank & -rank\n"
             "    up = (rank ^ low) | (low << 1)\n"
             "    return up if up < n else rank ^ low\n"
             "# NCCL 2.30.7 src/graph/trees.cc builds the same tree.",
    wrong_examples=[lambda rank, n: -1 if rank == 0 else (rank - 1) // 2,
                    lambda rank, n: -1 if rank == 0 else (rank ^ (rank & -rank)) | ((rank & -rank) << 1)],
)


def _interior_in_both(ranks: int) -> int:
    from labcore.sim.core.schedules import build

    trees = build("all_reduce", "double_tree", ranks, 1 << 20).layout.parents
    inner = [{p for p in tree if p >= 0} for tree in trees]
    return len(inner[0] & inner[1])


q_double_tree_interior = StatedValue(
    "Inside both trees?",
    "In NCCL's double binary tree on {ranks} ranks (the animation: solid and dashed tree), how many "
    "ranks have children in both trees?",
    expected=_interior_in_both,
    given={"ranks": 8},
    rtol=0, form="a whole number of ranks",
    mistakes=[(4, "4 ranks have children in the solid tree (0, 2, 4, 6) and 4 in the dashed one; how "
                  "many of them are the same ranks?"),
              (8, "Count a rank only if it has children in *both* trees.")],
    hints=["In the solid tree the even ranks have children and the odd ranks are leaves.",
           "The dashed tree is the mirror image r -> 7 - r: which ranks have children there?"],
    solution="0: the mirror maps the even (inner) ranks to odd ones, so every rank is inside at most one "
             "tree. Each rank therefore sends and receives one tree's share of the data per direction, and "
             "the two trees together use the links in both directions: that is how two trees give up to "
             "twice the bandwidth of one (Sanders, Speck and Traeff 2009).",
    correct_example=0,
    wrong_examples=[4, 8, 2],
)


def ring_overtakes_tree(ranks: int, alpha: float = 5e-6, bandwidth: float = 10e9) -> int:
    """Smallest power-of-two size (bytes, 1 KiB..1 GiB) where the simulated ring all-reduce beats the
    double binary tree on a switch with one port per rank (contention on)."""
    import labcore.sim as sim

    topo = sim.topologies.switch(ranks, alpha=alpha, bandwidth=bandwidth)
    for e in range(10, 31):
        size = 1 << e
        ring = sim.simulate("all_reduce", "ring", ranks, size, topology=topo, values=False).time_s
        tree = sim.simulate("all_reduce", "double_tree", ranks, size, topology=topo, values=False).time_s
        if ring < tree:
            return size
    raise ValueError(f"the tree stays faster up to 1 GiB on {ranks} ranks")


_CROSSOVER_16 = ring_overtakes_tree(16)        # a few ms of timing-only simulations

q_tree_vs_ring = StatedValue(
    "When does the ring win?",
    "On a switch where each of {ranks} ranks has one port of {bandwidth:.0e} B/s and each message "
    "pays {alpha:.0e} s of latency (lc.sim.topologies.switch({ranks}, alpha={alpha:.0e}, "
    "bandwidth={bandwidth:.0e})), find the smallest power-of-two size in bytes at which the ring "
    "all-reduce is faster than the double binary tree. Simulate both with values=False.",
    expected=ring_overtakes_tree,
    given={"ranks": 16, "alpha": 5e-6, "bandwidth": 10e9},
    rtol=0,
    unit="bytes", form="a number of bytes (a power of two)",
    mistakes=[(lambda ranks, alpha, bandwidth: ring_overtakes_tree(ranks, alpha, bandwidth) // 2,
               "At that size the tree is still (just) faster: the ring wins from the next power of two."),
              (lambda ranks, alpha, bandwidth: ring_overtakes_tree(ranks // 2, alpha, bandwidth),
               "That is the crossover for half as many ranks: more ranks push it to larger sizes, because "
               "the ring's latency grows with n and the tree's with log n.")],
    hints=["Loop e over 10..30, size = 2**e, and compare trace.time_s of the two algorithms.",
           "lc.sim.simulate('all_reduce', 'ring', 16, size, topology=topo, values=False).time_s, and the "
           "same with 'double_tree'; stop at the first size where the ring's time is lower."],
    solution="topo = lc.sim.topologies.switch(16, alpha=5e-6, bandwidth=10e9)\n"
             "for e in range(10, 31):\n"
             "    size = 2 ** e\n"
             "    t = {a: lc.sim.simulate('all_reduce', a, 16, size, topology=topo, values=False).time_s\n"
             "         for a in ('ring', 'double_tree')}\n"
             "    if t['ring'] < t['double_tree']:\n"
             "        break\n"
             "answer = size",
    correct_example=_CROSSOVER_16,
    wrong_examples=[_CROSSOVER_16 // 2, _CROSSOVER_16 * 4, 1.5],
)
