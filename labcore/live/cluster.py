"""A group of rank processes that stays alive between notebook cells.

Starting ranks costs seconds (each imports torch); a learner reruns cells all
the time. So :class:`Cluster` starts its ranks once, from a forkserver that has
already imported torch, and ships each call's function to them over a pipe.
Any fault (an exception, a dead rank, a hang) ends with the group replaced on the
next call, which with the warm forkserver takes a fraction of a second.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import select
import signal
import sys
import tempfile
import threading
import time
import weakref

import psutil

from labcore import validate
from labcore.live import hang, output, scratch, settings, source
from labcore.live import control
from labcore.live.base import ERROR_GRACE_S, RankGroupBase
from labcore.live.errors import ClusterError, CollectiveTimeout, RankDied, RankError
from labcore.live.sysinfo import check_world_size, choose_backend

# First start includes the forkserver importing torch; allow for a slow, shared machine.
_START_TIMEOUT_S = 120.0
# Exit code of a rank that found lc.Cluster(...) while importing a script's main module.
_MAIN_GUARD_EXIT = 86
_MAIN_GUARD_FIX = ("in a script, create the cluster under `if __name__ == \"__main__\":` (ranks start "
                   "with forkserver or spawn, which import the script's main module)")


def _context(start_method: str):
    if start_method == "fork":
        raise ValueError("start_method='fork' is unsafe in a Jupyter kernel (threads, CUDA); "
                         "use 'forkserver' (default) or 'spawn'.")
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', not {start_method!r}")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["labcore.live.forkserver_guard", "labcore.live.worker"])
    return ctx


def _kill_group(pid: int) -> None:
    """Kill a rank's process group, and the rank's descendants that left it (a new session, setpgid)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the rank and everything it forked are already gone
    for proc in descendants:
        try:
            proc.kill()
        except psutil.Error:
            pass


_GROUPS: "weakref.WeakSet[_Group]" = weakref.WeakSet()


def _disown_ranks() -> None:
    """In a process forked from the notebook: forget the ranks, which are the notebook's.

    multiprocessing terminates its daemonic children when a process exits, and a copy made by
    os.fork inherits the notebook's list of them: it would stop the notebook's ranks.
    """
    for group in list(_GROUPS):
        for proc in group.procs:
            mp.process._children.discard(proc)


os.register_at_fork(after_in_child=_disown_ranks)


class _Group:
    """One generation of rank processes: their pipes, their lifeline and their scratch folder."""

    def __init__(self, ctx, world_size: int, backend: str, env: dict, output_limit: int):
        self.procs, self.conns, self.outputs = [], [], []
        self.run_dir, self.lifeline, lifeline_end = None, None, None
        self.owner = os.getpid()  # a forked copy of the notebook must not stop these ranks
        self._stopping = threading.Lock()
        _GROUPS.add(self)
        try:  # whatever fails on the way (no file descriptors left, an interrupt) leaves nothing behind
            self.run_dir = scratch.make_run_dir()
            from labcore.live import worker

            lifeline_end, self.lifeline = ctx.Pipe(duplex=False)
            for rank in range(world_size):
                out = output.RankOutput(output_limit)
                self.outputs.append(out)
                parent_end, child_end = ctx.Pipe(duplex=True)
                self.conns.append(parent_end)
                try:
                    proc = ctx.Process(
                        target=worker.main, name=f"labcore-rank{rank}", daemon=True,
                        args=(child_end, lifeline_end, out.writers["out"], out.writers["err"], rank,
                              world_size, backend, self.run_dir, os.getpid(), env),
                        kwargs={"notebook_env": dict(os.environ)})  # the forkserver's may be older
                    proc.start()
                finally:
                    child_end.close()
                os.set_blocking(parent_end.fileno(), False)  # requests are written against the deadline
                out.close_writers()
                self.procs.append(proc)
        except BaseException:
            self.stop(graceful=False)
            raise
        finally:
            if lifeline_end is not None:
                lifeline_end.close()

    def path(self, rank: int, kind: str) -> str:
        return os.path.join(self.run_dir, f"rank{rank}.{kind}")

    def read_output(self) -> list[tuple[str, str]]:
        """What every rank printed since the last read (head and tail when it was too much)."""
        return [out.take() for out in self.outputs]

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
        dumps = {}
        for rank in ranks:
            try:
                with open(self.path(rank, "stack"), errors="replace") as f:
                    dumps[rank] = f.read()
            except OSError:
                dumps[rank] = ""
        return dumps

    def stop(self, graceful: bool) -> None:
        """End every rank and whatever it forked, close the pipes, remove the folder. Idempotent,
        and whole: an interrupt (Ctrl-C) waits until the folder is gone, then is raised."""
        if os.getpid() != self.owner:
            return  # a process forked from the notebook: the ranks are the notebook's to stop
        with self._stopping, _interrupts_deferred():
            self._stop(graceful)

    def _stop(self, graceful: bool) -> None:
        if self.run_dir is not None:
            # first, and again at the end: a kernel shut down on a busy machine is killed after its
            # grace (5 s in Jupyter) while its ranks are still being joined
            scratch.remove(self.run_dir)
        if graceful:
            for conn in self.conns:
                try:
                    conn.send((0, "close", b""))
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + 3.0
            for proc in self.procs:
                proc.join(max(0.0, deadline - time.monotonic()))
        if self.lifeline is not None:
            self.lifeline.close()  # ranks still running see EOF and end their process groups
        for proc in self.procs:
            _kill_group(proc.pid)
        for proc in self.procs:
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        for conn in self.conns:
            conn.close()
        for out in self.outputs:
            out.close()
        for proc in self.procs:
            if proc.exitcode is not None:
                proc.close()
        self.procs, self.conns, self.outputs = [], [], []
        if self.run_dir is not None:
            scratch.remove(self.run_dir)
            self.run_dir = None


@contextlib.contextmanager
def _interrupts_deferred():
    """Hold Ctrl-C (SIGINT) back while the block runs, then deliver it as it would have been.

    Only the main thread can set a signal handler, and Python runs handlers there; any thread
    may receive the signal, so blocking it in one thread is not enough.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])        # Python's and Jupyter's raise KeyboardInterrupt
        elif caught and previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


def _stop_quietly(group: _Group) -> None:
    group.stop(graceful=True)


class Cluster(RankGroupBase):
    """``world_size`` ranks running torch.distributed, kept alive between calls.

    Parameters
    ----------
    world_size : int
        Number of ranks (processes). More than this machine can hold (8 per CPU
        core, and the free memory) is refused before any process starts.
    backend : {"auto", "gloo", "nccl"}
        "auto" picks NCCL when NVML counts at least ``world_size`` GPUs (one per
        rank) and a child process finds that CUDA runs, else gloo on the CPU (with
        one line naming the fix where the GPUs are there but CUDA cannot run).
        "nccl" without enough GPUs, or without a CUDA that runs, is an error raised
        before any process starts.
    timeout : float
        Seconds a call may take on every rank before it is reported as a hang
        (finite and positive).
    env : dict, optional
        Environment variables set on every rank before the process group is
        created (``NCCL_DEBUG``, ``NCCL_ALGO``, ``NCCL_PROTO``, ...), over the notebook's
        ``os.environ`` as it is when the ranks start.
    start_method : {"forkserver", "spawn"}
        How ranks are started; never ``fork`` (the kernel has threads, maybe CUDA).
    show_output : bool
        Print each rank's output after a call, prefixed ``[rank r]``, in rank order.
    output_limit : int
        Bytes of each rank's stdout (and of its stderr) kept per call: the first
        and the last half; what lies between is dropped and counted.
    oversubscribe : bool
        Start more ranks than the machine can hold anyway.
    reply_limit : int
        Bytes one rank's reply may take (256 MiB): a larger return value is refused as soon as
        its size is known, before it fills the notebook's memory.

    A call returns only the replies to that call. Anything that leaves a call
    without a full, clean set of replies (an error, a dead rank, a hang, an
    interrupt, a reply the notebook cannot load) replaces the group on the next
    call, as does code that destroys the ranks' process group. A closed cluster
    starts fresh ranks when it is used again. The ranks die with the notebook.

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
                 env: dict | None = None, start_method: str = "forkserver", show_output: bool = True,
                 output_limit: int = 4 << 20, oversubscribe: bool = False, reply_limit: int = 256 << 20):
        if getattr(mp.current_process(), "_inheriting", False):
            print(f"labcore: a rank reached lc.Cluster(...) while importing the main module; {_MAIN_GUARD_FIX}.",
                  file=sys.stderr, flush=True)
            os._exit(_MAIN_GUARD_EXIT)
        world_size = validate.whole_number(world_size, "world_size", least=1,  # numpy integers too
                                           must="a positive int (the number of ranks)")
        self._init_base(timeout)
        output_limit = settings.check_output_limit(output_limit)
        reply_limit = validate.whole_number(reply_limit, "reply_limit", least=1,
                                            must="a number of bytes (an int of at least 1)")
        env = settings.check_env(env)
        self._ctx = _context(start_method)
        self.backend = choose_backend(world_size, backend)
        check_world_size(world_size, self.backend, oversubscribe)
        self.world_size = world_size
        self.env = env
        self.show_output = show_output
        self.output_limit = output_limit
        self.reply_limit = reply_limit
        self._group: _Group | None = None
        self._finalizer = None
        self._emitted = False
        scratch.remove_orphans()
        self._start()

    # -- lifecycle -------------------------------------------------------------------------
    def _start(self) -> None:
        try:
            group = _Group(self._ctx, self.world_size, self.backend, self.env, self.output_limit)
        except OSError as exc:
            if "AF_UNIX path too long" not in str(exc):
                raise
            raise ClusterError(f"the temp folder's path is too long for the forkserver's socket (TMPDIR="
                               f"{tempfile.gettempdir()!r}, and a socket's path may have about 100 characters): "
                               "set TMPDIR to a short path such as /tmp, or use start_method='spawn'") from None
        self._group = group
        self._finalizer = weakref.finalize(self, _stop_quietly, group)
        self._unshown = []
        try:
            self._collect(0, control.Outbox(b"", []), _START_TIMEOUT_S)  # each rank says it is ready
            self.start_output = self._last_output  # the same record: lines printed later join it
        except ClusterError as exc:
            self._discard()
            self._fault = None
            if isinstance(exc, RankDied) and exc.exitcode == _MAIN_GUARD_EXIT:
                raise ClusterError(f"the ranks could not start: {_MAIN_GUARD_FIX}.") from None
            raise ClusterError(f"the {self.world_size} ranks could not start ({self.backend}):\n{exc}") from None
        self._fault = None

    def _discard(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._group is not None:
            self._group.stop(graceful=False)
        self._group = None

    def _close_now(self) -> None:
        finalizer, self._finalizer = self._finalizer, None
        self._group, self._fault = None, None  # closed, even if an interrupt ends the stop below
        if finalizer is not None:
            finalizer()  # runs the graceful stop once

    def _running(self) -> bool:
        return self._group is not None

    def _dead_ranks(self) -> list[int]:
        return [r for r, p in enumerate(self._group.procs) if not p.is_alive()]

    @property
    def pids(self) -> list[int]:
        """Process ids of the current ranks (for inspection and tests)."""
        return [p.pid for p in self._group.procs] if self._group else []

    def __repr__(self) -> str:
        state = "closed" if self.closed else (
            f"restarting: {self._fault}" if self._group is None else "running")
        return f"Cluster(world_size={self.world_size}, backend={self.backend!r}, {state})"

    # -- calls: RankGroupBase checks them and keeps them one at a time -------------------------
    def _check_caller(self) -> None:
        if self._group is not None and self._group.owner != os.getpid():
            raise ClusterError(f"this cluster's ranks belong to process {self._group.owner}, which this "
                               "process was forked from; create an lc.Cluster of its own here")

    def _send(self, kind: str, payload: bytes, timeout: float) -> list:
        self._emit_late()
        outbox = control.Outbox(control.frame((self._request_id, kind, payload, timeout)),
                                [conn.fileno() for conn in self._group.conns])
        for fd in outbox.unsent():
            outbox.write(fd)  # a short request to ranks that are reading goes out at once
        return self._collect(self._request_id, outbox, timeout)

    def _collect(self, request_id: int, outbox: control.Outbox, timeout: float) -> list:
        """Finish sending ``outbox``; wait for every rank's reply to it, watching processes and output.

        Anything but a full, clean set of replies leaves with the group discarded,
        so no later call can read a reply meant for this one.
        """
        group = self._group
        replies: dict[int, tuple] = {}
        errors: dict = {}
        streams = [control.ReplyStream(conn.fileno(), self.reply_limit) for conn in group.conns]
        clean = False
        self._emitted = False
        try:
            self._await_replies(group, outbox, streams, request_id, replies, errors, timeout)
            clean = (not errors or len(replies) == len(group.procs)) and not any(s.partial for s in streams)
        except KeyboardInterrupt:
            self._fault = "the previous call was interrupted"
            raise
        except ClusterError:
            raise
        except BaseException as exc:
            self._fault = f"the previous call failed in the notebook ({type(exc).__name__})"
            raise
        finally:
            if self._group is group:
                if not self._emitted:
                    self._emit()
                if not clean:
                    self._fault = self._fault or (f"rank {min(errors)} raised while other ranks waited"
                                                  if errors else "the previous call did not finish")
                    self._discard()
        lost = [r for r, (_, _, problem) in sorted(replies.items()) if problem]
        if lost:
            self._fault = f"rank {lost[0]} {replies[lost[0]][2]}"
            self._discard()
        if errors:
            raise RankError(errors, restarted=self._group is None)
        return self._unpack_all(replies)

    def _await_replies(self, group: _Group, outbox: control.Outbox, streams: list, request_id: int,
                       replies: dict, errors: dict, timeout: float) -> None:
        """Write what is left of the request and read replies until every rank has answered, a rank
        raised (then the others get ``ERROR_GRACE_S``), a rank died (RankDied) or the deadline passed
        (the hang report)."""
        n = len(group.procs)
        by_conn = {conn: r for r, conn in enumerate(group.conns)}
        by_sentinel = {p.sentinel: r for r, p in enumerate(group.procs)}
        by_output = {fd: r for r, out in enumerate(group.outputs) for fd in out.fds.values()}
        by_fd = {conn.fileno(): r for r, conn in enumerate(group.conns)}
        deadline = time.monotonic() + timeout
        while len(replies) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if errors:
                    return
                unreached = sorted(by_fd[fd] for fd in outbox.unsent())
                self._hang(timeout, sorted(replies), sorted(set(range(n)) - set(replies) - set(unreached)), unreached)
            pending = [r for r in range(n) if r not in replies]
            watched = ([group.conns[r] for r in pending] + [group.procs[r].sentinel for r in pending]
                       + [fd for fd, r in by_output.items() if fd in group.outputs[r].fds.values()])
            ready, writable = control.wait(watched, outbox.unsent(), remaining)
            for fd in writable:
                outbox.write(fd)
            for obj in sorted(ready, key=lambda o: o in by_sentinel):  # replies before deaths
                if obj in by_output:
                    group.outputs[by_output[obj]].drain(obj)
                elif obj in by_conn:
                    self._receive(group, streams, by_conn[obj], request_id, replies, errors)
                    if errors:
                        deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
                elif by_sentinel[obj] not in replies and not group.conns[by_sentinel[obj]].poll():
                    self._died(by_sentinel[obj])

    def _receive(self, group: _Group, streams: list, rank: int, request_id: int, replies: dict,
                 errors: dict) -> None:
        try:
            messages = streams[rank].read()
        except control.ReplyTooLarge as big:
            self._fault = f"rank {rank}'s reply was over the reply limit"
            raise ClusterError(
                f"rank {rank} is sending back {big.nbytes:,} bytes, more than this cluster's reply_limit "
                f"({self.reply_limit:,} bytes): return less (a summary, a slice), or save it to a file on "
                "the rank and load it here; lc.Cluster(..., reply_limit=...) raises the limit. "
                "The next call starts a fresh group.") from None
        except control.ReplyGarbled as garbled:
            self._fault = f"rank {rank}'s control pipe was written to by something else"
            raise ClusterError(
                f"rank {rank}'s control pipe held bytes that are not a reply ({garbled}): code on the rank, "
                "or a process it started, wrote to the pipe the cluster talks through. "
                "The next call starts a fresh group.") from None
        except OSError:
            messages = None
        if messages is None:  # end of file: the rank is gone
            group.procs[rank].join(1.0)
            self._died(rank)
        for message in messages:
            if not (isinstance(message, tuple) and len(message) == 5 and message[0] == request_id
                    and message[1] == group.procs[rank].pid):
                continue  # not this rank's answer to this request (a stale reply, a forked child): drop it
            _, _, status, body, problem = message   # problem: why the group must go ("" if it may stay)
            replies[rank] = (status, body, problem)
            if status != "ok":
                name, text, tb = body
                errors[rank] = (name, text, source.restore_frames(tb, self._origins))

    def _died(self, rank: int):
        proc = self._group.procs[rank]
        proc.join(1.0)
        code = proc.exitcode
        out = self._emit()
        self._fault = f"rank {rank} died"
        raise RankDied(rank, code, out[rank][0] + out[rank][1] if out else "")

    def _hang(self, timeout: float, finished: list[int], stuck: list[int], unreached: list[int]):
        dumps = self._group.stack_dumps(stuck)
        report = hang.report(timeout, finished, {r: source.restore_frames(dumps[r], self._origins) for r in stuck},
                             unreached, self._group.path, self._request_id)
        self._fault = "the previous call timed out"
        raise CollectiveTimeout(report)

    def _keep_late_output(self) -> None:
        """Read what ranks printed after their last call returned into that call's record (in place, so
        a copy of ``last_output`` taken earlier, ``start_output`` or a sweep's, has it too); it is shown
        when the next call starts (:meth:`_emit_late`)."""
        if self._group is None or self._group.owner != os.getpid():
            return
        waiting = select.poll()  # one system call: between calls the pipes are nearly always empty
        for out in self._group.outputs:
            for fd in out.fds.values():
                waiting.register(fd, select.POLLIN)
        if not waiting.poll(0):
            return
        late = self._group.read_output()
        record = self._last_output
        record.extend([("", "")] * (len(late) - len(record)))
        for rank, (out, err) in enumerate(late):
            record[rank] = (record[rank][0] + out, record[rank][1] + err)
        self._unshown.append(late)

    def _emit_late(self) -> None:
        """Show what ranks printed after their last call returned (a thread that call left running),
        marked as such, so that it is not taken for the next call's output; ``last_output`` keeps it."""
        self._keep_late_output()
        for late in self._unshown:
            self._show(late, ", after its last call returned")
        self._unshown = []

    def _emit(self) -> list[tuple[str, str]]:
        """Read what every rank printed during the call; show it prefixed by rank, in rank order."""
        self._last_output = self._group.read_output()
        self._emitted = True
        self._show(self._last_output)
        return self._last_output
