"""Schedule builders, one per (collective, algorithm); :func:`build` picks one by name.

Every builder is registered by its module with ``@algorithm(collective, name)``
(:func:`labcore.sim.schedules._parts.algorithm`); a module lands in :data:`ALGORITHMS` by
being imported below. The collectives themselves are described in :mod:`labcore.collectives`.

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

from labcore.sim import collectives
from labcore.sim.schedules import ring, tree, recursive, hierarchical, switch, bruck, alltoall  # noqa: F401 (register)
from labcore.sim.schedules._parts import BUILDERS

ALGORITHMS = {op: {algo: fn for (c, algo), fn in BUILDERS.items() if c == op} for op in collectives.COLLECTIVES}
"""collective -> algorithm -> builder, for every collective the simulator plays."""


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
