"""Run a Schedule on a Topology: time every transfer and, optionally, move real values.

Timing is vectorised over all transfers at once (a few sorts and bincounts), so
its cost grows with the number of transfers, O(T log T); a 1024-rank ring
all-reduce has about two million. It is split in two: :func:`plan` groups the
transfers into messages, finds their routes and the bytes every link carries in
every step (which depend only on the schedule and the wiring), and
:func:`timing` turns a plan into times for given latencies and bandwidths, so
the same schedule is timed under several protocols for the price of one plan.

Moving values loops over steps and does a handful of numpy operations per step
on that step's transfers, so it grows with steps x (transfers per step x ranks)
because each chunk carries a bitmask of the ranks it holds.

Example
-------
>>> from labcore.sim.core.schedules import build
>>> from labcore.sim.core.network import Uniform
>>> trace = run(build("all_reduce", "ring", 4, 1 << 20), Uniform(4, alpha=1e-6, bandwidth=1e9))
>>> round(trace.time_s * 1e6, 3)      # 6 steps x (1 us + 256 KiB / 1 GB/s)
1578.864
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labcore.sim.core import buffers
from labcore.sim.core.trace import Schedule, ScheduleError, Trace

_BINCOUNT_LIMIT = 1 << 26       # (step, link) bins counted directly below this, sorted above


def run(schedule: Schedule, topology, reduce_op: str = "sum", values: bool = True, contention: bool = True,
        elements: int = 1, seed: int = 0) -> Trace:
    """Simulate ``schedule`` on ``topology`` and return its :class:`~labcore.sim.core.trace.Trace`.

    Parameters
    ----------
    schedule : Schedule
    topology : a :mod:`labcore.sim.core.network` object with at least ``schedule.ranks`` ranks
        (for a protocol's view of it, ``topology.with_protocol(name)``).
    reduce_op : "sum", "max", "min" or "prod".
    values : move real numbers and record every step's buffer state (needed by ``verify()``).
    contention : share a link's bandwidth between the messages crossing it in a step.
    elements : numbers per chunk when values are on.
    seed : seed of the random integer inputs.
    """
    buffers.identity(reduce_op)
    check_schedule(schedule, topology)
    trace = Trace(schedule, topology, reduce_op, contention=contention, protocol=topology.protocol,
                  **timing(plan(schedule, topology), topology, contention))
    if values:
        _move_values(trace, elements, seed)
    return trace


def check_schedule(schedule: Schedule, topology) -> None:
    """Raise ValueError, with the fix, when ``schedule`` cannot run on ``topology``."""
    if topology.ranks != schedule.ranks:
        raise ValueError(f"the schedule has {schedule.ranks} ranks but the topology {topology.name!r} has "
                         f"{topology.ranks}; build the topology for {schedule.ranks} ranks")
    # on GPU servers the switches are of two kinds: the NVSwitch's NVLS engine and the fabric's SHARP
    if schedule.algorithm == "nvls" and getattr(topology, "has_engine", True) is False:
        raise ValueError(f"nvls needs NVLink SHARP (an NVSwitch that reduces), which topology {topology.name!r} "
                         "lacks; use an H100-or-later preset (its nodes' NVSwitches reduce) or another algorithm")
    if schedule.algorithm == "in_network" and getattr(topology, "sharp", True) is False:
        raise ValueError(f"in_network needs a network switch that reduces (SHARP), which topology "
                         f"{topology.name!r} lacks; build it with sharp=True on an InfiniBand preset "
                         "(e.g. dgx_h100_ib) or use another algorithm")
    if schedule.switches > topology.switch_agents:
        raise ValueError(f"the schedule needs {schedule.switches} reducing switch(es) but topology "
                         f"{topology.name!r} has {topology.switch_agents}; use one with in-network reduction "
                         "(topologies.uniform, nvswitch, multinode(sharp=True))")


@dataclass
class Plan:
    """What timing needs and latencies or bandwidths do not change: the messages of every step
    (transfers with the same step, source, destination and channel), their routes and the bytes
    on every link they cross, in their step (``load``) and of their own (``own``)."""

    schedule: Schedule
    n_steps: int
    transfer_message: np.ndarray   # (T,) message of every transfer
    step: np.ndarray               # (M,) per message
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    reduced: np.ndarray
    links: np.ndarray              # (M, H) link ids, -1 padded
    load: np.ndarray               # (M, H) bytes of the whole step on each link
    own: np.ndarray                # (M, H) the message's own bytes on each link
    full: bool = False             # every message uses all H hops (no -1 padding)


def plan(s: Schedule, topo) -> Plan:
    """Group ``s``'s transfers into messages and route them on ``topo`` (see :class:`Plan`)."""
    T = s.n_transfers
    if T == 0:
        z = np.zeros(0, dtype=np.int64)
        e = np.zeros((0, 1), dtype=np.int64)
        return Plan(s, s.n_steps, z, z, z, z, np.zeros(0), np.zeros(0), e, np.zeros((0, 1)), np.zeros((0, 1)))
    A = np.int64(s.agents)
    if s.distinct:                          # the builder promises one transfer per message
        inv = first = np.arange(T)
    else:
        key = ((s.step * A + s.src) * A + s.dst) * (np.int64(s.channel.max()) + 1) + s.channel
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.ravel()
    m_step, m_src, m_dst = s.step[first], s.src[first], s.dst[first]
    if s.distinct:
        m_bytes, m_red = s.size.astype(float), s.size * s.reduce
    else:
        m_bytes, m_red = np.bincount(inv, weights=s.size), np.bincount(inv, weights=s.size * s.reduce)
    links = topo.routes(m_src, m_dst)                      # (M, H)
    valid = links >= 0
    full = bool(valid.all())
    safe = links if full else np.where(valid, links, 0)
    own = np.broadcast_to(m_bytes[:, None], links.shape) if full else np.where(valid, m_bytes[:, None], 0.0)
    L = np.int64(topo.n_links)
    lkey = (m_step[:, None] * L + safe).ravel() if full else (m_step[:, None] * L + safe)[valid]
    weights = own.ravel() if full else np.broadcast_to(m_bytes[:, None], links.shape)[valid]
    if s.n_steps * int(L) <= _BINCOUNT_LIMIT:
        per_bin = np.bincount(lkey, weights=weights, minlength=s.n_steps * int(L))
        load_flat = per_bin[lkey]
    else:
        _, linv = np.unique(lkey, return_inverse=True)
        load_flat = np.bincount(linv.ravel(), weights=weights)[linv.ravel()]
    if full:
        load = load_flat.reshape(links.shape)
    else:
        load = np.zeros(links.shape)
        load[valid] = load_flat
    return Plan(s, s.n_steps, inv, m_step, m_src, m_dst, m_bytes, m_red, links, load, own, full)


def timing(p: Plan, topo, contention: bool = True) -> dict:
    """Times of a :class:`Plan` on ``topo``'s latencies and bandwidths: the Trace's timing fields.

    A message's wire time is the slowest of its links (the step's bytes on the link with
    ``contention``, else its own, over the link's bandwidth) plus reducing its bytes at the
    destination. With the "step" latency model a message also takes its route's latency and a
    step lasts as long as its slowest message; with single ports, at least as long as the busiest
    rank's messages one after another, out or in. With the "path" model a step lasts its slowest
    wire time plus the topology's ``step_s``, and the latency along the slowest chain of hops a
    chunk takes (see :func:`path_latency`) is added as it accrues. The whole run never takes less
    than the topology's ``issue_s``.
    """
    S = p.n_steps
    if p.step.size == 0:
        z = np.zeros(S)
        launch = float(topo.launch_s) if S else 0.0
        return dict(time_s=max(launch, topo.issue_s) if S else 0.0, step_start=z + topo.launch_s,
                    step_end=z + topo.launch_s, start=np.zeros(0), end=np.zeros(0),
                    links=np.zeros((0, 1), dtype=np.int64))
    single, path = topo.ports == "single", topo.latency_model == "path"
    if single and path:
        raise ValueError(f"topology {topo.name!r}: single ports go with the 'step' latency model only")
    bytes_on = p.load if contention and not single else p.own
    lat = np.zeros(p.step.size)
    wire = np.zeros(p.step.size)
    for h in range(p.links.shape[1]):           # routes have few hops: a column at a time
        link = p.links[:, h]
        if p.full:
            lat += topo.latency[link]
            np.maximum(wire, bytes_on[:, h] / topo.bandwidth[link], out=wire)
        else:
            ok = link >= 0
            safe = np.where(ok, link, 0)
            lat += np.where(ok, topo.latency[safe], 0.0)
            np.maximum(wire, np.where(ok, bytes_on[:, h] / topo.bandwidth[safe], 0.0), out=wire)
    if p.reduced.any() and topo.gamma.any():
        wire = wire + p.reduced * topo.gamma[p.dst]
    m_time = wire if path else lat + wire
    dur = _per_step_max(m_time, p.step, S)
    offset = np.zeros(m_time.size)
    if path:
        dur += topo.step_s * (np.bincount(p.step, minlength=S) > 0)
        reach, arrived = path_latency(p, lat)
    else:
        reach = np.zeros(S)
    if single:
        P = np.int64(topo.ranks)
        for agent in (p.src, p.dst):
            rank = agent < P
            busy = np.bincount(p.step[rank] * P + agent[rank], weights=m_time[rank], minlength=S * int(P))
            np.maximum.at(dur, np.arange(S).repeat(int(P)), busy)
        # a rank's messages leave one after another, in message order
        rank = p.src < P
        group = np.where(rank, p.step * P + p.src, -1 - np.arange(m_time.size))
        order = np.argsort(group, kind="stable")
        g, t = group[order], m_time[order]
        cum = np.cumsum(t)
        change = np.r_[True, g[1:] != g[:-1]]
        base = np.maximum.accumulate(np.where(change, cum - t, 0.0))
        offset[order] = np.where(g >= 0, cum - t - base, 0.0)
    step_end = topo.launch_s + np.cumsum(dur) + reach
    step_start = np.r_[topo.launch_s, step_end[:-1]]
    if path:
        # a message lands when its step's wire time is done plus the latency its own chain of hops
        # has gathered (at most the slowest chain's, which ends the step)
        m_end = topo.launch_s + np.cumsum(dur)[p.step] + arrived
        m_start = m_end - m_time - lat
    else:
        m_start = step_start[p.step] + offset
        m_end = m_start + m_time
    inv = p.transfer_message
    return dict(time_s=max(float(step_end[-1]), topo.issue_s), step_start=step_start, step_end=step_end,
                start=m_start[inv], end=m_end[inv], links=p.links[inv])


def _per_step_max(values: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray:
    """Largest value of every step (0 for a step without any); ``step`` is sorted."""
    out = np.zeros(n_steps)
    starts = np.searchsorted(step, np.arange(n_steps))
    busy = np.flatnonzero(np.diff(np.r_[starts, step.size]) > 0)
    if busy.size:
        out[busy] = np.maximum.reduceat(values, starts[busy])
    return out


_PATH_CELLS = 1 << 26


def path_latency(p: Plan, m_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n_steps,) the latency accrued by the end of each step along the slowest chain of hops, and
    (n_messages,) the latency each message's data has gathered when it lands.

    Every (agent, chunk) carries the latency its data has gathered; a transfer delivers its
    source's latency plus its message's route latency, and the destination keeps the larger of
    that and its own. Chunks moved in the same step travel side by side (their latencies do
    not add up), so a pipelined ring pays each hop of a chunk's path once, NVLink hops at NVLink
    latency and network hops at network latency. Chunks that multi-chunk transfers move as one
    block are followed as one.
    """
    s = p.schedule
    block = int(np.gcd.reduce(np.r_[s.span[s.span > 1], s.chunk[s.span > 1]])) if (s.span > 1).any() else 1
    block = block or 1
    cells_per_agent = -(-s.chunks // block)
    cells = s.agents * cells_per_agent
    if cells > _PATH_CELLS:
        raise ValueError(f"timing {s.ranks} ranks x {s.chunks} chunks with path latencies needs {cells:,} cells "
                         "(more than this simulator keeps); use fewer ranks, pieces or channels")
    lat = m_lat[p.transfer_message]
    width = np.maximum(1, s.span // block)
    src, dst, cell, step = s.src, s.dst, s.chunk // block, s.step
    if (width > 1).any():
        origin = np.repeat(np.arange(s.n_transfers), width)
        offset = np.arange(origin.size) - np.repeat(np.cumsum(width) - width, width)
        src, dst, cell, step, lat = src[origin], dst[origin], cell[origin] + offset, step[origin], lat[origin]
    ready = np.zeros(cells)
    out = np.zeros(s.n_steps)
    arrive = np.zeros(src.size)
    bounds = np.searchsorted(step, np.arange(s.n_steps + 1))
    top = 0.0
    for k in range(s.n_steps):
        a, b = bounds[k], bounds[k + 1]
        if b > a:
            arrive[a:b] = ready[src[a:b] * cells_per_agent + cell[a:b]] + lat[a:b]
            np.maximum.at(ready, dst[a:b] * cells_per_agent + cell[a:b], arrive[a:b])
            top = max(top, float(arrive[a:b].max()))
        out[k] = top
    per_transfer = np.zeros(s.n_transfers)
    np.maximum.at(per_transfer, origin if (width > 1).any() else np.arange(s.n_transfers), arrive)
    per_message = np.zeros(m_lat.size)
    np.maximum.at(per_message, p.transfer_message, per_transfer)
    return out, per_message


def _move_values(trace: Trace, elements: int, seed: int) -> None:
    s, _ = trace.schedule.per_chunk()
    P, C, A = s.ranks, s.chunks, s.agents
    f = buffers.ufunc(trace.reduce_op)
    inputs = buffers.make_inputs(trace.reduce_op, P, C, elements, seed)
    holds = np.zeros((A, C, P), dtype=bool)
    holds[:P] = buffers.initial(s.collective, P, C, s.root)
    vals = np.full((A, C, elements), buffers.identity(trace.reduce_op))
    r, c, k = np.nonzero(holds[:P])
    vals[r, c] = inputs[k, c]
    written = np.full((A, C), -1, dtype=np.int64)
    hist_h = np.empty((s.n_steps + 1, A, C, (P + 7) // 8), dtype=np.uint8)
    hist_v = np.empty((s.n_steps + 1, A, C, elements))
    hist_h[0], hist_v[0] = np.packbits(holds, axis=-1), vals
    problems = trace.problems
    for step, sl in enumerate(s.step_slices()):
        src, dst, ch, red = s.src[sl], s.dst[sl], s.chunk[sl], s.reduce[sl]
        if src.size:
            snap_h, snap_v = holds[src, ch], vals[src, ch]
            empty = np.flatnonzero(~snap_h.any(axis=1))
            for i in empty[:1]:
                problems.append((step, int(src[i]), int(ch[i]), f"sends chunk {ch[i]} to {dst[i]} but holds no data "
                                 "for it yet"))
            cell = dst * C + ch
            uniq, counts = np.unique(cell, return_counts=True)
            many = uniq[counts > 1]
            if many.size:
                clash = np.isin(cell, many) & ~red
                for i in np.flatnonzero(clash)[:1]:
                    problems.append((step, int(dst[i]), int(ch[i]), "is written by more than one transfer in the "
                                     "same step and at least one of them is a copy (the result would be ambiguous)"))
            cp = ~red
            if red.any():
                rd, rc, rh = dst[red], ch[red], snap_h[red]
                before = holds[rd, rc]
                total = np.zeros((A * C, P), dtype=np.int16)
                np.add.at(total, rd * C + rc, rh)
                seen = total[rd * C + rc] + before
                dup = np.flatnonzero((seen > 1).any(axis=1))
                for i in dup[:1]:
                    twice = np.flatnonzero(seen[i] > 1).tolist()
                    problems.append((step, int(rd[i]), int(rc[i]), f"would count the contribution of rank(s) "
                                     f"{twice} twice when reducing what rank {src[red][i]} sends"))
                holds[rd, rc] = before | (total[rd * C + rc] > 0)
                f.at(vals, (rd, rc), snap_v[red])
            holds[dst[cp], ch[cp]] = snap_h[cp]
            vals[dst[cp], ch[cp]] = snap_v[cp]
            written[dst, ch] = step
        hist_h[step + 1], hist_v[step + 1] = np.packbits(holds, axis=-1), vals
    trace.inputs, trace._holds, trace._values, trace._written = inputs, hist_h, hist_v, written


_TRANSFER_BYTES = 256         # a transfer's share of the schedule, its plan and its timing arrays
_WORKING_BYTES = 32 << 20     # numpy's and Python's own working memory during a run, whatever its size


def values_bytes(schedule: Schedule, elements: int = 1) -> int:
    """Memory a run with values needs at its peak, in bytes, before it starts: the transfers (the schedule,
    its plan and timing), every step's buffer state (kept for the animation), the state itself and the
    inputs, and the larger of one step's work (the reductions' counts, the copies) and ``Trace.verify``'s
    (the targets, the final holdings, numpy's answer), and 32 MiB of numpy's and Python's own working
    memory. An upper bound: the measured peak stays below it (benchmarks/bench_memory.py)."""
    A, C, P, S, e = schedule.agents, schedule.chunks, schedule.ranks, schedule.n_steps, elements
    steps = schedule.per_chunk()[0].step
    busiest = int(np.bincount(steps).max()) if steps.size else 0
    history = (S + 1) * A * C * ((P + 7) // 8 + 8 * e)
    state = A * C * (P + 8 * e + 8) + 16 * P * C * e
    step = 3 * A * C * P + busiest * (5 * P + 24 * e + 64)
    check = P * C * P * (3 + 8 * e)
    return int(_WORKING_BYTES + _TRANSFER_BYTES * steps.size + history + state + max(step, check))


__all__ = ["run", "plan", "timing", "path_latency", "check_schedule", "values_bytes", "Plan", "ScheduleError"]
