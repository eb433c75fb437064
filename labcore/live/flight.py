"""torch's flight recorder on a lab cluster: every rank's dump, one analysis by torch's own fr_trace.

With ``TORCH_FR_BUFFER_SIZE=N`` each rank keeps its last N collectives in a ring
buffer: group, sequence number, op, sizes, dtypes and the Python stack that issued
it. Under NCCL the watchdog writes that buffer to ``TORCH_FR_DUMP_TEMP_FILE<rank>``
when a collective times out (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``), and torch's analyzer
(``python -m torch.distributed.flight_recorder.fr_trace DIR``) reads the dumps of
all ranks to find the first collective the ranks disagree on.

Both of torch's recorders are read (:mod:`labcore.live.fr_dumps`): NCCL's, where the GPU's
collectives are, and the CPU one, where gloo's are; a lab rank on NCCL has both.

torch 2.13's gloo records the same entries but (checked in the lab) writes no dump
when its own timeout fires, and leaves the dump's group table (``pg_config``)
empty, which fr_trace needs to know which ranks belong to which group. So
:func:`capture` runs a function on every rank with a small watchdog thread that
dumps the buffer once the call has run ``dump_after_s`` (and again whenever it
changes, and at the end), with the group table filled in from
``torch.distributed``; then it runs torch's analyzer on the dumps. The dumps live
in a run folder of the notebook (``labcore-<pid>-*``) that is removed before :func:`capture`
returns, or by the next cluster's sweep if the notebook died.

Reading the dumps safely and running torch's analyzer are the readers' part
(:mod:`labcore.readers.flight_dump`: :func:`~labcore.readers.flight_dump.load_dump`,
:func:`~labcore.readers.flight_dump.analyze`); this module is what runs on the ranks.

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

import math
import os
import pickle
import threading
import time

from labcore.live import fr_dumps, scratch
from labcore.live.errors import ClusterError
from labcore.readers.flight_dump import PREFIX, FlightAnalysis, analyze

__all__ = ["ENV", "capture", "dump"]

#: The cluster environment that turns the recorder on (entries kept per rank).
ENV = {"TORCH_FR_BUFFER_SIZE": "1000"}
_POLL_S = 0.05
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


def _trace(since: dict, stacks: bool = True) -> dict:
    """This rank's entries since ``since`` ({recorder: last record_id}) in torch's dump layout, both
    recorders' (:mod:`labcore.live.fr_dumps`) merged, renumbered and with the group table filled in."""
    merged = fr_dumps.read(stacks)
    entries = [e for e in merged["entries"] if fr_dumps.key(e)[1] > since.get(e["recorder"], -1)]
    trace = {"version": merged["version"], "pg_config": _group_table(), "pg_status": {}, "entries": [],
             "progress": merged["pg_status"]}
    # torch's fr_trace matches each group's entries by sequence number, and a group of both backends
    # numbers its CPU and its GPU collectives apart: such a group is shown as two, "<name>:<recorder>"
    both = {e["process_group"][0] for e in entries if e["recorder"] == "nccl"} & \
        {e["process_group"][0] for e in entries if e["recorder"] != "nccl"}
    for number, e in enumerate(entries):   # fr_trace aligns ranks on record ids rising in issue order
        name, desc = e["process_group"]
        if name in both:
            name = f"{name}:{e['recorder']}"
            row = trace["pg_config"].get(e["process_group"][0], {"desc": desc, "ranks": "[]"})
            trace["pg_config"][name] = dict(row, name=name, desc=f"{row['desc']} ({e['recorder']})")
        status = merged["pg_status"][e["recorder"]].get(e["process_group"][0])
        if status is not None:
            trace["pg_status"][name] = status
        trace["entries"].append(dict(e, record_id=number, process_group=(name, desc)))
    return trace


def _progress(trace: dict) -> tuple:
    """What changes when a collective is enqueued or completes (to skip identical dumps)."""
    return tuple(sorted((r, k, v.get("last_enqueued_collective"), v.get("last_completed_collective"))
                        for r, status in trace["progress"].items() for k, v in status.items())) \
        + (len(trace["entries"]),)


def dump(path: str, since: dict | None = None, stacks: bool = True) -> dict:
    """Write this rank's flight-recorder trace to ``path`` (atomically) and return it.

    Call it on a rank. Both of torch's recorders are read (NCCL's, in CUDA builds, and the CPU
    one). Entries at or before ``since`` ({recorder: record_id}: earlier calls on a long-lived
    rank) are left out. ``stacks=False`` leaves out the Python stack of each entry: the first
    dump with stacks in a process symbolizes them, which took 0.8 s per rank with 2 ranks and
    2.6 s with 4 ranks on a 2-core machine.
    """
    trace = _trace(since or {}, stacks)
    trace.pop("progress")
    partial = os.path.join(os.path.dirname(path), f".partial-{os.getpid()}")
    with open(partial, "wb") as f:
        pickle.dump(trace, f)
    os.replace(partial, path)
    return trace


def _last_record_ids() -> dict:
    """{recorder: its newest record_id}: where this call's entries begin."""
    since: dict = {}
    for e in fr_dumps.read(stacks=False)["entries"]:
        name, number = fr_dumps.key(e)
        since[name] = max(since.get(name, -1), number)
    return since


def _watch(path: str, since: dict, dump_after_s: float, done: threading.Event) -> None:
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
    since = _last_record_ids()
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


def _settle(since: dict, wait_s: float = 0.5) -> None:
    """Wait (briefly) until the recorder marks this rank's finished collectives completed.

    gloo marks an entry completed from its own thread, shortly after the call
    returned to Python; a dump taken at once can still show it pending.
    """
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        status = [s for groups in _trace(since, stacks=False)["progress"].values() for s in groups.values()]
        if all(s.get("last_completed_collective", -1) >= s.get("last_enqueued_collective", -1)
               for s in status):
            return
        time.sleep(0.01)


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
