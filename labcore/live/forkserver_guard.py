"""Imported by the lab's forkserver alone: the ranks it forked go when the notebook goes.

Each running rank watches a lifeline to the notebook and ends itself, but a rank that cannot run
(stopped, say) cannot, and it would keep the forkserver alive too (children hold the forkserver's
alive pipe). So the forkserver asks Linux for a signal when the notebook dies, and on it (or on
the SIGTERM Jupyter sends the kernel's whole process group) gives the ranks a moment to tidy up
after themselves, then kills the process group of every rank still there, removes the notebook's
``pymp-*`` folder once the notebook is gone (it holds the forkserver's socket; a notebook that
closed its clusters has no ranks left to remove it) and its run folders (which ranks killed before
they could run leave behind), and exits. It also adopts the orphans of ranks
that died without ending what they started (labcore.live.subreaper), so those go with it too.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import sys
import time
import warnings

import psutil

from labcore.live import scratch, subreaper

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
        for target in (lambda kid=kid: os.killpg(kid.pid, signal.SIGKILL), kid.kill):
            try:
                target()
            except (OSError, psutil.Error):
                pass
    deadline = time.monotonic() + _GRACE_S
    while not _notebook_gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    if _notebook_gone():
        if _pymp_dir:
            shutil.rmtree(_pymp_dir, ignore_errors=True)
        scratch.remove_orphans()  # its run folders: ranks killed above before they ran could not remove them
    os._exit(0)


def _socket_folder(frame) -> str | None:
    """The ``pymp-*`` folder of the forkserver's listening socket (from forkserver.main's frame)."""
    try:
        with socket.socket(fileno=os.dup(frame.f_locals["listener_fd"])) as listener:
            folder = os.path.dirname(listener.getsockname())
    except (KeyError, OSError, TypeError):
        return None
    return folder if os.path.basename(folder).startswith("pymp-") else None


def _forkserver_main():
    """forkserver.main's frame while multiprocessing's forkserver preloads this module, else None."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return frame
        frame = frame.f_back
    return None


_main = _forkserver_main()
_pymp_dir = _socket_folder(_main) if _main is not None else None
if _main is not None:
    signal.signal(signal.SIGTERM, _end_ranks)
    signal.signal(signal.SIGUSR2, _end_ranks)
    _arm()
    subreaper.adopt_orphans()
    # forkserver.main reaps every child that exits, and warns of each it did not fork itself
    warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
