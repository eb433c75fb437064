"""What both of the lab's clusters share: the calls, one call at a time, the restart path, close.

:class:`labcore.Cluster` (ranks forked on this machine) and :class:`labcore.EngineCluster`
(ranks on ipyparallel engines) differ in how ranks start, how a request reaches them and how
their replies come back. Everything a learner sees besides is here, once: the checks of
``run``/``call``/``exec``/``pull``/``push``, the lock that keeps calls one at a time, and the
life cycle. A call that did not end with a full, clean set of replies leaves a fault; the next
call then replaces the group (``labcore: starting N fresh ranks (why)``), as it does after a
rank died between calls or after :meth:`close`.

A subclass provides ``world_size`` and:

- ``_running()``: whether a group is up; ``_dead_ranks()``: ranks whose process is gone;
- ``_start()``: bring up a group (fresh processes where the old ones cannot be trusted);
- ``_discard()``: end the current group now (its processes where they are stuck or dead);
- ``_send(kind, payload, timeout)``: one request to every rank; the replies in rank order;
- ``_close_now()``: end everything the cluster started; and may override ``_check_caller()``.
"""
from __future__ import annotations

import math
import numbers
import sys
import threading
import time

import cloudpickle

from labcore.live import settings, source
from labcore.live.errors import ClusterError

# How long the other ranks get to report after one rank raised, before the group is replaced.
ERROR_GRACE_S = 1.0
# A hang report asks each stuck rank for its stack: about this long.
HANG_REPORT_S = 2.0


def _brief(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_timeout(value, what: str = "timeout") -> float:
    """``value`` as seconds, or a ValueError naming ``what`` when it is not in (0, a week]."""
    try:
        finite = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    except OverflowError:  # an int or Fraction beyond any float
        finite = False
    if not finite or value <= 0:
        raise ValueError(f"{what} must be a finite, positive number of seconds (e.g. 30), not {_brief(value)}")
    if value > settings.MAX_TIMEOUT_S:
        raise ValueError(f"{what} must be at most a week ({settings.MAX_TIMEOUT_S} s), not {_brief(value)}: a call "
                         "that may run longer is better split into shorter ones")
    return float(value)


class RankGroupBase:
    """The life cycle and the calls of a group of ranks running torch.distributed."""

    _name = "lc.Cluster"   # how messages name the class

    def _init_base(self, timeout: float) -> None:
        self._timeout = check_timeout(timeout)
        self.restarts = 0
        self._last_output: list[tuple[str, str]] = []
        self.start_output: list[tuple[str, str]] = []  # what the ranks printed while the group started
        self._fault: str | None = None
        self._origins: dict[str, str] = {}  # where the current call's functions were defined
        self._request_id = 0
        self._lock = threading.Lock()
        self._call_ends = 0.0            # when the running call's timeout, hang report and grace are over
        self._closed_under_call = False  # close() in another thread gave up waiting for that call

    @property
    def last_output(self) -> list[tuple[str, str]]:
        """(stdout, stderr) of each rank for the last call, and what the ranks printed after it returned
        (NCCL's proxy threads, asynchronous WARNs, a thread the call left running) up to now.

        After a start, the start-up's output (also kept in ``start_output`` until the group is
        replaced: NCCL logs its version, graphs, channels and tuning there).
        """
        self._keep_late_output()
        return self._last_output

    @last_output.setter
    def last_output(self, value: list[tuple[str, str]]) -> None:
        self._last_output = value

    def _keep_late_output(self) -> None:
        """Add what ranks printed since their last call returned to that call's ``last_output``
        (nothing to do where output only comes with replies)."""

    @property
    def timeout(self) -> float:
        """Seconds a call may take before it is reported as a hang (finite and positive)."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._timeout = check_timeout(value)

    # -- life cycle ------------------------------------------------------------------------
    def _check_caller(self) -> None:
        """Refuse a call this process may not make (nothing to check by default)."""

    def _ensure_running(self) -> None:
        """The one restart path: a group whose rank died since the last call, a faulted call's
        group and a closed cluster's all end with a fresh group here."""
        dead = self._dead_ranks() if self._running() else []
        if dead:
            self._fault = f"rank {dead[0]} had exited since the last call"
            self._discard()
        if not self._running():
            print(f"labcore: starting {self.world_size} fresh ranks "
                  f"({self._fault or 'the cluster had been closed'}).", flush=True)
            self.restarts += 1
            self._start()

    def close(self) -> None:
        """Stop every rank and remove the scratch files. Safe to call twice.

        Using the cluster again afterwards starts fresh ranks. A call running in
        another thread gets its own timeout (and its hang report) to finish first.
        """
        locked = self._lock.acquire(timeout=max(0.0, self._call_ends - time.monotonic()) + 1.0)
        self._closed_under_call = not locked
        try:
            self._close_now()
        finally:
            if locked:
                self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close` (a faulted cluster is not closed: it restarts on the next call)."""
        return not self._running() and self._fault is None

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
            raise TypeError(f"{type(self).__name__}.run needs a function to run on every rank, "
                            f"got {type(fn).__name__}")
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args must be a tuple of positional arguments, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict of keyword arguments, not {type(kwargs).__name__}")
        timeout = self._call_timeout(timeout)
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
        if not isinstance(code, str):
            raise TypeError(f"{type(self).__name__}.exec needs the code as a string, not {type(code).__name__}")
        try:
            text = code.encode()
        except UnicodeEncodeError as bad:
            raise ValueError(f"the code holds {bad.object[bad.start:bad.end]!r} at position {bad.start}, which is "
                             "not text (a lone surrogate, e.g. from a file read with the wrong encoding)") from None
        return self._request("exec", text, self._call_timeout(timeout))

    def pull(self, name: str, timeout: float | None = None) -> list:
        """The value of ``name`` in each rank's ``%%ranks`` namespace, in rank order."""
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"{type(self).__name__}.pull needs a variable name such as 'result', not {name!r}")
        return self._request("pull", name.encode(), self._call_timeout(timeout))

    def push(self, names: dict | None = None, /, timeout: float | None = None, **values) -> None:
        """Define names in every rank's ``%%ranks`` namespace, e.g. ``cl.push(n=1024)``.

        ``timeout`` is the call's own; a variable of that name goes in a dict:
        ``cl.push({"timeout": 30})``.
        """
        if names is not None:
            if not isinstance(names, dict) or not all(isinstance(k, str) and k.isidentifier() for k in names):
                raise TypeError(f"{type(self).__name__}.push takes a dict of variable names to values, e.g. "
                                "{'timeout': 30}, or the names as keywords")
            values = {**names, **values}
        timeout = self._call_timeout(timeout)
        for name, value in values.items():
            try:
                cloudpickle.dumps(value)
            except Exception as exc:
                raise TypeError(f"cannot send {name}={type(value).__name__} to the ranks "
                                f"({type(exc).__name__}: {exc}); push plain data") from None
        self._request("push", cloudpickle.dumps(values), timeout)

    def _call_timeout(self, timeout) -> float:
        return self._timeout if timeout is None else check_timeout(timeout)

    def _request(self, kind: str, payload: bytes, timeout: float, origins: dict[str, str] | None = None) -> list:
        if not self._lock.acquire(blocking=False):
            raise ClusterError("another call is already running on this cluster (from another thread); "
                               f"wait for it to return, or give each thread its own {self._name}")
        try:
            self._check_caller()
            self._ensure_running()
            self._origins = origins or {}
            self._request_id += 1
            self._call_ends = time.monotonic() + timeout + HANG_REPORT_S + ERROR_GRACE_S
            return self._send(kind, payload, timeout)
        except Exception:
            if self._closed_under_call:
                raise ClusterError("close() ran in another thread while this call was still running, after "
                                   "waiting for the call's timeout; the cluster is closed (using it again "
                                   "starts fresh ranks)") from None
            raise
        finally:
            self._closed_under_call = False
            self._lock.release()

    # -- replies ---------------------------------------------------------------------------
    def _unpack_all(self, replies: dict) -> list:
        """Every rank's result, loaded; one the notebook cannot load ends the group."""
        results, failed = [], None
        for rank in range(len(replies)):
            try:
                results.append(cloudpickle.loads(replies[rank][1]))
            except (Exception, SystemExit) as exc:  # what a reply's own unpickling raises (not Ctrl-C)
                failed = failed or (rank, exc)
                results.append(None)
        if failed:
            rank, exc = failed
            self._fault = f"rank {rank} returned a value the notebook could not load"
            self._discard()
            raise ClusterError(f"rank {rank} returned a value the notebook cannot load "
                               f"({type(exc).__name__}: {exc}); return plain data or CPU tensors, not "
                               "objects of classes or modules that exist only on the ranks. "
                               "The next call starts a fresh group.") from None
        return results

    def _show(self, outputs: list[tuple[str, str]], note: str = "") -> None:
        """Print each rank's output, prefixed ``[rank r<note>]``, in rank order (when show_output)."""
        if self.show_output:
            for rank, (out, err) in enumerate(outputs):
                for text, stream in ((out, sys.stdout), (err, sys.stderr)):
                    for line in text.splitlines():
                        stream.write(f"[rank {rank}{note}] {line}\n")
            sys.stdout.flush()
