"""torch's flight recorder on a lab cluster: every rank's dump, one analysis by torch's own fr_trace.

With ``TORCH_FR_BUFFER_SIZE=N`` each rank keeps its last N collectives in a ring
buffer: group, sequence number, op, sizes, dtypes and the Python stack that issued
it. Under NCCL the watchdog writes that buffer to ``TORCH_FR_DUMP_TEMP_FILE<rank>``
when a collective times out (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``), and torch's analyzer
(``python -m torch.distributed.flight_recorder.fr_trace DIR``) reads the dumps of
all ranks to find the first collective the ranks disagree on.

torch 2.13's gloo records the same entries but (checked in the lab) writes no dump
when its own timeout fires, and leaves the dump's group table (``pg_config``)
empty, which fr_trace needs to know which ranks belong to which group. So
:func:`capture` runs a function on every rank with a small watchdog thread that
dumps the buffer once the call has run ``dump_after_s`` (and again whenever it
changes, and at the end), with the group table filled in from
``torch.distributed``; then it runs torch's analyzer on the dumps. The dumps live
in a run folder of the notebook (``labcore-<pid>-*``) that is removed before :func:`capture`
returns, or by the next cluster's sweep if the notebook died.

Dumps are untrusted input. A dump is a pickle, and unpickling runs whatever code a crafted
file names; dumps of real jobs get copied and shared. So the lab never calls ``pickle.load``
on one (nor torch's ``read_dump``, which does): :func:`load_dump` reads a regular file of at
most 64 MiB with an unpickler that builds plain data only (dicts, lists, tuples, strings,
bytes, numbers, booleans, None: all that torch's recorder writes, checked on dumps of a gloo
cluster with :data:`ENV`) and refuses any class or function, then checks the dump's layout;
a file that is anything else is one ``ValueError`` naming it.

Example
-------
>>> import labcore as lc
>>> from labcore.live import flight
>>> from labcore.exercises import hang_cases
>>> with lc.Cluster(4, backend="gloo", timeout=3, env=flight.ENV) as cl:   # doctest: +SKIP
...     fa = flight.capture(cl, hang_cases.skipped_collective, culprit=2)
>>> fa.culprits                                                               # doctest: +SKIP
[2]
"""
from __future__ import annotations

import io
import logging
import math
import os
import pickle
import threading
import time
import warnings
from dataclasses import dataclass, field

from labcore.live import scratch
from labcore.live.errors import ClusterError

__all__ = ["ENV", "PREFIX", "MAX_DUMP_BYTES", "FlightAnalysis", "capture", "analyze", "dump", "load_dump"]

#: The cluster environment that turns the recorder on (entries kept per rank).
ENV = {"TORCH_FR_BUFFER_SIZE": "1000"}
#: Dump file names: PREFIX + global rank, as fr_trace expects.
PREFIX = "fr_trace_rank_"
#: The largest dump read (a ring buffer of 1,000 entries with stacks is a few MiB).
MAX_DUMP_BYTES = 64 << 20
_POLL_S = 0.05
# What fr_trace and the lab read of every entry.
_ENTRY_KEYS = ("record_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name", "input_sizes",
               "output_sizes", "state")


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain data only; a reference to any class or function (what running code needs) is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}, and a dump holds plain data only")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it refers to an object outside the file")


def _plain(data: bytes):
    """``data`` unpickled as plain data (see :class:`_PlainUnpickler`)."""
    return _PlainUnpickler(io.BytesIO(data)).load()


# -- on the ranks ----------------------------------------------------------------------------
def _group_table() -> dict:
    """``pg_config`` as NCCL fills it: group name -> its description and global ranks."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _world

    table = {}
    for pg, name in list(_world.pg_names.items()):
        try:
            ranks = dist.get_process_group_ranks(pg)
        except (RuntimeError, ValueError):
            continue  # a group this rank is not part of
        table[name] = {"name": name, "desc": getattr(pg, "group_desc", "undefined"), "ranks": str(ranks)}
    return table


def _trace(since_record: int = -1, stacks: bool = True) -> dict:
    import torch

    trace = _plain(torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=stacks))
    trace["entries"] = [e for e in trace.get("entries", []) if e["record_id"] > since_record]
    trace["pg_config"] = _group_table()
    return trace


def _progress(trace: dict) -> tuple:
    """What changes when a collective is enqueued or completes (to skip identical dumps)."""
    status = trace.get("pg_status", {})
    return tuple(sorted((k, v.get("last_enqueued_collective"), v.get("last_completed_collective"))
                        for k, v in status.items())) + (len(trace["entries"]),)


def dump(path: str, since_record: int = -1, stacks: bool = True) -> dict:
    """Write this rank's flight-recorder trace to ``path`` (atomically) and return it.

    Call it on a rank. Entries with ``record_id <= since_record`` (earlier calls on
    a long-lived rank) are left out. ``stacks=False`` leaves out the Python stack
    of each entry: the first dump with stacks in a process symbolizes them, which
    took 0.8 s per rank with 2 ranks and 2.6 s with 4 ranks on a 2-core machine.
    """
    trace = _trace(since_record, stacks)
    partial = os.path.join(os.path.dirname(path), f".partial-{os.getpid()}")
    with open(partial, "wb") as f:
        pickle.dump(trace, f)
    os.replace(partial, path)
    return trace


def _last_record_id() -> int:
    import torch

    entries = _plain(torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False))["entries"]
    return max((e["record_id"] for e in entries), default=-1)


def _watch(path: str, since: int, dump_after_s: float, done: threading.Event) -> None:
    if done.wait(dump_after_s):
        return
    last = None
    while True:
        trace = _trace(since, stacks=False)
        if _progress(trace) != last:
            last = _progress(trace)
            dump(path, since, stacks=False)
        if done.wait(_POLL_S * 4):
            return


def _recorded(fn, args, kwargs, folder: str, dump_after_s: float, stacks: bool):
    """Run ``fn`` on this rank with the recorder's watchdog; always leave a final dump."""
    import torch.distributed as dist

    if not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        raise RuntimeError("the flight recorder is off on this rank: create the cluster with "
                           "env=labcore.live.flight.ENV (TORCH_FR_BUFFER_SIZE)")
    path = os.path.join(folder, f"{PREFIX}{dist.get_rank()}")
    since = _last_record_id()
    done = threading.Event()
    watchdog = threading.Thread(target=_watch, args=(path, since, dump_after_s, done),
                                name="labcore-fr-watchdog", daemon=True)
    watchdog.start()
    returned = False
    try:
        result = fn(*args, **kwargs)
        returned = True
        return result
    finally:
        done.set()
        watchdog.join()
        if returned:
            _settle(since)
        dump(path, since, stacks)


def _settle(since: int, wait_s: float = 0.5) -> None:
    """Wait (briefly) until the recorder marks this rank's finished collectives completed.

    gloo marks an entry completed from its own thread, shortly after the call
    returned to Python; a dump taken at once can still show it pending.
    """
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        status = _trace(since, stacks=False).get("pg_status", {}).values()
        if all(s.get("last_completed_collective", -1) >= s.get("last_enqueued_collective", -1)
               for s in status):
            return
        time.sleep(0.01)


# -- in the notebook -------------------------------------------------------------------------
@dataclass
class FlightAnalysis:
    """torch's flight-recorder analysis of one call on every rank.

    Attributes
    ----------
    world_size : int
    dumped, missing : list[int]
        Ranks that left a dump, and ranks that did not (killed before their watchdog
        wrote one, or never started the call).
    collectives : list
        torch's ``Collective`` records (``fr_trace``'s database), in matching order;
        ``pass_check`` is False where the ranks disagreed.
    text : str
        What torch's analyzer printed.
    last_entered : dict[int, dict]
        Per rank, the last collective it enqueued: op, sequence number, sizes,
        whether it completed (from the dump's ``pg_status``).
    error : Exception or None
        What the call raised in the notebook (``CollectiveTimeout``, ``RankDied``, ...).
    elapsed_s : float
        From the call's start to the analysis being ready.
    """

    world_size: int
    dumped: list
    missing: list
    collectives: list
    text: str
    last_entered: dict = field(default_factory=dict)
    error: Exception | None = None
    elapsed_s: float = 0.0

    @property
    def first_mismatch(self):
        """The first collective torch's analyzer flagged (mismatched or missing ranks), or None."""
        return next((c for c in self.collectives if not c.pass_check or c.missing_ranks), None)

    @property
    def torch_culprits(self) -> list[int]:
        """The ranks torch's analyzer names at the first flagged collective.

        Either the ranks missing from it, or those whose entry differs from the
        reference rank's (the first rank fr_trace reads; here, rank 0 or the lowest
        rank that dumped). With no flagged collective: the ranks that left no dump.
        """
        c = self.first_mismatch
        if c is None:
            return list(self.missing)
        if c.missing_ranks:
            return sorted(c.missing_ranks)
        return sorted(c.mismatch_collectives or {})

    @property
    def culprits(self) -> list[int]:
        """:attr:`torch_culprits`, read as a majority vote.

        fr_trace compares every rank with its reference rank and blames those that
        differ; when it blames more than half of the ranks that dumped, the odd one
        out is the reference itself.
        """
        named = self.torch_culprits
        c = self.first_mismatch
        if c is not None and not c.missing_ranks and 2 * len(named) > len(self.dumped):
            return sorted(set(self.dumped) - set(named))
        return named

    def __str__(self) -> str:
        return self.describe()

    def describe(self, verdict: bool = True) -> str:
        """What each rank's dump says and fr_trace's first mismatch; with ``verdict``, also the
        culprit the lab reads from them (an exercise leaves that to the learner)."""
        lines = [f"flight recorder: dumps from ranks {self.dumped}"
                 + (f", none from {self.missing}" if self.missing else "")]
        for rank in self.dumped:
            e = self.last_entered.get(rank)
            if e is None:
                lines.append(f"  rank {rank}: no collective recorded in this call")
                continue
            state = "completed" if e["completed"] else "NOT completed"
            lines.append(f"  rank {rank}: last entered {e['op']} #{e['seq']} (group {e['group']}, "
                         f"input sizes {e['input_sizes']}), {state}")
        c = self.first_mismatch
        if c is None:
            lines.append("fr_trace: every recorded collective matched on every rank that dumped.")
            return "\n".join(lines)
        if c.missing_ranks:
            kind = f"ranks {sorted(c.missing_ranks)} never entered it"
        else:
            kinds = {m.type_of_mismatch.state.name for m in (c.mismatch_collectives or {}).values()}
            kind = f"{', '.join(sorted(kinds))} against rank {self.dumped[0]}'s entry, on ranks {self.torch_culprits}"
        lines.append(f"fr_trace: first mismatch at {c.collective_name} #{c.collective_seq_id} "
                     f"(group {c.pg_desc}): {kind}")
        if verdict:
            lines.append(f"culprit (majority reading): rank(s) {self.culprits}")
        return "\n".join(lines)


def _last_entered(trace: dict) -> dict | None:
    entries = [e for e in trace["entries"] if not e.get("is_p2p")] or trace["entries"]
    if not entries:
        return None
    e = entries[-1]
    name, desc = e["process_group"]
    done = trace.get("pg_status", {}).get(name, {}).get("last_completed_collective", -1)
    seq = e["p2p_seq_id"] if e.get("is_p2p") else e["collective_seq_id"]
    return {"op": e["profiling_name"], "seq": seq, "group": desc, "input_sizes": e["input_sizes"],
            "completed": bool(not e.get("is_p2p") and done >= e["collective_seq_id"])}


def load_dump(path) -> dict:
    """One rank's dump as plain data, read safely (see the module): a dict with ``version``,
    ``entries`` (each with the keys fr_trace reads) and ``pg_config``.

    Raises ValueError naming the file when it is not a regular file of at most
    :data:`MAX_DUMP_BYTES`, not a pickle of plain data, or not a flight-recorder dump.
    """
    from labcore.files import read_bytes_limited

    data = read_bytes_limited(path, MAX_DUMP_BYTES, "a flight-recorder dump", fix="remove it, or dump again")
    try:
        trace = _plain(data)
    except Exception as exc:  # noqa: BLE001 - whatever a malformed pickle raises, one line naming the file
        raise _unreadable(path, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    why = _layout_problem(trace)
    if why:
        raise _unreadable(path, why)
    return trace


def _unreadable(path, why: str) -> ValueError:
    return ValueError(f"{path} is not a readable flight-recorder dump ({why}); remove it, or dump again")


def _layout_problem(trace) -> str | None:
    """What is missing for this to be torch's dump, or None."""
    if not isinstance(trace, dict):
        return f"it holds a {type(trace).__name__}, not the dump's dict"
    missing = [k for k in ("version", "entries", "pg_config") if k not in trace]
    if missing:
        return f"it has no {', '.join(missing)}"
    if not isinstance(trace["entries"], list) or not isinstance(trace["pg_config"], dict):
        return "its entries are not a list, or its pg_config not a dict"
    status = trace.get("pg_status", {})
    if not isinstance(status, dict) or not all(isinstance(v, dict) for v in status.values()):
        return "its pg_status is not a table of groups"
    for i, entry in enumerate(trace["entries"]):
        lacks = [k for k in _ENTRY_KEYS if not isinstance(entry, dict) or k not in entry]
        if lacks:
            return f"entry {i} has no {', '.join(lacks)}"
        group = entry["process_group"]
        if not isinstance(group, (list, tuple)) or len(group) != 2:
            return f"entry {i}'s process_group is not (name, description)"
    return None


def analyze(folder: str, world_size: int) -> FlightAnalysis:
    """Run torch's fr_trace analyzer on the dumps in ``folder`` (``PREFIX<rank>`` files).

    Each dump is read with :func:`load_dump` (dumps are untrusted input: no code in one runs).
    Ranks without a dump are allowed (``--allow-incomplete-ranks``); they are listed in
    ``missing``. A dump that cannot be read, or that torch's analyzer cannot match up, is one
    ValueError naming the file or the dumps.
    """
    from labcore import validate

    world_size = validate.whole_number(world_size, "world_size", least=1,
                                       must="a positive int (the ranks that should have dumped)")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no dump folder {folder!r}")
    files = {int(f[len(PREFIX):]): os.path.join(folder, f) for f in os.listdir(folder)
             if f.startswith(PREFIX) and f[len(PREFIX):].isdigit()}
    traces = {rank: load_dump(path) for rank, path in sorted(files.items())}
    last = {rank: entry for rank, trace in traces.items() if (entry := _last_entered(trace)) is not None}
    missing = [r for r in range(world_size) if r not in files]
    if not files:
        return FlightAnalysis(world_size, [], missing, [], "no rank left a dump", last)
    text, collectives = _run_fr_trace(files, traces)
    return FlightAnalysis(world_size, sorted(files), missing, collectives, text, last)


def _run_fr_trace(files: dict[int, str], traces: dict[int, dict]) -> tuple[str, list]:
    """torch's analyzer on the dumps in rank order (so rank 0 is its reference), its log captured.

    The dumps are handed over as read by :func:`load_dump`, in the form of torch's own
    ``read_dump`` (which unpickles the files itself, and is not used).
    """
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger

    log = FlightRecorderLogger().logger
    buffer = io.StringIO()
    capture = logging.StreamHandler(buffer)
    capture.setFormatter(logging.Formatter("%(message)s"))
    saved, log.handlers = log.handlers, [capture]
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig

        folder = os.path.dirname(next(iter(files.values())))
        args = JobConfig().parse_args([folder, "--allow-incomplete-ranks", "-p", PREFIX])
        details = {os.path.basename(files[rank]): dict(host_name=f"host_rank{rank}", rank=rank, entries=t["entries"],
                                                       version=t["version"], pg_config=t["pg_config"])
                   for rank, t in sorted(traces.items())}
        version = str(next(iter(details.values()))["version"])
        try:
            db = build_db(details, args, version)
        except Exception as exc:  # noqa: BLE001 - dumps that do not match up: one line naming them
            text = " ".join(str(exc).split())[:200]
            raise ValueError(f"torch's fr_trace could not match up the dumps in {folder} ({type(exc).__name__}"
                             f"{': ' + text if text else ''}); remove the dumps that are not of one job, or dump "
                             "again") from None
    finally:
        log.handlers = saved
    # builder warns once, at import, that the optional tabulate package is absent
    text = "\n".join(line for line in buffer.getvalue().splitlines() if not line.startswith("tabulate is"))
    return text.strip(), list(db.collectives)


def capture(cluster, fn, *args, dump_after_s: float = 0.5, timeout: float | None = None,
           stacks: bool = False, **kwargs) -> FlightAnalysis:
    """Run ``fn(*args, **kwargs)`` on every rank with the flight recorder dumping; analyse the dumps.

    Parameters
    ----------
    cluster : labcore.Cluster
        Created with ``env=flight.ENV`` (or any ``TORCH_FR_BUFFER_SIZE``).
    fn
        The per-rank function, as for ``cluster.run``.
    dump_after_s : float
        How long the call runs before each rank's watchdog dumps its buffer (then
        again on every change). Shorter than the call's timeout, so ranks that are
        stuck, and later killed, leave a dump.
    timeout : float, optional
        The call's timeout (default: the cluster's).
    stacks : bool
        Keep each entry's Python stack in the final dump of ranks that finish
        (fr_trace prints it as "collective stack trace"). Off by default: the first
        such dump in a process costs seconds (see :func:`dump`); watchdog dumps
        never carry stacks, and the lab's hang report has the stuck ranks' stacks.

    Returns
    -------
    FlightAnalysis
        With ``error`` set to what the call raised (a hang, a dead rank, ...):
        a failing call is what the recorder is for, so it is not re-raised.
    """
    if not callable(getattr(cluster, "call", None)):
        raise TypeError(f"flight.capture runs on a cluster (lc.Cluster(n, env=flight.ENV)), not {type(cluster).__name__}")
    if not callable(fn):
        raise TypeError(f"flight.capture needs the function to run on every rank, not {type(fn).__name__}")
    env_size = getattr(cluster, "env", {}).get("TORCH_FR_BUFFER_SIZE", "")
    if not env_size.isdigit() or int(env_size) < 1:
        raise ValueError("the flight recorder needs TORCH_FR_BUFFER_SIZE on the ranks: create the "
                         "cluster with lc.Cluster(n, env=labcore.live.flight.ENV)")
    call_timeout = cluster.timeout if timeout is None else timeout
    for name, value in (("dump_after_s", dump_after_s), ("timeout", call_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise ValueError(f"{name} must be a positive, finite number of seconds, not {value!r}")
    if dump_after_s >= call_timeout:
        raise ValueError(f"dump_after_s ({dump_after_s:g} s) must be shorter than the call's timeout "
                         f"({call_timeout:g} s), or stuck ranks are killed before they dump")
    # A run folder of this process: if the notebook is killed mid-call, the next cluster sweeps it.
    folder = scratch.make_run_dir()
    start = time.monotonic()
    try:
        error = None
        try:
            cluster.call(_recorded, (fn, args, kwargs, folder, float(dump_after_s), bool(stacks)), timeout=call_timeout)
        except ClusterError as exc:
            error = exc
        result = analyze(folder, cluster.world_size)
    finally:
        scratch.remove(folder)
    result.error = error
    result.elapsed_s = time.monotonic() - start
    return result


_warned_record = False


def record(*args, **kwargs) -> FlightAnalysis:
    """Deprecated (kept for one release): :func:`capture`, renamed so that it is not mistaken for
    :func:`labcore.live.recorder.record`, the collective recorder. Warns once, then forwards."""
    global _warned_record
    if not _warned_record:
        _warned_record = True
        warnings.warn("labcore.live.flight.record is deprecated: use labcore.live.flight.capture (the same "
                      "function; labcore.live.recorder.record is the collective recorder)", DeprecationWarning,
                      stacklevel=2)
    return capture(*args, **kwargs)
