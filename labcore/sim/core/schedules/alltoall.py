"""Pairwise all-to-all: in step s (1..n-1) every rank r sends its block for rank r+s and receives
the block from rank r-s, so each step is a permutation (n-1 steps of S/n bytes for n ranks and
S bytes per rank; MPICH's pairwise exchange, written with (r+s) mod n so any n works).

Example
-------
>>> [(t.src, t.dst, t.chunk) for t in pairwise_all_to_all_schedule(3, 30).steps()[0]]
[(0, 1, 1), (1, 2, 5), (2, 0, 6)]
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts
from labcore.sim.core import steps
from labcore.sim.core.trace import Layout, Schedule


def _pairwise_form(collective, p, n, k, channels, ports, options):
    # [MPICH] pairwise: p-1 steps of n/p
    return [steps.step(p - 1, (1, n / p, 0))]


@algorithm("all_to_all", "pairwise", form=_pairwise_form, transfers=lambda p, k, c, g: p * p)
def pairwise_all_to_all_schedule(ranks: int, nbytes: float) -> Schedule:
    """Pairwise exchange all-to-all; chunk src*p + dst is the block from src to dst."""
    p = ranks
    parts = Parts()
    s = np.arange(1, p)[:, None]
    r = np.arange(p)[None]
    parts.add(s - 1, r, (r + s) % p, r * p + (r + s) % p, False, label="pairwise exchange")
    return parts.schedule("all_to_all", "pairwise", p, nbytes, p * p, layout=Layout("mesh"))
