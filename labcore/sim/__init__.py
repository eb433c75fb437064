"""labcore.sim: a step-by-step simulator of collective algorithms (numpy only, no torch).

Build an algorithm's schedule (steps of chunk transfers), run it on a topology moving real values,
check the result against numpy and time every transfer. Notation follows the lab's notebooks: n
ranks, S bytes. The package is in layers, each importing only those below it:

- :mod:`~labcore.sim.core`: the data model (:mod:`~labcore.sim.core.trace`), the engine, the network
  model, the register of algorithms and their schedules with their closed forms, cost and bounds;
- :mod:`~labcore.sim.nccl`: NCCL's own model: its tuner and the mid-size mechanisms;
- :mod:`~labcore.sim.machines`: the topology blocks and the one catalog of presets;
- :mod:`~labcore.sim.simulation`: :func:`simulate`;
- :mod:`~labcore.sim.apps`: replay, the DDP step, calibration, scale-out, pricing, sweeps, and what NCCL
  ran beside its tuner;
- :mod:`~labcore.sim.cli`: ``python -m labcore sim``.

This module only gathers their public names.

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

from labcore.sim.apps import scaleout
from labcore.sim.apps.calibration import Calibration, calibrate, synthetic_sweep
from labcore.sim.apps.choices import nccl_choices, tuner_machine
from labcore.sim.apps.ddp_step import DDPStep, ddp_buckets, predict_ddp_step, steps_table
from labcore.sim.apps.pricing import EXAMPLE_PRICES, GpuPrice, compute_seconds, price_steps, step_cost
from labcore.sim.apps.replay import Replay, replay
from labcore.sim.apps.sweeps import simulate_sizes
from labcore.sim.core import cost
from labcore.sim.core.engine import run
from labcore.sim.core.schedules import ALGORITHMS, build, nccl_algorithms
from labcore.sim.core.trace import Layout, Schedule, ScheduleError, Trace, Transfer
from labcore.sim.machines import presets, topologies
from labcore.sim.nccl import mechanisms, tuner
from labcore.sim.simulation import simulate

__all__ = ["simulate", "run", "build", "ALGORITHMS", "nccl_algorithms", "Schedule", "Transfer", "Layout", "Trace",
           "ScheduleError", "topologies", "presets", "mechanisms", "scaleout", "cost", "tuner", "calibrate",
           "Calibration", "synthetic_sweep", "simulate_sizes", "replay", "Replay", "DDPStep", "ddp_buckets", "predict_ddp_step",
           "steps_table", "EXAMPLE_PRICES", "GpuPrice", "compute_seconds", "price_steps", "step_cost",
           "nccl_choices", "tuner_machine"]


def __dir__() -> list[str]:
    return sorted(__all__)
