"""Schedule builders, one per (collective, algorithm); :func:`build` picks one by name.

Pipelined algorithms (chain, tree, double_tree, in_network, nvls) take ``pipeline``,
the number of pieces; by default one per 512 KiB (:func:`labcore.sim.cost.default_pipeline`).

Example
-------
>>> build("all_reduce", "ring", ranks=4, nbytes=1024).n_steps
6
>>> sorted(ALGORITHMS["all_reduce"])[:3]
['double_tree', 'hierarchical', 'in_network']
"""
from __future__ import annotations

import inspect

from labcore.sim.schedules import alltoall, bruck, hierarchical, recursive, ring, switch, tree

ALGORITHMS = {
    "all_reduce": {
        "ring": ring.ring_all_reduce,
        "tree": tree.tree_all_reduce,
        "double_tree": tree.double_tree_all_reduce,
        "recursive_doubling": recursive.recursive_doubling_all_reduce,
        "rabenseifner": recursive.rabenseifner_all_reduce,
        "hierarchical": hierarchical.hierarchical_all_reduce,
        "in_network": switch.in_network_all_reduce,
        "nvls": switch.nvls_all_reduce,
    },
    "reduce_scatter": {"ring": ring.ring_reduce_scatter, "bruck": bruck.bruck_reduce_scatter},
    "all_gather": {"ring": ring.ring_all_gather, "bruck": bruck.bruck_all_gather},
    "broadcast": {"chain": ring.chain_broadcast, "binomial": tree.binomial_broadcast},
    "reduce": {"binomial": tree.binomial_reduce},
    "all_to_all": {"pairwise": alltoall.pairwise_all_to_all},
}


def build(collective: str, algorithm: str, ranks: int, nbytes: float, **options):
    """Build the schedule of ``algorithm`` for ``collective`` (options: root, pipeline, order, ...)."""
    if collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; choose one of {', '.join(ALGORITHMS)}")
    table = ALGORITHMS[collective]
    if algorithm not in table:
        raise ValueError(f"no {algorithm!r} algorithm for {collective}; choose one of {', '.join(sorted(table))}")
    fn = table[algorithm]
    accepted = inspect.signature(fn).parameters
    extra = sorted(set(options) - set(accepted))
    if extra:
        raise TypeError(f"{collective}/{algorithm} does not take {', '.join(extra)}; it takes "
                        f"{', '.join(p for p in accepted if p not in ('ranks', 'nbytes'))}")
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    return fn(ranks, nbytes, **options)
