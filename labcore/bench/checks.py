"""Input checks shared by ``sweep`` and the CLI: every request is checked before a rank starts.

Each check raises ``ValueError`` with one sentence that names the problem and the fix;
the CLI prints it as one line and exits 2.

Example
-------
>>> from labcore.bench.checks import check_sizes
>>> check_sizes("all_gather", [8, 16], nranks=4, itemsize=4)
Traceback (most recent call last):
...
ValueError: every size is too small for all_gather on 4 ranks of 4-byte elements: each rank's share rounds down to 0 elements (nccl-tests rounds it down to a multiple of 16 bytes); make the largest size (-e, max_bytes) at least 64 bytes
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from labcore import validate
from labcore.bench import ops as _ops

# The most calls a size may time or warm up with (-n, -w: every timed call keeps its stamp,
# so 10**20 of them would fill any memory), and the most repeats of a sweep (-N).
MAX_CALLS = 10**6
MAX_REPEATS = 10**4
# The largest factor (-f) between sizes: 8 bytes times 2**30 is already 8 GiB, and a factor
# near the largest float would multiply a size past what any number of bytes can hold.
MAX_FACTOR = float(1 << 30)


def check_ranks(nranks, flag: str = "world_size") -> int:
    """``nranks`` as an int, if at least 1 and within what this machine holds
    (:func:`labcore.live.sysinfo.rank_limit`, the same limit a Cluster applies)."""
    from labcore.live.sysinfo import LIMIT_ENV, rank_limit

    nranks = validate.whole_number(nranks, flag, least=1, must="a whole number of ranks >= 1")
    limit, why = rank_limit()
    if nranks > limit:
        raise ValueError(f"{flag} {nranks} is more ranks than this machine can hold ({why}); use at "
                         f"most {limit}, or set {LIMIT_ENV}={nranks} to try anyway")
    return nranks


def check_counts(warmup, iters, repeats=1) -> tuple[int, int, int]:
    """(warmup, iters, repeats) as ints: warm-up calls 0 to :data:`MAX_CALLS`, timed calls
    1 to :data:`MAX_CALLS`, repeats 1 to :data:`MAX_REPEATS` (whole numbers, numpy's too)."""
    counts = []
    for name, flag, value, least, most, unit in (
            ("warmup", "-w", warmup, 0, MAX_CALLS, "calls per size"),
            ("iters", "-n", iters, 1, MAX_CALLS, "calls per size"),
            ("repeats", "-N", repeats, 1, MAX_REPEATS, "sweeps")):
        number = validate.whole_number(value, f"{name} ({flag})", least=least)
        if number > most:
            raise ValueError(f"{name} ({flag}) must be at most {most} {unit}, not {value!r}: "
                             f"use {flag} {most} or fewer")
        counts.append(number)
    return tuple(counts)


def check_collective(op: str, nranks: int, redop: str, root: int) -> str:
    """The canonical name of ``op`` if it can run on ``nranks`` with ``redop`` and ``root``."""
    name = _ops.op_name(op)
    if redop not in _ops.REDOPS:
        extra = (" (NCCL's premultiplied sum is not in torch.distributed)" if redop == "mulsum" else
                 " (the lab runs one reduction at a time)" if redop == "all" else "")
        raise ValueError(f"unknown reduction (-o) {redop!r}{extra}; use one of {', '.join(_ops.REDOPS)}")
    if name in _ops.OPS and nranks < _ops.OPS[name].min_ranks:
        least = _ops.OPS[name].min_ranks
        raise ValueError(f"{name} needs at least {least} ranks: use -g {least} (world_size={least}) or more")
    if name in _ops.OPS and _ops.OPS[name].power_of_two and nranks & (nranks - 1):
        raise ValueError(f"{name} needs a power-of-two number of ranks (nccl-tests skips others), "
                         f"not {nranks}: use -g {1 << (nranks.bit_length() - 1)}")
    root = validate.whole_number(root, "root (-r)", must="a whole rank number")
    if name in _ops.OPS and _ops.OPS[name].rooted and not 0 <= root < nranks:
        raise ValueError(f"root (-r) must be a rank between 0 and {nranks - 1}, not {root}")
    return name


def check_support(op: str, dtype, redop: str, backend: str) -> None:
    """Refuse what ``backend`` cannot run, once the backend is known and before a rank measures."""
    from labcore.bench.units import dtype_of

    name = _ops.op_name(op)
    type_name, torch_dtype = dtype_of(dtype)
    if (name in _ops.OPS and _ops.OPS[name].kind == "reduce" and redop == "avg"
            and not torch_dtype.is_floating_point and backend == "gloo"):
        raise ValueError(f"gloo cannot average {type_name} tensors: use a float type (-d float) or another "
                         "reduction (-o sum)")


def check_sizes(op: str, sizes: list[int], nranks: int, itemsize: int) -> None:
    """Refuse a sweep in which no size moves any data, or one that repeats a size."""
    name = _ops.op_name(op)
    if name == _ops.BARRIER or not sizes:
        return
    bad = [s for s in sizes if validate.whole(s) is None or s < 0]
    if bad:
        raise ValueError(f"sizes must be whole, non-negative numbers of bytes, not {bad[0]!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError("the sweep lists a size more than once: use a factor (-f) > 1 or a step (-i) > 0")
    spec = _ops.OPS[name]
    if all(spec.layout(s, nranks, itemsize).count == 0 for s in sizes):
        need = spec.smallest_size(nranks, itemsize)
        why = (f"each rank's share rounds down to 0 elements (nccl-tests rounds it down to a "
               f"multiple of {_ops.ALIGN_BYTES} bytes)" if spec.chunked else
               f"a {itemsize}-byte element does not fit")
        raise ValueError(f"every size is too small for {name} on {nranks} ranks of {itemsize}-byte "
                         f"elements: {why}; make the largest size (-e, max_bytes) at least {need} bytes")


def check_factor(factor) -> float | None:
    """``factor`` as a float if it is a finite number (numpy's too) of at most :data:`MAX_FACTOR`.

    (Whether it is above 1 is :func:`labcore.bench.units.size_steps`'s check, with -i's advice.)
    """
    if factor is None:
        return None
    value = validate.finite_number(factor, "factor (-f)", must="a finite number above 1")
    if value > MAX_FACTOR:
        raise ValueError(f"factor (-f) must be at most {MAX_FACTOR:.0f} (2**30: 8 bytes times that is "
                         f"8 GiB already), not {factor!r}: use a smaller factor, or a step in bytes (-i)")
    return value


def check_output(path, force: bool = False, flag: str = "--json") -> Path:
    """``path`` may be written by a run of the lab: checked before measuring (so results are never lost)
    and again before saving (so nothing is destroyed).

    Refused: an empty name, a name longer than a file system takes (:data:`MAX_NAME_BYTES` per
    name, :data:`MAX_PATH_BYTES` in all), a symbolic link (it would write through to its target),
    a folder or anything but a regular file, a file that exists and is not a sweep the lab saved
    (unless ``force``), and a place the lab cannot write to.
    """
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{flag} needs a file name, not {text!r}: give one, e.g. {flag} sweep.json")
    if "\0" in text:
        raise ValueError(f"{flag} {text!r} is not a file name (it holds a NUL character): give a plain name")
    parts = [len(part.encode()) for part in Path(text).parts]
    if len(text.encode()) > MAX_PATH_BYTES or max(parts) > MAX_NAME_BYTES:
        raise ValueError(f"{flag} is a name of {len(text)} characters ({text[:40]}...), longer than a file system "
                         f"takes ({MAX_NAME_BYTES} bytes a name, {MAX_PATH_BYTES} in all): give a shorter one")
    path = Path(text)
    if path.is_symlink():
        raise ValueError(f"{flag} {path} is a symbolic link (to {os.readlink(path)}): the lab does not write "
                         "through links; give the path of the file itself, or a new name")
    if path.is_dir():
        raise ValueError(f"cannot save to {path}: it is a folder; give a file name such as {path / 'sweep.json'}")
    if path.exists():
        if not stat.S_ISREG(path.stat().st_mode):
            raise ValueError(f"cannot save to {path}: it is not a regular file (a device, a pipe or a socket); "
                             "give a file name")
        if not force and not _lab_result(path):
            raise ValueError(f"{flag} {path} exists and is not a sweep the lab saved: it would be overwritten; "
                             "give another name, or add --force to replace it")
    return _writable(path)


# A file system's limits (Linux: NAME_MAX, PATH_MAX).
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


def _lab_result(path: Path) -> bool:
    """Whether ``path`` is a sweep the lab saved (a baseline JSON with the lab's format key)."""
    from labcore.bench import baseline
    from labcore.files import read_bytes_limited

    try:
        doc = json.loads(read_bytes_limited(path, baseline.MAX_BASELINE_BYTES, "a sweep").decode("utf-8"))
    except (ValueError, OSError, RecursionError, MemoryError):
        return False
    return isinstance(doc, dict) and doc.get("format") in baseline.READS


def _writable(path: Path) -> Path:
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write {path} ({exc.strerror}): choose a path in a folder you can "
                         "write to") from None
    if not existed:
        path.unlink()
    return path
