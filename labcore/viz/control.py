"""The control chart of repeated runs: each run's median, the baseline's limits, the gate's answers.

It draws the table of :func:`labcore.evidence.drift.control_table`: one point per run
(its median with a bootstrap interval), the centre line and 3-sigma limits set by the
baseline runs (shaded), each monitored run coloured by the regression gate's answer, and
a ring around the runs where the chart's rules signal.
"""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from labcore.viz.style import TEMPLATE, format_bytes

__all__ = ["control_chart"]

GATE_COLORS = {"baseline": "#1f77b4", "pass": "#2ca02c", "inconclusive": "#7f7f7f", "regression": "#d62728"}


def control_chart(table: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """A control chart of ``table`` (from ``control_table``); y is log time.

    Example
    -------
    >>> import pandas as pd
    >>> from labcore.evidence.drift import control_table
    >>> runs = {f"run {i}": pd.DataFrame(dict(size=1024, placement="in-place", repeat=range(5),
    ...         op="all_reduce", busbw=1.0, median_us=[10.0 + i % 3, 10.5, 9.9, 10.2, 10.1]))
    ...         for i in range(10)}
    >>> fig = control_chart(control_table(runs, 1024, baseline=6))
    >>> [t.name for t in fig.data][:3]
    ['upper limit (3 sigma)', 'centre', 'lower limit (3 sigma)']
    """
    needed = {"run", "order", "phase", "value_us", "low_us", "high_us", "center_us", "lower_us", "upper_us",
              "signal", "gate"}
    missing = sorted(needed - set(table.columns))
    if missing:
        raise ValueError(f"the table lacks {missing}: pass the DataFrame of labcore.evidence.drift.control_table")
    x = table["run"].tolist()
    fig = go.Figure()
    for col, name, dash in (("upper_us", "upper limit (3 sigma)", "dash"), ("center_us", "centre", "solid"),
                            ("lower_us", "lower limit (3 sigma)", "dash")):
        fig.add_trace(go.Scatter(x=x, y=table[col], mode="lines", name=name,
                                 line={"color": "black" if col == "center_us" else "#555", "dash": dash, "width": 1}))
    kinds = table["gate"].where(table["phase"] == "monitored", "baseline").fillna("baseline")
    for kind, color in GATE_COLORS.items():
        d = table[kinds == kind]
        if d.empty:
            continue
        label = "baseline runs (set the limits)" if kind == "baseline" else f"gate: {kind}"
        fig.add_trace(go.Scatter(
            x=d["run"], y=d["value_us"], mode="markers", name=label, marker={"color": color, "size": 9},
            error_y={"type": "data", "symmetric": False, "array": d["high_us"] - d["value_us"],
                     "arrayminus": d["value_us"] - d["low_us"], "thickness": 1, "color": color},
            hovertemplate="%{x}: %{y:.4g} us<extra>" + label + "</extra>"))
    flagged = table[table["signal"] != ""]
    if not flagged.empty:
        fig.add_trace(go.Scatter(x=flagged["run"], y=flagged["value_us"], mode="markers", name="chart signals",
                                 marker={"symbol": "circle-open", "size": 20, "color": "#ff7f0e", "line": {"width": 2}},
                                 text=flagged["signal"], hovertemplate="%{x}: %{text}<extra></extra>"))
    baseline = table[table["phase"] == "baseline"]
    if not baseline.empty:
        fig.add_vrect(x0=-0.5, x1=len(baseline) - 0.5, fillcolor="#1f77b4", opacity=0.07, line_width=0)
    size = table.attrs.get("size")
    what = f"{format_bytes(size)} {table.attrs.get('placement', '')}".strip() if size is not None else ""
    lo = min(table["low_us"].min(), table["lower_us"].min())
    hi = max(table["high_us"].max(), table["upper_us"].max())
    # room above the data for the legend, which stays inside the plot
    fig.update_yaxes(type="log", title="median time of the run's repeats (us)",
                     range=[math.log10(lo / 1.2), math.log10(hi * 2.5)])
    fig.update_xaxes(title="run, in time order", tickangle=-45, type="category")
    fig.update_layout(template=TEMPLATE, height=440, margin={"t": 60, "b": 90},
                      title=title or f"control chart{', ' + what if what else ''}",
                      legend={"orientation": "h", "x": 0.01, "y": 0.99, "yanchor": "top",
                              "bgcolor": "rgba(255,255,255,0.75)"})
    return fig
