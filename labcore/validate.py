"""Input checks every package shares: whole numbers, finite numbers, and sizes in one grammar.

Each check returns the value in a plain Python type (numpy's integers and floats are
accepted, ``True``/``False`` never count as numbers) or raises ``ValueError`` with one
sentence "``what`` must be ..., not ``value``"; ``must=`` replaces the middle part where
a caller says it better ("a whole number of ranks >= 1").

Sizes have one grammar: a number (``8``, ``1.5``, ``1e3``), then optionally K, M, G or T
(powers of 1024, either case, optionally followed by ``i`` and ``B``: ``64M``, ``64MiB``,
``64 mb``). :func:`size` reads the whole text and refuses a fraction of a byte.
``size(text, nccl_tests=True)`` reads nccl-tests' ``-b/-e/-i`` exactly as nccl-tests does:
K, M or G only, anything after that letter ignored (``2kb`` is 2K), and a fraction of a
byte dropped as its cast to ``size_t`` drops it (``0.3K`` is 307 bytes).

Example
-------
>>> import numpy as np
>>> from labcore.validate import size, whole_number, finite_number
>>> size("64M"), size("1MiB"), size("1T"), size("0.3K", nccl_tests=True)
(67108864, 1048576, 1099511627776, 307)
>>> whole_number(np.int64(4), "ranks", least=1)
4
>>> finite_number(0, "link_gbps", above=0, must="a link speed in GB/s above 0")
Traceback (most recent call last):
...
ValueError: link_gbps must be a link speed in GB/s above 0, not 0
"""
from __future__ import annotations

import math
import numbers
import operator
import re

# The largest size read: 2**63 bytes (8 EiB) is more than torch can index, and sizes near
# the largest float would overflow when multiplied by a factor.
MAX_BYTES = (1 << 63) - 1

_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf(?:inity)?|nan)"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(rf"\s*({_NUMBER})\s*(?:([kmgt])i?)?b?\s*", re.IGNORECASE)
# nccl-tests' parsesize (src/common.cu, commit a0b82b2): a number, then optionally K, M or G;
# whatever follows that letter is ignored.
_NCCL_TESTS_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_NCCL_TESTS_NUMBER = re.compile(rf"\s*({_NUMBER})", re.IGNORECASE)


def whole(value) -> int | None:
    """``value`` as a Python int if it is a whole number (an int or a numpy integer, not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def real(value) -> float | None:
    """``value`` as a float if it is a finite real number (numpy's too, not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    return number if math.isfinite(number) else None


def _refuse(what: str, must: str, value, fix: str | None) -> ValueError:
    return ValueError(f"{what} must be {must}, not {_shown(value)}" + (f": {fix}" if fix else ""))


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:30]}... ({len(text)} characters)"


def whole_number(value, what: str, *, least: int | None = None, most: int | None = None,
                 must: str | None = None, fix: str | None = None) -> int:
    """``value`` as an int if it is a whole number within ``least..most``; else ValueError naming ``what``."""
    number = whole(value)
    if number is None or (least is not None and number < least) or (most is not None and number > most):
        bounds = (f" from {least} to {most}" if least is not None and most is not None else
                  f" >= {least}" if least is not None else f" <= {most}" if most is not None else "")
        raise _refuse(what, must or f"a whole number{bounds}", value, fix)
    return number


def finite_number(value, what: str, *, above: float | None = None, at_least: float | None = None,
                  below: float | None = None, at_most: float | None = None, must: str | None = None,
                  fix: str | None = None) -> float:
    """``value`` as a float if it is a finite real number within the bounds given; else ValueError.

    The message reads "``what`` must be ``must`` (or the bounds), not ``value``", then ": ``fix``" if given.
    """
    number = real(value)
    inside = number is not None and all((
        above is None or number > above, at_least is None or number >= at_least,
        below is None or number < below, at_most is None or number <= at_most))
    if not inside:
        bounds = [f"{word} {bound:g}" for word, bound in (("above", above), ("at least", at_least),
                                                          ("below", below), ("at most", at_most))
                  if bound is not None]
        raise _refuse(what, must or " and ".join([" ".join(["a finite number", *bounds[:1]]), *bounds[1:]]),
                      value, fix)
    return number


def positive_number(value, what: str, *, must: str | None = None, fix: str | None = None) -> float:
    """``value`` as a float if it is a finite number above 0; else ValueError naming ``what``."""
    return finite_number(value, what, above=0, must=must or "a finite number above 0", fix=fix)


def size(value, what: str | None = None, *, nccl_tests: bool = False) -> int:
    """Bytes from a size such as ``8``, ``64K``, ``1MiB``, ``1.5G`` (or an int, numpy's too).

    ``nccl_tests=True`` reads it as nccl-tests' ``-b``/``-e``/``-i`` do (see the module).
    nan, inf, negative sizes and sizes above :data:`MAX_BYTES` are refused; ``what``
    (a flag, say "-b (min_bytes)") starts the error when given.
    """
    try:
        return _size(value, nccl_tests)
    except ValueError as exc:
        if what:
            raise ValueError(f"{what}: {exc}") from None
        raise


def _size(value, nccl_tests: bool) -> int:
    if isinstance(value, bool):
        raise ValueError(f"size {value!r} is not a number of bytes")
    if isinstance(value, numbers.Integral):     # Python's and numpy's integers, exactly (10**400 too)
        number = int(value)
    else:
        number = (_nccl_tests_bytes if nccl_tests else _bytes)(value)
    if number < 0 or (isinstance(number, float) and not math.isfinite(number)):
        raise ValueError(f"size {_shown(value)} must be a finite, non-negative number of bytes")
    if number > MAX_BYTES:
        raise ValueError(f"size {_shown(value)} is more than 2**63 bytes (8 EiB), more than torch can index: "
                         "give a number of bytes with an optional K, M or G, e.g. 64K, 128M, 8G")
    if not nccl_tests and number != int(number):
        raise ValueError(f"size {_shown(value)} is {number:g} bytes, not a whole number of bytes: give a whole "
                         "number of bytes or a multiple of its unit, e.g. 307 or 1.5K")
    return int(number)


def _bytes(value) -> float:
    text = str(value)
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"cannot read size {_shown(value)}: write a number of bytes with an optional K, M, "
                         "G or T (powers of 1024; KiB, MB... also read), e.g. 8, 64K, 1MiB, 1G")
    return float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def _nccl_tests_bytes(value) -> float:
    text = str(value)
    match = _NCCL_TESTS_NUMBER.match(text)
    unit = text[match.end():].lstrip()[:1].lower() if match else None
    if match is None or unit not in _NCCL_TESTS_UNITS:
        raise ValueError(f"cannot read size {_shown(value)}: write a number of bytes with an optional "
                         "K, M or G (powers of 1024), e.g. 8, 0.3K, 64K, 128M, 1G")
    return float(match.group(1)) * _NCCL_TESTS_UNITS[unit]


__all__ = ["MAX_BYTES", "whole", "real", "whole_number", "finite_number", "positive_number", "size"]
