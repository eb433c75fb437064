"""A group of rank processes that stays alive between notebook cells.

Starting ranks costs seconds (each imports torch); a learner reruns cells all
the time. So :class:`Cluster` starts its ranks once, from a forkserver that has
already imported torch, and ships each call's function to them over a pipe.
Any fault (an exception, a dead rank, a hang) ends with the group replaced on the
next call, which with the warm forkserver takes a fraction of a second.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from multiprocessing.connection import wait

import cloudpickle

from labcore.live import hang, source
from labcore.live.errors import ClusterError, CollectiveTimeout, HangReport, RankDied, RankError
from labcore.live.sysinfo import choose_backend

# How long the other ranks get to report after one rank raised, before the group is replaced.
_ERROR_GRACE_S = 1.0
# First start includes the forkserver importing torch; allow for a slow, shared machine.
_START_TIMEOUT_S = 120.0


def _context(start_method: str):
    if start_method == "fork":
        raise ValueError("start_method='fork' is unsafe in a Jupyter kernel (threads, CUDA); "
                         "use 'forkserver' (default) or 'spawn'.")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["labcore.live.worker"])
    return ctx


def _read_from(path: str, offset: int) -> tuple[str, int]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return "", offset
    return data.decode(errors="replace"), offset + len(data)


class _Group:
    """One generation of rank processes, their pipes and their scratch directory."""

    def __init__(self, ctx, world_size: int, backend: str, timeout: float, env: dict):
        self.run_dir = tempfile.mkdtemp(prefix="labcore-")
        self.procs, self.conns = [], []
        self.offsets = {}
        from labcore.live import worker

        try:
            for rank in range(world_size):
                parent_end, child_end = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=worker.main, name=f"labcore-rank{rank}", daemon=True,
                    args=(child_end, rank, world_size, backend, os.path.join(self.run_dir, "store"),
                          self.run_dir, timeout, env))
                proc.start()
                child_end.close()
                self.procs.append(proc)
                self.conns.append(parent_end)
        except BaseException:
            self.stop(graceful=False)
            raise

    def path(self, rank: int, kind: str) -> str:
        return os.path.join(self.run_dir, f"rank{rank}.{kind}")

    def read_output(self) -> list[tuple[str, str]]:
        """New stdout/stderr text of every rank since the last read."""
        out = []
        for rank in range(len(self.procs)):
            texts = []
            for kind in ("out", "err"):
                key = (rank, kind)
                text, self.offsets[key] = _read_from(self.path(rank, kind), self.offsets.get(key, 0))
                texts.append(text)
            out.append(tuple(texts))
        return out

    def stack_dumps(self, ranks: list[int], wait_s: float = 1.0) -> dict[int, str]:
        """Ask stuck ranks to print their Python stacks (faulthandler on SIGUSR1) and read them."""
        for rank in ranks:
            try:
                os.kill(self.procs[rank].pid, signal.SIGUSR1)
            except (ProcessLookupError, TypeError):
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if all(os.path.getsize(self.path(r, "stack")) > 0 for r in ranks
                   if os.path.exists(self.path(r, "stack"))):
                break
            time.sleep(0.05)
        time.sleep(0.1)  # let the last dump finish writing
        dumps = {rank: _read_from(self.path(rank, "stack"), 0)[0] for rank in ranks}
        return dumps

    def stop(self, graceful: bool) -> None:
        """Close pipes and end every process: ask, then SIGTERM, then SIGKILL. Idempotent."""
        if graceful:
            for conn in self.conns:
                try:
                    conn.send(("close", b""))
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + 3.0
            for proc in self.procs:
                proc.join(max(0.0, deadline - time.monotonic()))
        for sig_method in ("terminate", "kill"):
            alive = [p for p in self.procs if p.is_alive()]
            for proc in alive:
                getattr(proc, sig_method)()
            for proc in alive:
                proc.join(2.0)
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            if proc.exitcode is not None:
                proc.close()
        self.procs, self.conns = [], []
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _stop_quietly(group: _Group) -> None:
    group.stop(graceful=True)


class Cluster:
    """``world_size`` ranks running torch.distributed, kept alive between calls.

    Parameters
    ----------
    world_size : int
        Number of ranks (processes).
    backend : {"auto", "gloo", "nccl"}
        "auto" picks NCCL when torch sees at least ``world_size`` GPUs (one per
        rank), else gloo on the CPU. "nccl" without enough GPUs is an error
        raised before any process starts.
    timeout : float
        Seconds a call may take on every rank before it is reported as a hang.
    env : dict, optional
        Environment variables set on every rank before the process group is
        created (``NCCL_DEBUG``, ``NCCL_ALGO``, ``NCCL_PROTO``, ...).
    start_method : {"forkserver", "spawn"}
        How ranks are started; never ``fork`` (the kernel has threads, maybe CUDA).
    show_output : bool
        Print each rank's output after a call, prefixed ``[rank r]``, in rank order.

    Examples
    --------
    >>> import labcore as lc
    >>> def total(x):
    ...     import torch, torch.distributed as dist
    ...     t = torch.tensor([x + lc.rank_info().rank])
    ...     dist.all_reduce(t)
    ...     return t.item()
    >>> with lc.Cluster(world_size=2, backend="gloo") as cl:
    ...     cl.run(total, 10)
    [21, 21]
    """

    def __init__(self, world_size: int, backend: str = "auto", timeout: float = 60.0,
                 env: dict | None = None, start_method: str = "forkserver", show_output: bool = True):
        if getattr(mp.current_process(), "_inheriting", False):
            raise RuntimeError(
                "a rank process is importing your script's main module and reached lc.Cluster(...): "
                "in a script, create the cluster under `if __name__ == \"__main__\":` "
                "(ranks start with forkserver/spawn, which import the main module).")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int (the number of ranks), not {world_size!r}")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        env = dict(env or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise TypeError("env must map variable names to string values, e.g. {'NCCL_DEBUG': 'INFO'}")
        self.world_size = world_size
        self.backend = choose_backend(world_size, backend)
        self.timeout = float(timeout)
        self.env = env
        self.show_output = show_output
        self.restarts = 0
        self.last_output: list[tuple[str, str]] = []
        self._ctx = _context(start_method)
        self._group: _Group | None = None
        self._finalizer = None
        self._fault: str | None = None
        self._origins: dict[str, str] = {}  # where the current call's functions were defined
        self._start()

    # -- lifecycle -------------------------------------------------------------------------
    def _start(self) -> None:
        group = _Group(self._ctx, self.world_size, self.backend, self.timeout, self.env)
        self._group = group
        self._finalizer = weakref.finalize(self, _stop_quietly, group)
        try:
            self._collect("start", _START_TIMEOUT_S)
        except ClusterError as exc:
            self._discard()
            raise ClusterError(f"the {self.world_size} ranks could not start ({self.backend}):\n{exc}") from None
        self._fault = None

    def _discard(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._group is not None:
            self._group.stop(graceful=False)
        self._group = None

    def _ensure_running(self) -> None:
        if self.closed:
            raise ClusterError("this cluster is closed; create a new lc.Cluster(...)")
        dead = [r for r, p in enumerate(self._group.procs) if not p.is_alive()] if self._group else []
        if dead:
            self._fault = f"rank {dead[0]} had exited since the last call"
            self._discard()
        if self._group is None:
            print(f"labcore: starting {self.world_size} fresh ranks ({self._fault}).", file=sys.stderr)
            self.restarts += 1
            self._start()

    def close(self) -> None:
        """Stop every rank and remove the scratch files. Safe to call twice."""
        if self._finalizer is not None:
            self._finalizer()  # runs the graceful stop once
        self._group = None
        self._fault = None

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close` (a faulted cluster is not closed: it restarts on the next call)."""
        return self._group is None and self._fault is None

    @property
    def pids(self) -> list[int]:
        """Process ids of the current ranks (for inspection and tests)."""
        return [p.pid for p in self._group.procs] if self._group else []

    def __repr__(self) -> str:
        state = "closed" if self.closed else (
            f"restarting: {self._fault}" if self._group is None else "running")
        return f"Cluster(world_size={self.world_size}, backend={self.backend!r}, {state})"

    # -- calls -----------------------------------------------------------------------------
    def run(self, fn, *args, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results in rank order.

        ``fn`` may be defined in the notebook (it travels with cloudpickle). Inside
        it, ``labcore.rank_info()`` gives the rank, world size and device.
        """
        return self.call(fn, args, kwargs)

    def call(self, fn, args: tuple = (), kwargs: dict | None = None, timeout: float | None = None) -> list:
        """Like :meth:`run` with an explicit per-call ``timeout`` (seconds)."""
        if not callable(fn):
            raise TypeError(f"Cluster.run needs a function to run on every rank, got {type(fn).__name__}")
        try:
            payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
        except Exception as exc:
            raise TypeError(f"cannot send {getattr(fn, '__name__', fn)!r} or its arguments to the ranks: "
                            f"{type(exc).__name__}: {exc}. Pass plain data (numbers, lists, arrays, "
                            "CPU tensors) and create files, locks or sockets on the ranks.") from None
        return self._request("run", payload, timeout, source.code_origins(fn))

    def exec(self, code: str, timeout: float | None = None) -> list:
        """Run code on every rank in that rank's own namespace (what ``%%ranks`` does).

        Returns, per rank, the repr of the code's last expression or None.
        """
        return self._request("exec", code.encode(), timeout)

    def pull(self, name: str, timeout: float | None = None) -> list:
        """The value of ``name`` in each rank's ``%%ranks`` namespace, in rank order."""
        return self._request("pull", name.encode(), timeout)

    def push(self, timeout: float | None = None, **values) -> None:
        """Define names in every rank's ``%%ranks`` namespace, e.g. ``cl.push(n=1024)``."""
        self._request("push", cloudpickle.dumps(values), timeout)

    def _request(self, kind: str, payload: bytes, timeout: float | None,
                 origins: dict[str, str] | None = None) -> list:
        self._ensure_running()
        self._origins = origins or {}
        timeout = self.timeout if timeout is None else float(timeout)
        for rank, conn in enumerate(self._group.conns):
            try:
                conn.send((kind, payload))
            except (OSError, ValueError):
                pass  # that rank is gone; _collect sees its sentinel
        return self._collect(kind, timeout)

    def _collect(self, kind: str, timeout: float) -> list:
        """Wait for a reply from every rank, watching their processes as well as their pipes."""
        group = self._group
        n = len(group.procs)
        results: list = [None] * n
        errors: dict = {}
        pending = set(range(n))
        by_conn = {conn: r for r, conn in enumerate(group.conns)}
        by_sentinel = {p.sentinel: r for r, p in enumerate(group.procs)}
        deadline = time.monotonic() + timeout
        try:
            while pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if errors:
                        break
                    self._hang(timeout, sorted(set(range(n)) - pending), sorted(pending))
                ready = wait([group.conns[r] for r in pending] + [group.procs[r].sentinel for r in pending],
                             timeout=remaining)
                for obj in ready:
                    if obj in by_sentinel and by_sentinel[obj] in pending:
                        self._died(by_sentinel[obj])
                    rank = by_conn.get(obj)
                    if rank is None or rank not in pending:
                        continue
                    try:
                        status, body = obj.recv()
                    except (EOFError, OSError):
                        group.procs[rank].join(1.0)
                        self._died(rank)
                    pending.discard(rank)
                    if status == "ok":
                        results[rank] = self._unpack(rank, body)
                    else:
                        name, message, tb = body
                        errors[rank] = (name, message, source.restore_frames(tb, self._origins))
                        deadline = min(deadline, time.monotonic() + _ERROR_GRACE_S)
        except KeyboardInterrupt:
            self._fault = "the previous call was interrupted"
            self._emit()
            self._discard()
            raise
        self._emit()
        if errors:
            stuck = bool(pending)
            if stuck:
                self._fault = f"rank {min(errors)} raised while other ranks waited"
                self._discard()
            raise RankError(errors, restarted=stuck)
        return results

    def _unpack(self, rank: int, body: bytes):
        try:
            return cloudpickle.loads(body)
        except Exception as exc:
            raise ClusterError(f"rank {rank} returned a value the notebook cannot load "
                               f"({type(exc).__name__}: {exc}); return plain data or CPU tensors.") from None

    def _died(self, rank: int):
        proc = self._group.procs[rank]
        proc.join(1.0)
        code = proc.exitcode
        out = self._emit()
        self._fault = f"rank {rank} died"
        self._discard()
        raise RankDied(rank, code, out[rank][0] + out[rank][1] if out else "")

    def _hang(self, timeout: float, finished: list[int], stuck: list[int]):
        dumps = self._group.stack_dumps(stuck)
        self._emit()
        report = HangReport(timeout, finished,
                            {r: hang.summarize(source.restore_frames(dumps[r], self._origins)) for r in stuck})
        self._fault = "the previous call timed out"
        self._discard()
        raise CollectiveTimeout(report)

    def _emit(self) -> list[tuple[str, str]]:
        """Read what every rank printed during the call; show it prefixed by rank, in rank order."""
        self.last_output = self._group.read_output()
        if self.show_output:
            for rank, (out, err) in enumerate(self.last_output):
                for text, stream in ((out, sys.stdout), (err, sys.stderr)):
                    for line in text.splitlines():
                        stream.write(f"[rank {rank}] {line}\n")
            sys.stdout.flush()
        return self.last_output
