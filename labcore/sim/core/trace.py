"""The simulator's data model: Transfer, Schedule, Layout and Trace.

Everything here is plain data (numpy arrays, tuples, strings) so that a learner
can read it and ``labcore.viz`` can draw it without knowing how it was made.

Agents, chunks, contributions
-----------------------------
* **Agents** are the things that hold buffers: ranks ``0 .. ranks-1`` and, for
  in-network reduction, reducing switches ``ranks .. ranks+switches-1``.
* Every agent's buffer is cut into ``chunks`` equal chunks. For most
  collectives chunk ``c`` of every rank covers the same slice of the vector
  being reduced or gathered; for ``all_to_all`` there are ``ranks**2 * m``
  chunks and chunk ``c`` belongs to block ``b = c // m``, the data that rank
  ``b // ranks`` sends to rank ``b % ranks``.
* A **contribution** is one rank's input for one chunk. The buffer state says,
  for every agent and chunk, which ranks' contributions it currently holds:
  ``holds[agent, chunk, k]`` is True when rank ``k``'s input is folded in.

Schedule (what moves)
---------------------
A schedule is a list of steps; each step is a set of transfers that run at the
same time. One transfer moves one chunk, or ``span`` consecutive chunks:
``Transfer(src, dst, chunk, nbytes, op, channel, span)`` with ``op`` either
``"reduce"`` (the destination combines what it receives with what it holds)
or ``"copy"`` (the destination replaces its chunk). Reads happen at the start
of a step, writes at its end, so two ranks can swap chunks in one step.
``channel`` is the independent stream the transfer belongs to (one of NCCL's
channels: rings or trees that run at the same time). For speed a Schedule
stores its transfers as columns (``step, src, dst, chunk, size, reduce,
channel, span``, one entry per transfer, sorted by step); ``schedule.steps()``
gives the readable list of Transfer objects and ``print(schedule)`` a table. A schedule also carries ``phases``
(a name per step, e.g. "reduce-scatter"), ``params`` (the builder's options,
e.g. ``pipeline``) and ``layout``, a :class:`Layout` telling a drawing where
to put the ranks.

Timing model (how long it takes)
--------------------------------
Steps are synchronous: step ``s`` starts when step ``s-1`` has finished (the
first one after the topology's fixed launch latency). Transfers of one step
with the same source, destination and channel travel as one **message** (one
latency, their bytes added). A message follows the topology's route from source to
destination and takes

    route latency + max over its links (bytes on that link in this step / link bandwidth)
                  + reduced bytes x gamma of the destination

With ``contention=False`` a link's bytes are only the message's own, which is
the alpha-beta(-gamma) model of the closed forms in :mod:`labcore.sim.core.cost`;
with ``contention=True`` every message on a link waits for the whole step's
load on that link, so messages sharing a link share its bandwidth. On a
topology with single ports (``topology.ports == "single"``) a rank's messages
of one step go one after another, out and in: the step lasts at least the sum
of the busiest rank's message times. Back-to-back collectives finish at most
one per ``topology.issue_s`` (the host's time to issue one), so the total is
never below it.

Trace (what happened)
---------------------
``Trace`` holds the schedule, the topology (as the protocol it ran with sees
it; ``trace.protocol`` names the protocol), per-transfer ``start``/``end``
times (seconds, aligned with the schedule's columns) and ``links`` (an
``(n_transfers, hops)`` array of link ids, ``-1`` padded; see
``topology.link_label(id)``), per-step ``step_start``/``step_end``, the total
``time_s``, and, when values are on, the buffer state after every step:
``trace.holds_at(step)`` (``step=-1`` is the initial state, ``0`` is after
the first step) and ``trace.values_at(step)`` (real numbers, shape
``(agents, chunks, elements)``). ``trace.verify()`` checks the final
buffers against numpy and raises :class:`ScheduleError` naming the rank,
chunk and step of the first thing that is wrong. ``algbw``/``busbw`` (GB/s,
nccl-tests' definitions), ``lower_bound_s()``, ``summary()`` and
``to_frame()`` (one row per transfer with its times and route) report it.

Example
-------
>>> import labcore.sim as sim
>>> t = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20)
>>> t.verify()
>>> t.schedule.n_steps
6
>>> sorted(t.contributors(step=2, rank=0, chunk=1))
[0, 2, 3]
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from labcore.sim.core import buffers

TRANSFER_OPS = ("copy", "reduce")


class ScheduleError(AssertionError):
    """A schedule that is malformed or leaves a wrong result; the message says where."""


@dataclass(frozen=True)
class Transfer:
    """One chunk moving from ``src`` to ``dst`` in one step.

    Parameters
    ----------
    src, dst : int
        Agent ids (ranks, then reducing switches).
    chunk : int
        Which chunk of the buffer moves.
    nbytes : float or None
        Bytes on the wire; ``None`` means the chunk's size.
    op : {"copy", "reduce"}
        What the destination does with it.
    channel : int
        Independent stream (NCCL channel, or one of two trees); transfers of different
        channels between the same pair travel as separate messages.
    span : int
        How many consecutive chunks, from ``chunk`` on, the transfer moves.

    Example
    -------
    >>> Transfer(0, 1, chunk=2, op="reduce")
    Transfer(src=0, dst=1, chunk=2, nbytes=None, op='reduce', channel=0, span=1)
    """

    src: int
    dst: int
    chunk: int
    nbytes: float | None = None
    op: str = "copy"
    channel: int = 0
    span: int = 1


@dataclass(frozen=True)
class Layout:
    """How to draw the ranks of a schedule.

    ``kind`` is one of ``"ring"`` (``order`` = the ring), ``"tree"`` (``parents``:
    one tuple per tree giving each rank's parent, -1 for the root; two trees
    for NCCL's double binary tree), ``"hierarchical"`` (``nodes``: node index
    of every rank; ``order`` the intra-node ring), ``"switch"`` (ranks around
    ``switches`` reducing switch agents) or ``"mesh"`` (no structure).
    """

    kind: str = "mesh"
    order: tuple[int, ...] = ()
    parents: tuple[tuple[int, ...], ...] = ()
    nodes: tuple[int, ...] = ()
    switches: int = 0


@dataclass
class Schedule:
    """Steps of transfers for one collective; columnar, sorted by step.

    Build one with :meth:`from_steps` (readable) or from arrays (fast). Columns:
    ``step, src, dst, chunk`` (int64), ``size`` (bytes, float64), ``reduce`` (bool),
    ``channel`` (int64, default all 0), ``span`` (int64 chunks moved, default all 1).
    ``phases`` names each step's phase; ``params`` records the builder's options
    (e.g. ``pipeline``, ``channels``). ``distinct`` is the builder's promise that no two
    transfers share step, source, destination and channel (each is a message of its own),
    which spares the engine a sort.

    Example
    -------
    >>> s = Schedule.from_steps("all_reduce", ranks=2, nbytes=8, chunks=1, steps=[
    ...     [Transfer(0, 1, 0, op="reduce")], [Transfer(1, 0, 0)]])
    >>> print(s)                                   # doctest: +NORMALIZE_WHITESPACE
    all_reduce 'custom': 2 ranks, 1 chunks of 8 B, 2 steps
    step 0: 0->1 c0 reduce 8 B
    step 1: 1->0 c0 copy 8 B
    """

    collective: str
    algorithm: str
    ranks: int
    nbytes: float
    chunks: int
    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    size: np.ndarray
    reduce: np.ndarray
    n_steps: int
    root: int = 0
    switches: int = 0
    layout: Layout = field(default_factory=Layout)
    phases: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    channel: np.ndarray | None = None
    span: np.ndarray | None = None
    distinct: bool = False

    def __post_init__(self) -> None:
        buffers.check_layout(self.collective, self.ranks, self.chunks, self.root)
        cols = [np.asarray(getattr(self, k)) for k in ("step", "src", "dst", "chunk")]
        self.step, self.src, self.dst, self.chunk = (c.astype(np.int64, copy=False).ravel() for c in cols)
        self.size = np.asarray(self.size, dtype=np.float64).ravel()
        self.reduce = np.asarray(self.reduce, dtype=bool).ravel()
        n = self.step.size
        self.channel = (np.zeros(n, dtype=np.int64) if self.channel is None
                        else np.asarray(self.channel, dtype=np.int64).ravel())
        self.span = (np.ones(n, dtype=np.int64) if self.span is None
                     else np.asarray(self.span, dtype=np.int64).ravel())
        if not all(a.size == n for a in (self.src, self.dst, self.chunk, self.size, self.reduce, self.channel,
                                         self.span)):
            raise ScheduleError("schedule columns step, src, dst, chunk, size, reduce, channel, span must have the "
                                "same length")
        if n and np.any(np.diff(self.step) < 0):
            order = np.argsort(self.step, kind="stable")
            for k in _COLUMNS:
                setattr(self, k, getattr(self, k)[order])
        agents = self.ranks + self.switches
        for name in ("src", "dst"):
            col = getattr(self, name)
            bad = np.flatnonzero((col < 0) | (col >= agents))
            if bad.size:
                i = bad[0]
                raise ScheduleError(f"step {self.step[i]}: {name} {col[i]} is not an agent "
                                    f"(ranks are 0..{self.ranks - 1}, switches {self.ranks}..{agents - 1})")
        bad = np.flatnonzero((self.chunk < 0) | (self.span < 1) | (self.chunk + self.span > self.chunks)
                             | (self.src == self.dst))
        if bad.size:
            i = bad[0]
            raise ScheduleError(f"step {self.step[i]}: transfer {self.src[i]}->{self.dst[i]} chunk {self.chunk[i]} "
                                f"(span {self.span[i]}) is invalid (chunks are 0..{self.chunks - 1}; a rank cannot "
                                "send to itself)")
        if n and (self.step[0] < 0 or self.step[-1] >= self.n_steps):
            raise ScheduleError(f"steps must lie in 0..{self.n_steps - 1}")

    # -- construction -----------------------------------------------------
    @classmethod
    def from_steps(cls, collective: str, ranks: int, nbytes: float, chunks: int,
                   steps: Sequence[Iterable[Transfer | tuple]], algorithm: str = "custom",
                   root: int = 0, switches: int = 0, layout: Layout | None = None) -> "Schedule":
        """A schedule from a list of steps, each a list of Transfer (or tuples of its fields).

        Example
        -------
        >>> Schedule.from_steps("broadcast", 3, 30, 1, [[(0, 1, 0)], [(1, 2, 0)]]).n_steps
        2
        """
        cb = buffers.chunk_bytes(collective, ranks, nbytes, chunks)
        rows = []
        for s, transfers in enumerate(steps):
            for t in transfers:
                t = t if isinstance(t, Transfer) else Transfer(*t)
                if t.op not in TRANSFER_OPS:
                    raise ScheduleError(f"step {s}: op {t.op!r} must be 'copy' or 'reduce'")
                rows.append((s, t.src, t.dst, t.chunk, cb * t.span if t.nbytes is None else t.nbytes,
                             t.op == "reduce", t.channel, t.span))
        cols = list(zip(*rows)) if rows else [[]] * 8
        return cls(collective, algorithm, ranks, nbytes, chunks, *(np.array(c) for c in cols[:5]),
                   np.array(cols[5], dtype=bool), n_steps=len(steps), root=root, switches=switches,
                   layout=layout or Layout(switches=switches), channel=np.array(cols[6], dtype=np.int64),
                   span=np.array(cols[7], dtype=np.int64))

    # -- reading ------------------------------------------------------------
    @property
    def n_transfers(self) -> int:
        return int(self.step.size)

    @property
    def agents(self) -> int:
        return self.ranks + self.switches

    @property
    def chunk_bytes(self) -> float:
        return buffers.chunk_bytes(self.collective, self.ranks, self.nbytes, self.chunks)

    @property
    def n_channels(self) -> int:
        return int(self.channel.max()) + 1 if self.channel.size else 1

    def per_chunk(self) -> tuple["Schedule", np.ndarray]:
        """This schedule with every multi-chunk transfer split into one transfer per chunk, and
        for each new transfer the index of the one it came from (for drawing)."""
        if np.all(self.span == 1):
            return self, np.arange(self.n_transfers)
        origin = np.repeat(np.arange(self.n_transfers), self.span)
        offset = np.arange(origin.size) - np.repeat(np.cumsum(self.span) - self.span, self.span)
        cols = {k: getattr(self, k)[origin] for k in _COLUMNS}
        cols["chunk"] = cols["chunk"] + offset
        cols["size"] = cols["size"] / self.span[origin]
        cols["span"] = np.ones(origin.size, dtype=np.int64)
        return Schedule(self.collective, self.algorithm, self.ranks, self.nbytes, self.chunks, n_steps=self.n_steps,
                        root=self.root, switches=self.switches, layout=self.layout, phases=self.phases,
                        params=self.params, **cols), origin

    def step_slices(self) -> list[slice]:
        """``slices[s]`` selects step ``s``'s transfers in the columns."""
        bounds = np.searchsorted(self.step, np.arange(self.n_steps + 1))
        return [slice(int(bounds[s]), int(bounds[s + 1])) for s in range(self.n_steps)]

    def steps(self) -> list[list[Transfer]]:
        """The schedule as a list of steps of :class:`Transfer` (readable, slow for big ones)."""
        out: list[list[Transfer]] = [[] for _ in range(self.n_steps)]
        for s, a, b, c, n, r, h, w in zip(self.step.tolist(), self.src.tolist(), self.dst.tolist(),
                                          self.chunk.tolist(), self.size.tolist(), self.reduce.tolist(),
                                          self.channel.tolist(), self.span.tolist()):
            out[s].append(Transfer(a, b, c, n, "reduce" if r else "copy", h, w))
        return out

    def to_frame(self):
        """The transfers as a pandas DataFrame (one row per transfer)."""
        import pandas as pd

        return pd.DataFrame({"step": self.step, "src": self.src, "dst": self.dst, "chunk": self.chunk,
                             "nbytes": self.size, "op": np.where(self.reduce, "reduce", "copy"),
                             "channel": self.channel, "span": self.span})

    def __str__(self) -> str:
        head = (f"{self.collective} {self.algorithm!r}: {self.ranks} ranks, {self.chunks} chunks of "
                f"{_fmt_bytes(self.chunk_bytes)}, {self.n_steps} steps")
        lines = [head]
        for s, sl in enumerate(self.step_slices()[:64]):
            label = f" [{self.phases[s]}]" if s < len(self.phases) and self.phases[s] else ""
            cols = zip(self.src[sl][:32].tolist(), self.dst[sl][:32].tolist(), self.chunk[sl][:32].tolist(),
                       self.reduce[sl][:32].tolist(), self.size[sl][:32].tolist(), self.span[sl][:32].tolist())
            body = ", ".join(f"{a}->{b} c{c}{f'-{c + w - 1}' if w > 1 else ''} {'reduce' if r else 'copy'} "
                             f"{_fmt_bytes(n)}" for a, b, c, r, n, w in cols)
            more = sl.stop - sl.start - 32
            lines.append(f"step {s}{label}: {body}" + (f", ... {more} more" if more > 0 else ""))
        if self.n_steps > 64:
            lines.append(f"... {self.n_steps - 64} more steps")
        return "\n".join(lines)


_COLUMNS = ("step", "src", "dst", "chunk", "size", "reduce", "channel", "span")


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.4g} B"


@dataclass
class Trace:
    """The result of running a Schedule on a Topology (see the module docstring).

    Attributes
    ----------
    schedule, topology : the inputs.
    reduce_op : "sum", "max", "min" or "prod".
    time_s : total simulated time (launch latency plus every step).
    step_start, step_end : (n_steps,) seconds.
    start, end : (n_transfers,) seconds, aligned with the schedule's columns.
    links : (n_transfers, hops) link ids of each transfer's route, -1 padded.
    inputs : (ranks, chunks, elements) every rank's input values, or None.
    contention : whether links were shared.
    problems : what went wrong while moving values, as (step, agent, chunk, text).
    protocol : the NCCL protocol the topology was seen through (None without protocols).
    """

    schedule: Schedule
    topology: Any
    reduce_op: str
    time_s: float
    step_start: np.ndarray
    step_end: np.ndarray
    start: np.ndarray
    end: np.ndarray
    links: np.ndarray
    contention: bool
    inputs: np.ndarray | None = None
    problems: list[tuple[int, int, int, str]] = field(default_factory=list)
    protocol: str | None = None
    _holds: np.ndarray | None = None      # (n_steps+1, agents, chunks, ceil(ranks/8)) packed bits
    _values: np.ndarray | None = None     # (n_steps+1, agents, chunks, elements)
    _written: np.ndarray | None = None    # (agents, chunks) last step that wrote each cell, -1 never

    # -- state --------------------------------------------------------------
    @property
    def has_values(self) -> bool:
        return self._holds is not None

    def _need_values(self) -> None:
        if self._holds is None:
            raise ValueError("this trace was simulated with values=False; simulate again with values=True")

    def holds_at(self, step: int) -> np.ndarray:
        """(agents, chunks, ranks) bool: whose contributions each chunk holds after ``step`` (-1 = initial)."""
        self._need_values()
        packed = self._holds[step + 1]
        return np.unpackbits(packed, axis=-1, count=self.schedule.ranks).astype(bool)

    def values_at(self, step: int) -> np.ndarray:
        """(agents, chunks, elements) buffer values after ``step`` (-1 = initial)."""
        self._need_values()
        return self._values[step + 1]

    def contributors(self, step: int, rank: int, chunk: int) -> tuple[int, ...]:
        """Ranks whose input ``rank``'s ``chunk`` holds after ``step`` (-1 = initial)."""
        self._need_values()
        bits = np.unpackbits(self._holds[step + 1, rank, chunk], count=self.schedule.ranks)
        return tuple(int(k) for k in np.flatnonzero(bits))

    # -- numbers ------------------------------------------------------------
    @property
    def algbw(self) -> float:
        """nccl-tests algorithm bandwidth, GB/s (size / time, GB = 1e9 B). A run that takes no time (one
        rank: nothing moves) has none: ValueError, not inf."""
        if self.time_s <= 0:
            s = self.schedule
            raise ValueError(f"{s.collective} on {s.ranks} rank{'s' if s.ranks != 1 else ''} moves nothing and takes "
                             "no time: algbw and busbw need 2 or more ranks")
        return self.schedule.nbytes / self.time_s / 1e9

    @property
    def busbw(self) -> float:
        """nccl-tests bus bandwidth, GB/s (algbw x the collective's factor); ValueError where algbw has none."""
        return self.algbw * buffers.busbw_factor(self.schedule.collective, self.schedule.ranks)

    def lower_bound_s(self, in_network: bool | None = None) -> float:
        """Least time any algorithm needs for this collective on this topology: the bytes that must
        leave and enter each of the topology's cuts (one rank, one node) over the cut's bandwidth,
        or the latency floor if that is larger, plus the launch latency, and never below the host's
        issue time; see :func:`labcore.sim.core.cost.lower_bound`.

        ``in_network``: count in-network reduction (by default when the topology has a reducing
        switch); False gives the bound for algorithms that reduce at the ranks only.
        """
        from labcore.sim.core.bounds import lower_bound

        s, topo = self.schedule, self.topology
        reducing = topo.switch_agents > 0 if in_network is None else in_network
        bound = lower_bound(s.collective, s.ranks, s.nbytes, cuts=topo.cuts(), alpha=topo.hop_latency(),
                            in_network=reducing, ports=topo.ports)
        return max(topo.issue_s, topo.launch_s + bound)

    def per_chunk(self) -> "Trace":
        """This trace with multi-chunk transfers split into one per chunk (same times and routes)."""
        schedule, origin = self.schedule.per_chunk()
        if schedule is self.schedule:
            return self
        other = copy.copy(self)
        other.schedule, other.start, other.end, other.links = (schedule, self.start[origin], self.end[origin],
                                                               self.links[origin])
        return other

    def summary(self) -> dict[str, Any]:
        """Headline numbers of the run as a dict (time in us, bandwidths in GB/s; None for a run that moves
        nothing, one rank's)."""
        s = self.schedule
        return {"collective": s.collective, "algorithm": s.algorithm, "ranks": s.ranks, "nbytes": s.nbytes,
                "topology": getattr(self.topology, "name", "?"), "protocol": self.protocol,
                "channels": s.n_channels, "steps": s.n_steps,
                "transfers": s.n_transfers, "time_us": self.time_s * 1e6,
                "algbw": self.algbw if self.time_s > 0 else None, "busbw": self.busbw if self.time_s > 0 else None,
                "bound_us": self.lower_bound_s() * 1e6}

    def to_frame(self):
        """Every transfer with its timing: the schedule's columns plus start_us, end_us and the
        route as text (pandas DataFrame)."""
        frame = self.schedule.to_frame()
        frame["start_us"], frame["end_us"] = self.start * 1e6, self.end * 1e6
        labels = {int(l): self.topology.link_label(int(l)) for l in np.unique(self.links) if l >= 0}
        frame["route"] = [" | ".join(labels[int(l)] for l in row if l >= 0) for row in self.links]
        return frame

    # -- checking -----------------------------------------------------------
    def verify(self) -> None:
        """Check the final buffers against numpy; raise ScheduleError saying which rank/chunk/step is wrong."""
        self._need_values()
        if self.problems:
            step, agent, chunk, text = self.problems[0]
            more = f" ({len(self.problems) - 1} more problems)" if len(self.problems) > 1 else ""
            raise ScheduleError(f"step {step}, {_agent(agent, self.schedule.ranks)}, chunk {chunk}: {text}{more}")
        s = self.schedule
        want, care = buffers.target(s.collective, s.ranks, s.chunks, s.root)
        final = self.holds_at(s.n_steps - 1)[: s.ranks]
        wrong = np.argwhere(care & np.any(final != want, axis=-1))
        last = s.n_steps - 1
        if wrong.size:
            r, c = (int(x) for x in wrong[0])
            got, exp = set(np.flatnonzero(final[r, c]).tolist()), set(np.flatnonzero(want[r, c]).tolist())
            step = int(self._written[r, c])
            when = f"it was last written at step {step}" if step >= 0 else "no step ever wrote it"
            raise ScheduleError(
                f"after the last step (step {last}), rank {r}, chunk {c} holds the contributions of ranks "
                f"{sorted(got)} but should hold {sorted(exp)}: missing {sorted(exp - got)}, extra "
                f"{sorted(got - exp)}; {when} ({len(wrong)} rank/chunk pairs wrong)")
        expected = buffers.expected_values(self.inputs, want, self.reduce_op)
        vals = self.values_at(last)[: s.ranks]
        bad = np.argwhere(care & np.any(vals != expected, axis=-1))
        if bad.size:
            r, c = (int(x) for x in bad[0])
            raise ScheduleError(f"after the last step (step {last}), rank {r}, chunk {c} holds values "
                                f"{vals[r, c].tolist()} but numpy's {self.reduce_op} gives {expected[r, c].tolist()}")


def _agent(a: int, ranks: int) -> str:
    return f"rank {a}" if a < ranks else f"switch {a - ranks} (agent {a})"
