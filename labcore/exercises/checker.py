"""Checks of a learner's code run apart: in a child process that is killed at its deadline.

A check whose answer holds the learner's code (a function, a class, an object of their own; see
:func:`labcore.exercises.answers.is_plain`) never runs that code in the notebook's process, where it
could switch its own time limit off (a bare ``except:`` around a loop swallows the alarm; a handler
can ignore ``SIGALRM``) or end the kernel (``SystemExit``, ``os._exit``). Instead:

- a **template** process is spawned once per session (``python -c``, never forked from the kernel,
  whose threads make ``fork`` unsafe) in a session of its own, so the notebook's Ctrl-C reaches only
  the notebook; it imports the lab's modules a check needs;
- for each check it **forks a fresh process** (one check's leftovers never reach the next) that reads
  the exercise (the lab's, sent with cloudpickle) and the answer (sent as data, its functions as their
  source: :mod:`labcore.exercises.codec`, so that sending it runs nothing of the learner's in the
  notebook, and an answer checked here is checked as the grader will), says it has started, runs
  the check under the exercise's own limit and writes back its verdict;
- that process must start within :data:`LOAD_S` and end within the time limit plus
  :data:`GRACE_S` of its start, or it is **killed**, with everything it started (its own process
  group); a check whose process dies (``os._exit``, a crash) gets a verdict saying so;
- **Ctrl-C** in the notebook kills the check's process and goes on as a KeyboardInterrupt.

The template and each check's process end when their parent does (EOF on their channel, and
``PR_SET_PDEATHSIG`` on Linux).

Example
-------
>>> from labcore.exercises import FunctionExercise
>>> q = FunctionExercise("Double", "2n?", reference=lambda n: 2 * n, cases=[(1,), (5,)])
>>> check_apart(q, lambda n: n + n, {}).status                  # doctest: +SKIP
'correct'
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

__all__ = ["check_apart", "start", "stop", "LOAD_S", "GRACE_S", "Outcome"]

LOAD_S = 60.0          # reading the answer in the check's process (imports such as torch's) may take this long
GRACE_S = 5.0          # the lab's own work in a check, besides the learner's time limit
_REPLY_S = 15.0        # the template's own slack beyond those, before it is taken for dead
_PR_SET_PDEATHSIG = 1


class Outcome(tuple):
    """What became of a check run apart: ``(kind, status, message)``; kind is "verdict" (status and
    message are the check's), "timeout", "died" (message says how) or "unavailable" (no process)."""

    @property
    def kind(self) -> str:
        return self[0]


# -- the notebook's side -------------------------------------------------------------------------------
_LOCK = threading.Lock()
_TEMPLATE: dict = {}


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def start() -> None:
    """Start the template now (a session's first check starts it otherwise)."""
    with _LOCK:
        _template()


def stop() -> None:
    """Kill the template (and a check it is running); the next check starts a new one."""
    with _LOCK:
        _kill_template()


def _template():
    proc = _TEMPLATE.get("proc")
    if proc is not None and proc.poll() is None:
        return _TEMPLATE["conn"]
    _kill_template()
    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    code = f"from labcore.exercises.checker import _serve; _serve({theirs.fileno()})"
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    _TEMPLATE.update(proc=proc, conn=conn)
    return conn


def _kill_template() -> None:
    proc, conn = _TEMPLATE.pop("proc", None), _TEMPLATE.pop("conn", None)
    forked = _TEMPLATE.pop("forked", None)
    for pid in (forked, proc.pid if proc is not None else None):
        if pid:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
    if conn is not None:
        conn.close()
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)


def check_apart(target, answer, context: dict, *, time_limit: float | None = None, preload=(),
        refuse_own: bool = True) -> Outcome:
    """Check ``answer`` against ``target`` in a fresh process forked from the template.

    ``target`` is an exercise (sent whole) or ``(module, name, state)``: the exercise ``name`` of
    ``module`` there, with the attributes in ``state`` set on a copy of it. ``preload``: modules of
    the lab the template imports first (so that each check's process has them already).
    ``refuse_own``: whether the lab's own answers are refused (:mod:`labcore.exercises.own`).
    """
    import cloudpickle

    from labcore.exercises import codec

    limit_s = float(time_limit) if time_limit is not None else 24 * 3600.0
    try:
        payload = cloudpickle.dumps((target, codec.dumps(answer), codec.dumps(dict(context)), bool(refuse_own)))
    except (ValueError, RecursionError) as err:          # too large, too deep: what cannot be copied to the check
        return Outcome(("unpicklable", "incorrect", str(err)))
    header = json.dumps(dict(path=[p for p in sys.path if isinstance(p, str)], limit_s=limit_s,
                             preload=[m for m in preload if isinstance(m, str)] +
                             (["torch"] if "torch" in sys.modules else []))).encode()
    with _LOCK:
        conn = _template()
        try:
            conn.send_bytes(header)
            conn.send_bytes(payload)
            return _wait(conn, LOAD_S + limit_s + GRACE_S + _REPLY_S)
        except KeyboardInterrupt:
            _kill_template()
            raise
        except (OSError, EOFError, ValueError):
            _kill_template()
            return Outcome(("unavailable", "", "the process that runs checks stopped answering"))


def _wait(conn, within: float) -> Outcome:
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not conn.poll(left):
            raise OSError("no reply")
        message = json.loads(conn.recv_bytes())
        if "forked" in message:
            _TEMPLATE["forked"] = int(message["forked"])
            continue
        _TEMPLATE.pop("forked", None)
        return Outcome((message["kind"], message.get("status", ""), message.get("message", "")))


# -- the template ----------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _serve(fd: int) -> None:
    """The template's loop: one request (a JSON header, then the pickled check) at a time."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    while True:
        try:
            header = json.loads(conn.recv_bytes())
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            os._exit(0)
        for entry in header["path"]:
            if entry not in sys.path:
                sys.path.append(entry)
        for module in header["preload"]:
            if module == "torch" or module.startswith("labcore."):
                with contextlib.suppress(Exception):
                    importlib.import_module(module)
        conn.send_bytes(json.dumps(_check_forked(conn, payload, header["limit_s"])).encode())


def _check_forked(conn, payload: bytes, limit_s: float) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # the check's own process
        os.close(read_end)
        _check_here(conn, payload, write_end)
    os.close(write_end)
    conn.send_bytes(json.dumps({"forked": pid}).encode())
    try:
        return _watch(pid, read_end, limit_s)
    finally:
        os.close(read_end)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)          # whatever the check started goes with it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _watch(pid: int, fd: int, limit_s: float) -> dict:
    """The check's verdict, or how it ended: not started within LOAD_S, or not done within its limit."""
    started, buffer = None, b""
    deadline = time.monotonic() + LOAD_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return dict(kind="timeout")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return dict(kind="died", message=_how_it_ended(pid))
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line == b"started" and started is None:
                started = time.monotonic()
                deadline = started + limit_s + GRACE_S
                continue
            try:
                verdict = json.loads(line)
                status, message = verdict["status"], verdict["message"]
            except (ValueError, KeyError, TypeError):
                return dict(kind="died", message="it wrote something that is not a verdict where the verdict goes")
            if type(status) is str and type(message) is str:
                return dict(kind="verdict", status=status, message=message)
        if len(buffer) > 1 << 20:
            return dict(kind="died", message="it wrote over 1 MiB where the verdict goes")


def _how_it_ended(pid: int) -> str:
    try:
        _, code = os.waitpid(pid, 0)
    except ChildProcessError:
        return "it ended"
    if os.WIFSIGNALED(code):
        return f"it was killed by {signal.Signals(os.WTERMSIG(code)).name}"
    return f"it exited with status {os.WEXITSTATUS(code)} (os._exit?)"


def _check_here(conn, payload: bytes, fd: int) -> None:
    """In the check's own process: read the check, say so, run it, write the verdict, exit.

    Statuses besides a check's own: "unreadable" (the answer could not be read or defined here),
    "opaque" (the answer is a value that cannot be copied), "no check" (this copy of the lab has no
    check for the exercise), "raised" (the learner's code raised what a check does not catch:
    SystemExit, KeyboardInterrupt, ...)."""
    os.setpgid(0, 0)
    _die_with_parent()
    conn.close()
    out = os.fdopen(fd, "wb", buffering=0)

    def say(status: str, message: str) -> None:
        with contextlib.suppress(BaseException):
            out.write(json.dumps(dict(status=status, message=message[:4000])).encode() + b"\n")
        os._exit(0)

    try:
        import cloudpickle

        from labcore.exercises import codec

        target, answer, context, refuse_own = cloudpickle.loads(payload)
        answer, context = codec.loads(answer), codec.loads(context)
        opaque = type(answer) is codec.Sourced and answer.kind == "opaque"
        answer, context = codec.materialize(answer), {k: codec.materialize(v) for k, v in context.items()}
    except BaseException as err:                   # the learner's code, defined from its source, raised
        say("unreadable", f"{type(err).__name__}: {err}")
    try:
        exercise = _exercise(target)
    except (ImportError, AttributeError) as err:
        say("no check", str(err))
    out.write(b"started\n")
    if opaque:
        say("opaque", "")
    try:
        result = exercise._judge_here(answer, context, refuse_own)
    except BaseException as err:
        say("raised", f"{type(err).__name__}: {err}")
    say(result.status, result.message)


def _exercise(target):
    """The exercise a request names: sent whole, or ``(module, name, state)`` found here."""
    if isinstance(target, tuple):
        import copy

        from labcore.exercises import sealed

        module, name, state = target
        if module.startswith(sealed.FULL):
            sealed.install_checks()
        exercise = copy.copy(getattr(importlib.import_module(module), name))
        for key, value in state.items():
            setattr(exercise, key, value)
        return exercise
    return target
