"""Scratch folders of a cluster's rank groups, and the sweep of those whose notebook died.

A group's folder (``labcore-<pid>-*`` in the temp dir) holds its rendezvous store,
the ranks' stack dumps and their temp files. ``close()`` and interpreter exit
remove it; a notebook killed outright cannot, so its ranks remove it when they see
it go, and the next cluster sweeps any folder whose owner is gone (and the
``pymp-*`` folder that multiprocessing made for that owner's forkserver).
"""
from __future__ import annotations

import atexit
import glob
import multiprocessing.util
import os
import shutil
import tempfile

import psutil

_PREFIX = "labcore-"
_PYMP_NOTE = "pymp-dir"


def make_run_dir() -> str:
    """A fresh folder owned by this process, noting multiprocessing's temp folder for the sweep."""
    run_dir = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    try:
        with open(os.path.join(run_dir, _PYMP_NOTE), "w") as f:
            f.write(multiprocessing.util.get_temp_dir())
    except BaseException:  # out of file descriptors, an interrupt: no half-made folder stays
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def remove(run_dir: str, with_pymp: bool = False) -> None:
    """Remove a run folder (and, when its owner is gone, the owner's ``pymp-*`` folder)."""
    if with_pymp:
        try:
            with open(os.path.join(run_dir, _PYMP_NOTE)) as f:
                pymp = f.read().strip()
        except OSError:
            pymp = ""
        if os.path.basename(pymp).startswith("pymp-"):
            shutil.rmtree(pymp, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    if os.path.exists(run_dir):  # e.g. no file descriptor was free to walk it: try again at exit
        _left_behind.add(run_dir)


_left_behind: set[str] = set()


@atexit.register
def _remove_left_behind() -> None:
    for run_dir in _left_behind:
        shutil.rmtree(run_dir, ignore_errors=True)


def owner_alive(run_dir: str) -> bool:
    """Whether the process that made ``run_dir`` still runs (a reused pid started later does not count,
    nor a dead one its parent has not reaped yet)."""
    try:
        pid = int(os.path.basename(run_dir)[len(_PREFIX):].split("-", 1)[0])
        made = os.stat(run_dir).st_mtime
        owner = psutil.Process(pid)
        return owner.create_time() <= made + 1.0 and owner.status() != psutil.STATUS_ZOMBIE
    except (ValueError, OSError, psutil.Error):
        return False


def remove_orphans() -> list[str]:
    """Remove the run folders (and their ``pymp-*`` folders) of notebooks that are gone."""
    removed = []
    for run_dir in glob.glob(os.path.join(tempfile.gettempdir(), f"{_PREFIX}[0-9]*-*")):
        pid = os.path.basename(run_dir)[len(_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and os.path.isdir(run_dir) and not owner_alive(run_dir):
            remove(run_dir, with_pymp=True)
            removed.append(run_dir)
    return removed
