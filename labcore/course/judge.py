"""The grader's judge: one handed-in answer, checked by the lab's full checks in a clean process.

A graded notebook runs the student release, whose questions hold no answers, and hands each answer
in as data (:mod:`labcore.course.handin`). :func:`judge_answer` checks one hand-in:

- in a process **spawned** for it (``python -I``: no environment variable, user site or current
  folder decides what it imports), never forked from anything a submission touched, holding the
  lab's full package: the checks and the references they compare with live here and nowhere the
  submission runs; it is **killed at its deadline** with everything it started;
- the answer is **decoded, not run** (:mod:`labcore.exercises.codec`): values are the lab's own
  types; a function or class is text. The exercise is looked up in the course catalog by name (the
  grade cell's name, not the notebook's say), and of what the notebook set on the question only
  the numbers the question has (``given``) and the table it may be about (``result``) are taken;
- the lab's **own answers are refused** handed in, copied or called (:mod:`labcore.exercises.own`);
- the learner's code runs **elsewhere**: a non-live check calls it in a sandbox
  (:mod:`labcore.course.sandbox`); a live check's ranks define it from its source. With a ``jail``
  (:mod:`labcore.course.jail`) both are confined as the notebook was; a live check's judge runs in
  the jail itself, since its ranks are its children.

The verdict is ``(status, message)``: the check's own, or "error" when the lab could not check.

Example
-------
>>> from labcore.course.handin import payload
>>> judge_answer(payload("operations.q_all_reduce", 10), expected="operations.q_all_reduce")     # doctest: +SKIP
Verdict(status='correct', message='All-reduce by hand: correct!')
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from labcore.course.jail import Jail, command, isolated_python

__all__ = ["judge_answer", "Verdict", "main", "NONLIVE_S", "LIVE_S"]

NONLIVE_S = 120.0       # a check without ranks: start-up, imports, the sandbox, beyond the exercise's own limit
LIVE_S = 900.0          # a live check: three clusters started (4, 3 and 5 ranks) and the learner's calls on them
_RESERVED = ("cluster", "timeout", "world_size")      # what a check takes that a notebook does not decide
_PR_SET_DUMPABLE = 4


class Verdict(NamedTuple):
    status: str            # "correct", "incorrect", "not attempted", or "error" (the lab could not check)
    message: str


def _root() -> str:
    return str(Path(__file__).resolve().parents[2])


def judge_answer(payload: str, *, expected: str, jail: Jail | None = None, release: str | None = None,
          timeout: float | None = None) -> Verdict:
    """Check one hand-in (JSON text) in a judge process; ``expected``: the exercise its grade cell names.

    Parameters
    ----------
    jail : where the learner's code runs (the sandbox; a live check's whole judge), None: unconfined.
    release : the student release's package folder, the sandbox's import path (what the notebook saw).
    timeout : seconds before the judge is killed (default :data:`NONLIVE_S` plus the exercise's own
        limit, or :data:`LIVE_S`).
    """
    live = _is_live(expected)
    if timeout is None:
        timeout = LIVE_S if live else NONLIVE_S + _limit(expected)
    read_end, write_end = os.pipe()
    code = f"from labcore.course.judge import main; main({write_end})"
    if live and jail is not None:                 # its ranks run the learner's code: the judge goes in the jail
        copy_ = _judge_copy(jail)
        inside = dataclasses.replace(jail, pythonpath=[copy_], read=[*jail.read, copy_])
        # -P: no current folder on the path; PYTHONPATH (set by the jail) reaches the forkserver and ranks too
        argv = command(inside, [sys.executable, "-s", "-P", "-c", code])
    else:
        argv = isolated_python([_root()], code)
    options = json.dumps(dict(expected=expected, release=release, jail=_jail_spec(jail) if not live else None))
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(argv, pass_fds=[write_end], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=errors, start_new_session=True, cwd=str(jail.work / "tmp") if jail else None)
        finally:
            os.close(write_end)
        try:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(options.encode() + b"\n" + payload.encode())
                proc.stdin.close()
            reply = _read(read_end, timeout)
        finally:
            os.close(read_end)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if reply is None:
            return Verdict("error", f"the grader's check did not finish within {timeout:g} s, so it was stopped")
        try:
            found = json.loads(reply)
            return Verdict(str(found["status"]), str(found["message"]))
        except (ValueError, KeyError, TypeError):
            errors.seek(0)
            last = (errors.read().decode(errors="replace").strip().splitlines() or ["no message"])[-1]
            return Verdict("error", f"the grader could not check this answer: {last[-300:]}")


def _read(fd: int, timeout: float) -> bytes | None:
    """Everything written to ``fd`` until its writer closes it, or None past ``timeout``."""
    import select

    deadline, data = time.monotonic() + timeout, b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return data
            data += chunk
            if len(data) > 1 << 20:
                return data


def _judge_copy(jail: Jail) -> str:
    """A copy of the lab's package beside the jail's folder (read-only inside the jail: the ranks of a live
    check, which run the learner's code, cannot change the judge's modules), removed with the jail."""
    import shutil

    target = Path(str(jail.work) + "-judge")
    if not target.exists():
        shutil.copytree(Path(_root()) / "labcore", target / "labcore",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "STUDENT", "*.bin"))
        jail.owned.append(target)
    return str(target)


def _jail_spec(jail: Jail | None):
    return None if jail is None else dict(work=str(jail.work), read=[str(p) for p in jail.read], uid=jail.uid,
                                          no_caps=jail.no_caps, landlock=jail.landlock, confine=jail.confine)


def _exercise(name: str):
    """The catalog's exercise ``name`` ("operations.q_all_reduce"), importing its module alone."""
    import importlib

    from labcore.course.catalog import NOTEBOOK_OF, PREFIX
    from labcore.exercises.core import Exercise

    short, _, var = str(name).partition(".")
    found = None
    if short in NOTEBOOK_OF and var.startswith("q_") and var.isidentifier():
        found = getattr(importlib.import_module(PREFIX + short), var, None)
    if not isinstance(found, Exercise):
        raise LookupError(f"{name!r} is not an exercise of the lab")
    return found


def _is_live(name: str) -> bool:
    from labcore.exercises.live import LiveExercise

    with contextlib.suppress(LookupError):
        return isinstance(_exercise(name), LiveExercise)
    return False


def _limit(name: str) -> float:
    with contextlib.suppress(LookupError):
        return float(_exercise(name).time_limit or 0)
    return 0.0


# -- the judge process -------------------------------------------------------------------------------
def main(fd: int) -> None:
    """The judge process: options and payload on stdin, the verdict (JSON) on ``fd``. Not dumpable: what a
    live check's ranks run cannot trace it or read its memory, and its verdict's pipe goes to no child."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.set_inheritable(fd, False)
    out = os.fdopen(fd, "w")
    options = json.loads(sys.stdin.readline())
    payload = sys.stdin.read()
    try:
        verdict = _verdict(payload, options)
    except Exception as err:              # the lab's own failure: say so, never a grade
        verdict = Verdict("error", f"the grader could not check this answer ({type(err).__name__}: {err})")
    out.write(json.dumps(verdict._asdict()))
    out.close()
    os._exit(0)


def _verdict(payload: str, options: dict) -> Verdict:
    from labcore.exercises import codec, own
    from labcore.exercises.answers import is_plain
    from labcore.exercises.live import LiveExercise

    expected = options["expected"]
    try:
        data = json.loads(payload)
        if not isinstance(data, dict) or data.get("labcore_handin") != 1:
            raise codec.CodecError("not a hand-in")
        answer = codec.decode(data["answer"])
        context = {k: codec.decode(v) for k, v in dict(data.get("context", {})).items()}
        state = {k: codec.decode(v) for k, v in dict(data.get("state", {})).items()}
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        return Verdict("incorrect", f"the answer handed in could not be read ({err}): run the notebook's cells "
                                    "in order and hand in again")
    if data.get("exercise") != expected:
        return Verdict("incorrect", f"the cell handed in an answer to {data.get('exercise')!r}, not to {expected!r}")
    q = copy.copy(_exercise(expected))
    if isinstance(answer, codec.Sourced) and answer.kind == "opaque":
        return Verdict("incorrect", f"{q.title}: not quite. Your answer is a {answer.spec['type']}, which the grader "
                                    f"cannot receive ({answer.spec['why']}); this question takes {q.expects}.")
    _set_state(q, state)
    name = own.refused(answer, own.lab_answers(q))
    if name is not None:
        return Verdict("incorrect", f"{q.title}: not quite. {own.refusal(name)}")
    allowed = _context_names(q)
    context = {k: v for k, v in context.items() if k in allowed and is_plain(v)}
    jail = _jail(options.get("jail"))
    if not isinstance(q, LiveExercise):
        answer = _in_sandbox(answer, jail, options.get("release"))
    try:
        result = q._evaluate_here(answer, context) if q._early(answer) is None else q._early(answer)
    finally:
        _close(answer)
    return Verdict(result.status, result.message)


def _set_state(q, state: dict) -> None:
    """Take the question's numbers (only those it has, plain numbers) and the table it is about."""
    from labcore.exercises.answers import is_plain

    given = state.get("given")
    if isinstance(given, dict) and isinstance(getattr(q, "given", None), dict):
        q.given = {**q.given, **{k: v for k, v in given.items() if k in q.given and is_plain(v)}}
    if "result" in state and hasattr(q, "result") and type(state["result"]).__name__ == "DataFrame":
        q.result = state["result"]


def _context_names(q) -> set[str]:
    """The keywords a check takes from the notebook (``grad_bytes=`` ...), never its cluster or timeout."""
    checker = getattr(q, "checker", None)
    if checker is None:
        return set()
    names = list(inspect.signature(checker).parameters)[1:]
    return {n for n in names if n not in _RESERVED}


def _jail(spec: dict | None) -> Jail | None:
    if spec is None:
        return None
    return Jail(work=Path(spec["work"]), read=spec["read"], uid=spec["uid"], no_caps=spec["no_caps"],
                landlock=spec["landlock"], confine=spec["confine"])


def _in_sandbox(answer, jail, release):
    """Functions and classes of the answer as sandboxed stand-ins (the judge never runs them)."""
    from labcore.course.sandbox import LearnerFunction
    from labcore.exercises.codec import Sourced

    path = [release] if release else [_root()]
    if isinstance(answer, Sourced) and answer.kind in ("function", "class", "import"):
        return LearnerFunction(answer, jail=jail, pythonpath=path)
    if type(answer) in (tuple, list):
        return type(answer)(_in_sandbox(item, jail, release) for item in answer)
    return answer


def _close(answer) -> None:
    from labcore.course.sandbox import LearnerFunction

    for item in answer if type(answer) in (tuple, list) else [answer]:
        if isinstance(item, LearnerFunction):
            item.close()
