"""The grader's sandbox: a learner's function, defined from its source and called in a process of its own.

The judge (:mod:`labcore.course.judge`) never runs a learner's code. A handed-in function reaches
a check as a :class:`LearnerFunction`, a stand-in whose calls go to a sandbox process: spawned
(``python -I``), confined like the notebook was (:mod:`labcore.course.jail`), with the student
release's package on its path (what the notebook could import), where the function is defined from
its source once and then called with the check's arguments. What comes back is data
(:mod:`labcore.exercises.codec`): a value, or the name and message of what the function raised. A
call that outlasts the check's time left (or :data:`CALL_S` outside a check) kills the sandbox and
is an :class:`~labcore.exercises.timing.OutOfTime`; a sandbox that dies is an error naming how.

Example
-------
>>> from labcore.exercises.codec import loads, dumps
>>> f = LearnerFunction(loads('{"function": {"name": "f", "source": "def f(n):\\\\n    return n + 1", '
...                           '"globals": {}}}'))
>>> f(41)                                         # doctest: +SKIP
42
>>> f.close()                                     # doctest: +SKIP
"""
from __future__ import annotations

import builtins
import contextlib
import json
import os
import signal
import socket
import subprocess
from multiprocessing.connection import Connection

from labcore.exercises import codec, timing
from labcore.course.jail import Jail, command, isolated_python

__all__ = ["LearnerFunction", "LearnerError", "CALL_S", "serve"]

CALL_S = 60.0            # a call outside a check's limit (none is): the most it may take
START_S = 120.0          # starting the sandbox: Python, numpy, torch where the answer imports it


class LearnerError(Exception):
    """The learner's code raised something the lab does not know by name; the message names it."""


class LearnerFunction:
    """Calls of a handed-in function, run in a sandbox (see the module docstring).

    ``jail``: where the sandbox runs (None: unconfined, for tests on the lab's own answers);
    ``pythonpath``: the package the learner's code imports (the student release's in a graded run).
    """

    def __init__(self, sourced: codec.Sourced, jail: Jail | None = None, pythonpath: list | None = None):
        self.sourced, self.jail, self.pythonpath = sourced, jail, list(pythonpath or [])
        self.__name__ = sourced.name
        self._proc = self._conn = None

    def __repr__(self) -> str:
        return f"<function {self.sourced.name} (handed in)>"

    def __call__(self, *args, **kwargs):
        budget = timing._CURRENT.get()
        limit = budget.left if budget is not None and budget.left is not None else CALL_S
        if limit <= 0:
            raise timing.OutOfTime()
        conn = self._start()
        import cloudpickle

        try:
            conn.send_bytes(cloudpickle.dumps((args, kwargs)))
            reply = self._reply(conn, limit)
        except BaseException:
            self.close()
            raise
        if "value" in reply:
            return codec.decode(reply["value"])
        kind, message = reply.get("raised", ["LearnerError", "the sandbox said nothing"])
        raise _exception(str(kind), str(message))

    def _reply(self, conn, limit: float) -> dict:
        if not conn.poll(limit):
            raise timing.OutOfTime()
        try:
            return json.loads(conn.recv_bytes(codec.MAX_BYTES))
        except (EOFError, OSError):
            code = self._proc.wait(timeout=10)
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
            raise LearnerError(f"the process running your function {how} (os._exit, a crash?)") from None
        except (ValueError, UnicodeDecodeError):
            raise LearnerError("your function's process wrote something that is not a reply") from None

    def _start(self):
        if self._proc is not None and self._proc.poll() is None:
            return self._conn
        ours, theirs = socket.socketpair()
        argv = command(self.jail, isolated_python(self.pythonpath, f"from labcore.course.sandbox import serve; "
                                                                   f"serve({theirs.fileno()})"))
        env = dict(os.environ, LABCORE_PROGRESS="off")
        try:
            self._proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send_bytes(json.dumps({"kind": self.sourced.kind, "spec": self.sourced.spec}).encode())
        ready = self._reply(self._conn, START_S)
        if "defined" not in ready:
            kind, message = ready.get("raised", ["LearnerError", "?"])
            self.close()
            raise _exception(str(kind), f"defining your code: {message}")
        return self._conn

    def close(self) -> None:
        """End the sandbox (and whatever it started)."""
        if self._proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def __del__(self):
        self.close()


def _exception(kind: str, message: str) -> BaseException:
    """An exception named as the learner's was, raised here as one of Python's own where it is one."""
    known = getattr(builtins, kind, None)
    if isinstance(known, type) and issubclass(known, Exception):
        return known(message)
    return type(kind if kind.isidentifier() else "LearnerError", (LearnerError,), {})(message)


def serve(fd: int) -> None:
    """The sandbox: define the function sent first, then answer each call with data."""
    conn = Connection(fd)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)           # what the learner prints goes nowhere
    first = json.loads(conn.recv_bytes())
    try:
        fn = codec._define(first["kind"], first["spec"])
    except BaseException as err:
        conn.send_bytes(json.dumps({"raised": [type(err).__name__, str(err)[:2000]]}).encode())
        return
    conn.send_bytes(b'{"defined": true}')
    import pickle

    while True:
        try:
            args, kwargs = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            reply = {"value": codec.encode(fn(*args, **kwargs))}
        except BaseException as err:                    # SystemExit, KeyboardInterrupt too: a reply, not an end
            reply = {"raised": [type(err).__name__, str(err)[:2000]]}
        conn.send_bytes(json.dumps(reply, allow_nan=False).encode())
