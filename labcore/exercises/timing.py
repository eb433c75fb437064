"""Time limits that count only the learner's code.

A check runs the lab's own code (imports, references, simulations, starting ranks) and the
learner's code (their function, and any method of their answer the lab has to call, such as its
``repr``). Only the second is timed: :func:`learner_code` runs a call under the time left to the
check in progress (:func:`limit`), and the lab's code around it runs unbounded. So a slow first
import of torch never counts, and a limit that fires never cuts an import in half (a module left
half-initialised breaks every later check of the session): an alarm that arrives while a module
is being imported waits for the import to finish.

The limit is a ``SIGALRM`` interval timer, armed in the main thread only (elsewhere the learner's
code runs unbounded); a timer already running (pytest-timeout's, say) is put back with what it
had left.

Example
-------
>>> with limit(1.0) as budget:
...     learner_code(sum, [1, 2, 3])
6
>>> budget.left <= 1.0
True
"""
from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time

__all__ = ["OutOfTime", "Budget", "limit", "learner_code"]

_IMPORT_WAIT_S = 0.05       # how often an alarm that came during an import looks again


class OutOfTime(BaseException):
    """Raised inside the learner's code when it ran past the check's time limit (a BaseException:
    ``except Exception`` in the learner's code must not swallow it)."""


class Budget:
    """What is left of the seconds the learner's code may run in one check (None: no limit)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.left = seconds
        self._armed = False
        self._inside = False

    def run(self, fn, /, *args, **kwargs):
        """Call ``fn(*args, **kwargs)`` with the alarm set to the time left; nested calls share it."""
        if self.left is None or self._inside or threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        if self.left <= 0:
            raise OutOfTime()
        self._inside = True
        previous = signal.signal(signal.SIGALRM, self._alarm)
        outer, _ = signal.setitimer(signal.ITIMER_REAL, self.left)
        start = time.monotonic()
        try:
            self._armed = True
            try:
                return fn(*args, **kwargs)
            finally:
                self._armed = False
        finally:                   # runs even when the alarm arrived as the inner block ended
            self._armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            spent = time.monotonic() - start
            self.left = max(0.0, self.left - spent)
            self._inside = False
            if outer:
                signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer - spent))

    def _alarm(self, signum, frame) -> None:
        if not self._armed:
            return
        if _importing(frame):
            signal.setitimer(signal.ITIMER_REAL, _IMPORT_WAIT_S)
            return
        self._armed = False
        raise OutOfTime()


def _importing(frame) -> bool:
    """Whether the interrupted code is inside an import (importlib's frozen bootstrap is on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("labcore_exercise_budget", default=None)


@contextlib.contextmanager
def limit(seconds: float | None):
    """The budget of one check: :func:`learner_code` inside the block spends it."""
    budget = Budget(seconds)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def learner_code(fn, /, *args, **kwargs):
    """Run the learner's ``fn(*args, **kwargs)`` under the time left to the check in progress (outside a
    check: unbounded). Raises :class:`OutOfTime` when the time runs out."""
    budget = _CURRENT.get()
    if budget is None:
        return fn(*args, **kwargs)
    return budget.run(fn, *args, **kwargs)
