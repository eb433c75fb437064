"""labcore.sim: a step-by-step simulator of collective algorithms (numpy only, no torch).

Build an algorithm's schedule (steps of chunk transfers), run it on a topology
moving real values, check the result against numpy and time every transfer.
The data model is documented in :mod:`labcore.sim.trace`.

Example
-------
>>> import labcore.sim as sim
>>> t = sim.simulate("all_reduce", algorithm="ring", ranks=8, nbytes=64 << 20,
...                  topology=sim.topologies.uniform(8, alpha=1e-6, bandwidth=100e9))
>>> t.verify()
>>> round(t.busbw, 1)           # GB/s; near the 100 GB/s links (latency costs the rest)
98.8
"""
from __future__ import annotations

from labcore.sim import cost, topologies, tuner
from labcore.sim.calibration import Calibration, calibrate
from labcore.sim.engine import run
from labcore.sim.replays import Replay, replay
from labcore.sim.schedules import ALGORITHMS, build
from labcore.sim.sweeps import sweep
from labcore.sim.trace import Layout, Schedule, ScheduleError, Trace, Transfer


def simulate(op: str, algorithm: str = "ring", ranks: int = 8, nbytes: float = 1 << 20, topology=None,
             reduce_op: str = "sum", values: bool = True, contention: bool = True, elements: int = 1,
             seed: int = 0, **options) -> Trace:
    """Simulate collective ``op`` with ``algorithm`` on ``ranks`` ranks and return its Trace.

    Parameters
    ----------
    op : "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce" or "all_to_all".
    algorithm : a name from ``ALGORITHMS[op]``.
    ranks : number of ranks (any number from 1).
    nbytes : message size in bytes, as nccl-tests reports it for ``op``.
    topology : a topology from :mod:`labcore.sim.topologies`, or a preset name such as
        ``"nvswitch8"``; default ``uniform(ranks)`` (1 us, 10 GB/s per link).
    reduce_op : "sum", "max", "min" or "prod".
    values : move real numbers (needed by ``verify()``); False times only, for big runs.
    contention : transfers that share a link share its bandwidth.
    elements : numbers carried per chunk when values are on.
    seed : seed for the random integer inputs.
    **options : passed to the schedule builder (``root``, ``pipeline``, ``order``,
        ``gpus_per_node`` -- taken from the topology's nodes when it has several).

    Example
    -------
    >>> t = simulate("broadcast", algorithm="chain", ranks=4, nbytes=4096, pipeline=4)
    >>> t.verify(); t.schedule.n_steps
    6
    """
    if topology is None:
        topo = topologies.uniform(ranks)
    elif isinstance(topology, str):
        topo = topologies.preset(topology, ranks)
    else:
        topo = topology
    if algorithm == "hierarchical" and "gpus_per_node" not in options and topo.nodes > 1:
        options["gpus_per_node"] = ranks // topo.nodes
    schedule = build(op, algorithm, ranks, nbytes, **options)
    return run(schedule, topo, reduce_op=reduce_op, values=values, contention=contention,
               elements=elements, seed=seed)


__all__ = ["simulate", "run", "build", "ALGORITHMS", "Schedule", "Transfer", "Layout", "Trace",
           "ScheduleError", "topologies", "cost", "tuner", "calibrate", "Calibration", "sweep", "replay", "Replay"]
