"""Figures of evidence: medians with intervals under several conditions, percentiles, money.

- :func:`interval_plot`: the same sweep under several conditions (idle, noisy neighbours,
  training compute), each size's median with its bootstrap interval (``lc.evidence.summarize``);
- :func:`percentile_plot`: p50 and p99 under each condition with their distribution-free
  intervals (``labcore.evidence.latency.latency_summary``), an unbounded end drawn as an arrow;
- :func:`cost_plot`: dollars per run of steps, compute beside the communication it waited for
  (``labcore.sim.price_steps``).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from labcore.viz.style import LEGEND_BELOW, LEGEND_ROOM, TEMPLATE, byte_ticks, chunk_color

__all__ = ["interval_plot", "percentile_plot", "cost_plot"]

_LEGEND = dict(legend=LEGEND_BELOW, margin={"b": LEGEND_ROOM})


def interval_plot(summaries: Mapping[str, pd.DataFrame], *, placement: str = "in-place",
                  title: str | None = None) -> go.Figure:
    """Median time per size with its interval, one colour per condition (log-log).

    ``summaries`` is ``{condition: lc.evidence.summarize(sweep)}``. Conditions are drawn side by
    side at each size (slightly apart), so intervals that overlap can be seen to.

    Example
    -------
    >>> s = pd.DataFrame(dict(size=[1024, 1 << 20], placement="in-place", median_us=[10.0, 900.0],
    ...                       low_us=[9.0, 850.0], high_us=[12.0, 990.0], repeats=5))
    >>> len(interval_plot({"idle": s, "busy": s.assign(median_us=s.median_us * 2)}).data)
    2
    """
    if not summaries:
        raise ValueError("interval_plot needs {condition: lc.evidence.summarize(sweep)}")
    fig = go.Figure()
    k = len(summaries)
    sizes = []
    for i, (label, s) in enumerate(summaries.items()):
        missing = sorted({"size", "median_us", "low_us", "high_us"} - set(s.columns))
        if missing:
            raise ValueError(f"summary {label!r} lacks {missing}: pass lc.evidence.summarize(sweep)")
        d = s[s["placement"] == placement] if "placement" in s else s
        shift = 2 ** ((i - (k - 1) / 2) * 0.25)          # side by side on the log axis
        sizes += d["size"].tolist()
        fig.add_trace(go.Scatter(
            x=d["size"] * shift, y=d["median_us"], mode="markers+lines", name=label,
            marker={"size": 8, "color": chunk_color(i)}, line={"color": chunk_color(i), "width": 1},
            error_y={"type": "data", "symmetric": False, "array": d["high_us"] - d["median_us"],
                     "arrayminus": d["median_us"] - d["low_us"], "color": chunk_color(i)},
            customdata=np.stack([d["size"], d["low_us"], d["high_us"]], axis=1),
            hovertemplate="%{customdata[0]} B: %{y:.4g} us (%{customdata[1]:.4g}..%{customdata[2]:.4g})"
                          "<extra>" + label + "</extra>"))
    fig.update_xaxes(**byte_ticks(sizes))
    fig.update_yaxes(type="log", title="median time of the repeats (us), with its interval")
    fig.update_layout(template=TEMPLATE, height=420 + LEGEND_ROOM - 60,
                      title=title or "the same sweep under each condition", **_LEGEND)
    return fig


def percentile_plot(summary: pd.DataFrame, *, unit: str = "us", title: str | None = None) -> go.Figure:
    """Each percentile's estimate and interval, grouped by percentile, one colour per condition.

    ``summary`` holds rows of ``latency_summary`` (columns condition, percentile, estimate,
    low, high), several conditions concatenated. An infinite upper end (too few calls to bound
    that percentile) is drawn as an arrow to the top and named in the hover text.
    """
    missing = sorted({"condition", "percentile", "estimate", "low", "high"} - set(summary.columns))
    if missing:
        raise ValueError(f"the summary lacks {missing}: pass latency_summary(...) rows (pd.concat them)")
    finite_high = summary.loc[np.isfinite(summary["high"]), "high"]
    top = float(max(finite_high.max() if len(finite_high) else 0, summary["estimate"].max())) * 3
    fig = go.Figure()
    for i, (label, d) in enumerate(summary.groupby("condition", sort=False)):
        high = d["high"].where(np.isfinite(d["high"]), top)
        low = d["low"].where(np.isfinite(d["low"]), d["estimate"])
        note = ["no upper bound: too few calls" if not math.isfinite(h) else "" for h in d["high"]]
        fig.add_trace(go.Scatter(
            x=d["percentile"], y=d["estimate"], mode="markers", name=label or "measured",
            marker={"size": 10, "color": chunk_color(i)}, text=note,
            error_y={"type": "data", "symmetric": False, "array": high - d["estimate"],
                     "arrayminus": d["estimate"] - low, "color": chunk_color(i)},
            hovertemplate="%{x}: %{y:.4g} " + unit + " %{text}<extra>" + str(label) + "</extra>"))
    fig.update_yaxes(type="log", title=f"call time ({unit}), with its interval")
    fig.update_xaxes(title="percentile of the calls", type="category")
    fig.update_layout(template=TEMPLATE, height=420 + LEGEND_ROOM - 60, scattermode="group",
                      title=title or "p50 and p99 of every call, under each condition", **_LEGEND)
    return fig


def cost_plot(costs: pd.DataFrame, *, label: str = "label", title: str | None = None) -> go.Figure:
    """Dollars for the priced steps of ``costs`` (``labcore.sim.price_steps``), one bar each:
    the compute, and on top the communication the step waited for.

    ``label`` names the column that tells the rows apart (add one, e.g. "multinode, 25 MiB").
    """
    missing = sorted({label, "usd", "usd_waiting"} - set(costs.columns))
    if missing:
        raise ValueError(f"the cost table lacks {missing}: pass labcore.sim.price_steps(...) with a "
                         f"{label!r} column naming each row")
    n = costs.attrs.get("n_steps", "")
    fig = go.Figure()
    fig.add_trace(go.Bar(y=costs[label], x=costs["usd"] - costs["usd_waiting"], orientation="h",
                         name="compute (hiding some communication)", marker={"color": chunk_color(0)}))
    fig.add_trace(go.Bar(y=costs[label], x=costs["usd_waiting"], orientation="h",
                         name="waiting for communication", marker={"color": "#d62728"}))
    fig.update_layout(template=TEMPLATE, barmode="stack", height=190 + 34 * len(costs),
                      title=title or f"what {n} steps cost at ${costs.attrs.get('usd_per_gpu_hour', 0):.2f} "
                                     "per GPU-hour",
                      legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "traceorder": "normal"},
                      margin={"l": 10, "t": 100})
    fig.update_xaxes(title=f"US dollars for {n} steps")
    fig.update_yaxes(automargin=True, autorange="reversed")
    return fig
