"""Verifiable inputs: values chosen so that every collective's result is exact.

Like nccl-tests' verifiable data (NT-V, nccl-tests ``verifiable/verifiable.cu``),
each rank fills its input from a formula of (rank, element index) that every
rank can re-evaluate, so any rank can compute the exact expected output of a
collective without receiving anything. Values are small integers, so sums,
products, minima and maxima are exact in every dtype the lab supports
(bfloat16 holds integers exactly up to 256, float16 up to 2048).

Only the float ``avg`` can differ from the exact result (NCCL pre-multiplies
by 1/n), so it gets nccl-tests' tolerance of a couple of units in the last
place; every other comparison is bit-exact.

Example
-------
>>> import torch
>>> from labcore.bench.verify import inputs, expected_reduction, count_wrong
>>> i = torch.arange(4)
>>> x0 = inputs(0, i, "sum", nranks=2, dtype=torch.float32)
>>> x1 = inputs(1, i, "sum", nranks=2, dtype=torch.float32)
>>> want = expected_reduction(range(2), i, "sum", 2, torch.float32)
>>> count_wrong(x0 + x1, want, "sum")
0
"""
from __future__ import annotations

from typing import Iterable

import torch

# Elements checked per block, so the check needs only a few MB of scratch memory
# whatever the buffer size (the memory planner counts on this).
CHECK_BLOCK = 1 << 18


def inputs(rank, index: torch.Tensor, redop: str, nranks: int, dtype: torch.dtype) -> torch.Tensor:
    """The input elements at ``index`` of ``rank``'s send buffer, exact in ``dtype``.

    Parameters
    ----------
    rank : int or int64 tensor shaped like ``index`` (one source rank per element).
    index : int64 tensor of element positions in that rank's send buffer.
    redop : "sum", "prod", "max", "min", "avg" or "none" (data-movement collectives).
    nranks : the world size.
    dtype : the element type of the returned tensor (same device as ``index``).
    """
    i = index
    if redop == "prod":
        # Exactly one rank holds a 2 or a 3 at each index, the rest hold 1: products stay tiny.
        big = ((i + rank) % nranks == 0).to(torch.int64)
        values = 1 + big * (1 + i % 2)
    elif redop == "avg":
        # Multiples of n: the sum is divisible by n, so an integer average is exact too.
        values = nranks * ((i * 7 + rank * 13) % 5)
    elif redop == "none":
        # Up to 100 (fits int8) with many distinct values, so a misplaced chunk shows.
        values = (i * 7 + rank * 13 + 1) % 101
    else:
        values = (i * 7 + rank * 13 + 1) % 5
    return values.to(dtype)


def _exact_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype.is_floating_point else torch.int64


def expected_reduction(ranks: Iterable[int], index: torch.Tensor, redop: str, nranks: int,
                       dtype: torch.dtype) -> torch.Tensor:
    """The exact reduction over ``ranks`` of the input elements at ``index``, cast to ``dtype``."""
    acc = None
    wide = _exact_dtype(dtype)
    for r in ranks:
        x = inputs(r, index, redop, nranks, wide)
        if acc is None:
            acc = x.clone()
        elif redop in ("sum", "avg"):
            acc += x
        elif redop == "prod":
            acc *= x
        elif redop == "max":
            torch.maximum(acc, x, out=acc)
        elif redop == "min":
            torch.minimum(acc, x, out=acc)
        else:
            raise ValueError(f"unknown reduction {redop!r}: use sum, prod, max, min or avg")
    if redop == "avg":
        acc = acc / nranks if wide.is_floating_point else torch.div(acc, nranks, rounding_mode="floor")
    return acc.to(dtype)


def count_wrong(got: torch.Tensor, want: torch.Tensor, redop: str) -> int:
    """How many elements of ``got`` differ from ``want``.

    Bit-exact, except a float ``avg``, which may be off by 2 units in the last
    place of the result (as nccl-tests allows).
    """
    if got.shape != want.shape:
        raise ValueError(f"result has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if redop == "avg" and got.dtype.is_floating_point:
        eps = torch.finfo(got.dtype).eps
        g, w = got.to(torch.float64), want.to(torch.float64)
        bad = (g - w).abs() > 2 * eps * w.abs().clamp(min=1.0)
    else:
        bad = got != want
    return int(bad.sum().item())
