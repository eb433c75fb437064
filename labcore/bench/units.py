"""Sizes and element types as nccl-tests spells them (``-b 8 -e 128M``, ``-d float``).

Example
-------
>>> from labcore.bench.units import parse_size, size_steps, dtype_of
>>> parse_size("128M"), parse_size("0.3K")
(134217728, 307)
>>> size_steps(8, 64, factor=2)
[8, 16, 32, 64]
>>> dtype_of("half")
('half', torch.float16)
"""
from __future__ import annotations

import math

import torch

from labcore import validate

# The largest size (-b, -e, -i) read (2**63 bytes: more than torch can index).
MAX_BYTES = validate.MAX_BYTES

# A sweep of more sizes than this is a slip of -i or -f (one of 8 B steps up to 1 GiB would
# keep a list of 134 million sizes before measuring any).
MAX_SIZES = 4096

# nccl-tests' type names first; torch's names are accepted as aliases.
DTYPES = {
    "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
    "half": torch.float16, "float": torch.float32, "double": torch.float64,
    "bfloat16": torch.bfloat16,
}
_ALIASES = {"float16": "half", "fp16": "half", "float32": "float", "fp32": "float",
            "float64": "double", "fp64": "double", "bf16": "bfloat16", "int": "int32",
            "char": "int8", "long": "int64"}


def parse_size(text) -> int:
    """Bytes from a size written as nccl-tests' ``-b``/``-e``/``-i`` read it.

    A number (``8``, ``0.3``, ``1e3``) and an optional K, M or G (powers of 1024);
    a fractional result is truncated as nccl-tests' cast to ``size_t`` does, so
    ``0.3K`` is 307 bytes. nan, inf, negative sizes and sizes above :data:`MAX_BYTES` are refused.
    (The nccl-tests variant of :func:`labcore.validate.size`, the lab's one size grammar.)
    """
    return validate.size(text, nccl_tests=True)


def _too_many(count: int) -> ValueError:
    return ValueError(f"this sweep would measure {count} sizes, more than the {MAX_SIZES} a sweep may have: "
                      "use a larger step (-i) or factor (-f), or a narrower range (-b/-e)")


def size_steps(min_bytes: int, max_bytes: int, factor: float | None = 2,
               step: int | None = None) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes``: times ``factor``, or plus ``step`` bytes.

    As nccl-tests' size loop: each size is the previous one times the factor (truncated
    to whole bytes) or plus the step. A factor that would repeat a size, a step that is not
    positive, and more than :data:`MAX_SIZES` sizes are refused.
    """
    if max_bytes < min_bytes:
        raise ValueError(f"the smallest size (-b, min_bytes={min_bytes}) is larger than the largest "
                         f"(-e, max_bytes={max_bytes}): swap them")
    if step is not None:
        if step <= 0:
            raise ValueError(f"step (-i) must be a positive number of bytes, not {step}")
        count = (max_bytes - min_bytes) // int(step) + 1
        if count > MAX_SIZES:
            raise _too_many(count)
        return list(range(min_bytes, max_bytes + 1, int(step)))
    if factor is None or not math.isfinite(factor) or factor <= 1:
        raise ValueError(f"factor (-f) must be a finite number above 1 (sizes multiply), or give a "
                         f"step in bytes (-i) so sizes add; got {factor}")
    if min_bytes <= 0:
        raise ValueError("sizes that multiply cannot start at 0 bytes (0 x factor stays 0): "
                         "start at -b 1 or more, or add a step with -i")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        if len(sizes) > MAX_SIZES:
            raise _too_many(f"over {MAX_SIZES}")
        # capped before rounding: a product past every size (even an infinite one) ends the loop
        nxt = int(min(size * factor, float(1 << 64)))
        if nxt <= size:
            raise ValueError(f"factor (-f) {factor:g} repeats the size {size} ({size} x {factor:g} rounds "
                             f"to {nxt} bytes): use a factor of at least {(size + 1) / size:.3g}, or a "
                             "larger -b")
        size = nxt
    return sizes


def dtype_of(name) -> tuple[str, torch.dtype]:
    """(nccl-tests name, torch dtype) for a type name or a torch dtype."""
    if isinstance(name, torch.dtype):
        for key, value in DTYPES.items():
            if value == name:
                return key, value
        raise ValueError(f"dtype {name} is not supported; choose one of {', '.join(DTYPES)}")
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in DTYPES:
        raise ValueError(f"unknown type {name!r}; choose one of {', '.join(DTYPES)}")
    return key, DTYPES[key]
