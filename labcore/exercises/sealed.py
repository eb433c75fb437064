"""The exercise modules of a student release: their faces here, their checks apart.

A student release (``python -m labcore course build``, :mod:`labcore.course.release`) ships each
notebook's exercise module compiled, in two parts, one file of each per Python version:

- ``faces-<python>.bin``: what a notebook imports. The module's demonstration code (the names the
  notebooks use, and what those need) and its questions as :class:`labcore.exercises.question.Question`
  objects: a title, a prompt and the hints a learner may see, nothing a check compares with. The
  module's file is a stub that calls :func:`load`;
- ``checks-<python>.bin``: the whole module (no solutions, examples or docstrings) under the name
  ``labcore.exercises._full.<module>``, which :func:`install_checks` teaches Python to import. Only
  what runs a check imports it: the checker's child process, a live check (on the learner's ranks),
  never a question's face. A graded run's copy of the release leaves this file out: its questions
  say that the grader checks them.

Bytecode is one Python version's: a release built for other versions says which, and the fix.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import marshal
import sys
from pathlib import Path

FOLDER = Path(__file__).parent
FULL = "labcore.exercises._full"
PREFIX = "labcore.exercises."
_BLOBS: dict[str, dict] = {}

__all__ = ["FULL", "blob_path", "load", "install_checks", "have_checks", "full_name"]


def blob_path(kind: str, version: tuple[int, int] | None = None) -> Path:
    """The compiled ``kind`` ("faces" or "checks") for one Python version (default: this interpreter's)."""
    major, minor = version or sys.version_info[:2]
    return FOLDER / f"{kind}-{major}.{minor}.bin"


def _blob(kind: str) -> dict:
    if kind not in _BLOBS:
        path = blob_path(kind)
        if not path.exists():
            built = sorted(p.stem.split("-", 1)[1] for p in FOLDER.glob(f"{kind}-*.bin"))
            here = ".".join(map(str, sys.version_info[:2]))
            if kind == "checks" and not built:
                raise ImportError("this copy of the lab holds no checks (a graded run's copy): the grader checks "
                                  "the answers")
            raise ImportError(f"this student release was built for Python {', '.join(built) or 'none'}, not {here}: "
                              f"ask for one built with --python python{here}, or use that Python")
        _BLOBS[kind] = marshal.loads(path.read_bytes())
    return _BLOBS[kind]


def load(namespace: dict) -> None:
    """Run the face of the module whose globals are ``namespace`` (called by its stub)."""
    name = namespace["__name__"]
    faces = _blob("faces")
    if name not in faces:
        raise ImportError(f"{name} is not in the student release: the notebooks import its package")
    exec(marshal.loads(faces[name]), namespace)


def full_name(module: str) -> str:
    """``labcore.exercises.ring`` -> ``labcore.exercises._full.ring`` (where its checks load)."""
    return FULL + "." + module[len(PREFIX):]


def have_checks() -> bool:
    """Whether this copy of the release holds its checks."""
    try:
        _blob("checks")
    except ImportError:
        return False
    return True


class _Checks(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``labcore.exercises._full.<module>`` from the compiled checks."""

    def find_spec(self, name, path=None, target=None):
        if name != FULL and not name.startswith(FULL + "."):
            return None
        original = PREFIX + name[len(FULL) + 1:] if name != FULL else None
        checks = _blob("checks")
        if original is not None and original not in checks:
            return None
        package = original is None or any(other.startswith(original + ".") for other in checks)
        return importlib.machinery.ModuleSpec(name, self, is_package=package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        if name != FULL:
            exec(marshal.loads(_blob("checks")[PREFIX + name[len(FULL) + 1:]]), module.__dict__)


_FINDER = _Checks()


def install_checks() -> None:
    """Let Python import the release's checks (``labcore.exercises._full.*``); done once per process."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
