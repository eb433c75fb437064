"""Where a submission's code runs while it is graded: a private folder, another user, files out of reach.

``python -m labcore.course.jail [options] -- COMMAND ...`` starts COMMAND (a notebook's kernel, the
grader's sandbox, a live check's judge) confined, on one machine, without a container:

- **a private folder**: HOME, TMPDIR and the working folder are inside ``--work`` (a per-notebook
  temporary copy), the umask is 077, and the environment is rebuilt from nothing but PATH, the
  Python path given and ``--env``;
- **another user**, when started as root and Python's installation is readable by other users: a
  user id no account uses (``--uid``), no supplementary groups. It cannot read files that are not
  readable by others (keep the course folder ``chmod 700``), nor signal or trace the grader's
  processes, and every process it leaves is killed at the end (:func:`kill_user`);
- **no capabilities**, when started as root but Python lives where only root can read (``/root``):
  the command stays user 0 with an empty capability bounding set and ``no_new_privs`` (no mount,
  no raw sockets, no module loading, no privilege regained on exec); Landlock is then required;
- **files out of reach** with Linux's Landlock (kernel 5.13 and later), also without root: the
  process and everything it starts can read only the system's folders, Python's installation and
  ``--read`` paths, and write only in ``--work`` (and ``/dev``); Landlock ABI 6 and later also keeps
  it from signalling processes outside (``LANDLOCK_SCOPE_SIGNAL``) and from abstract Unix sockets,
  and Landlock keeps it from tracing processes outside at any ABI.

What it does not do: limit memory, CPU or the network (a submission can use the machine's
network as the grader's user could), or hide the system's own files and other processes' names;
without another user, a process that leaves its session and rewrites its environment can outlive
its grading (still confined). :func:`protections` says what this machine can give; nbgrader's
documentation advises a container per submission for untrusted code, which remains the stronger
choice where one is available.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import pwd
import secrets
import shutil
import signal
import stat
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Jail", "protections", "landlock_abi", "command", "isolated_python", "kill_user", "reap_orphans", "main",
           "IsolationError"]

# Landlock's system calls (the same numbers on every architecture) and its rights (linux/landlock.h)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
_PR_SET_CHILD_SUBREAPER = 36
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_TRUNCATE, _IOCTL_DEV = 1 << 14, 1 << 15
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/opt")
_UID_FIRST, _UID_SPAN = 2_000_000_000, 100_000_000      # ids no account has: a fresh one per notebook


class IsolationError(RuntimeError):
    """This machine cannot confine a submission as asked (the message says what would)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers (0: none)."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    abi = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(abi), 0)


def protections() -> dict:
    """What this machine can give a submission: {"user": another user (root, and Python readable by
    others), "capabilities": drop root's capabilities (root), "landlock": the Landlock ABI (0: none)}."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return {"user": root and _others_can_run_python(), "capabilities": root, "landlock": landlock_abi()}


def _others_can_run_python() -> bool:
    """Whether a user other than the owner can reach and read Python's installation and packages."""
    for path in {os.path.realpath(sys.executable), *_python_paths()}:
        parts = Path(path).parts
        for i in range(1, len(parts) + 1):
            mode = os.stat(os.path.join(*parts[:i])).st_mode
            need = stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH
            if not mode & need:
                return False
    return True


def _drop_capabilities() -> None:
    """Empty the capability bounding set and the ambient set: the command, though user 0, keeps no
    privilege, and exec gives none back."""
    libc = _libc()
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise IsolationError(f"could not drop capability {cap} ({os.strerror(ctypes.get_errno())})")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def _all_fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1                        # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= 1 << 13                         # refer
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def _landlock(read: list[str], write: list[str], abi: int) -> None:
    """Confine this process and its children to reading ``read`` and writing ``write`` (see the module)."""
    libc = _libc()
    handled = _all_fs_rights(abi)
    attr = _RulesetAttr(handled, 0, (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise IsolationError(f"Landlock refused a ruleset ({os.strerror(ctypes.get_errno())})")
    try:
        for paths, rights in ((read, _EXECUTE | _READ_FILE | _READ_DIR), (write, handled)):
            for path in paths:
                _allow(libc, ruleset, path, rights & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            raise IsolationError(f"Landlock could not confine the process ({os.strerror(ctypes.get_errno())})")
    finally:
        os.close(ruleset)


def _allow(libc, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return                                    # a system folder this machine does not have
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise IsolationError(f"Landlock refused a rule for {path} ({os.strerror(ctypes.get_errno())})")
    finally:
        os.close(fd)


def _python_paths() -> list[str]:
    """Python's own installation and its packages (the venv included), which the confined code reads."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            found.add(sysconfig.get_paths()[key])
    found |= {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p) and "site-packages" in p}
    return sorted(found)


@dataclass
class Jail:
    """One confinement: ``work`` (made private, removed at :meth:`close`), ``read`` (paths it may read
    besides the system's and Python's), ``uid`` (another user when root; None to stay), ``no_caps``
    (stay root without capabilities), ``landlock`` (the ABI to use; 0 for none), ``pythonpath``, ``env``."""

    work: Path
    read: list = field(default_factory=list)
    uid: int | None = None
    no_caps: bool = False
    landlock: int = 0
    pythonpath: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    confine: bool = True
    before: set = field(default_factory=set)
    owned: list = field(default_factory=list)

    @classmethod
    def fresh(cls, parent: str | None = None, confine: bool = True, **options) -> "Jail":
        """A new jail in a fresh private folder, with what this machine offers (see :func:`protections`);
        IsolationError where it offers nothing. ``confine=False``: only the private folder and environment
        (for notebooks that are trusted)."""
        can = protections() if confine else {"user": False, "capabilities": False, "landlock": 0}
        if confine and not can["user"] and not can["landlock"]:
            raise IsolationError("this machine can neither switch users (root, with Python readable by others) nor "
                                 "confine files (no Landlock): grade in a container per submission, as nbgrader's "
                                 "documentation advises")
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="labcore-grading-", dir=parent))
        uid = None
        while can["user"] and (uid is None or not _no_account(uid)):
            uid = _UID_FIRST + secrets.randbelow(_UID_SPAN)
        reap_orphans()
        jail = cls(work=work, uid=uid, no_caps=uid is None and can["capabilities"], landlock=can["landlock"],
                   confine=confine, before=_children(), **options)
        for sub in ("home", "tmp", "work"):
            (work / sub).mkdir()
        jail.give(work / "home", work / "tmp", work / "work")
        os.chmod(work, 0o711)
        return jail

    def give(self, *paths) -> None:
        """Hand ``paths`` (recursively) to the jail's user, so that the confined code may write there."""
        if self.uid is None:
            return
        for path in paths:
            for root, dirs, files in os.walk(path):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.lchown(name, self.uid, self.uid)

    def prefix(self, cwd: str | None = None, copies: dict | None = None) -> list[str]:
        """The argv prefix that runs a command in this jail (``python -m labcore.course.jail ... --``)."""
        argv = [sys.executable, "-m", "labcore.course.jail", "--work", str(self.work), "--landlock", str(self.landlock)]
        if self.uid is not None:
            argv += ["--uid", str(self.uid)]
        if self.no_caps:
            argv += ["--no-capabilities"]
        if not self.confine:
            argv += ["--unconfined"]
        for path in self.read:
            argv += ["--read", str(path)]
        for path in self.pythonpath:
            argv += ["--pythonpath", str(path)]
        for key, value in self.env.items():
            argv += ["--env", f"{key}={value}"]
        for src, dst in (copies or {}).items():
            argv += ["--copy", f"{src}={dst}"]
        argv += ["--chdir", str(cwd or self.work / "work")]
        return argv + ["--"]

    def close(self) -> None:
        """End every process started since the jail was made (this process adopts the orphans of what it
        starts, so a process that left its parent is found too), every process of the jail's user, and
        remove its folder (and the folders it was given to remove, ``owned``)."""
        if self.uid is not None:
            kill_user(self.uid)
        for pid in _children() - self.before:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
        for path in [self.work, *self.owned]:
            shutil.rmtree(path, ignore_errors=True)


def isolated_python(path: list, code: str) -> list[str]:
    """``python -I -c code`` with ``path`` first on sys.path: no environment variable, user site or
    current folder (a submission's ``numpy.py``) decides what it imports."""
    return [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {[str(p) for p in path]!r}; {code}"]


def reap_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux): what a confined process starts and
    leaves behind becomes this process's child, found and ended by :meth:`Jail.close`."""
    if sys.platform.startswith("linux"):
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children() -> set[int]:
    """Every process below this one (children, theirs, ...)."""
    import psutil

    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def command(jail: Jail | None, argv: list[str], cwd: str | None = None) -> list[str]:
    """``argv`` run in ``jail`` (as it is without one)."""
    return argv if jail is None else jail.prefix(cwd) + list(argv)


def kill_user(uid: int) -> None:
    """SIGKILL every process of ``uid`` (a child that becomes that user and signals all it may)."""
    if os.geteuid() != 0:
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m labcore.course.jail", description="Run a command confined.")
    p.add_argument("--work", required=True)
    p.add_argument("--landlock", type=int, default=0)
    p.add_argument("--uid", type=int)
    p.add_argument("--no-capabilities", action="store_true")
    p.add_argument("--unconfined", action="store_true")
    p.add_argument("--read", action="append", default=[])
    p.add_argument("--pythonpath", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--copy", action="append", default=[])
    p.add_argument("--chdir")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> None:
    """Confine this process as the options say, then become the command (exec)."""
    args = _parser().parse_args(argv)
    command_argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command_argv:
        raise SystemExit("python -m labcore.course.jail: give the command after --")
    work = os.path.realpath(args.work)
    for copy in args.copy:                         # e.g. the kernel's connection file, readable by us only
        src, dst = copy.split("=", 1)
        shutil.copyfile(src, dst)
        if args.uid is not None:
            os.chown(dst, args.uid, args.uid)
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": os.path.join(work, "home"), "TMPDIR": os.path.join(work, "tmp"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join(args.pythonpath), "LABCORE_PROGRESS": "off", "PYTHONNOUSERSITE": "1"}
    env.update(item.split("=", 1) for item in args.env)
    read = [p for p in [*_SYSTEM, *_python_paths(), *args.read, *args.pythonpath] if os.path.exists(p)]
    if args.uid is not None:
        os.setgroups([])
        os.setgid(args.uid)
        os.setuid(args.uid)
    if args.no_capabilities:
        _drop_capabilities()
    if args.landlock:
        _landlock(read, [work, "/dev"], args.landlock)
    elif args.uid is None and not args.unconfined:
        raise SystemExit("python -m labcore.course.jail: neither another user nor Landlock: refusing to run")
    os.umask(0o077)
    os.chdir(args.chdir or os.path.join(work, "work"))
    os.execve(command_argv[0], command_argv, env)


def _no_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return True
    return False


if __name__ == "__main__":
    main()
