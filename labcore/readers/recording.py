"""A recording: the collectives a training step issued, one row each per rank, whoever recorded them.

The live recorder (:mod:`labcore.live.recorder`, on the ranks of a lab cluster) and the reader of real
jobs' profiler traces (:mod:`labcore.readers.profiler_trace`) both return a :class:`Recording`, so
replay, the timelines and :meth:`Recording.exposed` work on either and nothing downstream knows the
difference. The names of torch's ops and the byte counts come from :mod:`labcore.collectives`.

Columns of :attr:`Recording.frame` (one row per collective per rank)
--------------------------------------------------------------------
rank, step, op, bytes (the size nccl-tests reports: all_gather's output, reduce_scatter's input,
otherwise the buffer), in_bytes, out_bytes, dtype, group (process group name), group_ranks,
group_size, seq (the group's collective number, equal on every rank of the group), issued_s,
start_s, end_s (seconds from the recording's start, on the rank's clock), time_us (end - start),
overlapped, frame (the first frame outside torch: the line that issued it), via (the torch function
that called the process group, e.g. DDP's ``_sync_params_and_buffers`` or FSDP's
``foreach_all_gather``), backend_op, peer (NCCL's send/recv: the other rank, in the group's
numbering; -1 for collectives and for gloo's send/recv, whose events do not name it), and from
NCCL's kernels (empty or -1 on gloo): kernel, algorithm, protocol, channels (CTAs), threads (a block).

Example
-------
>>> from_profiling_name("nccl:_all_gather_base"), from_profiling_name("nccl:send 0->1"), from_profiling_name("gloo:all_reduce_barrier")
(('all_gather', -1), ('send', 1), ('barrier', -1))
>>> nccl_tests_bytes("all_gather", 16, 64)
64
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from labcore import collectives as _collectives
from labcore.readers import intervals

__all__ = ["Recording", "combine", "COLUMNS", "ROW", "ITEMSIZE", "P2P", "from_profiling_name", "nccl_tests_bytes"]

COLUMNS = ["rank", "step", "op", "bytes", "in_bytes", "out_bytes", "dtype", "group", "group_ranks",
           "group_size", "seq", "issued_s", "start_s", "end_s", "time_us", "overlapped", "frame", "via",
           "backend_op", "peer", "kernel", "algorithm", "protocol", "channels", "threads"]
"""The columns of :attr:`Recording.frame` a reader of a recording sees (module docstring)."""
ROW = [c for c in COLUMNS if not c.endswith("_s") and c != "time_us"] + ["issued_ns", "start_ns", "end_ns"]
"""What a recorder or a reader builds a row of: times in ns on the rank's clock (re-based into ``*_s``)."""
ITEMSIZE = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
            "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16,
            "Float8_e4m3fn": 1, "Float8_e5m2": 1}
"""c10d's dtype names (flight-recorder entries, ``record_param_comms``) -> bytes per element."""
P2P = {"send", "recv", "recvAnySource"}
"""The backends' profiling names of point-to-point calls."""


def from_profiling_name(profiling_name: str) -> tuple[str, int]:
    """The op, and the peer (-1: none), a backend's profiling name (``nccl:<op>``, ``gloo:<op>``) stands for."""
    head, _, tail = profiling_name.split(":", 1)[-1].strip().partition(" ")
    p2p = re.fullmatch(r"\d+\s*(->|<-)\s*(\d+)", tail.strip())
    if head in P2P and p2p:          # ProcessGroupNCCL: "nccl:send <rank>-><peer>", "nccl:recv <rank><-<peer>"
        return ("send" if head == "send" else "recv"), int(p2p[2])
    return _collectives.from_torch(head) or head, -1


def nccl_tests_bytes(op: str, in_bytes: int, out_bytes: int) -> int:
    """nccl-tests' size: the buffer a collective splits across the ranks, whole (the output of all_gather
    and gather, the input of reduce_scatter and scatter, which only the root holds), else the input."""
    split = _collectives.describe(op).split if op in _collectives.COLLECTIVES else ""
    if split == "recv":
        return out_bytes
    if split == "send":
        return max(in_bytes, out_bytes)
    return in_bytes


@dataclass
class Recording:
    """The collectives of a recorded training loop, for one rank or all of them.

    Attributes
    ----------
    name : label given to :func:`record`.
    world_size, backend : of the cluster that recorded it.
    frame : pandas DataFrame, one row per collective per rank (columns in the module docstring).
    scopes : the compute the profiler saw (rank, step, name, start_s, end_s): autograd nodes and
        framework scopes such as ``DistributedDataParallel.forward`` or ``Optimizer.step#SGD.step``.
    steps : rank, step, start_s, end_s of every marked step (a profiler trace's also ``label``,
        its ``ProfilerStep#N``).
    ranks : which ranks are in it.
    notes : what a reader of a real job's trace left out or assumed (:func:`labcore.readers.read_trace`).
    machine : the machine a trace says it ran on (GPU, compute capability, GPUs seen, nodes, NCCL).

    Example
    -------
    >>> rec = combine(cl.run(train_and_record))          # doctest: +SKIP
    >>> rec.summary()                                     # doctest: +SKIP
    """

    name: str
    world_size: int
    backend: str
    frame: "object"
    scopes: "object"
    steps: "object"
    ranks: tuple = ()
    origin_ns: int = 0
    _windows: dict = field(default_factory=dict, repr=False)
    notes: list = field(default_factory=list)
    machine: dict = field(default_factory=dict)

    @classmethod
    def _from_rank(cls, name, rank, world, backend, t0, t1, frame, scopes, steps) -> "Recording":
        rec = cls(name, world, backend, frame, scopes, steps, (rank,), t0, {rank: (t0, t1)})
        return rec._rebase(t0)

    def _rebase(self, origin_ns: int) -> "Recording":
        """Express every time in seconds from ``origin_ns`` (kept in ``*_ns`` columns too)."""
        for df, cols in ((self.frame, ("issued", "start", "end")), (self.scopes, ("start", "end")),
                         (self.steps, ("start", "end"))):
            for c in cols:
                df[f"{c}_s"] = (df[f"{c}_ns"].astype(float) - origin_ns) / 1e9
        self.frame["time_us"] = (self.frame["end_ns"] - self.frame["start_ns"]) / 1e3
        self.origin_ns = origin_ns
        self.frame = self.frame[COLUMNS + ["issued_ns", "start_ns", "end_ns"]]
        return self

    @property
    def n_steps(self) -> int:
        return int(self.steps["step"].max()) + 1 if len(self.steps) else 0

    def step_times(self):
        """Duration of every marked step, in us, on its slowest rank (pandas Series by step)."""
        d = self.steps.assign(us=(self.steps["end_ns"] - self.steps["start_ns"]) / 1e3)
        return d.groupby("step")["us"].max()

    def collectives(self, rank: int | None = None):
        """Rows of one rank (default: the lowest), without the bookkeeping ``*_ns`` columns."""
        rank = min(self.ranks) if rank is None else rank
        return self.frame[self.frame["rank"] == rank][COLUMNS].reset_index(drop=True)

    def summary(self, by: str = "op"):
        """Per step: calls, bytes and the bytes each rank sends, by op (``by="op"``) or by rank.

        ``bytes`` sums nccl-tests' sizes; ``sent_bytes`` is what each rank puts on the wire with
        a bandwidth-optimal algorithm (size x nccl-tests' busbw factor: 2(n-1)/n for all_reduce,
        (n-1)/n for all_gather and reduce_scatter, 1 for broadcast and send). With ``by="op"``
        the numbers are per rank (the lowest rank of the recording).
        """
        import pandas as pd

        if by not in ("op", "rank"):
            raise ValueError(f"by must be 'op' or 'rank', not {by!r}")
        df = self.frame.copy()
        df["sent_bytes"] = [b * _busbw_factor(op, n) for b, op, n in zip(df["bytes"], df["op"], df["group_size"])]
        if by == "op":
            df = df[df["rank"] == min(self.ranks)]
        keys = ["step", by]
        out = df.groupby(keys).agg(calls=("op", "size"), bytes=("bytes", "sum"), sent_bytes=("sent_bytes", "sum"),
                                   time_us=("time_us", "sum"))
        return out if len(out) else pd.DataFrame(columns=["calls", "bytes", "sent_bytes", "time_us"])

    def bandwidth(self, rank: int | None = None):
        """:meth:`collectives` of one rank with each one's ``algbw_gbs`` (bytes / time) and ``busbw_gbs``
        (algbw x nccl-tests' factor for its op and group size), GB = 1e9 bytes, as nccl-tests counts.

        Example
        -------
        >>> rec.bandwidth()[["op", "bytes", "time_us", "busbw_gbs"]]      # doctest: +SKIP
        """
        rows = self.collectives(rank)
        algbw = rows["bytes"] / rows["time_us"].where(rows["time_us"] > 0) / 1e3
        factor = [_busbw_factor(op, n) for op, n in zip(rows["op"], rows["group_size"])]
        return rows.assign(algbw_gbs=algbw, busbw_gbs=algbw * factor)

    def exposed(self, by: str = "step"):
        """Per rank and step (``by="rank"``: per rank, all steps at once), how much communication ran
        with no compute beside it, in us.

        ``comm_us`` is the time any collective ran (their union, start to end), ``hidden_us`` the
        part of it during which a compute scope also ran (on a trace, a compute kernel on the GPU),
        ``exposed_us`` the rest: communication nothing hid. ``exposed_share`` = exposed / comm.
        (HolisticTraceAnalysis's ``get_comm_comp_overlap`` is hidden / comm over the whole trace.)

        Example
        -------
        >>> rec.exposed()                     # doctest: +SKIP
        """
        import pandas as pd

        if by not in ("step", "rank"):
            raise ValueError(f"by must be 'step' or 'rank', not {by!r}")
        keys = ["rank", "step"] if by == "step" else ["rank"]
        f, sc = self.frame, self.scopes
        scopes = dict(list(sc.groupby(keys)))
        rows = []
        for key, g in f[f["start_ns"].notna() & f["end_ns"].notna()].groupby(keys):
            comm, busy = comm_and_busy(g, scopes.get(key, sc.iloc[:0]))
            total, hidden = intervals.length(comm), intervals.length(intervals.intersect(comm, busy))
            rows.append(dict(zip(keys, key if by == "step" else (key[0] if isinstance(key, tuple) else key,))) | dict(
                comm_us=total / 1e3, hidden_us=hidden / 1e3, exposed_us=(total - hidden) / 1e3,
                exposed_share=(total - hidden) / total if total else 0.0))
        return pd.DataFrame(rows, columns=keys + ["comm_us", "hidden_us", "exposed_us", "exposed_share"])

    def exposed_spans(self, rank: int, step: int) -> list[tuple[float, float]]:
        """The spans (start_s, end_s) of one rank's step when communication ran with no compute beside it."""
        f, sc = self.frame, self.scopes
        g = f[(f["rank"] == rank) & (f["step"] == step) & f["start_ns"].notna() & f["end_ns"].notna()]
        comm, busy = comm_and_busy(g, sc[(sc["rank"] == rank) & (sc["step"] == step)])
        hidden = intervals.intersect(comm, busy)
        out, j = [], 0
        for a, b in comm:             # comm minus hidden: hidden spans lie inside comm's, in order
            while j < len(hidden) and hidden[j][1] <= b:
                if hidden[j][0] > a:
                    out.append((a, hidden[j][0]))
                a = hidden[j][1]
                j += 1
            if b > a:
                out.append((a, b))
        return [((a - self.origin_ns) / 1e9, (b - self.origin_ns) / 1e9) for a, b in out]

    def __repr__(self) -> str:
        ops = self.collectives()["op"].value_counts()
        listing = ", ".join(f"{op} {n}" for op, n in ops.items()) or "no collectives"
        return (f"<Recording {self.name!r}: ranks {list(self.ranks)} of {self.world_size}, {self.backend}, "
                f"{self.n_steps} step(s); per rank: {listing}>")


def comm_and_busy(rows, scopes) -> tuple[list, list]:
    """Unions (ns) of the collectives' spans and of the compute scopes (waits left out)."""
    comm = intervals.union(zip(rows["start_ns"], rows["end_ns"]))
    busy = intervals.union((a, b) for a, b, n in zip(scopes["start_ns"], scopes["end_ns"], scopes["name"])
                  if "wait" not in n.lower())
    return comm, busy


def _busbw_factor(op: str, n: int) -> float:
    """nccl-tests' factor of a collective (:mod:`labcore.collectives`); 1 for an op it does not describe."""
    spec = _collectives.COLLECTIVES.get(op)
    return 0.0 if n <= 1 else spec.busbw_factor(n) if spec else 1.0


def combine(recordings) -> Recording:
    """Join the per-rank :class:`Recording` objects of one recorded run into one.

    Times are re-based to the earliest start among the ranks (ranks on one machine share a
    clock; across machines, their clocks' offset shows up as skew).

    Example
    -------
    >>> rec = combine(cl.run(train_and_record))    # doctest: +SKIP
    """
    import pandas as pd

    recs = list(recordings)
    if not recs or not all(isinstance(r, Recording) for r in recs):
        raise TypeError("combine() takes the Recording of every rank, e.g. combine(cl.run(fn)) where fn "
                        "returns rec.recording()")
    names, worlds = {r.name for r in recs}, {r.world_size for r in recs}
    if len(worlds) > 1:
        raise ValueError(f"these recordings come from clusters of {sorted(worlds)} ranks; combine the "
                         "ranks of one run")
    ranks = sorted(r for rec in recs for r in rec.ranks)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"rank(s) {sorted({r for r in ranks if ranks.count(r) > 1})} appear twice; combine "
                         "the ranks of one run")
    if len(names) > 1:
        raise ValueError(f"these are different recordings ({', '.join(sorted(names))}); combine one at a time")
    origin = min(min(w[0] for w in r._windows.values()) for r in recs)
    out = Recording(recs[0].name, recs[0].world_size, recs[0].backend,
                    pd.concat([r.frame for r in recs], ignore_index=True),
                    pd.concat([r.scopes for r in recs], ignore_index=True),
                    pd.concat([r.steps for r in recs], ignore_index=True),
                    tuple(ranks), origin, {k: v for r in recs for k, v in r._windows.items()})
    out = out._rebase(origin)
    out.frame = out.frame.sort_values(["issued_ns", "rank"], kind="stable").reset_index(drop=True)
    out.notes = [n for r in recs for n in r.notes]
    out.machine = next((r.machine for r in recs if r.machine), {})
    return out
