"""Loads the exercise modules of a student release, which ship compiled, without their source.

A student release (:mod:`labcore.course.release`) replaces each exercise module's code by a
three-line stub that calls :func:`load`; the module's code, with the solutions and last hints
taken out, is in ``sealed-<python>.bin`` beside this file (a marshal of compiled code objects,
one file per Python version the release was built for). ``inspect.getsource`` and a text
editor find nothing to read there; the checks run as they do in the lab.
"""
from __future__ import annotations

import marshal
import sys
from pathlib import Path

_FOLDER = Path(__file__).parent
_CACHE: dict[str, bytes] | None = None

__all__ = ["load", "blob_path"]


def blob_path(version: tuple[int, int] | None = None) -> Path:
    """The sealed code for one Python version (default: this interpreter's)."""
    major, minor = version or sys.version_info[:2]
    return _FOLDER / f"sealed-{major}.{minor}.bin"


def _blobs() -> dict[str, bytes]:
    global _CACHE
    if _CACHE is None:
        path = blob_path()
        if not path.exists():
            built = sorted(p.stem.removeprefix("sealed-") for p in _FOLDER.glob("sealed-*.bin"))
            here = ".".join(map(str, sys.version_info[:2]))
            raise ImportError(f"this student release was built for Python {', '.join(built) or 'none'}, not {here}: "
                              f"ask for one built with --python python{here}, or use that Python")
        _CACHE = marshal.loads(path.read_bytes())
    return _CACHE


def load(namespace: dict) -> None:
    """Run the sealed code of the module whose globals are ``namespace`` (called by its stub)."""
    name = namespace["__name__"]
    blobs = _blobs()
    if name not in blobs:
        raise ImportError(f"{name} is not in this student release's sealed code: rebuild the release")
    exec(marshal.loads(blobs[name]), namespace)
