"""Latency targets: every call of a collective timed, p50 and p99 with distribution-free intervals.

A sweep summarises each repeat by its median call, which is right for a regression gate
but hides the tail. A latency target ("p99 of a 1 MiB all-reduce under 5 ms") needs the
time of **every** call: :func:`call_latencies` issues one collective back to back on
every rank, stamps each call (CUDA events on NCCL, ``perf_counter`` on gloo) and keeps,
per call, the slowest rank's time, since a training step waits for the last rank.

:func:`quantile_interval` puts a confidence interval on any percentile without assuming a
distribution: the number of calls below the true q-quantile is Binomial(n, q), so two
order statistics of the sorted times bracket it with a known probability (Conover,
*Practical Nonparametric Statistics*, 3rd ed., 1999, section 3.2). A high percentile needs
many calls before its interval closes: with n calls the largest one is an upper bound for
p99 only with probability 1 - 0.99^n, so a 95% interval needs at least 368 calls
(:func:`calls_needed`); with fewer the upper end is infinite, and a target on it can only
be "inconclusive". The calls of one run are not independent (a neighbour's burst slows
several in a row), so the interval is a best case: repeat the measurement to see the rest.

Example
-------
>>> import numpy as np
>>> times = np.arange(1.0, 401.0)                 # 400 calls of 1..400 us
>>> est, low, high = quantile_interval(times, 0.5)
>>> float(est), bool(low < est < high)
(200.5, True)
>>> calls_needed(0.99)
368
>>> quantile_interval(times[:100], 0.99)[2]       # 100 calls cannot bound p99 from above
inf
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from labcore import validate
from labcore.bench import checks
from labcore.bench import ops as _ops

QUANTILES = (0.5, 0.99)


def _check_fraction(name: str, value: float) -> None:
    validate.finite_number(value, name, above=0, below=1,
                           must="a fraction strictly between 0 and 1 (0.99 = p99)")


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, q), computed in log space (n may be large)."""
    k = np.arange(n + 1)
    log_choose = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
    log_pmf = log_choose + k * math.log(q) + (n - k) * math.log1p(-q)
    return np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)


def quantile_interval(values, q: float, level: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): the ``q``-quantile of ``values`` and a distribution-free interval.

    The interval runs between two order statistics chosen so that it covers the true
    quantile with probability at least ``level`` (each side misses with at most
    ``(1 - level) / 2``). Where the data cannot bound a side, that end is -inf or inf.

    Parameters
    ----------
    values : times (any unit), at least one.
    q : the quantile, strictly between 0 and 1 (0.5 = p50, 0.99 = p99).
    level : confidence level, strictly between 0 and 1.
    """
    _check_fraction("q", q)
    _check_fraction("level", level)
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("quantile_interval needs at least one finite value")
    n, tail = x.size, (1 - level) / 2
    cdf = _binomial_cdf(n, q)
    # low = x(l) (1-based) with P(B <= l - 1) <= tail, as large as possible;
    # high = x(u) with P(B >= u) = 1 - P(B <= u - 1) <= tail, as small as possible.
    lows = np.nonzero(cdf[:n] <= tail)[0]
    highs = np.nonzero(1 - cdf[:n] <= tail)[0]
    low = x[lows[-1]] if lows.size else -math.inf
    high = x[highs[0]] if highs.size else math.inf
    return float(np.quantile(x, q)), float(low), float(high)


def calls_needed(q: float, level: float = 0.95) -> int:
    """Fewest calls for which :func:`quantile_interval` can bound the ``q``-quantile from above."""
    _check_fraction("q", q)
    _check_fraction("level", level)
    # the largest call is an upper bound with probability 1 - q**n; it must reach 1 - tail
    return math.ceil(math.log((1 - level) / 2) / math.log(q))


def latency_summary(times, quantiles=QUANTILES, level: float = 0.95, label: str = "") -> pd.DataFrame:
    """One row per quantile: ``percentile`` (e.g. "p99"), ``estimate``, ``low``, ``high``, ``calls``.

    ``times`` is a sequence of call times or the DataFrame of :func:`call_latencies`
    (its ``time_us``); ``label`` fills a ``condition`` column (e.g. "idle").
    """
    values = times["time_us"] if isinstance(times, pd.DataFrame) else times
    rows = []
    for q in quantiles:
        est, low, high = quantile_interval(values, q, level)
        rows.append(dict(condition=label, percentile=f"p{q * 100:g}", estimate=est, low=low, high=high,
                         calls=len(values)))
    out = pd.DataFrame(rows)
    out.attrs["level"] = level
    return out


def stamped_calls(spec: dict) -> list[float]:
    """On every rank: ``calls`` back-to-back calls of ``op`` at ``nbytes``, each one's seconds.

    Runs inside ``Cluster.run``; the buffers, inputs and call are the benchmark harness's
    (:mod:`labcore.bench.harness`), so a call here is a call of :func:`labcore.bench.sweep`.
    Every rank runs the same number of calls, so none waits for a call the others skip.
    """
    from labcore.bench import harness
    from labcore.bench.units import dtype_of

    import torch.distributed as dist

    dev = harness._device()
    op = _ops.OPS[spec["op"]]
    _, dtype = dtype_of(spec["dtype"])
    n, rank = dist.get_world_size(), dist.get_rank()
    lay = op.layout(spec["nbytes"], n, dtype.itemsize)
    ctx = _ops.Ctx(rank, n, spec["root"] if op.rooted else -1, op.fill_redop(spec["redop"]), dtype,
                   lay.count, torch_op=spec["redop"])
    send, recv = harness._buffers(op, spec["placement"], lay, ctx, dev)
    harness._fill(send, op, ctx)
    call = harness._caller(op, spec["placement"], send, recv, ctx)
    harness._first_call(call, spec["op"], spec["dtype"])
    for _ in range(spec["warmup"]):
        call()
    harness._barrier(dev)
    return harness.per_call_seconds(call, spec["calls"], dev)


def call_latencies(cluster, op: str = "all_reduce", nbytes=1 << 20, *, calls: int = 400, warmup: int = 5,
                   dtype: str = "float", redop: str = "sum", root: int = 0, placement: str = "in-place",
                   timeout: float | None = None) -> pd.DataFrame:
    """Time every one of ``calls`` calls of ``op`` at ``nbytes`` on the cluster's ranks.

    Parameters
    ----------
    cluster : a :class:`labcore.Cluster` (or EngineCluster).
    op, nbytes, dtype, redop, root, placement : as in :func:`labcore.bench.sweep` (one size,
        one placement); ``nbytes`` may be a string such as ``"1M"``.
    calls : timed calls; p99 needs at least :func:`calls_needed` (368) for a closed interval.
    warmup : untimed calls first (the same on every rank).
    timeout : seconds the whole measurement may take (cluster default).

    Returns
    -------
    DataFrame with one row per call: ``call`` (0-based), ``time_us`` (the slowest rank's time
    for that call: a step waits for the last rank) and ``mean_us`` (the mean over ranks),
    with ``op``, ``size``, ``ranks``, ``backend``.

    Example
    -------
    >>> import labcore as lc
    >>> with lc.Cluster(2) as cl:                                         # doctest: +SKIP
    ...     lat = call_latencies(cl, "all_reduce", "1M", calls=400)
    >>> latency_summary(lat)                                              # doctest: +SKIP
    """
    from labcore.bench.harness import PLACEMENTS
    from labcore.bench.units import dtype_of

    name = checks.check_collective(op, cluster.world_size, redop, root)
    if name == _ops.BARRIER:
        raise ValueError("a barrier moves no data; time a collective that does (all_reduce, ...)")
    warmup, calls, _ = checks.check_counts(warmup, calls)
    root = validate.whole(root)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, not {placement!r}")
    _, torch_dtype = dtype_of(dtype)
    size = validate.size(nbytes, nccl_tests=True)
    checks.check_sizes(name, [size], cluster.world_size, torch_dtype.itemsize)
    spec = dict(op=name, nbytes=size, dtype=dtype, redop=redop, root=root, placement=placement,
                calls=calls, warmup=warmup)
    per_rank = np.asarray(cluster.call(stamped_calls, (spec,), timeout=timeout), dtype=float) * 1e6
    lay = _ops.OPS[name].layout(size, cluster.world_size, torch_dtype.itemsize)
    df = pd.DataFrame(dict(call=np.arange(calls), time_us=per_rank.max(axis=0), mean_us=per_rank.mean(axis=0)))
    df.insert(0, "backend", cluster.backend)
    df.insert(0, "ranks", cluster.world_size)
    df.insert(0, "size", max(lay.send, lay.recv) * torch_dtype.itemsize)
    df.insert(0, "op", name)
    df.attrs["params"] = spec
    return df
