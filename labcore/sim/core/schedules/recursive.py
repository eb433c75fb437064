"""Recursive doubling and Rabenseifner all-reduce, for any number of ranks.

Both work on a power of two n' = 2^floor(log2 n) of the n ranks. With r = n - n' extra
ranks they do what MPICH does: first, among ranks 0..2r-1 every even rank sends
its whole buffer to the odd rank above it, which reduces and takes part in the
main phase while the even rank waits; at the end the odd rank sends the result
back (one extra step before and after, a full buffer each).

* Recursive doubling: in round k every rank swaps its whole buffer with the rank
  2^k away and both reduce: log2 n' rounds of the S bytes (short messages).
* Rabenseifner: a recursive-halving reduce-scatter (round k swaps half of the
  current range with the rank n'/2^(k+1) away, S/2, S/4, ... bytes) then a
  recursive-doubling all-gather that reverses it: 2 log2 n' rounds moving
  2(n'-1)/n' S bytes in all (long messages).

Thakur, Rabenseifner and Gropp, IJHPCA 19(1), 2005.

Example
-------
>>> recursive_doubling_all_reduce_schedule(6, 60).n_steps    # 1 + log2(4) + 1
4
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core import steps
from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts
from labcore.sim.core.trace import Layout, Schedule


def _fold(ranks: int) -> tuple[int, int, np.ndarray]:
    """(n', r, real): the power of two, the extra ranks, and the real rank of each virtual rank."""
    pp = 1 << (ranks.bit_length() - 1)
    r = ranks - pp
    real = np.array([2 * v + 1 if v < r else v + r for v in range(pp)], dtype=np.int64)
    return pp, r, real


def _pre(parts: Parts, r: int, chunks: int) -> int:
    if r == 0:
        return 0
    even = 2 * np.arange(r)
    parts.add(0, even[:, None], even[:, None] + 1, np.arange(chunks)[None], True, label="fold extra ranks in")
    return 1


def _post(parts: Parts, r: int, chunks: int, step: int) -> None:
    if r:
        even = 2 * np.arange(r)
        parts.add(step, even[:, None] + 1, even[:, None], np.arange(chunks)[None], False,
                  label="send result to extra ranks")


def _folds(p: int) -> tuple[int, int]:
    """MPICH's power-of-two fold: (log2 p', 1 if there are extra ranks else 0)."""
    pp = 1 << (p.bit_length() - 1)
    return pp.bit_length() - 1, int(p > pp)


def _recursive_doubling_form(collective, p, n, k, channels, ports, options):
    # [MPICH] lgp (alpha + n beta + n gamma), plus a fold step before and a send-back step after
    L, extra = _folds(p)
    return [steps.step(L + extra, (1, n, n)), steps.step(extra, (1, n, 0))]


def _rabenseifner_form(collective, p, n, k, channels, ports, options):
    # [MPICH] 2 lgp alpha + 2 (p-1)/p n beta + (p-1)/p n gamma on p' ranks, plus fold/send-back
    L, extra = _folds(p)
    halves = [n / (2 << s) for s in range(L)]
    return ([steps.step(extra, (1, n, n))] + [steps.step(1, (1, m, m)) for m in halves]
            + [steps.step(1, (1, m, 0)) for m in reversed(halves)] + [steps.step(extra, (1, n, 0))])


@algorithm("all_reduce", "recursive_doubling", form=_recursive_doubling_form)
def recursive_doubling_all_reduce_schedule(ranks: int, nbytes: float) -> Schedule:
    """Recursive-doubling all-reduce: log2 n' rounds swapping the whole buffer (+2 steps if n is not 2^k)."""
    pp, r, real = _fold(ranks)
    parts = Parts()
    step = _pre(parts, r, 1)
    v = np.arange(pp)
    for k in range(pp.bit_length() - 1):
        parts.add(step, real[v], real[v ^ (1 << k)], 0, True, label=f"swap with rank 2^{k} away")
        step += 1
    _post(parts, r, 1, step)
    return parts.schedule("all_reduce", "recursive_doubling", ranks, nbytes, 1, layout=Layout("mesh"))


@algorithm("all_reduce", "rabenseifner", form=_rabenseifner_form, transfers=lambda p, k, c, g: 2 * p * p)
def rabenseifner_all_reduce_schedule(ranks: int, nbytes: float) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter then recursive-doubling all-gather, n' chunks."""
    pp, r, real = _fold(ranks)
    L = pp.bit_length() - 1
    parts = Parts()
    step = _pre(parts, r, pp)
    v = np.arange(pp)
    lo = np.zeros(pp, dtype=np.int64)          # each virtual rank's current range [lo, lo + size)
    size = pp
    for k in range(L):
        d = pp >> (k + 1)
        upper = (v & d) != 0                   # keeps the upper half of the range
        send_lo = np.where(upper, lo, lo + size // 2)
        parts.add(step, real[v][:, None], real[v ^ d][:, None], send_lo[:, None] + np.arange(size // 2)[None],
                  True, label="reduce-scatter (halving)")
        lo = np.where(upper, lo + size // 2, lo)
        size //= 2
        step += 1
    for k in range(L):
        d = 1 << k
        parts.add(step, real[v][:, None], real[v ^ d][:, None], lo[:, None] + np.arange(size)[None], False,
                  label="all-gather (doubling)")
        lo = np.minimum(lo, lo[v ^ d])
        size *= 2
        step += 1
    _post(parts, r, pp, step)
    return parts.schedule("all_reduce", "rabenseifner", ranks, nbytes, pp, layout=Layout("mesh"))
