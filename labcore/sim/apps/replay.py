"""Replay a recorded training step on another machine: what would its communication cost there?

Input: a :class:`labcore.readers.recording.Recording` (what every rank issued, when, and the
compute around it, recorded on any machine, a laptop included). Output: a :class:`Replay`
with, per collective, the time the simulator predicts on a topology (a preset such as
``"nvswitch8"`` or ``"multinode"``, any :mod:`labcore.sim.machines.topologies` object, or one fitted to
your measurements), with the algorithm NCCL's tuner would pick (or one you name); and per step
the total with and without overlap against the recorded compute.

The step model
--------------
Compute is what the rank did outside communication, as recorded: the time no collective was
in flight, plus the profiler's compute scopes (autograd nodes, ``Optimizer.step``...) that ran
while an overlapped one was. Each collective is issued at the same point of that compute as in
the recording and runs on its process group's stream, one after another (NCCL runs one
communicator's kernels in order). An overlapped collective (the rank went on while it ran)
runs beside the compute that follows; a blocking one holds the compute until it ends; compute
that resumed after the rank waited waits for the collectives that ended during that wait; the
step ends when its compute and all its collectives have. ``serial`` is compute plus every
collective one after another (no overlap). Every rank is replayed on its own; the step takes
as long as the slowest rank.

Scaling: with ``world_size`` larger than the recording's, collectives over all recorded ranks
run over all ``world_size`` ranks with the same bytes (data parallelism: gradients and gathered
parameters do not shrink as ranks are added); collectives on sub-groups keep their groups.
``placement`` puts rank r on topology rank ``placement[r]`` (e.g. a tensor-parallel pair on one
node, ``[0, 1]``, or across two, ``[0, 8]`` on ``multinode``).

NCCL's tuner picks the algorithms on a preset it has a machine for (:mod:`labcore.sim.machines.presets`);
elsewhere (a textbook machine, a fitted one, a preset whose NCCL graphs are not known) the
collectives run the simulator's default algorithm of each op and ``notes`` says why.

Rows no run can have made are refused before anything is simulated, in one line naming the row
and the fix: a collective without an issue or end time (NCCL records end times only with
``TORCH_NCCL_ENABLE_TIMING=1``), one that ends before it is issued, a group of no ranks, a group
naming ranks the recording does not have or leaving out the row's own rank, a step without an
end after its start, a row in a step the recording does not bound, missing columns.

Collectives the simulator has no schedule for (send/recv, barrier, scatter, gather, a reduce
NCCL would run as a ring) are listed with ``status`` "not simulated: ..." and their recorded
time in ``not_simulated_us``; they are never dropped silently, and left out of the totals.

Example
-------
>>> import labcore as lc                                              # doctest: +SKIP
>>> r = lc.sim.replay(recording, "multinode")                        # doctest: +SKIP
>>> r.steps[["serial_us", "overlap_us"]]                             # doctest: +SKIP
"""
from __future__ import annotations

import copy

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from labcore import validate
from labcore.collectives import COLLECTIVES
from labcore.readers import intervals
from labcore.sim.core import schedules
from labcore.sim.core.network import Topology
from labcore.sim.core.schedules import ALGORITHMS
from labcore.sim.machines import presets, topologies
from labcore.sim.nccl import tuner
from labcore.sim.simulation import MAX_RANKS, simulate

__all__ = ["replay", "Replay", "recorded_timeline", "nccl_algorithm"]


def _no_schedule(op: str) -> str | None:
    """Why the simulator cannot play ``op`` (None: it can)."""
    spec = COLLECTIVES.get(op)
    if spec is not None and spec.sim:
        return None
    if spec is not None and spec.point_to_point:
        return "point-to-point: the simulator has no send/recv schedule"
    if spec is not None and spec.busbw == "0":
        return f"a {op} carries no data; the simulator has no {op}"
    return f"the simulator has no {op} schedule"


_COLLECTIVE_COLUMNS = ["step", "op", "bytes", "group", "seq", "ranks", "nodes", "algorithm", "nccl", "protocol",
                       "predicted_us", "recorded_us", "status"]


_PLAYED_AS = {"NVLSTree": "NVLS", "CollNetChain": "CollNetDirect", "PAT": "Ring"}


def nccl_algorithm(op: str, nbytes: float, ranks: int, nodes: int, machine,
                   in_switch: bool = True) -> tuple[str | None, str, str]:
    """What NCCL's tuner picks, as the simulator plays it: (simulator algorithm, NCCL's name for
    the pick, its protocol).

    ``machine`` is a :class:`labcore.sim.nccl.tuner.Machine` or the name of a
    :data:`labcore.sim.nccl.tuner.MACHINES` entry, resized to ``ranks`` GPUs on ``nodes`` nodes. NCCL's
    pick plays as the schedule registered with it (:func:`labcore.sim.core.schedules.playing`; NVLSTree as
    NVLS, CollNetChain as CollNetDirect, PAT and what has no schedule of its own as the ring). Where the simulator stands in for NCCL's pick (NVLS without a reducing switch
    in the topology's NVSwitch, ``in_switch=False``, or PAT), the name says so. The algorithm is None when
    the simulator has no schedule that plays the pick. An all_to_all, which NCCL's tuner does not price,
    replays as NCCL's p2p path (:mod:`labcore.sim.nccl.p2p`). This is the one place the replay calls the tuner.

    Example
    -------
    >>> nccl_algorithm("all_reduce", 1 << 30, 8, 1, "dgx_h100")
    ('nvls', 'NVLS/Simple', 'Simple')
    """
    if isinstance(machine, str):
        if machine not in tuner.MACHINES:
            raise ValueError(f"unknown NCCL machine {machine!r}; choose one of {', '.join(tuner.MACHINES)} (a "
                             "preset's is labcore.sim.presets.entry(name).tuner)")
        machine = tuner.MACHINES[machine]
    choice = tuner.predict(op, int(nbytes), machine.with_ranks(ranks, nodes))
    played = _PLAYED_AS.get(choice.algorithm, choice.algorithm)
    algorithm = schedules.playing(op, played) or schedules.playing(op, "Ring")
    if algorithm is None:
        return None, (f"NCCL's tuner picks {choice.name} for {op}, which the simulator lacks; name one with "
                      f"algorithm={{'{op}': '{sorted(ALGORITHMS.get(op, {'?': 0}))[0]}'}}"), choice.protocol
    label = choice.name
    if algorithm == "nvls" and not in_switch:
        algorithm, label = "ring", f"{label} (simulated as ring: no reducing switch in this topology)"
    elif choice.algorithm not in ("Ring", "Tree", "NVLS"):
        label = f"{label} (simulated as {algorithm})"
    return algorithm, label, choice.protocol


class _Placed(Topology):
    """The ranks of one group, placed on chosen ranks of a bigger topology: its links, protocols and
    channels, with routes, nodes and rings restricted to those ranks (switches kept)."""

    _SHARED = ("name", "bandwidth", "latency", "launch_s", "notes", "ports", "channels", "channel_bytes", "issue_s",
               "protocols", "protocol", "link_kind", "latency_model", "step_s", "preset")

    def __init__(self, base: Topology, ranks: list[int]):
        for attr in self._SHARED:
            setattr(self, attr, getattr(base, attr))
        self.base, self.placed = base, np.asarray(ranks, dtype=np.int64)
        self.ranks, self.switch_agents = len(ranks), base.switch_agents
        self._agent = np.concatenate([self.placed, base.ranks + np.arange(base.switch_agents)])
        self.gamma = base.gamma[self._agent]
        _, self.node_of = np.unique(base.node_of[self.placed], return_inverse=True)
        # which switches are NVLS engines and which the fabric's SHARP (GPU servers), and the network's
        # latency, as in the base
        for attr in ("has_engine", "sharp", "net_latency_s"):
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))
        if getattr(base, "engine_agent0", None) is not None:
            self.engine_agent0 = self.ranks + base.engine_agent0 - base.ranks
        # NCCL's view of the group (labcore.sim.nccl.mechanisms): the base's machine, sized to the placed ranks
        if getattr(base, "nccl", None) is not None:
            self.nccl = base.nccl.with_ranks(self.ranks, int(self.node_of.max()) + 1)

    def routes(self, src, dst):
        return self.base.routes(self._agent[np.asarray(src)], self._agent[np.asarray(dst)])

    def link_label(self, link: int) -> str:
        return self.base.link_label(link)

    def ring_orders(self, channels: int) -> np.ndarray:
        """The base's rings, visiting only the placed ranks (numbered 0 .. ranks-1 in placement order)."""
        local = {int(r): k for k, r in enumerate(self.placed)}
        return np.array([[local[int(r)] for r in order if int(r) in local]
                         for order in self.base.ring_orders(channels)], dtype=np.int64)


@dataclass
class Replay:
    """What a recording's communication costs on one topology.

    Attributes
    ----------
    collectives : DataFrame, one row per collective (the same call on every rank of its group is
        one row): step, op, bytes, group, seq, ranks (how many take part in the replay), nodes,
        algorithm (simulator), nccl (the tuner's pick, "named" or "default"), protocol (the one
        simulated: NCCL's pick where the topology describes it, else the simulator's fastest), predicted_us,
        recorded_us (median over ranks), status ("simulated" or "not simulated: why").
    steps : DataFrame per step: recorded_us (slowest rank), compute_us, comm_us (sum of predicted
        collectives), serial_us (compute + comm), overlap_us (the step model above),
        hidden_us (serial - overlap), not_simulated (count) and not_simulated_us (their recorded time).
    timeline : DataFrame for figures: rank, step, lane ("compute", or "comm, group G" for a group's stream), name,
        start_s, end_s (seconds from the step's start), predicted with overlap.
    topology, world_size, algorithm, placement, compute_scale : what was replayed on, and how;
        ``label`` says it in words.
    """

    collectives: "object"
    steps: "object"
    timeline: "object"
    topology: str
    world_size: int
    algorithm: object
    notes: list = field(default_factory=list)
    placement: tuple = ()
    compute_scale: float = 1.0

    @property
    def label(self) -> str:
        """Topology, ranks, and what differs from the defaults (placement, compute scale)."""
        text = f"{self.topology}, {self.world_size} ranks"
        if self.placement and list(self.placement) != list(range(self.world_size)):
            text += f" on {list(self.placement)}"
        if self.compute_scale != 1.0:
            text += f", compute x {self.compute_scale:g}"
        return text

    @property
    def serial_s(self) -> float:
        """Total of all steps with no overlap, seconds."""
        return float(self.steps["serial_us"].sum()) / 1e6

    @property
    def overlap_s(self) -> float:
        """Total of all steps with overlap, seconds."""
        return float(self.steps["overlap_us"].sum()) / 1e6

    @property
    def comm_s(self) -> float:
        """Sum of every simulated collective, seconds (what ``serial_s`` adds to compute)."""
        return float(self.steps["comm_us"].sum()) / 1e6

    @property
    def not_simulated(self):
        """The collectives the simulator could not play, with the reason."""
        c = self.collectives
        return c[c["status"] != "simulated"]

    def __repr__(self) -> str:
        skipped = len(self.not_simulated)
        return (f"<Replay on {self.label}: {len(self.steps)} step(s), "
                f"serial {self.serial_s * 1e3:.3f} ms, overlapped {self.overlap_s * 1e3:.3f} ms"
                + (f", {skipped} collective(s) not simulated>" if skipped else ">"))


def _resolve_topology(topology, world_size: int | None, recorded: int, processes: str | None = None):
    """(topology object, tuner machine or None, label, note: why NCCL's tuner does not pick, or "")."""
    if isinstance(topology, str):
        topo = presets.topology(topology, world_size, processes=processes or "per_gpu")
        label = topology
    elif hasattr(topology, "params") and hasattr(topology, "fits"):           # a Calibration
        ranks = world_size or recorded
        return topologies.calibrated(topology, ranks), None, f"calibrated ({ranks} ranks)", \
            "a machine fitted to measurements has no NCCL tuner machine: collectives run the simulator's defaults"
    elif not isinstance(topology, Topology):
        raise TypeError(f"topology must be a preset name, a labcore.sim topology or a Calibration, not "
                        f"{type(topology).__name__}")
    else:
        topo, label = topology, topology.name
        if processes is not None:
            topo = presets.with_processes(copy.copy(topology), processes)
    try:
        return topo, presets.tuner_for(topo), label, ""
    except presets.NoTuner as why:
        return topo, None, label, f"{why}; collectives run the simulator's default algorithms"


def _check_algorithm(algorithm, ops: set[str]):
    if algorithm == "auto":
        return
    if isinstance(algorithm, str):
        if not any(algorithm in ALGORITHMS.get(op, {}) for op in ops):
            have = {op: sorted(ALGORITHMS[op]) for op in sorted(ops) if op in ALGORITHMS}
            raise ValueError(f"no op in this recording has a {algorithm!r} algorithm in the simulator; choose "
                             f"'auto' or one of {have}")
        return
    if not isinstance(algorithm, dict):
        raise TypeError("algorithm is 'auto', an algorithm name, or a dict {op: algorithm}")
    for op, name in algorithm.items():
        if op not in ALGORITHMS:
            raise ValueError(f"the simulator has no {op!r} collective; it has {', '.join(ALGORITHMS)}")
        if name not in ALGORITHMS[op] and name != "auto":
            raise ValueError(f"the simulator has no {name!r} algorithm for {op}; choose one of "
                             f"{', '.join(sorted(ALGORITHMS[op]))}")


def _choose(op, nbytes, n, nodes, algorithm, machine, in_switch):
    """(simulator algorithm or None, label or reason, protocol or "auto")."""
    named = algorithm.get(op, "auto") if isinstance(algorithm, dict) else algorithm
    if named != "auto" and named in ALGORITHMS.get(op, {}):
        return named, "named", "auto"
    if machine is not None and COLLECTIVES[op].nccl:
        return nccl_algorithm(op, nbytes, n, nodes, machine, in_switch)
    p2p = schedules.playing(op, "P2P")
    if machine is not None and p2p is not None:          # outside the tuner: NCCL's grouped send/recv
        return p2p, "NCCL p2p (grouped send/recv)", "auto"
    return COLLECTIVES[op].sim, "default", "auto"


def _check_type(recording) -> None:
    """A Recording, with the tables replay reads and a whole number of ranks."""
    if isinstance(recording, (list, tuple)):
        raise TypeError("replay takes one Recording; join the ranks' recordings first: "
                        "lc.readers.combine(cl.run(fn))")
    if not all(hasattr(recording, a) for a in ("frame", "scopes", "steps", "world_size")):
        raise TypeError(f"replay takes a Recording (lc.live.record ... rec.recording()), not "
                        f"{type(recording).__name__}")
    if not _whole(recording.world_size) or recording.world_size < 1:
        raise ValueError(f"the recording's world_size must be a whole number of ranks >= 1, not "
                         f"{recording.world_size!r}")
    _check_columns(recording)


def _check_recording(recording, world_size, topo, placement):
    W = int(recording.world_size)
    ranks_seen = set(recording.frame["rank"]) | set(recording.steps["rank"])
    if ranks_seen and max(ranks_seen) >= W:
        raise ValueError(f"this recording says it comes from {W} ranks but holds rank {max(ranks_seen)}: "
                         "it mixes recordings of different clusters; replay one run's recording")
    if world_size is not None and placement is not None and len(placement) != world_size:
        raise ValueError(f"placement names {len(placement)} ranks but world_size is {world_size}; give one "
                         "topology rank per replayed rank")
    asked = len(placement) if placement is not None else world_size
    if asked is not None and asked < W:
        raise ValueError(f"this recording comes from {W} ranks, so it cannot be replayed as {asked}; replay it "
                         f"on {W} ranks or more, or record on {asked}")
    if topo.ranks < W:
        raise ValueError(f"the topology {topo.name!r} has {topo.ranks} ranks, fewer than the {W} this recording "
                         f"comes from; choose one with at least {W} (e.g. lc.sim.topologies.nvswitch({max(W, 8)}))")
    size = asked or topo.ranks
    if topo.ranks < size:
        raise ValueError(f"the topology {topo.name!r} has {topo.ranks} ranks, fewer than the {size} asked for; "
                         "choose a bigger topology or a smaller world_size")
    place = list(range(size)) if placement is None else [int(p) for p in placement]   # whole numbers (checked)
    if len(set(place)) != len(place) or min(place) < 0 or max(place) >= topo.ranks:
        raise ValueError(f"placement must list {size} different ranks of the topology (0..{topo.ranks - 1}), "
                         f"got {placement}")
    return W, size, place


_FRAME = ("rank", "step", "op", "bytes", "group", "group_ranks", "group_size", "seq", "issued_s", "end_s", "time_us",
          "overlapped")
_SCOPES = ("rank", "step", "name", "start_s", "end_s")
_STEPS = ("rank", "step", "start_s", "end_s")
_NO_END = ("it has no end time: replay cannot tell its wait from compute (a rank recorded on NCCL needs "
           "TORCH_NCCL_ENABLE_TIMING=1 for end times); record it again, or drop the row")


def _check_columns(recording) -> None:
    for what, want in (("frame", _FRAME), ("scopes", _SCOPES), ("steps", _STEPS)):
        table = getattr(recording, what)
        missing = [c for c in want if c not in getattr(table, "columns", ())]
        if missing:
            raise ValueError(f"the recording's {what} lacks the columns {missing}: replay takes a Recording of "
                             "lc.live.record or lc.read_trace, whose tables have them")


def _row_name(frame, i: int) -> str:
    rank, step, op, seq = (frame[c].iloc[i] for c in ("rank", "step", "op", "seq"))
    return f"row {i} of the recording (rank {rank}, step {step}, {op} #{seq})"


def _first(mask) -> int | None:
    hit = np.flatnonzero(np.asarray(mask, dtype=bool))
    return int(hit[0]) if hit.size else None


def _check_rows(recording, W: int) -> None:
    """Refuse a row no run can have made, naming the row and the fix (one line)."""
    frame = recording.frame
    issued, end = (_floats(frame[c]) for c in ("issued_s", "end_s"))
    size, nbytes = _floats(frame["group_size"]), _floats(frame["bytes"])
    checks = [(~np.isfinite(issued), "it has no issue time (issued_s); record it again, or drop the row"),
              (~np.isfinite(end), _NO_END),
              (end < issued, "it ends before it is issued (end_s < issued_s); fix the row's times, or drop it"),
              (~(size >= 1) | (size != np.round(size)),
               "its group_size is not a whole number of ranks of at least 1; set it to the size of its group"),
              (~(nbytes >= 0), "its bytes are not a number of bytes >= 0; fix the row, or drop it")]
    for bad, why in checks:
        i = _first(bad)
        if i is not None:
            raise ValueError(f"{_row_name(frame, i)}: {why}")
    _check_groups(frame, W)
    _check_steps(recording)
    _check_scopes(recording.scopes)


def _check_groups(frame, W: int) -> None:
    """Every row's group: ranks of the recording, its own rank among them, as many as its size."""
    seen = set()
    for i, (rank, members, n) in enumerate(zip(frame["rank"].tolist(), frame["group_ranks"].tolist(),
                                               frame["group_size"].tolist())):
        key = (rank, members, n) if isinstance(members, tuple) else None
        if key in seen:
            continue
        members = tuple(members) if isinstance(members, (tuple, list, np.ndarray)) else ()
        if key is not None:
            seen.add(key)
        if not members:
            continue
        outside = [m for m in members if not (validate.whole(m) is not None and 0 <= m < W)]
        if outside:
            raise ValueError(f"{_row_name(frame, i)}: its group_ranks name rank {outside[0]}, but the recording "
                             f"comes from {W} ranks (0..{W - 1}); fix the row's group, or drop it")
        if rank not in members:
            raise ValueError(f"{_row_name(frame, i)}: rank {rank} is not in its group {list(members)}; the row "
                             "belongs to another rank's group")
        if len(members) != n:
            raise ValueError(f"{_row_name(frame, i)}: group_size {n} but {len(members)} group_ranks; make them agree")


def _check_steps(recording) -> None:
    """Every step has a start and an end after it; every row of a step has its step's bounds."""
    frame, steps = recording.frame, recording.steps
    start, stop = _floats(steps["start_s"]), _floats(steps["end_s"])
    i = _first(~np.isfinite(start) | ~np.isfinite(stop) | (stop < start))
    if i is not None:
        raise ValueError(f"step {steps['step'].iloc[i]} of rank {steps['rank'].iloc[i]} runs from {start[i]} to "
                         f"{stop[i]} s: a step needs a start and an end at or after it; fix the recording's steps")
    listed = set(zip(steps["rank"].tolist(), steps["step"].tolist()))
    rows = list(zip(frame["rank"].tolist(), frame["step"].tolist()))
    if not {key for key in set(rows) if key[1] >= 0} - listed:
        return
    for i, key in enumerate(rows):
        if key[1] >= 0 and key not in listed:
            raise ValueError(f"{_row_name(frame, i)}: the recording's steps have no step {key[1]} for rank "
                             f"{key[0]}, so replay cannot place it; add the step's bounds, or drop the row")


def _check_scopes(sc) -> None:
    i = _first(~np.isfinite(_floats(sc["start_s"])) | ~np.isfinite(_floats(sc["end_s"])))
    if i is not None:
        raise ValueError(f"compute scope {i} of the recording ({sc['name'].iloc[i]}, rank {sc['rank'].iloc[i]}) has "
                         "no start or end time; fix or drop it")


def _floats(column) -> np.ndarray:
    """A column as float64 numbers (NaN for what is not a number)."""
    import pandas as pd

    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)


def _whole(value) -> bool:
    return validate.whole(value) is not None


def _check_arguments(world_size, placement, steps, compute_scale):
    """(world_size, placement, steps) as ints and lists, or an error naming the argument."""
    if world_size is not None:
        if not _whole(world_size) or not 1 <= world_size <= MAX_RANKS:
            raise ValueError(f"world_size must be a whole number of ranks from 1 to {MAX_RANKS}, not {world_size!r}")
        world_size = int(world_size)
    if placement is not None:
        if isinstance(placement, (str, bytes)) or not hasattr(placement, "__iter__") \
                or not all(_whole(p) for p in placement):
            raise ValueError(f"placement is a list of topology ranks, one per replayed rank (e.g. [0, 8]), "
                             f"not {placement!r}")
        placement = [int(p) for p in placement]
    if steps is not None:
        listed = [steps] if np.isscalar(steps) else list(steps)
        if not listed or not all(_whole(k) for k in listed):
            raise ValueError(f"steps names recorded steps by number (an int or a list of them), not {steps!r}")
        steps = [int(k) for k in listed]
    validate.finite_number(compute_scale, "compute_scale", at_least=0, must="a finite number >= 0")
    return world_size, placement, steps


def replay(recording, topology="nvswitch8", algorithm="auto", world_size: int | None = None,
           placement=None, steps=None, compute_scale: float = 1.0, processes: str | None = None) -> Replay:
    """Predict the communication of ``recording`` on ``topology``, collective by collective.

    Parameters
    ----------
    recording : a :class:`labcore.readers.recording.Recording` (all ranks, ``lc.readers.combine``).
    topology : a preset name (any of :mod:`labcore.sim.machines.presets`: ``"nvswitch8"``, ``"multinode"``,
        ``"dgx_h100_ib"``, ``"uniform"``, ...), a topology (one built by ``presets.topology`` keeps its
        preset's tuner machine), or a :class:`labcore.sim.Calibration`. A preset name is built for
        ``world_size`` ranks when given (nvswitch8 for 4 ranks is a 4-GPU NVSwitch node), else at
        its own size (8; 32 for multinode, 16 for the other clusters).
    algorithm : "auto" (NCCL's tuner on presets it has a machine for, the ring family on
        others), an algorithm name used for every op that has it, or ``{op: name}``.
    world_size : ranks to replay as (default: the topology's); larger than the recording's
        scales data parallelism (see the module docstring).
    placement : topology rank of each replayed rank (default 0, 1, 2, ...).
    steps : which recorded steps to replay (default all).
    compute_scale : multiplies the recorded compute (e.g. 0.01: "if compute were 100x faster,
        as on a GPU, how much communication would still show?").
    processes : the job's process layout, which sets the host time each collective takes to issue
        (:func:`labcore.sim.machines.presets.with_processes`): "per_gpu" (one process a rank, as torch
        runs a recorded job; the default for a preset name) or "per_node"; with a topology object,
        None leaves it as it is.

    Example
    -------
    >>> r = replay(recording, "multinode", algorithm="ring")            # doctest: +SKIP
    >>> r.collectives[["op", "bytes", "algorithm", "predicted_us"]]     # doctest: +SKIP
    """
    import pandas as pd

    world_size, placement, steps = _check_arguments(world_size, placement, steps, compute_scale)
    _check_type(recording)
    topo, machine, label, untuned = _resolve_topology(topology, world_size, int(recording.world_size), processes)
    W, size, place = _check_recording(recording, world_size, topo, placement)
    _check_rows(recording, W)
    frame, scopes, step_frame = recording.frame, recording.scopes, recording.steps
    if steps is not None:
        wanted = set(steps)
        missing = wanted - set(step_frame["step"])
        if missing:
            raise ValueError(f"the recording has steps {sorted(set(step_frame['step']))}, not {sorted(missing)}")
        frame = frame[frame["step"].isin(wanted)]
        scopes = scopes[scopes["step"].isin(wanted)]
        step_frame = step_frame[step_frame["step"].isin(wanted)]
    _check_algorithm(algorithm, set(frame["op"]))
    collectives, durations = _predict_all(frame, W, size, place, topo, machine, algorithm)
    by_rank_step = frame.groupby(["rank", "step"]).indices
    scopes_by = scopes.groupby(["rank", "step"]).indices
    columns = {c: frame[c].to_numpy() for c in ("issued_s", "end_s", "overlapped", "group", "op", "bytes")}
    scope_cols = {c: scopes[c].to_numpy() for c in ("start_s", "end_s", "name")}
    pred = np.array([durations[i] for i in frame.index], dtype=object)
    per_rank, timeline = [], _Timeline()
    for rank, step, start, end in step_frame[["rank", "step", "start_s", "end_s"]].itertuples(index=False):
        rows = by_rank_step.get((rank, step), np.zeros(0, dtype=np.int64))
        sc = scopes_by.get((rank, step), np.zeros(0, dtype=np.int64))
        result = _replay_rank(float(start), float(end), {c: v[rows] for c, v in columns.items()},
                              {c: v[sc] for c, v in scope_cols.items()}, list(pred[rows]), compute_scale,
                              timeline.of(rank, step))
        per_rank.append(dict(rank=rank, step=step, **result))
    by_step = pd.DataFrame(per_rank).groupby("step").max(numeric_only=True).drop(columns="rank")
    by_step["hidden_us"] = by_step["serial_us"] - by_step["overlap_us"]
    skipped = collectives[collectives["status"] != "simulated"]
    by_step["not_simulated"] = skipped.groupby("step").size().reindex(by_step.index, fill_value=0)
    by_step["not_simulated_us"] = skipped.groupby("step")["recorded_us"].sum().reindex(by_step.index, fill_value=0.0)
    notes = []
    if size != W:
        notes.append(f"scaled from {W} to {size} ranks: collectives over all ranks run over all {size}")
    if untuned and (algorithm == "auto" or isinstance(algorithm, dict)):
        notes.append(untuned)           # why NCCL's tuner picks nothing here
    return Replay(collectives, by_step, timeline.frame(), label, size, algorithm, notes, tuple(place),
                  float(compute_scale))


def _predict_all(frame, W, size, place, topo, machine, algorithm):
    """One row per collective and {(group, seq) or row index: predicted seconds or None}.

    Work is done once per kind: NCCL's pick per (op, bytes, ranks, nodes), the simulation per
    (op, algorithm, placed ranks, bytes, protocol), the node count per group of ranks."""
    import pandas as pd

    cache: dict = {}
    picks: dict = {}
    spans: dict = {}
    rows, by_key = [], {}
    cols = {c: frame[c].tolist() for c in ("group", "seq", "op", "bytes", "group_ranks", "group_size", "step",
                                          "time_us")}
    keys = [(g, q) if q >= 0 else ("p2p", i) for i, (g, q) in enumerate(zip(cols["group"], cols["seq"]))]
    members: dict = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    for key, idx in members.items():
        i = idx[0]
        op, nbytes = cols["op"][i], float(cols["bytes"][i])
        ranks, placed, nodes = _placed_group(spans, cols["group_ranks"][i], int(cols["group_size"][i]), W, size,
                                             place, topo)
        recorded_us = _nanmedian([cols["time_us"][j] for j in idx])
        algo, label, predicted, status = None, "", None, "simulated"
        if _no_schedule(op):
            status = "not simulated: " + _no_schedule(op)
        elif len(ranks) == 1:
            algo, label, predicted = "-", "1 rank: nothing to send", 0.0
        else:
            pick = (op, nbytes, len(ranks), nodes)
            if pick not in picks:
                picks[pick] = _choose(op, nbytes, len(ranks), nodes, algorithm, machine,
                                      getattr(topo, "has_engine", topo.switch_agents > 0))
            algo, label, protocol = picks[pick]
            if algo is None:
                status = "not simulated: " + label
            else:
                predicted, status, protocol = _simulate(cache, op, algo, placed, nbytes, topo, protocol)
        by_key[key] = predicted
        rows.append(dict(step=int(cols["step"][i]), op=op, bytes=int(cols["bytes"][i]), group=cols["group"][i],
                         seq=int(cols["seq"][i]), ranks=len(ranks), nodes=nodes, algorithm=algo or "",
                         nccl=label if algo else "", protocol=protocol if predicted else "",
                         predicted_us=np.nan if predicted is None else predicted * 1e6,
                         recorded_us=recorded_us, status=status))
    durations = {index: by_key[key] for index, key in zip(frame.index, keys)}
    return pd.DataFrame(rows, columns=_COLLECTIVE_COLUMNS), durations


def _placed_group(spans: dict, group_ranks, group_size: int, W: int, size: int, place, topo):
    """(ranks of the group as replayed, their topology ranks, nodes they span), once per group."""
    key = (tuple(group_ranks), group_size)
    if key not in spans:
        ranks = list(group_ranks) or list(range(group_size))
        if sorted(ranks) == list(range(W)) and size != W:
            ranks = list(range(size))
        placed = [place[r] for r in ranks]
        spans[key] = (ranks, placed, len(set(topo.node_of[placed].tolist())))
    return spans[key]


def _nanmedian(values) -> float:
    """numpy's nanmedian of a few numbers (NaN when none is finite), without its per-call cost."""
    kept = sorted(v for v in values if v == v)
    if not any(map(math.isfinite, kept)):
        return np.nan
    m = len(kept)
    return float(kept[m // 2]) if m % 2 else (kept[m // 2 - 1] + kept[m // 2]) / 2


def _simulate(cache, op, algo, placed, nbytes, topo, protocol):
    """(seconds or None, status, protocol the simulator ran) of one collective, simulated once per kind.

    ``labcore.sim.simulate`` on the placed ranks: NCCL's protocol when the topology describes it,
    else the simulator's fastest ("auto"); builder options (channels, rings, pipeline, nodes) from
    the topology, as for any simulated collective."""
    key = (op, algo, tuple(placed), nbytes, protocol)
    if key not in cache:
        # one placed topology per group of ranks: what the simulator keeps per topology (a tree's peak) is reused
        group = ("placed", tuple(placed))
        if group not in cache:
            cache[group] = _Placed(topo, placed)
        placed_topo = cache[group]
        proto = protocol if protocol in placed_topo.protocols else ("auto" if placed_topo.protocols else None)
        try:
            try:
                trace = simulate(op, algo, len(placed), nbytes, topology=placed_topo, values=False, protocol=proto)
            except ValueError as err:
                if proto in (None, "auto") or "protocol" not in str(err):
                    raise
                trace = simulate(op, algo, len(placed), nbytes, topology=placed_topo, values=False, protocol="auto")
            cache[key] = (trace.time_s, "simulated", trace.protocol or "")
        except ValueError as err:
            cache[key] = (None, f"not simulated: {err}", "")
    return cache[key]


def _overlapped(values) -> np.ndarray:
    """True where a row says it overlapped; missing (None, NaN) is False."""
    values = np.asarray(values)
    if values.dtype == bool:
        return values
    return np.array([bool(v) if v is not None and v == v else False for v in values], dtype=bool)


def _compute_segments(S: float, E: float, rows, scopes) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """The recorded compute of one rank's step (see the module docstring), issue and end times.

    ``rows`` and ``scopes`` map column names to arrays (one rank's step)."""
    issued = np.asarray(rows["issued_s"], dtype=float)
    end = np.asarray(rows["end_s"], dtype=float)
    end = np.where(np.isnan(end), issued, end)
    overlapped = _overlapped(rows["overlapped"])
    starts, ends = issued.tolist(), end.tolist()          # Python floats: the walk compares them one by one
    flight = intervals.union(list(zip(starts, ends)))
    blocking = intervals.union([(a, b) for a, b, o in zip(starts, ends, overlapped.tolist()) if not o])
    busy = intervals.union([(a, b) for a, b, n in zip(np.asarray(scopes["start_s"], dtype=float).tolist(),
                                             np.asarray(scopes["end_s"], dtype=float).tolist(), scopes["name"])
                   if "wait" not in n.lower()])
    compute = intervals.union(intervals.subtract([(S, E)], flight) + intervals.subtract(busy, blocking))
    return intervals.subtract(compute, [(-np.inf, S), (E, np.inf)]), issued, end


def recorded_timeline(recording, rank: int | None = None, step: int = 0):
    """The recorded step of one rank as timeline rows (the columns of :attr:`Replay.timeline`).

    Example
    -------
    >>> recorded_timeline(recording, rank=0, step=1).head()      # doctest: +SKIP
    """
    import pandas as pd

    rank = min(recording.ranks) if rank is None else rank
    srow = recording.steps[(recording.steps["rank"] == rank) & (recording.steps["step"] == step)]
    if srow.empty:
        raise ValueError(f"rank {rank} has no step {step}; it has {sorted(set(recording.steps['step']))}")
    S, E = float(srow["start_s"].iloc[0]), float(srow["end_s"].iloc[0])
    f, sc = recording.frame, recording.scopes
    rows = f[(f["rank"] == rank) & (f["step"] == step)]
    sc = sc[(sc["rank"] == rank) & (sc["step"] == step)]
    compute, issued, end = _compute_segments(S, E, {c: rows[c].to_numpy() for c in rows},
                                             {c: sc[c].to_numpy() for c in sc})
    lanes = [dict(lane="compute", name="compute", start_s=a - S, end_s=b - S) for a, b in compute]
    start = np.where(rows["start_s"].notna(), rows["start_s"], issued)
    lanes += [dict(lane=f"comm, group {g}" if g else "p2p", name=op, start_s=a - S, end_s=b - S, bytes=nb)
              for g, op, a, b, nb in zip(rows["group"], rows["op"], start, end, rows["bytes"])]
    return pd.DataFrame([dict(rank=rank, step=step, **lane) for lane in lanes])


class _Timeline:
    """The replayed timeline's rows, gathered as columns (rank, step, lane, name, start_s, end_s, bytes):
    a frame of a hundred thousand small dicts costs more than the replay itself."""

    def __init__(self):
        self.cols: dict[str, list] = {c: [] for c in ("rank", "step", "lane", "name", "start_s", "end_s", "bytes")}
        self.sized = False

    def of(self, rank, step):
        """``add(lane, name, start, end, bytes=None)`` for one rank's step."""
        ranks, steps, lanes, names, starts, ends, sizes = self.cols.values()

        def add(lane, name, start, end, nbytes=None):
            ranks.append(rank)
            steps.append(step)
            lanes.append(lane)
            names.append(name)
            starts.append(start)
            ends.append(end)
            if nbytes is None:
                sizes.append(np.nan)
            else:
                sizes.append(nbytes)
                self.sized = True
        return add

    def frame(self):
        import pandas as pd

        if not self.cols["rank"]:
            return pd.DataFrame([])
        cols = dict(self.cols)
        if not self.sized:
            del cols["bytes"]                # no collective ran: no bytes column, as rows without bytes give
        elif any(v != v for v in cols["bytes"]):
            cols["bytes"] = np.asarray(cols["bytes"], dtype=float)     # compute rows have none: NaN
        return pd.DataFrame(cols)


def _replay_rank(S: float, E: float, rows, scopes, pred, compute_scale: float = 1.0, add=None) -> dict:
    """Serial and overlapped time of one rank's step (see module docstring); its predicted timeline
    goes to ``add(lane, name, start, end, bytes)``.

    ``rows`` and ``scopes`` map column names to arrays; ``pred`` is each row's predicted seconds
    (None: not simulated)."""
    add = add or (lambda *row: None)
    compute, issued, end = _compute_segments(S, E, rows, scopes)
    overlapped = _overlapped(rows["overlapped"]).tolist()
    issued, end = issued.tolist(), end.tolist()
    groups, ops, sizes = (list(rows[c]) for c in ("group", "op", "bytes"))
    comm = sum(p for p in pred if p is not None)
    total_compute = sum(b - a for a, b in compute) * compute_scale
    # walk the recorded timeline: compute segments and collective issues in time order
    order = sorted([(a, 0, k) for k, (a, _) in enumerate(compute)] + [(t, 1, j) for j, t in enumerate(issued)])
    clock, last_b = 0.0, S            # replay clock; recorded time where the last compute segment ended
    stream_free: dict = {}
    # (recorded end, replayed end) of simulated collectives not yet matched to a wait, earliest end first:
    # the waits come in time order, so every collective is looked at once
    ends: list[tuple[float, float]] = []
    finish = 0.0
    for when, kind, k in order:
        if kind == 0:
            a, b = compute[k]
            if a > last_b:       # the rank waited before this: for what ended during the wait
                while ends and ends[0][0] < last_b:
                    heapq.heappop(ends)
                while ends and ends[0][0] <= a:
                    clock = max(clock, heapq.heappop(ends)[1])
            span = (b - a) * compute_scale
            add("compute", "compute", clock, clock + span)
            clock += span
            last_b = b
            continue
        p = pred[k]
        if p is None:
            continue
        # issued inside the segment just played: at the same point of it
        at = clock - (last_b - when) * compute_scale if when < last_b else clock
        g = groups[k]
        lane = f"comm, group {g}" if g else "p2p"
        start = max(at, stream_free.get(lane, -np.inf))
        stream_free[lane] = start + p
        heapq.heappush(ends, (end[k], start + p))
        finish = max(finish, start + p)
        add(lane, ops[k], start, start + p, sizes[k])
        if not overlapped[k]:
            clock = max(clock, start + p)
    finish = max(finish, clock)
    return dict(recorded_us=(E - S) * 1e6, compute_us=total_compute * 1e6, comm_us=comm * 1e6,
                serial_us=(total_compute + comm) * 1e6, overlap_us=finish * 1e6)
