"""The pieces every closed form is written with: steps of alpha-beta-gamma candidates, and default pipelines.

A closed form (registered with its schedule, :mod:`labcore.sim.core.registry`) describes an algorithm
step by step: a list of ``(count, candidates)``, each of the ``count`` steps costing the largest of its
candidates ``a*alpha + b*beta + c*gamma`` (:mod:`labcore.sim.core.cost` evaluates them). Port models as
in :mod:`labcore.sim.core.network`: "multi" (a step costs its slowest message) or "single" (a rank's
messages one after another).

Example
-------
>>> default_pipeline(8), default_pipeline(4 << 20), default_pipeline(1 << 30)
(1, 8, 256)
>>> same(3, 2, 100.0, 100.0, "single")
(3, ((2.0, 200.0, 200.0),))
"""
from __future__ import annotations

PIPELINE_SLICE = 512 << 10
MAX_PIPELINE = 256

__all__ = ["step", "same", "undominated", "default_pipeline", "PIPELINE_SLICE", "MAX_PIPELINE"]


def default_pipeline(nbytes: float) -> int:
    """Pieces a pipelined algorithm cuts the buffer into by default: one per 512 KiB, the slice
    NCCL's Simple protocol moves per step (NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8), at most 256."""
    return int(min(MAX_PIPELINE, max(1, -(-int(nbytes) // PIPELINE_SLICE))))


def step(count, *candidates) -> tuple:
    """``count`` steps costing the largest of ``candidates`` ``(a, b, c)``."""
    return (int(count), tuple((float(a), float(b), float(c)) for a, b, c in candidates))


def same(count, messages: int, m: float, r: float, ports: str) -> tuple:
    """``count`` steps in which every rank sends and receives ``messages`` messages of m bytes
    (r of them reduced): the slowest one, or all of them one after another."""
    if ports == "single":
        return step(count, (messages, messages * m, messages * r))
    return step(count, (1, m, r))


def undominated(cands) -> list:
    """The candidates no other one is at least as large as in every coefficient."""
    cands = sorted(set(cands), reverse=True)
    keep = []
    for c in cands:
        if not any(all(x >= y for x, y in zip(k, c)) for k in keep):
            keep.append(c)
    return keep
