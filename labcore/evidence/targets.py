"""Targets written down before measuring, then checked against evidence with its interval.

Strong teams set the numbers a system must meet **before** they build or benchmark it
(latency, bandwidth, cost), so the measurement cannot move the goalposts. Each
:class:`Target` is a limit on one number, and :func:`check_targets` answers for each
with the same three words as the regression gate, from the measured value's
confidence interval:

- **met**: the whole interval is on the good side of the limit;
- **missed**: the whole interval is on the bad side;
- **inconclusive, measure more**: the interval straddles the limit.

A prediction (the simulator's, NCCL's tuner's) has no interval; give it as a single number
and it is met or missed outright, which says nothing about how good the model is.

Example
-------
>>> goals = [Target("p99 all_reduce 1 MiB", 5000, "us"),
...          Target("busbw / link speed", 0.5, "", higher_is_better=True)]
>>> check_targets(goals, {"p99 all_reduce 1 MiB": (4100, 3900, 5200),
...                       "busbw / link speed": 0.81})["status"].tolist()
['inconclusive, measure more', 'met']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import pandas as pd

from labcore import validate

INCONCLUSIVE = "inconclusive, measure more"


@dataclass(frozen=True)
class Target:
    """A limit on one number.

    Parameters
    ----------
    name : what is measured, e.g. "p99 all_reduce 1 MiB, 2 ranks".
    limit : the value it must not cross.
    unit : shown beside numbers ("us", "$", "" for a fraction).
    higher_is_better : True for a floor (busbw), False for a ceiling (latency, cost, share).
    where : how it is checked: "measured here", "predicted for the rented cluster", ...
    """

    name: str
    limit: float
    unit: str = ""
    higher_is_better: bool = False
    where: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a Target needs a name saying what is measured")
        validate.finite_number(self.limit, f"the limit of {self.name!r}")

    @property
    def rule(self) -> str:
        """"<= 5000 us" or ">= 0.5": the target as it reads."""
        sign = ">=" if self.higher_is_better else "<="
        return f"{sign} {self.limit:g}{(' ' + self.unit) if self.unit else ''}"


def targets_table(targets: Sequence[Target]) -> pd.DataFrame:
    """The targets as a table (target, rule, where): what to show before anything is measured."""
    return pd.DataFrame([dict(target=t.name, rule=t.rule, where=t.where) for t in targets])


def _as_interval(name: str, value) -> tuple[float, float, float]:
    if validate.real(value) is not None:
        return float(value), float(value), float(value)
    try:
        est, low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"evidence for {name!r} must be a number (a prediction) or (estimate, low, high), "
                         f"not {value!r}") from None
    if math.isnan(est) or not low <= est <= high:
        raise ValueError(f"evidence for {name!r} must satisfy low <= estimate <= high, got {value!r}")
    return est, low, high


def check_targets(targets: Sequence[Target], evidence: Mapping[str, object]) -> pd.DataFrame:
    """Each target against its evidence: ``met``, ``missed``, ``inconclusive, measure more`` or ``not measured``.

    Parameters
    ----------
    targets : the :class:`Target` list, written before measuring.
    evidence : ``{target name: (estimate, low, high)}`` for a measurement with its interval
        (an infinite end is allowed: a p99 from too few calls), or ``{name: number}`` for a prediction.

    Returns
    -------
    DataFrame: target, rule, estimate, low, high, status, where.
    """
    names = [t.name for t in targets]
    unknown = sorted(set(evidence) - set(names))
    if unknown:
        raise ValueError(f"evidence for {unknown} matches no target; the targets are {names}")
    rows = []
    for t in targets:
        if t.name not in evidence:
            rows.append(dict(target=t.name, rule=t.rule, estimate=math.nan, low=math.nan, high=math.nan,
                             status="not measured", where=t.where))
            continue
        est, low, high = _as_interval(t.name, evidence[t.name])
        good, bad = (low >= t.limit, high < t.limit) if t.higher_is_better else (high <= t.limit, low > t.limit)
        status = "met" if good else "missed" if bad else INCONCLUSIVE
        rows.append(dict(target=t.name, rule=t.rule, estimate=est, low=low, high=high, status=status, where=t.where))
    return pd.DataFrame(rows)


def _number(v: float, digits: int) -> str:
    """3 significant digits, but whole numbers written out (4,171 rather than 4.17e+03)."""
    if not math.isfinite(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:,.0f}" if abs(v) >= 10 ** digits else f"{v:.{digits}g}"


def side_by_side(checks: Mapping[str, pd.DataFrame], digits: int = 3) -> pd.DataFrame:
    """Several :func:`check_targets` results (one per condition) in one table, a column each.

    Each cell reads "estimate (low..high): status"; a prediction shows only its value.
    """
    if not checks:
        raise ValueError("side_by_side needs {condition: check_targets(...)}")
    first = next(iter(checks.values()))
    out = first[["target", "rule"]].copy()
    for label, c in checks.items():
        cells = []
        for r in c.itertuples():
            if math.isnan(r.estimate):
                cells.append(r.status)
            elif r.low == r.high:
                cells.append(f"{_number(r.estimate, digits)}: {r.status}")
            else:
                cells.append(f"{_number(r.estimate, digits)} ({_number(r.low, digits)}.."
                             f"{_number(r.high, digits)}): {r.status}")
        out[label] = cells
    return out.set_index("target")


def busbw_fraction(summary: pd.DataFrame, size: int, link_gbps: float,
                   placement: str = "in-place") -> tuple[float, float, float]:
    """(fraction, low, high): busbw at ``size`` as a fraction of ``link_gbps``, with its interval.

    ``summary`` is ``lc.evidence.summarize(sweep)``; busbw is inversely proportional to time, so
    its interval is the time interval turned over (busbw x median / high .. busbw x median / low).
    """
    link_gbps = validate.positive_number(link_gbps, "link_gbps", must="a link speed in GB/s above 0")
    rows = summary[(summary["size"] == size) & (summary["placement"] == placement)]
    if len(rows) != 1:
        raise ValueError(f"the summary has no single {placement} row of size {size}; "
                         f"its sizes are {sorted(set(summary['size']))}")
    r = rows.iloc[0]
    est = float(r["busbw"]) / link_gbps
    return est, est * r["median_us"] / r["high_us"], est * r["median_us"] / r["low_us"]


__all__ = ["Target", "targets_table", "check_targets", "side_by_side", "busbw_fraction", "INCONCLUSIVE"]
