"""All-to-all as NCCL runs it: one group of send/recv to every peer at once (its p2p path).

nccl-tests' alltoall issues ``ncclSend`` and ``ncclRecv`` to every peer inside one group; NCCL plans them
together on its p2p channels, every peer's transfer in flight at the same time (src/enqueue.cc
scheduleP2pTasksToPlan; :mod:`labcore.sim.nccl.p2p`). So every rank sends its n-1 blocks in one step,
sharing its ports (or its NICs) among them, where the pairwise exchange takes n-1 steps of one block.

Example
-------
>>> s = p2p_all_to_all_schedule(3, 30)
>>> s.n_steps, [(t.src, t.dst, t.chunk) for t in s.steps()[0]][:3]
(1, [(0, 1, 1), (0, 2, 2), (1, 0, 3)])
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core import steps
from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts
from labcore.sim.core.trace import Layout, Schedule


def _p2p_form(collective, p, n, k, channels, ports, options):
    # one step: p-1 blocks of n/p from every rank at once (one after another on a single port)
    return [steps.same(1 if p > 1 else 0, p - 1, n / p, 0, ports)]


@algorithm("all_to_all", "p2p", form=_p2p_form, nccl="P2P", transfers=lambda p, k, c, g: p * p)
def p2p_all_to_all_schedule(ranks: int, nbytes: float) -> Schedule:
    """All-to-all in one step: rank r sends block r*p + d to every d != r; chunk src*p + dst is the
    block from src to dst."""
    p = ranks
    src, dst = np.divmod(np.arange(p * p), p)
    keep = src != dst
    parts = Parts()
    parts.add(0, src[keep], dst[keep], (src * p + dst)[keep], False, label="grouped send/recv")
    return parts.schedule("all_to_all", "p2p", p, nbytes, p * p, layout=Layout("mesh"))
