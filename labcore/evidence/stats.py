"""Statistics that hold on a noisy machine: medians with bootstrap intervals, a permutation gate.

A shared machine makes single runs lie: a neighbour's burst doubles one run and
not the next. So a sweep is **repeated** (``sweep(..., repeats=R)``, every size
once, then again: interleaved, so slow drift touches every size alike) and each
size is summarised by the **median** of its repeats with a **bootstrap confidence
interval** (:func:`summarize`).

:func:`compare` is the regression gate. For each size and placement it asks
whether the current run is slower than the baseline by more than ``tolerance``
with a one-sided **permutation test** on log times. Its statistic is the rank-sum
of Wilcoxon and Mann-Whitney over each group's fastest three quarters of repeats:
a neighbour's burst only ever slows a repeat down, so the slowest quarter (of the
baseline as of the run) does not decide. Under "slower by exactly the tolerance" the
shifted current repeats and the baseline repeats are exchangeable, so the p-value is
exact (every relabelling enumerated when the groups are small, else 20,000 random
ones with a fixed seed; Good, *Permutation Tests*, 2000). Each size is
tested at ``alpha / k`` (Bonferroni over the ``k`` sizes and placements), so an
unchanged setup is flagged in at most ``alpha`` of runs (5% by default), whatever
the number of sizes. The same test the other way round says "pass" only when the
run is shown to be within the tolerance; otherwise the answer is "inconclusive:
measure more" (a larger ``repeats``), never a guess. Few repeats cannot reach the
level at all (3 against 3 give p >= 1/20), and the gate says so.

Example
-------
>>> import pandas as pd
>>> from labcore.evidence.stats import compare, verdict
>>> base = pd.DataFrame(dict(op="all_reduce", size=1024, type="float", redop="sum", root=-1,
...                          ranks=2, placement="in-place", repeat=range(6), busbw=1.0,
...                          median_us=[10.0, 10.4, 9.8, 10.1, 10.3, 9.9]))
>>> slow = base.assign(median_us=base["median_us"] * 2)
>>> compare(base, slow)["status"].tolist(), verdict(compare(base, base))
(['regression'], 'pass')
"""
from __future__ import annotations

import functools
import itertools
import math
import statistics

import numpy as np
import pandas as pd

from labcore import validate

KEYS = ["op", "size", "type", "redop", "root", "ranks", "placement"]
# Columns that must agree between a baseline and a run (the rest of KEYS are the sizes).
MATCHED = [("op", "collective"), ("type", "dtype (-d)"), ("redop", "reduction (-o)"),
           ("ranks", "rank count (-g)")]
EXACT_LIMIT = 20_000
RANDOM_RELABELLINGS = 20_000
BOOTSTRAP_RESAMPLES = 2_000
# Share of each group's slowest repeats the gate leaves out (load only ever slows a repeat).
TRIM = 0.25


TIMES = ("median_us", "time_us")


def _time_column(df: pd.DataFrame, time: str) -> str:
    """``time``, or nccl-tests' ``time_us`` where a frame has no usable medians (text read back)."""
    if time not in TIMES:
        raise ValueError(f"time is the column of times to use, {' or '.join(TIMES)}, not {time!r}")
    if time in df and df[time].notna().all():
        return time
    if "time_us" not in df:
        raise ValueError(f"the sweep has no {time} or time_us column: pass labcore.bench.sweep's output")
    return "time_us"


def _check_frame(df, what: str, needs=("size", "busbw")) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{what} must be a sweep DataFrame (labcore.bench.sweep, read_nccl_tests or "
                        f"load_baseline), not {type(df).__name__}")
    missing = [c for c in needs if c not in df]
    if missing:
        raise ValueError(f"{what} lacks the columns {missing}: pass labcore.bench.sweep's output")
    if df.empty:
        raise ValueError(f"{what} has no rows: measure first")


def bootstrap_median(values, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median of ``values`` and its percentile bootstrap interval.

    >>> bootstrap_median([1.0, 2.0, 3.0, 4.0, 100.0])[0]
    3.0
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    tail = (1 - level) / 2
    return float(np.median(x)), float(np.quantile(meds, tail)), float(np.quantile(meds, 1 - tail))


def summarize(df: pd.DataFrame, level: float = 0.95, time: str = "median_us") -> pd.DataFrame:
    """One row per size and placement: repeats, median time with its bootstrap interval, busbw.

    Parameters
    ----------
    df : a sweep (any number of repeats).
    level : confidence level of the interval.
    time : the per-repeat time to summarise: ``median_us`` (the median call of each repeat,
        which a stalled call does not move) or ``time_us`` (nccl-tests' mean).
    """
    _check_frame(df, "the sweep")
    if not 0 < level < 1:
        raise ValueError(f"level is a confidence level between 0 and 1 (0.95 = 95%), not {level!r}")
    col = _time_column(df, time)
    keys = [k for k in KEYS if k in df]
    rows = []
    for key, group in df.groupby(keys, sort=False):
        med, lo, hi = bootstrap_median(group[col], level)
        rows.append(dict(zip(keys, key), repeats=len(group), median_us=med, low_us=lo, high_us=hi,
                         busbw=float(group["busbw"].median())))
    out = pd.DataFrame(rows)
    out.attrs.update(level=level, time=col)
    return out


def _trimmed_u(x: np.ndarray, labels: np.ndarray, keep_base: int, keep_cur: int) -> np.ndarray:
    """Mann-Whitney U between the fastest ``keep_cur`` "current" and ``keep_base`` baseline values,
    for each row of boolean ``labels`` (True: current) over the pooled values ``x``."""
    cur = np.sort(np.where(labels, x, np.inf), axis=1)[:, :keep_cur]
    base = np.sort(np.where(labels, np.inf, x), axis=1)[:, :keep_base]
    above = (cur[:, :, None] > base[:, None, :]).sum(axis=(1, 2))
    ties = (cur[:, :, None] == base[:, None, :]).sum(axis=(1, 2))
    return above + 0.5 * ties


def _kept(n: int, trim: float) -> int:
    return n - int(math.floor(trim * n))


@functools.lru_cache(maxsize=32)
def _relabellings(n_base: int, n_cur: int, seed: int) -> np.ndarray:
    """Every way (or 20,000 random ways) to call ``n_cur`` of the pooled values "current"."""
    n = n_base + n_cur
    if math.comb(n, n_cur) <= EXACT_LIMIT:
        labels = np.zeros((math.comb(n, n_cur), n), dtype=bool)
        for i, chosen in enumerate(itertools.combinations(range(n), n_cur)):
            labels[i, list(chosen)] = True
        return labels
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((RANDOM_RELABELLINGS, n)), axis=1)
    return order >= n_base  # the last n_cur positions of each random order are "current"


def permutation_pvalues(baseline, current, tolerance: float, trim: float = TRIM,
                        seed: int = 0) -> tuple[float, float]:
    """One-sided p-values (slower, faster) of ``current`` against ``baseline`` x (1 + tolerance).

    "slower" tests H0: current <= (1 + tolerance) x baseline, so a small p is evidence of a
    slowdown beyond the tolerance; "faster" tests the opposite (evidence of being within it).
    The statistic is the rank-sum (Mann-Whitney U) of each group's fastest repeats, the
    slowest ``trim`` of each group left out: load only ever slows a repeat down, so a burst
    in the baseline or the run does not decide the answer. The same statistic is computed
    for every relabelling, so the p-value is exact for exchangeable repeats.
    """
    base = np.log(np.asarray(baseline, dtype=float))
    cur = np.log(np.asarray(current, dtype=float)) - math.log1p(tolerance)
    pooled = np.concatenate([base, cur])
    labels = _relabellings(base.size, cur.size, seed)
    keep = (_kept(base.size, trim), _kept(cur.size, trim))
    stats = _trimmed_u(np.broadcast_to(pooled, labels.shape), labels, *keep)
    observed = float(_trimmed_u(pooled[None, :], (np.arange(pooled.size) >= base.size)[None, :], *keep)[0])
    exact = math.comb(base.size + cur.size, cur.size) <= EXACT_LIMIT
    extra = 0 if exact else 1  # a random sample counts the observed labelling once more
    slower = (np.sum(stats >= observed - 1e-9) + extra) / (len(stats) + extra)
    faster = (np.sum(stats <= observed + 1e-9) + extra) / (len(stats) + extra)
    return float(slower), float(faster)


def smallest_pvalue(n_base: int, n_cur: int, trim: float = TRIM) -> float:
    """The smallest p-value ``n_base`` against ``n_cur`` repeats can give (every kept run slower)."""
    return permutation_pvalues(np.arange(1.0, n_base + 1), np.arange(1.0, n_cur + 1) * 1e6, 0.0, trim)[0]


def check_comparable(baseline: pd.DataFrame, current: pd.DataFrame, name: str = "the baseline",
                     min_bytes: int = 0) -> None:
    """Refuse a baseline of another collective, dtype, reduction or rank count, or one that shares
    no (size, placement) with ``current`` at ``min_bytes`` or more."""
    _check_frame(baseline, name, ("size",))
    _check_frame(current, "this run", ("size",))   # a run's plan, before it has measured, will do
    for col, what in MATCHED:
        if col in baseline and col in current:
            have, want = set(baseline[col].astype(str)), set(current[col].astype(str))
            if not want <= have:
                raise ValueError(f"{name} has {what} {', '.join(sorted(have))} but this run has "
                                 f"{', '.join(sorted(want))}: compare like with like (save a baseline "
                                 "of the same collective, dtype, reduction and rank count)")
    common = set(baseline["size"]) & set(current["size"])
    if not common:
        raise ValueError(f"{name} shares no size with this run (baseline {_span(baseline)}, run "
                         f"{_span(current)}): measure the baseline's sizes (-b/-e) or save a new baseline")
    if max(common) < min_bytes:
        raise ValueError(f"comparing only from {min_bytes} bytes up (--compare-from, min_bytes) leaves no "
                         f"size: the sizes both share go up to {max(common)} bytes; lower it")
    if "placement" in baseline and "placement" in current:
        if not {p for p in _pairs(baseline) & _pairs(current) if p[0] >= min_bytes}:
            raise ValueError(f"{name} shares no size and placement with this run (baseline placements "
                             f"{', '.join(sorted(set(baseline['placement'].astype(str))))}, run "
                             f"{', '.join(sorted(set(current['placement'].astype(str))))}): measure the "
                             "baseline's placements or save a new baseline")


def _pairs(df: pd.DataFrame) -> set:
    return set(zip(df["size"], df["placement"].astype(str)))


def _span(df: pd.DataFrame) -> str:
    sizes = sorted(set(int(s) for s in df["size"]))
    return f"{sizes[0]}..{sizes[-1]} B" if len(sizes) > 1 else f"{sizes[0]} B"


def compare(baseline: pd.DataFrame, current: pd.DataFrame, tolerance: float = 0.25,
            alpha: float = 0.05, min_bytes: int = 0, time: str = "median_us",
            name: str = "the baseline") -> pd.DataFrame:
    """The regression gate: each size ``pass``, ``regression`` or ``inconclusive``.

    Parameters
    ----------
    baseline, current : sweeps, ideally with several repeats each (``sweep(..., repeats=R)``).
    tolerance : slowdown allowed before a size regresses (0.25: up to 1.25x the baseline time).
    alpha : false-alarm rate of the whole gate (Bonferroni over the sizes compared).
    min_bytes : ignore smaller sizes (bytes, or a size such as "64K").
    time : per-repeat time compared (``median_us``, or ``time_us`` as nccl-tests prints).
    name : how errors name the baseline (e.g. its file).

    Returns
    -------
    DataFrame, one row per size and placement in both, with the keys, ``baseline_us`` and
    ``current_us`` (medians over repeats), their repeats, ``slowdown`` (current / baseline
    median time) with its bootstrap interval ``slowdown_low``..``slowdown_high``,
    ``p_slower`` and ``status``. ``attrs``: tolerance, alpha, the per-size level and the
    overall :func:`verdict`.

    Raises
    ------
    ValueError
        A baseline of another collective, dtype, reduction or rank count, or one that
        shares no size with ``current``; a tolerance or alpha out of range.
    """
    validate.finite_number(tolerance, "tolerance", at_least=0, below=10,
                           must="the slowdown allowed, as a fraction (0.25 = up to 25% slower)")
    validate.finite_number(alpha, "alpha", above=0, below=1, must="a false-alarm rate between 0 and 1 (0.05 = 5%)")
    min_bytes = validate.size(min_bytes, nccl_tests=True)
    _check_frame(baseline, name)
    _check_frame(current, "this run")
    check_comparable(baseline, current, name, min_bytes)
    cur = current[current["size"] >= min_bytes]
    keys = [k for k in KEYS if k in baseline and k in cur]
    bcol, ccol = _time_column(baseline, time), _time_column(cur, time)
    base_groups = dict(iter(baseline.groupby(keys, sort=False)))
    pairs = [(key, base_groups[key], group) for key, group in cur.groupby(keys, sort=False)
             if key in base_groups and (group[ccol] > 0).all() and (base_groups[key][bcol] > 0).all()]
    level = alpha / max(1, len(pairs))
    rows = []
    for key, b, c in pairs:
        bt, ct = b[bcol].to_numpy(float), c[ccol].to_numpy(float)
        slower, faster = permutation_pvalues(bt, ct, tolerance)
        ratio_lo, ratio_hi = _ratio_interval(bt, ct, 1 - 2 * level)
        status = "regression" if slower <= level else "pass" if faster <= level else "inconclusive"
        rows.append(dict(zip(keys, key), baseline_us=float(np.median(bt)), current_us=float(np.median(ct)),
                         baseline_repeats=len(bt), current_repeats=len(ct),
                         baseline_busbw=float(b["busbw"].median()), current_busbw=float(c["busbw"].median()),
                         slowdown=float(np.median(ct) / np.median(bt)), slowdown_low=ratio_lo,
                         slowdown_high=ratio_hi, p_slower=slower, status=status))
    out = pd.DataFrame(rows, columns=keys + [
        "baseline_us", "current_us", "baseline_repeats", "current_repeats", "baseline_busbw",
        "current_busbw", "slowdown", "slowdown_low", "slowdown_high", "p_slower", "status"])
    out.attrs.update(tolerance=tolerance, alpha=alpha, level=level, time=ccol)
    out.attrs["verdict"] = verdict(out)
    return out


def _ratio_interval(base, cur, level, resamples=BOOTSTRAP_RESAMPLES, seed=0) -> tuple[float, float]:
    """Bootstrap interval of median(cur) / median(base), resampling each group on its own."""
    rng = np.random.default_rng(seed)
    b = np.median(base[rng.integers(0, base.size, (resamples, base.size))], axis=1)
    c = np.median(cur[rng.integers(0, cur.size, (resamples, cur.size))], axis=1)
    tail = (1 - level) / 2
    ratio = c / b
    return float(np.quantile(ratio, tail)), float(np.quantile(ratio, 1 - tail))


def verdict(result: pd.DataFrame) -> str:
    """"regression" if any size regressed, else "inconclusive" if any is unsure, else "pass"."""
    status = set(result["status"])
    if "regression" in status:
        return "regression"
    if "inconclusive" in status or not len(result):
        return "inconclusive"
    return "pass"


def regressed(result: pd.DataFrame) -> bool:
    """True when :func:`compare` found at least one regression."""
    return verdict(result) == "regression"


def _least_repeats(level: float) -> int:
    """The fewest repeats a side for which the gate can reach ``level`` at all."""
    return next(r for r in range(2, 40) if smallest_pvalue(r, r) <= level)


def repeats_to_settle(result: pd.DataFrame, power: float = 0.8, most: int = 1000) -> pd.Series:
    """About how many repeats a side would settle each size :func:`compare` left inconclusive.

    An estimate, not a promise: it assumes the machine stays as noisy as in these repeats and the
    slowdown stays at its median. A size is unsettled because its interval (``slowdown_low`` to
    ``slowdown_high``) holds the tolerance line ``1 + tolerance``. An interval narrows as one over
    the square root of the repeats; the usual sample-size rule (the interval's edge ``z`` standard
    errors from the median, plus ``z_power`` more so that a new run settles with chance ``power``)
    gives ``n (1 + z_power / z)^2 (half-width / gap)^2``, in logs. Never fewer than the gate needs
    to reach its level at all. Sizes already settled get 0; a slowdown on the line itself, or more
    than ``most`` repeats, inf.

    >>> row = dict(status="inconclusive", slowdown=1.5, slowdown_low=1.1, slowdown_high=2.0,
    ...            baseline_repeats=7, current_repeats=7)
    >>> int(repeats_to_settle(pd.DataFrame([row]))[0])
    47
    """
    _check_frame(result, "the gate's result", ("status", "slowdown", "slowdown_low", "slowdown_high"))
    validate.finite_number(power, "power", above=0, below=1, must="the chance that the new run settles (0.8)")
    line = math.log1p(result.attrs.get("tolerance", 0.25))
    level = result.attrs.get("level", 0.05)
    floor = _least_repeats(level)
    normal = statistics.NormalDist()
    boost = (1 + normal.inv_cdf(power) / normal.inv_cdf(1 - level)) ** 2

    def one(row) -> float:
        if row["status"] != "inconclusive":
            return 0.0
        n = min(row["baseline_repeats"], row["current_repeats"])
        centre = math.log(row["slowdown"])
        edge = math.log(row["slowdown_low"] if centre > line else row["slowdown_high"])
        gap = abs(centre - line)
        if gap == 0:
            return math.inf
        need = max(floor, n + 1, math.ceil(n * boost * (abs(centre - edge) / gap) ** 2))
        return float(need) if need <= most else math.inf

    return result.apply(one, axis=1).rename("repeats_to_settle")


def advice(result: pd.DataFrame) -> str:
    """One sentence saying what the gate's verdict means and what to do next."""
    v = result.attrs.get("verdict", verdict(result))
    tol = result.attrs.get("tolerance", 0.25)
    # a gate on training steps (lc.evidence.ddp_steps) has one "size", the gradient bytes: name the step instead
    steps = "op" in result and len(result) and set(result["op"]) == {"ddp_step"}
    if v == "regression":
        if steps:
            return f"regression: the DDP step is slower than {1 + tol:g}x the baseline's beyond doubt"
        bad = result.loc[result["status"] == "regression", "size"].astype(int).unique().tolist()
        return f"regression: sizes {bad} are slower than {1 + tol:g}x the baseline beyond doubt"
    if v == "pass":
        if steps:
            return f"pass: the DDP step is within {1 + tol:g}x the baseline's beyond doubt"
        return f"pass: every size is within {1 + tol:g}x the baseline beyond doubt"
    if not len(result):
        return "inconclusive, measure more: the gate compared no size"
    least = result[["baseline_repeats", "current_repeats"]].min().min()
    need = _least_repeats(result.attrs.get("level", 0.05))
    if least < need:
        return (f"inconclusive, measure more: {int(least)} repeats cannot reach the level, use at least "
                f"{need} (repeats -N)")
    open_ = result[result["status"] == "inconclusive"]
    worst = open_.loc[(open_["slowdown_high"] / open_["slowdown_low"]).idxmax()]
    settle = repeats_to_settle(result)[open_.index]
    finite = settle[np.isfinite(settle)]
    one = len(settle) == 1
    parts = [f"about {int(finite.max())} repeats a side (repeats -N) would settle "
             + (("it" if one else "them") if len(finite) == len(settle) else str(len(finite)))] if len(finite) else []
    if len(finite) < len(settle):
        who = ("it sits" if one else "they sit") if not len(finite) else f"{len(settle) - len(finite)} sit"
        parts.append(f"{who} so near the line that no practical number of repeats would: gate on a tolerance that "
                     "matters to the job")
    how = "; ".join(parts)
    if steps:
        return (f"inconclusive, measure more: the DDP step's interval, {worst['slowdown_low']:.2f}-"
                f"{worst['slowdown_high']:.2f}x, holds {1 + tol:g}x; {how}")
    return (f"inconclusive, measure more: {len(open_)} size(s) have intervals that hold {1 + tol:g}x "
            f"(widest: {int(worst['size'])} B, {worst['slowdown_low']:.2f}-{worst['slowdown_high']:.2f}x); {how}")
