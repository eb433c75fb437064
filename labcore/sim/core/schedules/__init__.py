"""Schedule builders, one per (collective, algorithm); :func:`build` picks one by name.

Every builder is registered by its module with ``@algorithm(collective, name, form=...)``
(:mod:`labcore.sim.core.registry`: the builder, its closed form, the NCCL algorithm it plays); every
module of this package is imported below, so a new algorithm is one new file here. The collectives
themselves are described in :mod:`labcore.collectives`.

Pipelined algorithms (chain, tree, double_tree, in_network, nvls) take ``pipeline``,
the number of pieces; by default one per 512 KiB (:func:`labcore.sim.core.steps.default_pipeline`).

Example
-------
>>> build("all_reduce", "ring", ranks=4, nbytes=1024).n_steps
6
>>> sorted(ALGORITHMS["all_reduce"])[:3]
['double_tree', 'hierarchical', 'in_network']
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

from labcore.sim.core import buffers
from labcore.sim.core.registry import REGISTRY

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")       # each registers its algorithms

ALGORITHMS = {op: {a.name: a.build for (c, _), a in REGISTRY.items() if c == op} for op in buffers.SIMULATED}
"""collective -> algorithm -> builder, for every collective the simulator plays."""


def nccl_algorithms(collective: str) -> list[str]:
    """The simulator's algorithms for ``collective`` that play one of NCCL's (``algorithm="best"``
    picks among them), in the order they were registered."""
    return [a.name for (c, _), a in REGISTRY.items() if c == collective and a.nccl]


def playing(collective: str, nccl_algorithm: str) -> str | None:
    """The simulator's algorithm that plays NCCL's ``nccl_algorithm`` ("Ring", "Tree", ...) for
    ``collective``, or None where it has none.

    Example
    -------
    >>> playing("broadcast", "Ring"), playing("all_to_all", "Ring")
    ('chain', None)
    """
    return next((a.name for (c, _), a in REGISTRY.items() if c == collective and a.nccl == nccl_algorithm), None)


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


__all__ = ["ALGORITHMS", "REGISTRY", "build", "nccl_algorithms", "playing"]
