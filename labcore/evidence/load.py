"""Noisy neighbours: busy processes that compete with the ranks for CPU time.

A real cause of a slowed collective is another job on the same machine. With
:func:`noisy_neighbours` a notebook can produce one on purpose and show the
evidence gate catching it. Each neighbour is a plain Python process spinning
in a loop; it stops when the ``with`` block ends, when its parent process
disappears, or after ``max_seconds``, whichever comes first, so none outlives
the notebook.

Example
-------
>>> from labcore.evidence.load import noisy_neighbours
>>> with noisy_neighbours(1, max_seconds=5) as pids:
...     len(pids)
1
"""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager

from labcore import validate

# Spin, checking about every 10 ms whether to stop (parent gone or time up).
_SPIN = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < end:
    for _ in range(20000):
        pass
"""


@contextmanager
def noisy_neighbours(n: int = 2, max_seconds: float = 300.0):
    """Run ``n`` CPU-bound processes for the duration of the ``with`` block; yields their pids.

    Parameters
    ----------
    n : how many busy processes (one keeps about one core busy).
    max_seconds : each stops by itself after this long, even if the block is still running.
    """
    n = validate.whole_number(n, "n", least=1, must="at least 1 busy process")
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid()), str(max_seconds)])
             for _ in range(n)]
    try:
        yield [p.pid for p in procs]
    finally:
        stop_processes(procs)


def stop_processes(procs) -> None:
    """Terminate ``procs`` (subprocess.Popen), kill any still running 5 s later, close their pipes."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
        if p.stdout:
            p.stdout.close()
