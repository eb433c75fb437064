"""Closed-form alpha-beta-gamma costs of every simulated algorithm, for both port models, and lower bounds.

Model (Hockney; as used by Thakur, Rabenseifner and Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005): sending
m bytes between two ranks takes alpha + m*beta, reducing m bytes takes m*gamma;
n ranks, S bytes (the size nccl-tests reports; notation as in notebook 02). In the code
below p is the number of ranks and n the bytes, as in MPICH's cost comments.

Port models (a property of the topology, :class:`labcore.sim.core.network.Topology`):

* ``"multi"`` -- a rank's messages to different peers in one step travel at the same time
  (NVSwitch, the textbook full mesh): a step costs its slowest message.
* ``"single"`` -- a rank sends one message and receives one at a time (Thakur, Rabenseifner
  and Gropp): a step costs the busiest rank's messages one after another, out or in.

Each algorithm is described step by step (:func:`steps`) by the closed form its schedule module
registered (:mod:`labcore.sim.core.registry`): how many steps of a kind, and for each kind the
candidate costs ``(a, b, c)`` meaning ``a*alpha + b*beta + c*gamma``, of which the step takes the
largest. :func:`time` evaluates that; :func:`coefficients` returns the
sum ``(a, b, c)`` when it is linear (one candidate dominates in every step), so that a fit
(see :mod:`labcore.sim.apps.calibration`) and the simulator share one formula.

With the uniform topology and contention off, the simulator's time for every algorithm
equals ``time(...)`` here to rounding, for either port model; the tests check it.

Example
-------
>>> coefficients("all_reduce", "ring", ranks=4, nbytes=1000)
(6, 1500.0, 750.0)
>>> round(time("all_reduce", "ring", 4, 1000, alpha=1e-6, beta=1e-9) * 1e6, 6)
7.5

The double binary tree on 16 ranks, 1 GiB, 10 GB/s links: with multi-port ranks it beats the
single-port bandwidth bound 2(n-1)/n S beta = 201.3 ms; with one port per rank it cannot.

>>> round(time("all_reduce", "double_tree", 16, 1 << 30, 0, 1e-10) * 1e3, 1)
55.2
>>> round(time("all_reduce", "double_tree", 16, 1 << 30, 0, 1e-10, ports="single") * 1e3, 1)
216.8
>>> round(lower_bound("all_reduce", 16, 1 << 30, beta=1e-10) * 1e3, 1)
201.3
"""
from __future__ import annotations

from labcore.sim.core import schedules
from labcore.sim.core.bounds import cut_bytes, lower_bound
from labcore.sim.core.network import PORT_MODELS
from labcore.sim.core.steps import default_pipeline, undominated
from labcore.sim.core.tree_shapes import depths, tree_shapes


def tree_depth(ranks: int, gpus_per_node: int | None = None) -> int:
    """Depth D of NCCL's (double) binary tree on ``ranks`` ranks; across nodes of ``gpus_per_node``
    GPUs, the tree over nodes plus the chain inside a node."""
    return int(depths(tree_shapes(ranks, False, gpus_per_node)[0]).max())


def steps(collective: str, algorithm: str, ranks: int, nbytes: float, ports: str = "multi", **options) -> list:
    """The algorithm step by step: a list of ``(count, candidates)``; each of the ``count`` steps
    costs the largest of its candidates ``a*alpha + b*beta + c*gamma``.

    Options are the schedule's: ``pipeline`` (k pieces) for chain/tree/switch/hierarchical
    algorithms, ``channels`` for rings and trees, ``gpus_per_node`` for hierarchical, for
    NCCL's multi-node trees and for in-network reduction across nodes; ``root`` and ``order``
    are accepted and ignored.

    Example
    -------
    >>> steps("all_reduce", "ring", 4, 1000)
    [(3, ((1.0, 250.0, 250.0),)), (3, ((1.0, 250.0, 0.0),))]
    """
    if ports not in PORT_MODELS:
        raise ValueError(f"ports must be one of {', '.join(PORT_MODELS)}, got {ports!r}")
    k = options.get("pipeline")
    channels = max(1, int(options.get("channels") or 1))
    if ranks == 1:
        return []
    entry = schedules.REGISTRY.get((collective, algorithm))
    if entry is None:
        raise ValueError(f"no closed form for {collective}/{algorithm}")
    return entry.form(collective, ranks, float(nbytes), None if k is None else max(1, int(k)), channels, ports,
                      options)


def coefficients(collective: str, algorithm: str, ranks: int, nbytes: float, ports: str = "multi",
                 **options) -> tuple:
    """(a, b, c) with time = a*alpha + b*beta + c*gamma for ``algorithm`` (see :func:`steps`);
    ValueError when the time is not linear in them (then use :func:`time`)."""
    a = b = c = 0.0
    for count, cands in steps(collective, algorithm, ranks, nbytes, ports, **options):
        top = undominated(cands)
        if len(top) > 1:
            raise ValueError(f"{collective}/{algorithm} with ports={ports!r}: the slowest message of a step "
                             "depends on alpha, beta and gamma; use cost.time()")
        a, b, c = a + count * top[0][0], b + count * top[0][1], c + count * top[0][2]
    return (int(a) if a == int(a) else a, b, c)


def time(collective: str, algorithm: str, ranks: int, nbytes: float, alpha: float, beta: float,
         gamma: float = 0.0, ports: str = "multi", **options) -> float:
    """Closed-form time in seconds (see :func:`steps`)."""
    return float(sum(count * max(a * alpha + b * beta + c * gamma for a, b, c in cands)
                     for count, cands in steps(collective, algorithm, ranks, nbytes, ports, **options)))


__all__ = ["steps", "coefficients", "time", "lower_bound", "cut_bytes", "default_pipeline", "tree_depth"]
