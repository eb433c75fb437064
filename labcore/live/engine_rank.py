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
- :func:`teardown`: destroy the process group and forget the rank's state.
"""
from __future__ import annotations

import io
import os
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta

# A watchdog publishes the stack this much before the notebook's deadline, so it is there in time.
_DUMP_LEAD_S = 0.25
STACK_KEY = "labcore_stack"


class _State:
    """Everything a rank keeps between calls, on its engine (one per engine process)."""

    def __init__(self):
        self.store = None          # engine 0 keeps the master store alive
        self.listener = None       # the socket the master store listens on
        self.info = None
        self.world = None
        self.namespace: dict = {}
        self.lifeline = None


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
            "pgid": os.getpgid(0), "cpus": os.cpu_count() or 1,
            "address": _interface_address(interface), "interfaces": sorted(psutil.net_if_addrs()),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "nccl": dist.is_available() and dist.is_nccl_available()}


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
         sys_path: list[str]) -> dict:
    """Join the process group as ``rank``; return what the rank is (for the notebook to check).

    ``sys_path`` is the notebook's import path: functions cloudpickle sends by reference
    (those of a script's or test's own modules) import on the engine as they do there,
    as multiprocessing's spawn arranges for its children.
    """
    import torch
    import torch.distributed as dist

    from labcore.live import settings
    from labcore.live.context import RankInfo, _set_current

    teardown()
    sys.path.extend(p for p in sys_path if p not in sys.path)
    os.environ.update({"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface,
                       "OMP_NUM_THREADS": str(threads), "LOCAL_RANK": str(local_rank)})
    os.environ.update(env)
    torch.set_num_threads(threads)
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
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=settings.GROUP_TIMEOUT_S),
                            device_id=device if backend == "nccl" else None)
    info = RankInfo(rank, world_size, local_rank, backend, device)
    _set_current(info)
    _state.info, _state.world = info, dist.group.WORLD
    _state.namespace = {"__name__": "__ranks__", "torch": torch, "dist": dist, "rank": rank,
                        "world_size": world_size, "device": device}
    return {"rank": rank, "pid": os.getpid(), "device": str(device)}


def teardown() -> None:
    """Leave the process group and drop the rank's namespace (engine 0 keeps its store open)."""
    import torch.distributed as dist

    from labcore.live.context import _set_current

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _set_current(None)
    _state.info, _state.world, _state.namespace = None, None, {}


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
        for p, t in reap:
            if same(p, t):
                try:
                    os.killpg(p, signal.SIGKILL) if os.getpgid(p) == p else os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if run_dir:
            from labcore.live import scratch
            scratch.remove(run_dir, with_pymp=True)
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
    """Type name, message and traceback, without this module's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc, tb))


def call(request_id: int, kind: str, payload: bytes, timeout_s: float, output_limit: int) -> tuple:
    """Serve one request; reply ``(request_id, pid, status, body, group intact, stdout, stderr)``."""
    import torch.distributed as dist

    from labcore.live.worker import _pickle_reply, _Worker

    out, err = _Capped(output_limit), _Capped(output_limit)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    done = _arm_watchdog(max(0.05, timeout_s - _DUMP_LEAD_S))
    try:
        if _state.info is None:
            raise RuntimeError("this engine is not a rank of a labcore cluster (it was torn down)")
        # the forkserver rank's request handler, on this engine's state (namespace and rank info)
        reply = ("ok", _pickle_reply(_Worker.handle(_state, kind, payload)))
    except BaseException as exc:  # report everything, even SystemExit from user code
        reply = ("error", _describe(exc))
    finally:
        done.set()
        sys.stdout, sys.stderr = saved
    intact = dist.is_initialized() and dist.group.WORLD is _state.world
    return (request_id, os.getpid(), *reply, intact, out.stream.take(), err.stream.take())

