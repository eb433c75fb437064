"""A rank keeps what it starts: orphans come back to it, and its end takes them all.

A daemon leaves its starter twice over: it calls ``setsid()`` (out of the rank's process group,
so no ``killpg`` reaches it; ``subprocess.Popen(..., start_new_session=True)`` does this) and
forks again so that its parent can exit (so it is no longer anyone's descendant, and no walk of
the rank's children finds it). Linux hands such an orphan to the nearest ancestor that asked for
it with ``prctl(PR_SET_CHILD_SUBREAPER, 1)`` instead of to init (prctl(2)); so every rank asks,
and whatever its code started, daemons included, stays among its children until the rank ends
them (:func:`end_descendants`). Elsewhere (macOS, Windows) there is no such call: a daemon that
double-forks outlives its rank there, and :func:`adopt_orphans` says so by returning False.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import psutil

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h, since Linux 3.4
_REAP_S = 2.0  # a SIGKILLed process is gone in well under this; one stuck in the kernel is left


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants; False where the system has no such call."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def descendants(pid: int | None = None, keep=()) -> list[psutil.Process]:
    """Every live descendant of ``pid`` (this process by default), adopted orphans included,
    except the pids in ``keep`` and their own descendants."""
    try:
        root = psutil.Process(pid)
        found = root.children(recursive=True)
    except psutil.Error:
        return []
    spared = set(keep)
    for proc in found:
        if proc.pid in spared:
            try:
                spared.update(p.pid for p in proc.children(recursive=True))
            except psutil.Error:
                pass
    return [p for p in found if p.pid not in spared]


def end_descendants(pid: int | None = None, keep=()) -> list[int]:
    """SIGKILL every descendant of ``pid`` (see :func:`descendants`); return their pids.

    Those that were this process's own children are reaped, so a rank that lives on (an
    engine) is not left holding zombies of the daemons it adopted.
    """
    procs = descendants(pid, keep)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    if pid is None or pid == os.getpid():
        unreaped = {p.pid for p in procs}
        deadline = time.monotonic() + _REAP_S
        while unreaped and time.monotonic() < deadline:
            for child in list(unreaped):
                try:
                    if os.waitpid(child, os.WNOHANG)[0]:
                        unreaped.discard(child)
                except ChildProcessError:
                    unreaped.discard(child)  # not ours to wait for (a grandchild), or reaped already
            if unreaped:
                time.sleep(0.01)
    return [p.pid for p in procs]
