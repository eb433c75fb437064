"""The rank side of a :class:`labcore.Cluster`: one process per rank, alive across cells.

The forkserver imports this module (and so torch) once; every worker forked from
it starts without paying for that import again. A worker initialises
torch.distributed once, then serves requests from its control pipe until told to
stop or until the pipe closes (the notebook went away).
"""
from __future__ import annotations

import ast
import ctypes
import faulthandler
import itertools
import linecache
import os
import signal
import sys
import traceback
from datetime import timedelta

import cloudpickle
import torch
import torch.distributed as dist

from labcore.live.context import RankInfo, _set_current

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when our parent (the kernel, or its forkserver) exits.

    The forkserver itself exits when the kernel does, so a dead notebook takes
    every rank with it even while a rank is blocked inside a collective.
    """
    parent_pid = os.getppid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def _redirect_output(stdout_path: str, stderr_path: str) -> None:
    """Send fds 1 and 2 to per-rank files the parent reads, so C-level output (NCCL logs) is kept too."""
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _to_cpu(value):
    """Move CUDA tensors to the CPU so the parent can unpickle results without touching CUDA."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if value.is_cuda else value
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, dict) and type(value) is dict:
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


_cell_numbers = itertools.count(1)


def _exec_cell(source: str, namespace: dict):
    """Run a ``%%ranks`` cell in this rank's namespace; return the last expression's value, like IPython."""
    filename = f"<%%ranks cell {next(_cell_numbers)}>"
    # Registered so tracebacks and hang reports can quote the cell's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
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
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc, tb))


class _Worker:
    def __init__(self, conn, info: RankInfo):
        self.conn = conn
        self.info = info
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

    def serve(self) -> None:
        while True:
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                return  # the notebook closed the pipe or died: nothing left to serve
            if kind == "close":
                return
            try:
                reply = ("ok", cloudpickle.dumps(_to_cpu(self.handle(kind, payload))))
            except BaseException as exc:  # report everything, even SystemExit from user code
                reply = ("error", _describe(exc, skip_own_frames=True))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            self.conn.send(reply)


def main(conn, rank: int, world_size: int, backend: str, store_path: str, run_dir: str,
         timeout_s: float, env: dict) -> None:
    """Entry point of a worker process (the target given to multiprocessing)."""
    _die_with_parent()
    # Jupyter interrupts the kernel's whole process group; the parent decides what a rank does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _redirect_output(os.path.join(run_dir, f"rank{rank}.out"), os.path.join(run_dir, f"rank{rank}.err"))
    stack_file = open(os.path.join(run_dir, f"rank{rank}.stack"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)

    os.environ.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    os.environ.update(env)
    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            local = torch.device("cuda", rank)
            torch.cuda.set_device(local)
        else:
            local = torch.device("cpu")
        store = dist.FileStore(store_path, world_size)
        # The group's own timeout sits past the cluster's deadline so the parent's hang report wins.
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s + 30),
                                device_id=local if backend == "nccl" else None)
        info = RankInfo(rank, world_size, rank, backend, local)
        _set_current(info)
    except BaseException as exc:
        conn.send(("error", _describe(exc)))
        return
    conn.send(("ok", cloudpickle.dumps(None)))
    try:
        _Worker(conn, info).serve()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
