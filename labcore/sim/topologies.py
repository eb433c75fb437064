"""Ready-made topologies (presets); see :mod:`labcore.sim.topology` for the classes.

Example
-------
>>> uniform(8, alpha=2e-6, bandwidth=25e9).ranks
8
"""
from __future__ import annotations

from labcore.sim.topology import Graph, Link, Uniform


def uniform(ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, gamma: float = 0.0,
            gpus_per_node: int | None = None) -> Uniform:
    """Every pair of ranks joined by its own link of latency ``alpha`` (s) and ``bandwidth`` (B/s).

    The textbook alpha-beta machine (beta = 1/bandwidth): with it, and contention
    off, every algorithm costs exactly its closed form in :mod:`labcore.sim.cost`.
    """
    return Uniform(ranks, alpha=alpha, bandwidth=bandwidth, gamma=gamma, gpus_per_node=gpus_per_node)


__all__ = ["uniform", "Graph", "Link", "Uniform"]
