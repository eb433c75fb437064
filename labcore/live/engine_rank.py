"""The rank side of a :class:`labcore.EngineCluster`: what runs inside each ipyparallel engine.

An ipyparallel engine is a long-lived Python process that executes what a
client sends it, one request at a time. The notebook sends these module-level
functions (ipyparallel ships their code and imports this module on the engine
for their globals), so every engine needs labcore installed:

- :func:`probe`: host, pid, GPUs and the address of the named network interface;
- :func:`open_store`: on engine 0, the TCPStore every rank meets at, listening
  on that interface only;
- :func:`init`: ``init_process_group`` on the store, one rank per engine;
- :func:`call`: one request (run, exec, pull, push) with its output captured and
  capped, and a watchdog that publishes the rank's stack if it is still busy
  when the call's deadline comes, so the notebook can say where it is stuck;
- :func:`teardown`: destroy the process group and forget the rank's state; on close, also end
  whatever the rank's code started (daemons too: the engine adopts them, labcore.live.subreaper)
  and remove the engine's temp folder.

A call runs as a forked rank's does (labcore.live.worker): the same request handler, NCCL's
deadline per call, the wait for the GPU work it queued, the mixed ``cpu:gloo,cuda:nccl`` group
on GPUs, and C's stdout line-buffered and flushed per call.
"""
from __future__ import annotations

import io
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta

from labcore.live import subreaper

# A watchdog publishes the stack this much before the notebook's deadline, so it is there in time.
_DUMP_LEAD_S = 0.25
STACK_KEY = "labcore_stack"


class _State:
    """Everything a rank keeps between calls, on its engine (one per engine process)."""

    def __init__(self):
        self.store = None          # engine 0 keeps the master store alive
        self.listener = None       # the socket the master store listens on
        self.worker = None         # labcore.live.worker._Worker: the rank's namespace and call path
        self.lifeline = None
        self.tmp = None            # the engine's TMPDIR while it is a rank, and the TMPDIR it had
        self.saved_tmpdir = None


_state = _State()


def _interface_address(interface: str) -> str | None:
    import psutil

    for addr in psutil.net_if_addrs().get(interface, []):
        if addr.family == socket.AF_INET:
            return addr.address
    return None


def probe(interface: str) -> dict:
    """Facts the notebook needs before it picks ranks and a backend."""
    import psutil
    import torch
    import torch.distributed as dist

    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": me.create_time(),
            "pgid": os.getpgid(0), "cpus": os.cpu_count() or 1, "nannies": [p.pid for p in _nannies()],
            "address": _interface_address(interface), "interfaces": sorted(psutil.net_if_addrs()),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "nccl": dist.is_available() and dist.is_nccl_available()}


def _nannies() -> list:
    """ipyparallel's nanny of this engine: a child in a session of its own that tells the
    controller when the engine dies (ipyparallel/engine/nanny.py)."""
    import psutil

    found = []
    for child in psutil.Process().children():
        try:
            if "ipyparallel.engine.nanny" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found


def open_store(address: str, timeout_s: float) -> int:
    """Start the rendezvous store on this engine, listening on ``address`` only; return its port.

    A TCPStore left to itself listens on every interface of the host; handing it a
    socket bound to one address keeps it on the network the user named.
    """
    import torch.distributed as dist

    close_store()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((address, 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    _state.store = dist.TCPStore(address, port, None, True, timeout=timedelta(seconds=timeout_s),
                                 wait_for_workers=False, master_listen_fd=listener.fileno())
    _state.listener = listener
    return port


def close_store() -> None:
    _state.store = None
    if _state.listener is not None:
        _state.listener.close()
        _state.listener = None


def init(rank: int, world_size: int, local_rank: int, threads: int, backend: str, address: str, port: int,
         generation: int, interface: str, timeout_s: float, env: dict, lifeline: dict | None,
         sys_path: list[str], tmp_parent: str | None = None) -> dict:
    """Join the process group as ``rank``; return what the rank is (for the notebook to check).

    ``sys_path`` is the notebook's import path: functions cloudpickle sends by reference
    (those of a script's or test's own modules) import on the engine as they do there,
    as multiprocessing's spawn arranges for its children. ``tmp_parent`` is the cluster's
    scratch folder when it is on this host: the engine's temp files go there, and with it.
    """
    import torch
    import torch.distributed as dist

    from labcore.live import c_stdio, settings
    from labcore.live.context import RankInfo, _set_current
    from labcore.live.sysinfo import group_backend
    from labcore.live.worker import _nccl_defaults, _Worker

    teardown()
    subreaper.adopt_orphans()
    sys.path.extend(p for p in sys_path if p not in sys.path)
    _own_tmpdir(tmp_parent)
    os.environ.update({"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface,
                       "OMP_NUM_THREADS": str(threads), "LOCAL_RANK": str(local_rank)})
    if backend == "nccl":
        _nccl_defaults(_state.tmp)
    os.environ.update(env)
    torch.set_num_threads(threads)
    c_stdio.line_buffer_stdout()  # C's lines (NCCL's log) reach the engine's log as they are written
    if lifeline and _state.lifeline is None:
        _state.lifeline = _watch_notebook(**lifeline)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    store = _state.store if rank == 0 else dist.TCPStore(address, port, None, False,
                                                          timeout=timedelta(seconds=timeout_s))
    # A fresh prefix per generation: a re-initialised group never reads an older one's keys.
    store = dist.PrefixStore(f"labcore-{generation}", store)
    dist.init_process_group(group_backend(backend), store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=settings.GROUP_TIMEOUT_S),
                            device_id=device if backend == "nccl" else None)
    info = RankInfo(rank, world_size, local_rank, backend, device)
    _set_current(info)
    _state.worker = _Worker(None, info, _state.tmp)
    return {"rank": rank, "pid": os.getpid(), "device": str(device)}


def _own_tmpdir(tmp_parent: str | None) -> None:
    """Point TMPDIR (torch's compile caches, the learner's temp files) at a folder of the lab's,
    once per engine: inside the cluster's scratch folder when it is on this host, else a scratch
    folder of the engine's own (swept by a later cluster once the engine is gone)."""
    from labcore.live import scratch

    if _state.tmp is not None and os.path.isdir(_state.tmp):
        return
    if tmp_parent and os.path.isdir(tmp_parent):
        _state.tmp = os.path.join(tmp_parent, f"engine-{os.getpid()}.tmp")
        os.makedirs(_state.tmp, exist_ok=True)
    else:
        _state.tmp = scratch.make_run_dir()
    _state.saved_tmpdir = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = _state.tmp
    tempfile.tempdir = None


def teardown(final: bool = False) -> None:
    """Leave the process group and drop the rank's namespace (engine 0 keeps its store open).

    ``final`` (the cluster is closing): also end every process the rank's code started, but
    ipyparallel's nanny, and remove the engine's temp folder.
    """
    import torch.distributed as dist

    from labcore.live import scratch
    from labcore.live.context import _set_current

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _set_current(None)
    _state.worker = None
    if final:
        subreaper.end_descendants(keep=[p.pid for p in _nannies()])
        if _state.tmp is not None:
            for name, value in list(os.environ.items()):   # torch's caches note their folder here
                if value.startswith(_state.tmp + os.sep):
                    del os.environ[name]
            scratch.remove(_state.tmp)
            if _state.saved_tmpdir is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = _state.saved_tmpdir
            tempfile.tempdir = None
            _state.tmp = None


def _watch_notebook(host: str, pid: int, started: float, reap: list, run_dir: str | None):
    """End this engine (and the cluster's controller) soon after the notebook that owns them is gone.

    Only for engines on the notebook's host, where its pid can be seen; ``reap`` lists
    (pid, start time) of other processes of the cluster to end as well.
    """
    import psutil

    if host != socket.gethostname():
        return None

    def same(p: int, t: float) -> bool:
        try:
            return abs(psutil.Process(p).create_time() - t) < 1.0 and psutil.Process(p).status() != "zombie"
        except psutil.Error:
            return False

    def watch():
        while same(pid, started):
            time.sleep(0.25)
        subreaper.end_descendants()   # what the rank started, adopted daemons and the nanny too
        for p, t in reap:
            if same(p, t):
                try:
                    os.killpg(p, signal.SIGKILL) if os.getpgid(p) == p else os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if run_dir:
            from labcore.live import scratch
            scratch.remove(run_dir)
        if os.getpgid(0) == os.getpid():     # a session of its own (ipyparallel's local launcher)
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="labcore-lifeline", daemon=True)
    thread.start()
    return thread


class _Capped(io.TextIOBase):
    """A text stream that keeps the head and tail of what is written (labcore.live.output's cap)."""

    def __init__(self, limit: int):
        from labcore.live.output import CappedStream

        self.stream = CappedStream(limit)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.stream.add(text.encode(errors="replace"))
        return len(text)


def _main_stack(main_id: int) -> str:
    """The main thread's stack in faulthandler's layout (what labcore.live.hang reads)."""
    frame = sys._current_frames().get(main_id)
    lines = [f"Current thread 0x{main_id:016x} (most recent call first):"]
    while frame is not None:
        lines.append(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno} in {frame.f_code.co_name}')
        frame = frame.f_back
    return "\n".join(lines) + "\n"


def _arm_watchdog(seconds: float) -> threading.Event:
    """Publish the main thread's stack to the notebook if the call is still running after ``seconds``."""
    from ipyparallel.datapub import publish_data

    done = threading.Event()
    main_id = threading.get_ident()

    def watch():
        if not done.wait(seconds):
            publish_data({STACK_KEY: _main_stack(main_id)})

    threading.Thread(target=watch, name="labcore-watchdog", daemon=True).start()
    return done


def _describe(exc: BaseException) -> tuple[str, str, str]:
    """Type name, message and traceback, without this module's frames or the call path's."""
    from labcore.live import worker

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, worker.__file__):
        tb = tb.tb_next
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc, tb))


def call(request_id: int, kind: str, payload: bytes, timeout_s: float, output_limit: int) -> tuple:
    """Serve one request; reply ``(request_id, pid, status, body, problem, stdout, stderr)``, ``problem`` saying
    why the group must be replaced ("" while it may stay)."""
    from labcore.live import c_stdio
    from labcore.live.worker import _pickle_reply

    out, err = _Capped(output_limit), _Capped(output_limit)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    done = _arm_watchdog(max(0.05, timeout_s - _DUMP_LEAD_S))
    worker = _state.worker
    try:
        if worker is None:
            raise RuntimeError("this engine is not a rank of a labcore cluster (it was torn down)")
        worker.watch.begin(request_id)
        # the forkserver rank's call path: NCCL's deadline, the request, the GPU work it queued
        reply = ("ok", _pickle_reply(worker.run_call(kind, payload, timeout_s)))
    except BaseException as exc:  # report everything, even SystemExit from user code
        reply = ("error", _describe(exc))
    finally:
        done.set()
        sys.stdout, sys.stderr = saved
        c_stdio.flush()
        if worker is not None:
            worker.watch.end(request_id)
    problem = "is not a rank of this cluster any more" if worker is None else worker.group_problem()
    return (request_id, os.getpid(), *reply, problem, out.stream.take(), err.stream.take())
