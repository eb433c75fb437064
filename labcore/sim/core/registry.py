"""The one register of simulated algorithms: each is registered once, with everything the lab knows of it.

A schedule module registers an algorithm with ``@algorithm(collective, name, form=...)`` on its
step-by-step builder: the builder (``(ranks, nbytes, **options) -> Schedule``), its closed form
(``(collective, p, n, k, channels, ports, options) -> steps``, see :mod:`labcore.sim.core.steps`),
the NCCL algorithm it plays, if any (``nccl="Ring"``: ``algorithm="best"`` and NCCL's tuner pick from
those), and an estimate of its transfers (``transfers(p, k, c, g)``: p ranks, k pieces, c channels,
g GPUs a node) that refuses a schedule too big to build. The bytes a collective must move whatever
the algorithm follow from its roles (:mod:`labcore.sim.core.bounds`); the collectives themselves are
described in :mod:`labcore.collectives`.

Example
-------
>>> import labcore.sim.core.schedules                     # registers them all
>>> a = REGISTRY["all_reduce", "ring"]
>>> a.build.__name__, a.nccl
('ring_all_reduce_schedule', 'Ring')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from labcore.sim.core import buffers

__all__ = ["Algorithm", "REGISTRY", "algorithm"]


@dataclass(frozen=True)
class Algorithm:
    """One simulated algorithm of one collective (see the module docstring)."""

    collective: str
    name: str
    build: Callable
    form: Callable
    nccl: str | None = None
    transfers: Callable | None = None

    def estimate(self, ranks: int, pieces: int, channels: int, gpus_per_node: int) -> int:
        """Transfers its schedule would hold (a rough count, to refuse what is too big to build)."""
        if self.transfers is not None:
            return int(self.transfers(ranks, pieces, channels, gpus_per_node))
        return 2 * ranks * pieces * max(1, ranks.bit_length())


REGISTRY: dict[tuple[str, str], Algorithm] = {}
"""(collective, algorithm) -> :class:`Algorithm`, in the order the schedule modules registered them."""


def algorithm(collective: str, name: str, *, form: Callable, nccl: str | None = None,
              transfers: Callable | None = None):
    """Register the decorated builder as ``name`` for ``collective``, with its closed form."""
    if collective not in buffers.SIMULATED:
        raise ValueError(f"{collective!r} is not a collective the simulator plays; describe it in "
                         "labcore/collectives.py (with its default algorithm) first")

    def register(builder: Callable) -> Callable:
        if (collective, name) in REGISTRY:
            raise ValueError(f"{collective}/{name} is registered already: {REGISTRY[collective, name].build.__name__}")
        REGISTRY[collective, name] = Algorithm(collective, name, builder, form, nccl, transfers)
        return builder

    return register
