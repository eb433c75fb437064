"""Run a Schedule on a Topology: time every transfer and, optionally, move real values.

Timing is vectorised over all transfers at once (a few sorts and bincounts), so
its cost grows with the number of transfers, O(T log T); a 1024-rank ring
all-reduce has about two million. Moving values loops over steps and does a
handful of numpy operations per step on that step's transfers, so it grows
with steps x (transfers per step x ranks) because each chunk carries a
bitmask of the ranks it holds.

Example
-------
>>> from labcore.sim.schedules import build
>>> from labcore.sim.topology import Uniform
>>> trace = run(build("all_reduce", "ring", 4, 1 << 20), Uniform(4, alpha=1e-6, bandwidth=1e9))
>>> round(trace.time_s * 1e6, 3)      # 6 steps x (1 us + 256 KiB / 1 GB/s)
1578.864
"""
from __future__ import annotations

import numpy as np

from labcore.sim import collectives
from labcore.sim.trace import Schedule, ScheduleError, Trace


def run(schedule: Schedule, topology, reduce_op: str = "sum", values: bool = True, contention: bool = True,
        elements: int = 1, seed: int = 0) -> Trace:
    """Simulate ``schedule`` on ``topology`` and return its :class:`~labcore.sim.trace.Trace`.

    Parameters
    ----------
    schedule : Schedule
    topology : a :mod:`labcore.sim.topology` object with at least ``schedule.ranks`` ranks.
    reduce_op : "sum", "max", "min" or "prod".
    values : move real numbers and record every step's buffer state (needed by ``verify()``).
    contention : share a link's bandwidth between the messages crossing it in a step.
    elements : numbers per chunk when values are on.
    seed : seed of the random integer inputs.
    """
    collectives.identity(reduce_op)
    if topology.ranks != schedule.ranks:
        raise ValueError(f"the schedule has {schedule.ranks} ranks but the topology {topology.name!r} has "
                         f"{topology.ranks}; build the topology for {schedule.ranks} ranks")
    if schedule.switches > topology.switch_agents:
        raise ValueError(f"the schedule needs {schedule.switches} reducing switch(es) but topology "
                         f"{topology.name!r} has {topology.switch_agents}; use one with in-network reduction "
                         "(topologies.uniform, nvswitch, multinode(sharp=True))")
    timing = _time(schedule, topology, contention)
    trace = Trace(schedule, topology, reduce_op, contention=contention, **timing)
    if values:
        _move_values(trace, elements, seed)
    return trace


def _time(s: Schedule, topo, contention: bool) -> dict:
    T, S = s.n_transfers, s.n_steps
    if T == 0:
        z = np.zeros(S)
        return dict(time_s=float(topo.launch_s) if S else 0.0, step_start=z + topo.launch_s,
                    step_end=z + topo.launch_s, start=np.zeros(0), end=np.zeros(0),
                    links=np.zeros((0, 1), dtype=np.int64))
    A = np.int64(s.agents)
    key = ((s.step * A + s.src) * A + s.dst) * (np.int64(s.channel.max()) + 1) + s.channel
    if np.all(key[1:] > key[:-1]):          # already one transfer per message, in order
        inv = np.arange(T)
        first = inv
    else:
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.ravel()
    m_step, m_src, m_dst = s.step[first], s.src[first], s.dst[first]
    m_bytes = np.bincount(inv, weights=s.size)
    m_red = np.bincount(inv, weights=s.size * s.reduce)
    links = topo.routes(m_src, m_dst)                      # (M, H)
    valid = links >= 0
    safe = np.where(valid, links, 0)
    lat = np.where(valid, topo.latency[safe], 0.0).sum(axis=1)
    bw = topo.bandwidth[safe]
    if contention:
        L = np.int64(topo.n_links)
        lkey = m_step[:, None] * L + safe
        flat = lkey[valid]
        _, linv = np.unique(flat, return_inverse=True)
        load_flat = np.bincount(linv.ravel(), weights=np.broadcast_to(m_bytes[:, None], links.shape)[valid])
        load = np.zeros(links.shape)
        load[valid] = load_flat[linv.ravel()]
    else:
        load = np.where(valid, m_bytes[:, None], 0.0)
    wire = np.where(valid, load / bw, 0.0).max(axis=1)
    m_time = lat + wire + m_red * topo.gamma[m_dst]
    dur = np.zeros(S)
    np.maximum.at(dur, m_step, m_time)
    step_end = topo.launch_s + np.cumsum(dur)
    step_start = step_end - dur
    m_start = step_start[m_step]
    return dict(time_s=float(step_end[-1]), step_start=step_start, step_end=step_end,
                start=m_start[inv], end=(m_start + m_time)[inv], links=links[inv])


def _move_values(trace: Trace, elements: int, seed: int) -> None:
    s = trace.schedule
    P, C, A = s.ranks, s.chunks, s.agents
    f = collectives.ufunc(trace.reduce_op)
    inputs = collectives.make_inputs(trace.reduce_op, P, C, elements, seed)
    holds = np.zeros((A, C, P), dtype=bool)
    holds[:P] = collectives.initial(s.collective, P, C, s.root)
    vals = np.full((A, C, elements), collectives.identity(trace.reduce_op))
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


__all__ = ["run", "ScheduleError"]
