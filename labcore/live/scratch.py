"""Scratch folders of a cluster's rank groups, and the sweep of those whose notebook died.

A group's folder holds its rendezvous store, the ranks' stack dumps and their temp files. It lives
in this user's private folder, ``labcore-<uid>`` in the temp dir (mode 0700, owned by the user, not a
link: :func:`private_folder` refuses any other), as ``run-<pid>-*`` with a token file the lab wrote
into it (:data:`TOKEN`, naming the folder and its owner's process). ``close()`` and interpreter exit
remove it; a notebook killed outright cannot, so its ranks remove it when they see it go, and the
next cluster sweeps any folder of this user's whose owner is gone (:func:`remove_orphans`).

The sweep deletes only what this user's lab made: folders in the private folder, owned by this
user, not links, holding the lab's token for that very folder. It never deletes a path a file
names, and never looks in a folder other users can write to. (The forkserver removes a dead
notebook's ``pymp-*`` socket folder itself; see :mod:`labcore.live.forkserver_guard`.)
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile

import psutil

_RUN = "run-"
TOKEN = ".labcore-run"


def private_folder() -> str:
    """This user's folder for run folders, made 0700 if missing; ValueError if what is there is not
    a folder of this user's that no one else can enter (a link, another owner, open permissions)."""
    folder = os.path.join(tempfile.gettempdir(), f"labcore-{os.getuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise ValueError(f"{folder} is not a private folder of this user's (a link, another user's, or open to "
                         "others): remove it, or set TMPDIR to a folder of your own")
    return folder


def make_run_dir() -> str:
    """A fresh folder owned by this process, in this user's private folder, holding the lab's token."""
    for _ in range(3):                     # another process may remove the private folder when it is empty
        try:
            run_dir = tempfile.mkdtemp(prefix=f"{_RUN}{os.getpid()}-", dir=private_folder())
            break
        except FileNotFoundError:
            continue
    else:
        raise OSError(f"could not make a run folder in {tempfile.gettempdir()}")
    try:
        with open(os.path.join(run_dir, TOKEN), "x") as f:
            f.write(_token(run_dir))
    except BaseException:  # out of file descriptors, an interrupt: no half-made folder stays
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def _token(run_dir: str) -> str:
    return f"labcore run folder {os.path.basename(run_dir)} of uid {os.getuid()}\n"


def remove(run_dir: str) -> None:
    """Remove a run folder, and this user's private folder once it is empty."""
    shutil.rmtree(run_dir, ignore_errors=True)
    if os.path.exists(run_dir):  # e.g. no file descriptor was free to walk it: try again at exit
        _left_behind.add(run_dir)
        return
    try:
        os.rmdir(os.path.dirname(run_dir))
    except OSError:
        pass                       # other run folders are there, or it is gone already


_left_behind: set[str] = set()


@atexit.register
def _remove_left_behind() -> None:
    for run_dir in _left_behind:
        shutil.rmtree(run_dir, ignore_errors=True)


def owner_alive(run_dir: str) -> bool:
    """Whether the process that made ``run_dir`` still runs (a reused pid started later does not count,
    nor a dead one its parent has not reaped yet)."""
    try:
        pid = int(os.path.basename(run_dir)[len(_RUN):].split("-", 1)[0])
        made = os.stat(run_dir).st_mtime
        owner = psutil.Process(pid)
        return owner.create_time() <= made + 1.0 and owner.status() != psutil.STATUS_ZOMBIE
    except (ValueError, OSError, psutil.Error):
        return False


def _ours(run_dir: str) -> bool:
    """A run folder this user's lab made: a real folder of this user's holding the token written for it."""
    try:
        info = os.lstat(run_dir)
        token = os.path.join(run_dir, TOKEN)
        held = os.lstat(token)
        if not (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_ISREG(held.st_mode)
                and held.st_uid == os.getuid() and held.st_size < 256):
            return False
        fd = os.open(token, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            return os.read(fd, 256).decode(errors="replace") == _token(run_dir)
        finally:
            os.close(fd)
    except OSError:
        return False


def remove_orphans() -> list[str]:
    """Remove this user's run folders whose notebook is gone (see the module docstring)."""
    try:
        folder = private_folder()
    except (ValueError, OSError):
        return []                  # no private folder to trust: sweep nothing
    removed = []
    for entry in os.listdir(folder):
        run_dir = os.path.join(folder, entry)
        pid = entry[len(_RUN):].split("-", 1)[0]
        if entry.startswith(_RUN) and pid.isdigit() and _ours(run_dir) and not owner_alive(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
            removed.append(run_dir)
    try:
        os.rmdir(folder)           # left only if run folders are there
    except OSError:
        pass
    return removed
