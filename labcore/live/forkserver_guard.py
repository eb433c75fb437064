"""Imported by the lab's forkserver alone: the ranks it forked go when the notebook goes.

Each running rank watches a lifeline to the notebook and ends itself, but a rank that cannot run
(stopped, say) cannot, and it would keep the forkserver alive too (children hold the forkserver's
alive pipe). So the forkserver asks Linux for a signal when the notebook dies, and on it (or on
the SIGTERM Jupyter sends the kernel's whole process group) gives the ranks a moment to tidy up
after themselves, then kills the process group of every rank still there, and exits.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import psutil

_PR_SET_PDEATHSIG = 1
_GRACE_S = 2.0
_notebook = os.getppid()


def _notebook_gone() -> bool:
    try:
        return psutil.Process(_notebook).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _arm() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGUSR2)


def _end_ranks(signum, frame) -> None:
    if signum == signal.SIGUSR2 and not _notebook_gone():
        _arm()  # the notebook thread that started us ended, not the notebook: keep serving
        return
    deadline = time.monotonic() + _GRACE_S
    kids = psutil.Process().children()
    while time.monotonic() < deadline:
        kids = [k for k in kids if k.is_running() and k.status() not in (psutil.STATUS_ZOMBIE,
                                                                            psutil.STATUS_STOPPED)]
        if not kids:
            break
        time.sleep(0.05)
    for kid in psutil.Process().children():
        for target in (lambda: os.killpg(kid.pid, signal.SIGKILL), kid.kill):
            try:
                target()
            except (OSError, psutil.Error):
                pass
    os._exit(0)


def _in_forkserver() -> bool:
    """True while multiprocessing's forkserver preloads this module (and nowhere else)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return True
        frame = frame.f_back
    return False


if _in_forkserver():
    signal.signal(signal.SIGTERM, _end_ranks)
    signal.signal(signal.SIGUSR2, _end_ranks)
    _arm()
