"""A DDP training step's gradient all-reduces, predicted on a topology, beside its compute.

What does data parallelism's communication cost on a rented cluster? DDP all-reduces the
gradients in **buckets** while backward runs (Li et al., "PyTorch Distributed", VLDB 2020):

1. :func:`ddp_buckets` cuts the gradients into buckets as torch's reducer does after its
   first iteration: parameters in the order their gradients become ready (the last layer
   first), a bucket closed as soon as it holds at least its limit, the first limit
   ``first_cap_bytes`` (1 MiB when ``bucket_cap_mb`` is left at its default, else the cap),
   the others ``cap_bytes`` (``bucket_cap_mb`` x 2**20: DDP's "MB" are MiB);
2. :func:`predict_ddp_step` times each bucket's all-reduce with the algorithm NCCL's tuner
   (:mod:`labcore.sim.nccl.tuner`) picks, or the one ``nccl_algo`` forces (``NCCL_ALGO``), on the
   simulator (:func:`labcore.sim.simulate`); where the simulator has no schedule for the pick
   (NVLSTree across nodes without a reducing switch, PAT) it takes NCCL's own cost model's
   time and the ``source`` column says so (``timing="nccl"`` uses NCCL's model for every
   bucket, one model throughout);
3. it lays the buckets out against the compute: forward, then backward producing gradients
   at an even rate (bucket k is ready once backward has produced its bytes), one all-reduce
   at a time on the communication stream; the step ends when backward and the last
   all-reduce have. ``serial`` adds every all-reduce after the compute (no overlap).

Compute is an input (this module has no GPU to time): :func:`labcore.sim.apps.pricing.compute_seconds`
estimates it from the model's FLOPs. A step that can be recorded (notebook 05's) is better
predicted from the recording itself with :func:`labcore.sim.replay`, which keeps its real
buckets and compute; this module is for a model too large to record on the machine at hand.
Backward takes 2/3 of forward + backward (2N FLOPs per token forward, 4N backward:
Kaplan et al., "Scaling Laws for Neural Language Models", 2020).

Example
-------
>>> step = predict_ddp_step(100 << 20, "nvswitch8", compute_s=0.010)
>>> len(step.buckets), int(step.buckets["bytes"].sum()) == 100 << 20
(5, True)
>>> step.serial_s > step.step_s >= step.compute_s
True
"""
from __future__ import annotations

import copy

import numbers
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from labcore import validate
from labcore.sim.machines import presets
from labcore.sim.nccl import tuner
from labcore.sim.simulation import simulate

MIB = 1 << 20
DEFAULT_CAP_BYTES = 25 * MIB          # torch DDP's bucket_cap_mb default, 25 MiB
DEFAULT_FIRST_CAP_BYTES = 1 * MIB     # torch's _DEFAULT_FIRST_BUCKET_BYTES
BACKWARD_FRACTION = 2 / 3


def ddp_buckets(param_bytes, cap_bytes: int = DEFAULT_CAP_BYTES,
                first_cap_bytes: int | None = DEFAULT_FIRST_CAP_BYTES) -> list[int]:
    """Bytes of each gradient bucket, in the order DDP all-reduces them.

    Parameters
    ----------
    param_bytes : bytes of each parameter's gradient in the order they become ready in
        backward (for a plain stack of layers: the parameters reversed), or one int, the
        total, which is cut into full buckets (a model with many small parameters).
    cap_bytes : ``bucket_cap_mb`` in bytes (MiB x 2**20).
    first_cap_bytes : the first bucket's limit (torch: 1 MiB when ``bucket_cap_mb`` is the
        default, else ``cap_bytes``); None for ``cap_bytes``.

    >>> ddp_buckets([4 << 20, 4 << 20, 30 << 20, 1 << 20], cap_bytes=25 << 20) == [4 << 20, 34 << 20, 1 << 20]
    True
    """
    cap = _positive_int("cap_bytes", cap_bytes)
    first = cap if first_cap_bytes is None else _positive_int("first_cap_bytes", first_cap_bytes)
    if isinstance(param_bytes, numbers.Real):            # one number: the total (a whole number of bytes)
        total = _positive_int("param_bytes", param_bytes)
        head = min(first, total)
        rest = total - head
        return [head] + [cap] * (rest // cap) + ([rest % cap] if rest % cap else [])
    sizes = [_positive_int("each parameter's bytes", b) for b in param_bytes]
    if not sizes:
        raise ValueError("param_bytes is empty: give the gradient bytes of each parameter, or the total")
    buckets, current, limit = [], 0, first
    for b in sizes:
        current += b
        if current >= limit:
            buckets.append(current)
            current, limit = 0, cap
    if current:
        buckets.append(current)
    return buckets


def _positive_int(name: str, value) -> int:
    return validate.whole_number(value, name, least=1, must="a whole number of bytes >= 1")


def _topology(topology, ranks, nodes, processes):
    """(topology object, label) for a preset name or a topology object, with the job's process layout."""
    if not isinstance(topology, str):
        topo = topology if processes is None else presets.with_processes(copy.copy(topology), processes)
        return topo, topology.name
    return presets.topology(topology, ranks, nodes=nodes, processes=processes or "per_gpu"), topology


def _machine(topo, nccl_algo, timing):
    """NCCL's tuner machine for ``topo``, or None when there is none and none is needed."""
    try:
        return presets.tuner_for(topo)
    except presets.NoTuner as why:
        if nccl_algo or timing == "nccl":
            need = f"NCCL_ALGO={nccl_algo}" if nccl_algo else "timing='nccl'"
            raise presets.NoTuner(f"{need} needs NCCL's tuner, and {why}; leave nccl_algo=None and "
                                  "timing='simulator' (the simulator's fastest algorithm)") from None
        return None


def _bucket_time(nbytes: int, topo, machine, nccl_algo, timing: str):
    """(algorithm as simulated, NCCL's pick, source, seconds) of one bucket's all-reduce."""
    if machine is None:
        trace = simulate("all_reduce", "best", topo.ranks, nbytes, topology=topo, values=False)
        return trace.schedule.algorithm, "(no tuner model)", "simulator (its fastest algorithm)", trace.time_s
    pick = tuner.choose("all_reduce", int(nbytes), machine, algo_env=nccl_algo)
    if timing == "nccl":
        return pick.name, pick.name, "NCCL's cost model", pick.time_us * 1e-6
    try:
        algorithm, protocol, options, _ = tuner.simulated_as(pick.algorithm, pick.protocol, topo)
    except ValueError as why:
        return pick.name, pick.name, f"NCCL's cost model (the simulator cannot play it here: {why})", \
            pick.time_us * 1e-6
    trace = simulate("all_reduce", algorithm, topo.ranks, nbytes, topology=topo, values=False, **options)
    return algorithm, pick.name, "simulator", trace.time_s


@dataclass
class DDPStep:
    """One predicted DDP step: its buckets and the step's times (seconds)."""

    topology: str
    ranks: int
    nodes: int
    compute_s: float
    buckets: pd.DataFrame
    nccl_algo: str | None = None
    timing: str = "simulator"

    @property
    def comm_s(self) -> float:
        """All-reduce time of every bucket, added up."""
        return float(self.buckets["predicted_us"].sum() * 1e-6)

    @property
    def step_s(self) -> float:
        """The step with DDP's overlap: backward and the last all-reduce both done."""
        return float(max(self.compute_s, self.buckets["end_s"].max()))

    @property
    def serial_s(self) -> float:
        """Compute, then every all-reduce: no overlap."""
        return self.compute_s + self.comm_s

    @property
    def exposed_s(self) -> float:
        """Communication the overlap did not hide: what the step waits for beyond compute."""
        return self.step_s - self.compute_s

    @property
    def comm_share(self) -> float:
        """Share of the step spent waiting for communication (exposed / step)."""
        return self.exposed_s / self.step_s

    def summary(self) -> dict:
        """The step in one row (times in ms)."""
        return dict(topology=self.topology, gpus=self.ranks, nodes=self.nodes,
                    nccl_algo=self.nccl_algo or "(tuner's choice)", timing=self.timing, buckets=len(self.buckets),
                    compute_ms=self.compute_s * 1e3, comm_ms=self.comm_s * 1e3, step_ms=self.step_s * 1e3,
                    exposed_ms=self.exposed_s * 1e3, comm_share=self.comm_share)


def predict_ddp_step(param_bytes, topology="nvswitch8", *, compute_s: float, ranks: int | None = None,
                     nodes: int | None = None, cap_bytes: int = DEFAULT_CAP_BYTES,
                     first_cap_bytes: int | None = DEFAULT_FIRST_CAP_BYTES, nccl_algo: str | None = None,
                     timing: str = "simulator", backward_fraction: float = BACKWARD_FRACTION,
                     processes: str | None = None) -> DDPStep:
    """Predict one DDP step's gradient all-reduces on ``topology`` and lay them out against compute.

    Parameters
    ----------
    param_bytes : gradient bytes, per parameter in ready order or in total (see :func:`ddp_buckets`).
    topology : a preset (any of :mod:`labcore.sim.machines.presets`: "nvswitch8", "multinode", "dgx_h100_ib",
        "ib_8x200", ...) or a topology object; NCCL's tuner picks the algorithms where it has a
        machine for the preset, the simulator's fastest algorithm elsewhere.
    compute_s : forward + backward seconds of one step on one GPU (an input: see the module).
    ranks, nodes : the preset's shape (default its own: nvswitch8 8 GPUs, multinode 4 nodes, the
        other clusters 2 nodes of 8).
    cap_bytes, first_cap_bytes : DDP's bucket limits, in bytes.
    nccl_algo : force NCCL's algorithm as ``NCCL_ALGO`` would ("Ring", "Tree", ...); None: the tuner's pick.
    timing : "simulator" (the simulator's time of the pick; NCCL's cost model where the simulator
        has no schedule for it) or "nccl" (NCCL's cost model for every bucket: one model throughout).
    backward_fraction : share of ``compute_s`` that is backward (gradients appear during it).
    processes : the job's process layout, which sets the host time each all-reduce takes to issue
        (:func:`labcore.sim.machines.presets.with_processes`): "per_gpu" (DDP's one process a GPU; the
        default for a preset name) or "per_node"; with a topology object, None leaves it as it is.

    Returns
    -------
    :class:`DDPStep`: ``buckets`` (one row per bucket: bytes, ready_s, start_s, end_s,
    algorithm, nccl, source, predicted_us) and the step's times.
    """
    validate.finite_number(compute_s, "compute_s", at_least=0, must="a finite number (>= 0 seconds)")
    validate.finite_number(backward_fraction, "backward_fraction", above=0, at_most=1,
                           must="a finite number (in (0, 1])")
    if timing not in ("simulator", "nccl"):
        raise ValueError(f"timing must be 'simulator' or 'nccl' (NCCL's cost model), not {timing!r}")
    topo, label = _topology(topology, ranks, nodes, processes)
    machine = _machine(topo, nccl_algo, timing)
    sizes = ddp_buckets(param_bytes, cap_bytes, first_cap_bytes)
    total = float(sum(sizes))
    forward = compute_s * (1 - backward_fraction)
    timed = {b: _bucket_time(b, topo, machine, nccl_algo, timing) for b in sorted(set(sizes))}
    rows, done, clock = [], 0, 0.0
    for k, b in enumerate(sizes):
        done += b
        ready = forward + compute_s * backward_fraction * done / total
        algorithm, nccl, source, seconds = timed[b]
        start = max(ready, clock)
        clock = start + seconds
        rows.append(dict(bucket=k, bytes=b, ready_s=ready, start_s=start, end_s=clock, algorithm=algorithm,
                         nccl=nccl, source=source, predicted_us=seconds * 1e6))
    return DDPStep(topology=label, ranks=topo.ranks, nodes=int(topo.nodes), compute_s=float(compute_s),
                   buckets=pd.DataFrame(rows), nccl_algo=nccl_algo, timing=timing)


def steps_table(steps: Sequence[DDPStep]) -> pd.DataFrame:
    """Several predicted steps side by side, one row each (see :meth:`DDPStep.summary`)."""
    return pd.DataFrame([s.summary() for s in steps])


__all__ = ["ddp_buckets", "predict_ddp_step", "DDPStep", "steps_table", "MIB", "DEFAULT_CAP_BYTES",
           "DEFAULT_FIRST_CAP_BYTES"]
