"""Record every collective a training step issues: op, bytes, group, timing and the line that issued it.

Used on the ranks, around a training loop (DDP, FSDP2 ``fully_shard``, DTensor tensor
parallelism, ``ZeroRedundancyOptimizer`` or your own collectives)::

    with lc.live.record("ddp") as rec:
        for batch in batches:
            with rec.step():
                train_step(batch)
    return rec.recording()          # one rank's Recording; lc.readers.combine(...) joins the ranks

or in a notebook, ``%%ranks 4 --record ddp`` (the cell sees ``ddp`` as the recorder, the notebook
gets the combined :class:`Recording`).

What it builds on, and why
--------------------------
Nothing is patched: DDP's reducer calls the process group from C++, so wrapping
``torch.distributed`` functions would miss its buckets. Two records torch keeps anyway cover
everything that reaches a process group, whoever calls it:

* **the flight recorders** (c10d's ring buffers of the last ``TORCH_FR_BUFFER_SIZE`` collectives
  per process, 2000 by default in torch 2.13): gloo's in ``_dump_fr_trace()``, NCCL's in
  ``_dump_nccl_trace()`` (CUDA builds), both read (:mod:`labcore.live.fr_dumps`): the op, input and
  output sizes and dtypes,
  the process group, its sequence number, when it was issued and the Python stack that issued it.
  It is read once, when the recording is taken (``recording()``), not at every step: a dump
  costs about 10 us per buffered entry, and the first one in a process also imports
  torch._dynamo (1-2 s, ~80 MB);
* **the profiler**, limited to two record scopes (user scopes and autograd nodes): gloo runs
  each collective as a work item wrapped in a record function named ``gloo:<op>`` on its own
  thread, so its events give when the collective actually ran; they also carry gloo's
  point-to-point calls, which its flight recorder skips, and show the compute around them
  (autograd nodes, ``DistributedDataParallel.forward``, ``Optimizer.step``, ``FSDP::`` scopes).
  Profiling every aten op instead (with arguments, the only place torch keeps ``async_op``)
  costs about 9 us per op when the profiler stops, 20% of a small DDP step.

So the recorder does not read the ``async_op`` argument; it reports what asynchrony buys:
``overlapped`` is True when the rank went on working while the collective ran: it issued another
collective, or entered a compute scope the profiler records (an autograd node in backward, a
``torch.profiler.record_function`` scope such as DDP's forward, an optimizer's step or FSDP's
phases). Forward compute outside any scope is invisible to it: wrap it in
``record_function("...")`` to have it count.

On NCCL the collectives run as CUDA kernels, and the recorder reads those: the profiler records
CUDA activity too, the block ends with a device synchronize (so every kernel launched in it is
in the profile), and each flight-recorder entry is paired with its ``nccl:<op>`` scope and the
kernels launched inside it (:func:`labcore.readers.profiler_trace.match_kernels`, the code that reads a real
job's trace): ``start_s``/``end_s`` are the kernels' GPU times, ``kernel``, ``algorithm``,
``protocol``, ``channels`` and ``threads`` what they say (:func:`labcore.readers.profiler_trace.kernel_choice`),
and ``overlapped`` is True when a compute kernel ran beside them on the GPU. c10d's watchdog
(which notices a start within its 100 ms loop, and times an entry only once it retires it) is not
read; a collective NCCL ran without a kernel (a one-rank group copies) keeps the flight
recorder's times where it has them.

Two gloo facts show up in recordings: gloo runs ``reduce_scatter`` as an all-reduce of the
whole buffer (``backend_op`` says so; ``op`` names what was asked, from the Python frame), and
its send/recv rows have no group or frame.

It returns a :class:`labcore.readers.recording.Recording` (its columns are described there), the
model a real job's profiler trace is read into too.

Example (on a rank)
-------------------
>>> with record("demo") as rec:                    # doctest: +SKIP
...     with rec.step():
...         dist.all_reduce(torch.ones(4))
>>> rec.recording().frame[["op", "bytes", "group_size"]]    # doctest: +SKIP
         op  bytes  group_size
0  all_reduce     16           2
"""
from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from labcore import collectives as _collectives
from labcore.live import fr_dumps
from labcore.live.context import backend_for
from labcore.readers import intervals
from labcore.readers.recording import ITEMSIZE, P2P, ROW, Recording, combine, from_profiling_name, nccl_tests_bytes

__all__ = ["record", "Recorder", "record_cell", "FR_ENV"]

FR_ENV = {"TORCH_FR_BUFFER_SIZE": "2000"}
"""Environment that keeps the flight recorder on (pass to ``lc.Cluster(n, env=FR_ENV)``)."""
# see Recorder.__exit__: a margin for a worker thread that waits for a core on a busy machine (the lost times first
# blamed on a 50 ms grace came from runs begun out of queue order, mended in _match_runs; the margin stays)
_GLOO_SCOPE_GRACE_S = 0.5

# what a row has where no NCCL kernel ran it (gloo)
_NO_KERNEL = dict(peer=-1, kernel="", algorithm="", protocol="", channels=-1, threads=-1)
# the profiler's dtype names (gloo's point-to-point events) -> bytes per element
_PROFILER_ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                      "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1}


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


def _c10d_api_file(filename: str) -> bool:
    return filename.endswith(("distributed_c10d.py", "c10d_logger.py"))


def _frames(frames: list[dict], torch_dir: str) -> tuple[str, str, str]:
    """(api function, torch caller, user frame) from a flight-recorder stack, innermost first."""
    api = frames[0]["name"] if frames and _c10d_api_file(frames[0]["filename"]) else ""
    via = user = ""
    for fr in frames:
        name, filename = fr["name"], fr["filename"]
        inside = filename.startswith(torch_dir)
        if inside and not via and not _c10d_api_file(filename):
            module = filename[len(torch_dir):].removesuffix(".py").replace(os.sep, ".")
            via = f"torch.{module}.{name}"
        if not inside and "labcore" + os.sep + "live" not in filename and "multiprocessing" not in filename:
            user = f"{name} ({os.path.basename(filename)}:{fr['line']})"
            break
    return api, via, user


def _numel(sizes) -> int:
    return int(sum(int(np.prod(s)) if len(s) else 1 for s in sizes)) if sizes else 0


def _nbytes(sizes, dtypes) -> int:
    return int(sum((int(np.prod(s)) if len(s) else 1) * ITEMSIZE.get(d, 4) for s, d in zip(sizes, dtypes)))


@contextlib.contextmanager
def _quiet_stderr():
    """kineto prints a 'USDT ... profiler_start/stop' line to fd 2 at each start and stop; drop them."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _profiler_config():
    from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig

    # record_shapes on: with these two scopes only a few events per step carry them
    return ProfilerConfig(ProfilerState.KINETO, True, False, False, False, False, _ExperimentalConfig(), "")


def _start_profiler(cuda: bool = False) -> None:
    from torch._C._autograd import _enable_profiler, _prepare_profiler, _profiler_enabled
    from torch._C._profiler import ProfilerActivity, RecordScope

    if _profiler_enabled():
        raise RuntimeError("a torch profiler, or another record() block, is already running on this rank; "
                           "the recorder uses the profiler too, so record() blocks do not nest: end that one "
                           "first (or record outside it) and try again")
    activities = {ProfilerActivity.CPU, ProfilerActivity.CUDA} if cuda else {ProfilerActivity.CPU}
    with _quiet_stderr():
        _prepare_profiler(_profiler_config(), activities)
        _enable_profiler(_profiler_config(), activities, {RecordScope.USER_SCOPE, RecordScope.BACKWARD_FUNCTION})


def _stop_profiler():
    """Stop the profiler; its result is read later (:func:`_events`), outside the recorded step."""
    from torch._C._autograd import _disable_profiler

    with _quiet_stderr():
        return _disable_profiler()


def _gpu_events(result):
    """The profile's NCCL scopes, CUDA launches and kernels (:class:`labcore.readers.profiler_trace.Events`), read from
    the profiler's own Kineto JSON (the only place its kernels' launch sizes are), in a folder removed after."""
    import tempfile

    from labcore.readers import profiler_trace

    with tempfile.TemporaryDirectory(prefix="labcore-profile-") as tmp:
        path = os.path.join(tmp, "profile.json")
        result.save(path)
        return profiler_trace.Events.from_trace(profiler_trace.load_trace(path, limit=1 << 30), "this rank's profile")


def _events(result) -> list[tuple]:
    """The profiler's events as (name, thread, start_ns, end_ns, shapes, dtypes)."""
    return [(e.name(), e.start_thread_id(), e.start_ns(), e.end_ns(), [list(s) for s in e.shapes()],
             list(e.dtypes())) for e in result.events()]


class Recorder:
    """Context manager that records the collectives issued on this rank while it is open.

    Parameters
    ----------
    name : str
        Label of the recording (shown in figures and replays).

    Use :meth:`step` to mark training steps (the summary and the replay work per step); without
    it the whole recording is step 0. :meth:`recording` reads the flight recorder and returns
    this rank's :class:`Recording`; a Recorder sent back from a rank (returned by a function
    given to ``Cluster.run``, or pulled by ``%%ranks``) travels as that Recording.
    """

    def __init__(self, name: str = "recording"):
        self.name = str(name)
        self._t0 = self._t1 = None
        self._steps: list[tuple[int, int]] = []
        self._events: list[tuple] = []
        self._profile = None
        self._nccl, self._sm = False, None
        self._gpu = None          # on NCCL: the profile's CUDA kernels and launches (profiler_trace.Events)
        self._result: Recording | None = None

    def __enter__(self) -> "Recorder":
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("record() runs on a rank, after init_process_group: use it inside a "
                               "function given to Cluster.run, in a %%ranks cell, or under torchrun")
        if self._t0 is not None:
            raise RuntimeError(f"recording {self.name!r} was already used; start a new one with record()")
        if os.environ.get("TORCH_FR_BUFFER_SIZE", "").strip() == "0":
            raise RuntimeError("the flight recorder is off on this rank (TORCH_FR_BUFFER_SIZE=0) and the "
                               "recorder reads it: start the ranks with lc.Cluster(n, env=lc.live.FR_ENV)")
        # on NCCL the collectives run as CUDA kernels: profile them too (their GPU start and end)
        self._nccl = backend_for("cuda") == "nccl"   # a group's cuda part: "cpu:gloo,cuda:nccl" on a lab NCCL rank
        _start_profiler(cuda=self._nccl)
        self._t0 = time.time_ns()
        return self

    def __exit__(self, *exc) -> None:
        self._t1 = time.time_ns()
        if self._nccl:
            import torch

            torch.cuda.synchronize()      # every kernel launched in the block has ended, so the profile has it
            major, minor = torch.cuda.get_device_capability()
            self._sm = 10 * major + minor
        else:
            # gloo wakes the waiter of a finished collective before its worker thread closes the run's
            # profiler scope; a moment's grace keeps the block's last collective in the profile
            time.sleep(_GLOO_SCOPE_GRACE_S)
        self._profile = _stop_profiler()
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _world

        self._rank, self._world = dist.get_rank(), dist.get_world_size()
        self._backend = str(dist.get_backend())
        # process group name -> global ranks (the flight recorder names groups, not their members)
        self._groups = {pg.group_name: tuple(dist.get_process_group_ranks(pg)) for pg in _world.pg_map}

    @contextlib.contextmanager
    def step(self):
        """Mark one training step: ``with rec.step(): train_step()``."""
        if self._t0 is None or self._t1 is not None:
            raise RuntimeError("rec.step() works inside `with record(...) as rec:`")
        start = time.time_ns()
        try:
            yield len(self._steps)
        finally:
            self._steps.append((start, time.time_ns()))

    def recording(self) -> "Recording":
        """This rank's :class:`Recording` (reads the flight recorder the first time)."""
        if self._t1 is None:
            raise RuntimeError("the recording is read after the `with record(...)` block has ended")
        if self._result is None:
            dump = fr_dumps.read()
            if self._nccl:
                self._gpu = _gpu_events(self._profile)
            self._events, self._profile = _events(self._profile), None
            self._result = _build(self, dump.get("entries", []))
        return self._result

    def __reduce__(self):
        return (_identity, (self.recording(),))

    def __repr__(self) -> str:
        state = "not started" if self._t0 is None else "recording" if self._t1 is None else "done"
        return f"<Recorder {self.name!r}: {state}, {len(self._steps)} step(s) marked>"


def _identity(x):
    return x


def record(name: str = "recording") -> Recorder:
    """A :class:`Recorder` for ``with record(name) as rec:`` on every rank."""
    return Recorder(name)


# The flight recorder stamps entries with the system clock, the profiler its events with a TSC clock
# converted to epoch time; the two disagree by microseconds, while a run always begins after its entry
# (see _match_runs): an entry counts as queued before a run up to this much after it.
_CLOCK_SKEW_NS = 1_000_000


def _match_runs(entries: list[dict], runs: list[tuple]) -> dict[int, tuple[int, int]]:
    """Pair flight-recorder entries with gloo's ``gloo:<op>`` work events: entry key -> (start, end).

    c10d records a gloo collective's entry under its group's queue lock, then queues the work
    (``ProcessGroupGloo::enqueue`` in torch/csrc/distributed/c10d/ProcessGroupGloo.cpp); the group's
    own worker threads (two by default) take work in queue order, and a run's profiler scope opens
    once a thread has taken it. A thread can lose its core between taking a work item and opening the
    scope, so runs taken at the same moment by different threads can begin out of queue order (seen
    on 2 busy cores: a step's second bucket began 5 us before its first). So a run pairs with the
    oldest unpaired entry of its name and input shape among the first few of a group's queue (as
    many as the group has threads), never with one stamped after the run began. Two runs of the
    same name and shape taken together are told apart by neither record; they pair in start order.
    Ties between groups go to the group the run's thread served before (a thread serves one group).
    """
    queues: dict[str, list[dict]] = {}
    for e in sorted(entries, key=fr_dumps.key):
        queues.setdefault(e["process_group"][0], []).append(e)
    # threads a group has: the profile's gloo threads shared among the groups that queued work
    window = max(1, -(-len({r[1] for r in runs}) // max(1, len(queues))))
    thread_group: dict[int, str] = {}
    out = {}
    for name, thread, start, end, shapes, _ in sorted(runs, key=lambda r: r[2]):
        best = None
        for g, q in queues.items():
            e = next((e for e in q[:window] if e["profiling_name"] == name
                      and e["time_created_ns"] <= start + _CLOCK_SKEW_NS
                      and (not shapes or [list(s) for s in e["input_sizes"]] == shapes)), None)
            if e is None:
                continue
            key = (thread_group.get(thread) != g, e["time_created_ns"])
            if best is None or key < best[0]:
                best = (key, g, e)
        if best is None:
            continue
        _, g, e = best
        queues[g].remove(e)
        thread_group[thread] = g
        out[fr_dumps.key(e)] = (start, end)
    return out


def _nccl_kernels(entries: list[dict], gpu, sm: int | None = None) -> tuple[dict, list[tuple]]:
    """On NCCL: entry key (:func:`labcore.live.fr_dumps.key`) -> the kernel columns of each flight-recorder entry whose ``nccl:<op>`` scope
    launched kernels (:func:`labcore.readers.profiler_trace.collective_row`), and the compute kernels as events.

    Entries and scopes of one profiling name are paired in issue order when they are as many, else
    each entry with the scope around its creation time (c10d records the entry inside the scope)."""
    from labcore.readers import profiler_trace

    found, _ = profiler_trace.match_kernels(gpu)
    launched = {c["scope"][:3]: c["kernels"] for c in found if c["scope"][3].startswith("nccl:")}
    compute = intervals.union((k[0], k[1]) for k in gpu.compute)
    scopes: dict[str, list] = {}
    for sc in sorted(gpu.scopes):
        scopes.setdefault(sc[3], []).append(sc)
    mine: dict[str, list] = {}
    for e in sorted(entries, key=lambda e: e["time_created_ns"]):
        mine.setdefault(e["profiling_name"], []).append(e)
    out = {}
    for name, es in mine.items():
        ss = scopes.get(name, [])
        pairs = list(zip(es, ss)) if len(ss) == len(es) else _pair_by_time(es, ss)
        for e, sc in pairs:
            ks = launched.get(sc[:3])
            if ks:
                op, peer = from_profiling_name(name)
                out[fr_dumps.key(e)] = profiler_trace.collective_row(op, peer, ks, compute, sm)
    return out, [(k[3].split("(", 1)[0], None, k[0], k[1], [], []) for k in gpu.compute]


def _pair_by_time(entries: list[dict], scopes: list[tuple]) -> list[tuple]:
    """Each entry with the first free scope whose span holds its creation time."""
    pairs, free = [], list(scopes)
    for e in entries:
        sc = next((sc for sc in free if sc[0] <= e["time_created_ns"] <= sc[1]), None)
        if sc is not None:
            free.remove(sc)
            pairs.append((e, sc))
    return pairs


def _step_of(t_ns: float, steps: list[tuple[int, int]]) -> int:
    if not steps:
        return 0
    for k, (a, b) in enumerate(steps):
        if a <= t_ns <= b:
            return k
    return -1


def _overrun(entries: list[dict], t0: int) -> bool:
    """True when a recorder's ring buffer is full and its oldest entry is newer than the block's start."""
    size = int(os.environ.get("TORCH_FR_BUFFER_SIZE", "2000") or 2000)
    for name in {e["recorder"] for e in entries}:
        own = [e["time_created_ns"] for e in entries if e["recorder"] == name]
        if len(own) >= size and min(own) > t0:
            return True
    return False


def _build(rec: Recorder, entries: list[dict]) -> "Recording":
    import pandas as pd

    t0, t1, steps = rec._t0, rec._t1, rec._steps
    torch_dir = _torch_dir()
    runs = [e for e in rec._events if e[0].startswith("gloo:") and e[0][5:] not in P2P and e[2] >= t0]
    mine = [e for e in entries if t0 <= e["time_created_ns"] <= t1]
    if runs and not mine:
        raise RuntimeError("the profiler saw collectives but the flight recorder kept none: it is off on "
                           "this rank; start the ranks with lc.Cluster(n, env=lc.live.FR_ENV)")
    if mine and _overrun(entries, t0):
        raise RuntimeError(f"recording {rec.name!r} was read too late: the flight recorder keeps the last "
                           f"{len(entries)} collectives and newer ones replaced the start of it; call "
                           "rec.recording() right after the recorded block, or raise TORCH_FR_BUFFER_SIZE")
    timed = _match_runs(mine, runs)
    kernels, gpu_compute = _nccl_kernels(mine, rec._gpu, rec._sm) if rec._gpu is not None else ({}, [])
    # the backends' own scopes (gloo's work items, NCCL's enqueue) are communication, not compute
    compute = [e for e in rec._events if not e[0].startswith(("gloo:", "nccl:"))] + gpu_compute
    # what the rank did besides communicating: compute scopes (not waits) and issuing collectives
    busy = [e[2] for e in compute if "wait" not in e[0].lower()]
    activity = np.sort(np.array(busy + [e["time_created_ns"] for e in mine], dtype=np.int64))
    rows = []
    for e in mine:
        api, via, user = _frames(e.get("frames", []), torch_dir)
        backend_op = e["profiling_name"]
        named, peer = from_profiling_name(backend_op)
        op = _collectives.TORCH_NAMES.get(api) or named
        ib, ob = _nbytes(e["input_sizes"], e["input_dtypes"]), _nbytes(e["output_sizes"], e["output_dtypes"])
        start, end = timed.get(fr_dumps.key(e), (None, None))
        gpu = kernels.get(fr_dumps.key(e))
        if gpu is not None:                                              # NCCL: its kernels' GPU times
            start, end = gpu.pop("start_ns"), gpu.pop("end_ns")
        elif start is None and e.get("time_discovered_started_ns"):     # a collective NCCL ran without a kernel
            start = e["time_discovered_started_ns"]
            if e.get("duration_ms") is not None:
                end = start + e["duration_ms"] * 1e6
        group = e["process_group"][0]
        ranks = rec._groups.get(group, ())
        rows.append(_row(rec, steps, op, ib, ob, (e["input_dtypes"] or e["output_dtypes"] or [""])[0], group,
                         ranks, len(ranks) or rec._world, -1 if op in ("send", "recv") else int(e["collective_seq_id"]),
                         e["time_created_ns"], start, end, activity, user, via or api, backend_op,
                         gpu or dict(_NO_KERNEL, peer=peer)))
    for name, _thread, start, end, shapes, dtypes in rec._events:
        if name.startswith("gloo:") and name[5:] in P2P and t0 <= start <= t1:
            # gloo's flight recorder skips send/recv: bytes from the profiler's shapes, no group or frame
            nbytes = sum(_numel([s]) * _PROFILER_ITEMSIZE.get(d, 4) for s, d in zip(shapes, dtypes))
            op = "send" if name == "gloo:send" else "recv"
            rows.append(_row(rec, steps, op, nbytes, nbytes, dtypes[0] if dtypes else "", "", (), 2, -1, start,
                             start, end, activity, "", "", name))
    frame = pd.DataFrame(rows, columns=ROW)
    frame = frame.sort_values("issued_ns", kind="stable").reset_index(drop=True)
    scopes = pd.DataFrame([(rec._rank, _step_of(a, steps), e[0], a, b) for e in compute for a, b in [e[2:4]]
                           if t0 <= a <= t1],
                          columns=["rank", "step", "name", "start_ns", "end_ns"])
    step_frame = pd.DataFrame([(rec._rank, k, a, b) for k, (a, b) in enumerate(steps or [(t0, t1)])],
                              columns=["rank", "step", "start_ns", "end_ns"])
    return Recording._from_rank(rec.name, rec._rank, rec._world, rec._backend, t0, t1, frame, scopes, step_frame)


def _row(rec, steps, op, in_bytes, out_bytes, dtype, group, ranks, group_size, seq, created, start, end, activity,
         user, via, backend_op, kernel=_NO_KERNEL):
    """One frame row; ``kernel`` holds the kernel columns (and, on NCCL, ``overlapped`` from the GPU)."""
    kernel = dict(kernel)
    overlapped = kernel.pop("overlapped", None)
    if overlapped is None and end is not None:
        # did the rank do anything (compute, issue another collective) while this one was in flight?
        i = np.searchsorted(activity, created, side="right")
        overlapped = bool(i < activity.size and activity[i] < end)
    row = dict(rank=rec._rank, step=_step_of(created, steps), op=op, bytes=nccl_tests_bytes(op, in_bytes, out_bytes),
               in_bytes=in_bytes, out_bytes=out_bytes, dtype=dtype.lower(), group=group, group_ranks=tuple(ranks),
               group_size=group_size, seq=seq, overlapped=overlapped, frame=user, via=via, backend_op=backend_op,
               issued_ns=created, start_ns=np.nan if start is None else start, end_ns=np.nan if end is None else end,
               **kernel)
    return [row[c] for c in ROW]


# Names every %%ranks cell finds defined on the ranks, and the recorder's own import.
_CELL_NAMES = ("torch", "dist", "rank", "world_size", "device", "_labcore_recorder")


def check_recording_name(name) -> str:
    """``name`` if the recording can be bound to it on the ranks without hiding what a cell uses."""
    import keyword

    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"--record needs a Python name for the recording, not {name!r}")
    if name in _CELL_NAMES:
        raise ValueError(f"--record {name} would hide the ranks' {name!r}, which cells use; choose another "
                         "name such as rec")
    return name


def record_cell(cluster, name: str, cell: str, timeout: float | None = None):
    """Run a ``%%ranks`` cell under a recorder called ``name``; return (the cell's values, Recording).

    On the ranks the cell sees ``name`` as the :class:`Recorder` (``with name.step(): ...``);
    the recorder is closed even when the cell raises, as long as the ranks survive it.
    ``timeout`` is each call's (default: the cluster's).
    """
    check_recording_name(name)
    cluster.exec(f"import labcore.live.recorder as _labcore_recorder\n"
                 f"{name} = _labcore_recorder.record({name!r}).__enter__()", timeout=timeout)
    try:
        values = cluster.exec(cell, timeout=timeout)
    except BaseException:
        with contextlib.suppress(Exception):
            cluster.exec(f"{name}.__exit__(None, None, None)", timeout=timeout)
        raise
    cluster.exec(f"{name}.__exit__(None, None, None)", timeout=timeout)
    return values, combine(cluster.pull(name, timeout=timeout))
