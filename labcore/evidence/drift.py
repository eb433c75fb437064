"""Drift over repeated runs: a control chart of each run's median, and the gate on every run.

One gate compares two runs; a machine (or a cluster) that slowly changes is seen only by
watching a measurement over time. The classic tool is Shewhart's **individuals control
chart** (NIST/SEMATECH e-Handbook of Statistical Methods, section 6.3.2.2,
https://www.itl.nist.gov/div898/handbook/pmc/section3/pmc322.htm; Montgomery,
*Introduction to Statistical Quality Control*, 2009): from a baseline period, a centre
line and limits at 3 sigma, sigma estimated from the average moving range of
consecutive points (MR / 1.128, the d2 constant for ranges of two). Later points are
judged against them, with two of the Western Electric rules (*Statistical Quality
Control Handbook*, 1956): a point beyond the limits, or 8 points in a row on one side of
the centre (a shift too small for the limits).

Times on a shared machine are skewed (load only slows), so the chart works on log times:
the limits are ratios of the centre. The chart says *something changed*; the gate
(:func:`labcore.bench.compare` of each run against the pooled baseline runs) says whether the
change exceeds the tolerance, beyond doubt. Each run is gated at ``alpha``: over 20 runs
of an unchanged machine about one false alarm is expected (0.05 x 20).

Example
-------
>>> import numpy as np
>>> lim = control_limits([100, 104, 98, 101, 99, 103, 97, 102])
>>> round(lim.center), lim.lower < 97 and lim.upper > 104
(100, True)
>>> run_signals([1, 1, 1, 1, 1, 1, 1, 1, 0.3], [0.5] * 9, [0.1] * 9, [5.0] * 9, start=0)[-2:]
['8 in a row above the centre', '']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from labcore import validate

# d2 for subgroups of 2 (moving ranges of consecutive points): E[range] = 1.128 sigma.
D2 = 1.128
RUN_LENGTH = 8


@dataclass(frozen=True)
class Limits:
    """Centre line and 3-sigma limits of an individuals chart (in the values' own unit)."""

    center: float
    lower: float
    upper: float
    sigma_log: float


def control_limits(values, sigmas: float = 3.0) -> Limits:
    """Limits from baseline ``values`` (at least 2, positive), computed on log values.

    centre = exp(mean log v); limits = centre x exp(+-sigmas x MRbar / 1.128), where MRbar
    is the mean absolute difference of consecutive log values.
    """
    x = np.log(np.asarray(values, dtype=float))
    if x.size < 2 or not np.isfinite(x).all():
        raise ValueError("control limits need at least 2 positive baseline values (more is better: 8-20)")
    center = float(x.mean())
    sigma = float(np.abs(np.diff(x)).mean() / D2)
    return Limits(math.exp(center), math.exp(center - sigmas * sigma), math.exp(center + sigmas * sigma), sigma)


def run_signals(values, center, lower, upper, start: int) -> list[str]:
    """For each point from ``start`` on: "beyond the upper limit", "... lower ...", "8 in a row
    above/below the centre", or "" (the baseline points before ``start`` are never flagged)."""
    out = []
    side_run, last_side = 0, 0
    for i, (v, c, lo, hi) in enumerate(zip(values, center, lower, upper)):
        side = 1 if v > c else -1 if v < c else 0
        side_run = side_run + 1 if side and side == last_side else (1 if side else 0)
        last_side = side
        if i < start:
            out.append("")
        elif v > hi:
            out.append("beyond the upper limit")
        elif v < lo:
            out.append("beyond the lower limit")
        elif side_run >= RUN_LENGTH:
            out.append(f"{RUN_LENGTH} in a row {'above' if side > 0 else 'below'} the centre")
        else:
            out.append("")
    return out


def _ordered_runs(runs) -> list[tuple[str, pd.DataFrame]]:
    if isinstance(runs, pd.DataFrame):
        if "run" not in runs:
            raise ValueError("a single DataFrame of runs needs a 'run' column (or pass {label: sweep})")
        return [(str(k), g) for k, g in runs.groupby("run", sort=False)]
    if isinstance(runs, Mapping):
        return [(str(k), v) for k, v in runs.items()]
    raise ValueError("runs must be {label: sweep} in time order, or one DataFrame with a 'run' column")


def control_table(runs, size: int, placement: str = "in-place", baseline: int = 8, tolerance: float = 0.25,
                  alpha: float = 0.05, time: str = "median_us") -> pd.DataFrame:
    """Each run's median at one size, the chart's limits and signals, and the gate's answer.

    Parameters
    ----------
    runs : ``{label: sweep}`` in time order (each with repeats), or one frame with a ``run`` column.
    size, placement : which size and placement to follow.
    baseline : the first ``baseline`` runs set the limits (and are the gate's baseline, pooled).
    tolerance, alpha : the gate's (:func:`labcore.bench.compare`).
    time : per-repeat time (``median_us``, the median call of each repeat).

    Returns
    -------
    DataFrame, one row per run: run, order, phase ("baseline"/"monitored"), value_us (median of
    the run's repeats) with its bootstrap interval low_us..high_us, center_us, lower_us,
    upper_us, signal, gate ("regression"/"pass"/"inconclusive" for monitored runs) and slowdown.
    """
    from labcore.evidence.stats import bootstrap_median, compare

    ordered = _ordered_runs(runs)
    baseline = validate.whole_number(
        baseline, "baseline", least=2, most=len(ordered) - 1,
        must=f"a whole number of runs from 2 to {len(ordered) - 1} (the rest are watched)",
        fix="measure more runs or use a shorter baseline")
    picked = []
    for label, df in ordered:
        d = df[(df["size"] == size) & (df["placement"] == placement)] if "placement" in df else df[df["size"] == size]
        if d.empty:
            raise ValueError(f"run {label!r} has no {placement} rows of size {size}; "
                             f"its sizes are {sorted(set(df['size']))}")
        picked.append((label, d))
    stats = [bootstrap_median(d[time]) for _, d in picked]
    values = [s[0] for s in stats]
    lim = control_limits(values[:baseline])
    n = len(picked)
    signals = run_signals(values, [lim.center] * n, [lim.lower] * n, [lim.upper] * n, start=baseline)
    pooled = pd.concat([d for _, d in picked[:baseline]], ignore_index=True)
    rows = []
    for i, ((label, d), (med, lo, hi), signal) in enumerate(zip(picked, stats, signals)):
        gate = slowdown = None
        if i >= baseline:
            result = compare(pooled, d, tolerance=tolerance, alpha=alpha, time=time)
            gate, slowdown = result["status"].iloc[0], float(result["slowdown"].iloc[0])
        rows.append(dict(run=label, order=i, phase="baseline" if i < baseline else "monitored", value_us=med,
                         low_us=lo, high_us=hi, center_us=lim.center, lower_us=lim.lower, upper_us=lim.upper,
                         signal=signal, gate=gate, slowdown=slowdown))
    out = pd.DataFrame(rows)
    out.attrs.update(size=size, placement=placement, baseline=baseline, tolerance=tolerance, alpha=alpha)
    return out


def drift_verdict(table: pd.DataFrame) -> str:
    """One sentence: in control, or from which run the chart and the gate say the machine changed."""
    watched = table[table["phase"] == "monitored"]
    flagged = watched[watched["signal"] != ""]
    regressed = watched[watched["gate"] == "regression"]
    tol = table.attrs.get("tolerance", 0.25)
    if flagged.empty and regressed.empty:
        return "in control: no monitored run left the limits, and the gate flagged none"
    parts = []
    if not flagged.empty:
        first = flagged.iloc[0]
        parts.append(f"the chart signals from run {first['run']!r} ({first['signal']}; {len(flagged)} of "
                     f"{len(watched)} monitored runs)")
    if not regressed.empty:
        parts.append(f"the gate finds {len(regressed)} of {len(watched)} runs slower than {1 + tol:g}x the "
                     f"baseline beyond doubt (first: {regressed.iloc[0]['run']!r})")
    else:
        parts.append(f"the gate finds no run slower than {1 + tol:g}x the baseline beyond doubt")
    return "drift: " + "; ".join(parts)
