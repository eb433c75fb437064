"""Sizes and element types as nccl-tests spells them (``-b 8 -e 128M``, ``-d float``).

Example
-------
>>> from labcore.live.bench.units import parse_size, size_steps, dtype_of
>>> parse_size("128M")
134217728
>>> size_steps(8, 64, factor=2)
[8, 16, 32, 64]
>>> dtype_of("half")
('half', torch.float16)
"""
from __future__ import annotations

import torch

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

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
    """Bytes from ``8``, ``64K``, ``128M``, ``1G`` (powers of 1024, as nccl-tests reads them)."""
    s = str(text).strip().upper().removesuffix("B")
    unit = s[-1:] if s[-1:] in _SUFFIX and s[-1:] else ""
    number = s[: len(s) - len(unit)]
    try:
        value = float(number) * _SUFFIX[unit]
    except ValueError:
        raise ValueError(f"cannot read size {text!r}: write bytes like 8, 64K, 128M or 1G") from None
    if value < 0 or value != int(value):
        raise ValueError(f"size {text!r} must be a whole, non-negative number of bytes")
    return int(value)


def size_steps(min_bytes: int, max_bytes: int, factor: float | None = 2,
               step: int | None = None) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes``: multiplied by ``factor``, or plus ``step`` bytes."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"need 0 < min_bytes <= max_bytes, got {min_bytes} and {max_bytes}")
    if step:
        return list(range(min_bytes, max_bytes + 1, int(step)))
    if not factor or factor <= 1:
        raise ValueError("give factor > 1 (sizes multiply) or step > 0 (sizes add)")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(int(size))
        size *= factor
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
