"""The rank side of a :class:`labcore.Cluster`: one process per rank, alive across cells.

The forkserver imports this module (and so torch) once; every worker forked from
it starts without paying for that import again. A worker initialises
torch.distributed once, then serves requests from its control pipe until told to
stop or until the pipe closes (the notebook went away).
"""
from __future__ import annotations

import ast
import faulthandler
import itertools
import linecache
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta

import cloudpickle
import psutil
import torch
import torch.distributed as dist

from labcore.live import c_stdio, progress, scratch, settings, subreaper
from labcore.live.context import RankInfo, _set_current
from labcore.live.sysinfo import group_backend

def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _watch_lifeline(lifeline, notebook_pid: int, run_dir: str) -> None:
    """End this rank and everything it started as soon as the notebook is gone.

    The rank's parent is the forkserver, not the notebook, so PR_SET_PDEATHSIG
    would follow the wrong process: Jupyter's SIGTERM to the kernel's process group
    ends the forkserver first, and a SIGKILLed kernel leaves it running. A rank busy
    in a cell never reads its control pipe either. The lifeline is a pipe whose
    write end only the notebook holds: EOF means the notebook died or dropped this
    group. The rank leads its own process group, so one killpg takes whatever it
    forked too.
    """
    def watch():
        try:
            lifeline.recv_bytes()
        except (EOFError, OSError):
            pass
        # A dying notebook closes its pipes a moment before it is gone (seconds on a busy machine);
        # one that dropped this group on purpose kills the rank itself long before this wait ends.
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if _gone(notebook_pid):
                scratch.remove(run_dir)  # nobody else is left to tidy up
                break
            time.sleep(0.02)
        subreaper.end_descendants()  # those that left its group too (setsid, setpgid), daemons adopted
        os.killpg(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="labcore-lifeline", daemon=True).start()


_output_pipes: dict[int, tuple[int, tuple]] = {}  # fd 1 and 2 -> a spare descriptor of the pipe, its identity


def _redirect_output(stdout, stderr) -> None:
    """Point fds 1 and 2 at the notebook's pipes, so C-level output (NCCL logs) is kept too."""
    for fd, conn in ((1, stdout), (2, stderr)):
        os.dup2(conn.fileno(), fd)
        spare = os.dup(fd)
        _output_pipes[fd] = spare, _identity(spare)
        conn.close()
    # the rank's streams for its whole life: no block could hold them
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _identity(fd: int) -> tuple:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _flush_output() -> None:
    """Flush what a call printed, and mend what its code broke (a closed or replaced sys.stdout,
    a closed fd 1): the reply must still go back, and the next call's output reach the notebook.
    C's streams first: NCCL's log goes through them (see labcore.live.c_stdio)."""
    c_stdio.flush()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        try:
            stream.flush()
            usable = not stream.closed
        except Exception:
            usable = False
        spare, identity = _output_pipes.get(fd, (None, None))
        try:
            ours = _identity(fd) == identity
        except OSError:
            ours = False
        if not ours and spare is not None:
            os.dup2(spare, fd)
        if not usable:
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False))  # noqa: SIM115 (the rank's stream)


def _items(value) -> list | None:
    """What a plain list, tuple or dict holds (None for anything else)."""
    if type(value) in (list, tuple):
        return list(value)
    if type(value) is dict:
        return list(value.values())
    return None


def _holds_cuda(value, seen: set) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_cuda
    items = _items(value)
    if items is None or id(value) in seen:  # a list that holds itself is walked once
        return False
    seen.add(id(value))
    return any(_holds_cuda(v, seen) for v in items)


def _to_cpu(value, active: set | None = None):
    """Move CUDA tensors to the CPU so the parent can unpickle results without touching CUDA.

    A value without CUDA tensors goes back as it is (lists that hold themselves included).
    """
    if active is None and not _holds_cuda(value, set()):
        return value
    active = set() if active is None else active
    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if value.is_cuda else value
    if _items(value) is None or id(value) in active:
        return value
    active.add(id(value))
    try:
        if type(value) is dict:
            return {k: _to_cpu(v, active) for k, v in value.items()}
        return type(value)(_to_cpu(v, active) for v in value)
    finally:
        active.discard(id(value))


_cell_numbers = itertools.count(1)
_KEPT_CELLS = 200  # sources of the latest cells stay quotable; older ones are let go


def _exec_cell(source: str, namespace: dict):
    """Run a ``%%ranks`` cell in this rank's namespace; return the last expression's value, like IPython."""
    number = next(_cell_numbers)
    filename = f"<%%ranks cell {number}>"
    # Registered so tracebacks and hang reports can quote the cell's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    linecache.cache.pop(f"<%%ranks cell {number - _KEPT_CELLS}>", None)
    tree = ast.parse(source, filename=filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        return eval(compile(last, filename, "eval"), namespace)
    return None


def _describe(exc: BaseException, skip_own_frames: bool = False) -> tuple[str, str, str]:
    """Type name, message and traceback text; the worker's own frames are noise to a learner."""
    tb = exc.__traceback__
    while skip_own_frames and tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    try:
        message = str(exc)
    except Exception as broken:  # the exception's own __str__ failed
        message = f"(its message could not be shown: {type(broken).__name__} in its __str__)"
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:
        text = f"{type(exc).__name__}: {message}\n"
    return type(exc).__name__, message, text


def _pickle_reply(value) -> bytes:
    try:
        return cloudpickle.dumps(_to_cpu(value))
    except Exception as exc:
        raise TypeError(f"the return value ({type(value).__name__}) cannot be sent back to the notebook "
                        f"({type(exc).__name__}: {exc}); return plain data: numbers, strings, lists, "
                        "dicts, numpy arrays or CPU tensors") from None


class _Worker:
    def __init__(self, conn, info: RankInfo, run_dir: str):
        self.conn = conn
        self.info = info
        self.pid = os.getpid()
        # what the notebook's hang report reads (labcore.live.progress)
        self.watch = progress.CallWatch(progress.CallCounter(os.path.join(run_dir, f"rank{info.rank}.calls")),
                                        os.path.join(run_dir, f"rank{info.rank}.gpu"))
        self.nccl_timeout_s: float | None = None
        self.world = dist.group.WORLD  # the group this cluster made; user code may destroy it
        self.namespace = {
            "__name__": "__ranks__", "torch": torch, "dist": dist, "rank": info.rank,
            "world_size": info.world_size, "device": info.device,
        }

    def handle(self, kind: str, payload: bytes):
        if kind == "run":
            fn, args, kwargs = cloudpickle.loads(payload)
            return fn(*args, **kwargs)
        if kind == "exec":
            value = _exec_cell(payload.decode(), self.namespace)
            return None if value is None else repr(value)
        if kind == "pull":
            name = payload.decode()
            if name not in self.namespace:
                raise NameError(f"name {name!r} is not defined on rank {self.info.rank}")
            return self.namespace[name]
        if kind == "push":
            self.namespace.update(cloudpickle.loads(payload))
            return None
        raise ValueError(f"unknown request {kind!r}")

    def arm_nccl_timeout(self, timeout_s: float | None) -> None:
        """Give NCCL's watchdog the call's own deadline instead of the group's week.

        Works take the backend's timeout when they are created (ProcessGroupNCCL's
        ``_set_default_timeout``, torch/_C/_distributed_c10d.pyi), so a collective of this call
        times out in the watchdog when the call does in the notebook: it logs "Watchdog caught
        collective operation timeout" and, with ``TORCH_NCCL_DUMP_ON_TIMEOUT``, dumps the flight
        recorder; the lab's hang report still ends the group (see :func:`_nccl_defaults`).
        gloo keeps its group timeout: its collectives raise, not report, when it fires.
        """
        if self.info.backend != "nccl" or timeout_s is None or timeout_s == self.nccl_timeout_s:
            return
        try:
            backend = dist.group.WORLD._get_backend(torch.device("cuda"))
            backend._set_default_timeout(timedelta(seconds=timeout_s))
        except (RuntimeError, AttributeError, ValueError):
            return  # the learner's code replaced the group: the notebook starts a fresh one
        self.nccl_timeout_s = timeout_s

    def run_call(self, kind: str, payload: bytes, timeout_s: float | None):
        """The call path: NCCL's deadline, the learner's code, then the GPU work that code queued
        (NCCL collectives return once queued; a reply sent before they finish hid a hang in a
        later call, or paired its collective with a later one)."""
        self.arm_nccl_timeout(timeout_s)
        value = self.handle(kind, payload)
        progress.finish_gpu_work(self.info.device)
        return value

    def group_problem(self) -> str:
        """Why the notebook must replace this group ("" while it can be trusted), said after "rank N".

        A group whose NCCL watchdog saw a collective time out (or fail) cannot be kept: with
        ``TORCH_NCCL_DUMP_ON_TIMEOUT`` torch's heartbeat monitor kills the process about
        ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` (480 s) later (HeartbeatMonitor::runLoop in
        ProcessGroupNCCL.cpp), and a later call would read as the rank dying.
        """
        if not (dist.is_initialized() and dist.group.WORLD is self.world):
            return ("no longer had the cluster's process group (did the code call destroy_process_group() or "
                    "init_process_group()?)")
        failed = _nccl_errors()
        if failed:
            return (f"had {', '.join(failed)} failed in NCCL's watchdog: a group whose collective timed out "
                    "cannot be used again")
        return ""

    def serve(self) -> None:
        while True:
            try:
                req_id, kind, payload, *timeout = self.conn.recv()
            except (EOFError, OSError):
                return  # the notebook closed the pipe or died: nothing left to serve
            if kind == "close":
                return
            self.watch.begin(req_id)
            try:
                reply = ("ok", _pickle_reply(self.run_call(kind, payload, *timeout)))
            except BaseException as exc:  # report everything, even SystemExit from user code
                reply = ("error", _describe(exc, skip_own_frames=True))
            finally:
                if os.getpid() != self.pid:
                    os._exit(0)  # a process the user's code forked: it must not answer for the rank
                self.watch.end(req_id)
                _flush_output()
            self.conn.send((req_id, self.pid, *reply, self.group_problem()))


def _nccl_errors() -> list[str]:
    """This rank's groups whose NCCL backend reports an error: ProcessGroupNCCL's ``get_error()`` (its
    ``ErrorType getError()``, ProcessGroupNCCL.hpp) is ``TIMEOUT`` once the watchdog saw a collective
    time out, ``COMM_ERROR``/``REMOTE_ERROR`` after a failure; backends without it are skipped."""
    from torch.distributed.distributed_c10d import _world

    failed = []
    for pg, name in list(_world.pg_names.items()):
        try:
            get_error = getattr(pg._get_backend(torch.device("cuda")), "get_error", None)
            error = get_error() if get_error is not None else None
        except (RuntimeError, ValueError):
            continue  # no CUDA backend in this group, or one already shut down
        if error is not None and getattr(error, "name", "SUCCESS") != "SUCCESS":
            failed.append(f"group {name} ({error.name.lower().replace('_', ' ')})")
    return failed


def _take_notebook_env(notebook_env: dict | None) -> None:
    """Make this rank's environment the notebook's as it is now, additions and removals alike.

    A rank is forked from the forkserver, whose environment is the notebook's when the first
    cluster started: ``os.environ[...]`` set (or deleted) in the notebook after that never
    reached a later cluster's ranks, as it would with spawn or a script. The lab's own
    variables and the cluster's ``env`` are set after this, so they still win.
    """
    if notebook_env is None:
        return
    for name in set(os.environ) - set(notebook_env):
        del os.environ[name]
    os.environ.update(notebook_env)


def _nccl_defaults(run_dir: str) -> None:
    """What an NCCL rank of the lab runs with unless the notebook or ``env`` says otherwise.

    - the flight recorder on (``TORCH_FR_BUFFER_SIZE``), so a rank waiting for its GPU can say
      which collective the GPU is in (labcore.live.progress), and its dump on a watchdog
      timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``) into the rank's run folder, removed with it;
    - ``TORCH_NCCL_ASYNC_ERROR_HANDLING=0``: on a timeout the watchdog logs and dumps but
      neither aborts the communicator nor kills the process (modes 1-3 do, ``ErrorHandlingMode``
      in ProcessGroupNCCL.hpp), which would end a rank at the deadline and turn the hang
      report into a RankDied naming whichever rank's watchdog fired first;
    - ``TORCH_NCCL_ENABLE_MONITORING=0``: after a dump on timeout torch's heartbeat monitor sleeps
      ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` (480 s by default) and then terminates the process
      (``terminateProcess`` in HeartbeatMonitor::runLoop, ProcessGroupNCCL.cpp), so a subgroup that
      timed out killed its rank minutes later, in whatever cell ran then. With monitoring off it
      logs instead; the lab's own deadline is the monitor, and a group whose watchdog saw a
      timeout is replaced after the call (:meth:`_Worker.group_problem`). The names are torch
      2.13's (``TORCH_NCCL_ENABLE_MONITORING``, ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` in
      ProcessGroupNCCL.hpp).
    """
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", os.path.join(run_dir, "nccl_trace_rank_"))
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
    os.environ.setdefault("TORCH_NCCL_ENABLE_MONITORING", "0")


def main(conn, lifeline, stdout, stderr, rank: int, world_size: int, backend: str, run_dir: str,
         notebook_pid: int, env: dict, notebook_env: dict | None = None) -> None:
    """Entry point of a worker process (the target given to multiprocessing)."""
    os.setpgid(0, 0)  # a group of its own: stopping the rank stops what it forked
    subreaper.adopt_orphans()  # and daemons it starts (setsid, then fork) stay its children
    _watch_lifeline(lifeline, notebook_pid, run_dir)
    os.register_at_fork(after_in_child=conn.close)  # forked children cannot use the control pipe
    # Jupyter interrupts the kernel's whole process group; the parent decides what a rank does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for inherited in (signal.SIGTERM, signal.SIGUSR2):  # the forkserver's handlers are not a rank's
        signal.signal(inherited, signal.SIG_DFL)
    _redirect_output(stdout, stderr)
    c_stdio.line_buffer_stdout()  # C's lines (NCCL's log) leave as they are written
    stack_file = open(os.path.join(run_dir, f"rank{rank}.stack"), "w")  # noqa: SIM115 (faulthandler keeps it)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)

    tmp = os.path.join(run_dir, f"rank{rank}.tmp")  # the rank's temp files go when the group goes
    os.makedirs(tmp, exist_ok=True)
    _take_notebook_env(notebook_env)
    os.environ.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "TMPDIR": tmp})
    if backend == "nccl":
        _nccl_defaults(run_dir)
    os.environ.update(env)
    dist.set_debug_level_from_env()  # torch read TORCH_DISTRIBUTED_DEBUG when the forkserver imported it
    tempfile.tempdir = None
    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            local = torch.device("cuda", rank)
            torch.cuda.set_device(local)
        else:
            local = torch.device("cpu")
        store = dist.FileStore(os.path.join(run_dir, "store"), world_size)
        dist.init_process_group(group_backend(backend), store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=settings.GROUP_TIMEOUT_S),
                                device_id=local if backend == "nccl" else None)
        info = RankInfo(rank, world_size, rank, backend, local)
        _set_current(info)
    except BaseException as exc:
        conn.send((0, os.getpid(), "error", _describe(exc), ""))
        return
    conn.send((0, os.getpid(), "ok", cloudpickle.dumps(None), ""))
    try:
        _Worker(conn, info, run_dir).serve()
    finally:
        subreaper.end_descendants()
        if dist.is_initialized():
            dist.destroy_process_group()
        c_stdio.flush()  # the process ends by os._exit (multiprocessing), which flushes nothing
