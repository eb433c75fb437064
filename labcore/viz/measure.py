"""Figures of measurements: time and busbw against size, tuner crossovers, topology.

Everything here takes pandas DataFrames in the shape ``labcore.bench.sweep``
returns (one row per size and placement, columns ``op, size, ranks, backend,
placement, time_us, algbw, busbw, ...``), so a measurement, a saved CSV and a
simulator prediction can share one set of axes.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence, Union

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labcore.viz.style import DESIGN_WIDTH, LEGEND_BELOW, LEGEND_ROOM, TEMPLATE, byte_ticks, chunk_color, format_bytes

__all__ = ["measurement_plot", "crossover_plot", "topology_heatmap", "gate_plot"]

Runs = Union[pd.DataFrame, Mapping[str, pd.DataFrame], Sequence[pd.DataFrame]]
Prediction = Union[pd.DataFrame, Callable[[float], float]]
_NEEDED = ("size", "time_us", "busbw")


def _as_runs(runs: Runs) -> dict[str, pd.DataFrame]:
    if isinstance(runs, pd.DataFrame):
        runs = {"": runs}
    elif not isinstance(runs, Mapping):
        runs = {f"run {k + 1}": df for k, df in enumerate(runs)}
    out = {}
    for name, df in runs.items():
        missing = [c for c in _NEEDED if c not in df.columns]
        if missing:
            raise ValueError(f"run {name!r} lacks columns {missing}: pass the DataFrame that "
                             "labcore.bench.sweep returns (or one with size, time_us, busbw).")
        out[name] = df
    return out


def _groups(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Split a run by whatever varies among op / ranks / backend, naming each part."""
    keys = [k for k in ("op", "ranks", "backend") if k in df.columns and df[k].nunique() > 1]
    if not keys:
        return [("", df)]
    return [(", ".join(f"{k}={v}" for k, v in zip(keys, vals if isinstance(vals, tuple) else (vals,))), g)
            for vals, g in df.groupby(keys if len(keys) > 1 else keys[0], sort=True)]


def _run_label(name: str, group: str, df: pd.DataFrame) -> str:
    parts = [p for p in (name, group) if p]
    if not parts:
        for k in ("op", "ranks", "backend"):
            if k in df.columns and df[k].nunique() == 1:
                parts.append(f"{k}={df[k].iloc[0]}" if k == "ranks" else str(df[k].iloc[0]))
    return " ".join(parts) or "measured"


def measurement_plot(runs: Runs, *, prediction: Mapping[str, Prediction] | Prediction | None = None,
                     placement: str = "out-of-place", title: str | None = None) -> go.Figure:
    """Time (log-log) and busbw (log size) against size, runs overlaid, predictions dashed.

    Parameters
    ----------
    runs
        A bench DataFrame, a dict ``{label: DataFrame}`` or a list of them.
        Inside one DataFrame, rows that differ in op, ranks or backend are
        drawn as separate lines.
    prediction
        Model curves on the same axes: a DataFrame with ``size`` and
        ``time_us`` (``busbw`` optional), or a function ``nbytes -> seconds``
        evaluated at the measured sizes, or a dict ``{label: either}``. A
        prediction without busbw gets it from the measurement's busbw*time,
        which is fixed per size for a given collective.
    placement
        "out-of-place", "in-place" or None for both.

    Example
    -------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"op": "all_reduce", "size": [1024, 4096], "ranks": 4,
    ...                    "placement": "out-of-place", "time_us": [20.0, 40.0],
    ...                    "busbw": [0.077, 0.154]})
    >>> fig = measurement_plot(df, prediction={"alpha-beta": lambda n: 15e-6 + n / 1e9})
    >>> len(fig.data)
    4
    """
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("time per call", "bus bandwidth"))
    all_sizes: list[float] = []
    k = 0
    reference = None
    for name, df in _as_runs(runs).items():
        if placement and "placement" in df.columns:
            df = df[df["placement"] == placement]
        for group, g in _groups(df):
            g = g.sort_values("size")
            reference = g if reference is None else reference
            label, color = _run_label(name, group, g), chunk_color(k)
            k += 1
            all_sizes += g["size"].tolist()
            for col, y in ((1, "time_us"), (2, "busbw")):
                fig.add_trace(go.Scatter(
                    x=g["size"], y=g[y], mode="lines+markers", name=label, legendgroup=label,
                    showlegend=col == 1, line={"color": color},
                    hovertemplate=f"{label}<br>%{{x:.3s}}B: %{{y:.4g}} {'us' if col == 1 else 'GB/s'}<extra></extra>"),
                    row=1, col=col)
    if prediction is not None:
        if not isinstance(prediction, Mapping):
            prediction = {"prediction": prediction}
        for name, pred in prediction.items():
            p = _prediction_frame(pred, reference)
            color = chunk_color(k)
            k += 1
            all_sizes += p["size"].tolist()
            for col, y in ((1, "time_us"), (2, "busbw")):
                if y in p.columns:
                    fig.add_trace(go.Scatter(
                        x=p["size"], y=p[y], mode="lines", name=name, legendgroup=name,
                        showlegend=col == 1, line={"color": color, "dash": "dash"}), row=1, col=col)
    axis = byte_ticks(all_sizes)
    fig.update_xaxes(**axis)
    fig.update_yaxes(type="log", title="time (us)", row=1, col=1)
    # busbw is linear, where its plateau (the number people quote) reads best, unless the runs' peaks lie
    # more than 30x apart (a GPU cluster beside a laptop): a linear axis would flatten the slower one to 0
    peaks = [float(t.y.max()) for t in fig.data if t.xaxis == "x2" and len(t.y) and np.nanmax(t.y) > 0]
    log_busbw = len(peaks) > 1 and max(peaks) > 30 * min(peaks)
    fig.update_yaxes(title="busbw (GB/s, 1 GB = 1e9 B)" + (", log" if log_busbw else ""),
                     **({"type": "log"} if log_busbw else {"rangemode": "tozero"}), row=1, col=2)
    fig.update_layout(template=TEMPLATE, title=title, height=420 + LEGEND_ROOM - 60, legend=LEGEND_BELOW,
                      margin={"b": LEGEND_ROOM})
    return fig


_STATUS_COLOR = {"regression": "#d62728", "pass": "#2ca02c", "inconclusive": "#7f7f7f"}


def gate_plot(baseline: pd.DataFrame, current: pd.DataFrame, result: pd.DataFrame, *,
              placement: str = "in-place", title: str | None = None) -> go.Figure:
    """Every repeat of a baseline and a run, size by size, with the gate's threshold and verdict.

    Parameters
    ----------
    baseline, current
        Sweeps with repeats (``lc.bench.sweep(..., repeats=R)``).
    result
        ``lc.evidence.compare(baseline, current)``: its tolerance draws the threshold (baseline
        median x (1 + tolerance)) and its status labels each size.
    placement
        Which placement to draw.

    Example
    -------
    >>> import pandas as pd
    >>> import labcore as lc
    >>> base = pd.DataFrame(dict(op="all_reduce", size=1024, type="float", redop="sum", root=-1,
    ...                          ranks=2, placement="in-place", repeat=range(5), busbw=1.0,
    ...                          median_us=[10.0, 11, 10.5, 9.8, 10.2]))
    >>> now = base.assign(median_us=base["median_us"] * 2)
    >>> fig = gate_plot(base, now, lc.evidence.compare(base, now))
    >>> len(fig.data)
    3
    """
    time = result.attrs.get("time", "median_us")
    tol = result.attrs.get("tolerance", 0.25)
    pick = result[result["placement"] == placement] if "placement" in result else result
    sizes = sorted(pick["size"].unique())
    # a gate on training steps (lc.evidence.ddp_steps) has one "size", the gradient bytes: it is a step
    steps = "op" in pick and set(pick["op"]) == {"ddp_step"}
    labels = {s: f"DDP step ({format_bytes(s)} of gradients)" if steps else format_bytes(s) for s in sizes}
    fig = go.Figure()
    for name, df, color in (("baseline", baseline, chunk_color(0)), ("this run", current, chunk_color(1))):
        d = df[df["size"].isin(sizes)]
        if "placement" in d:
            d = d[d["placement"] == placement]
        col = time if time in d and d[time].notna().all() else "time_us"
        fig.add_trace(go.Box(x=[labels[s] for s in d["size"]], y=d[col], name=f"{name} (every repeat)",
                             boxpoints="all", jitter=0.4, pointpos=0, marker={"color": color, "size": 5},
                             line={"color": color}))
    threshold = pick.set_index("size")["baseline_us"] * (1 + tol)
    fig.add_trace(go.Scatter(x=[labels[s] for s in sizes], y=[threshold[s] for s in sizes], mode="markers",
                             name=f"{1 + tol:g}x baseline median", marker={"symbol": "line-ew-open", "size": 40,
                                                                           "color": "black"}))
    for _, r in pick.iterrows():
        fig.add_annotation(x=labels[r["size"]], y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=r["status"], font={"color": _STATUS_COLOR.get(r["status"], "black")})
    fig.update_yaxes(type="log", title=f"{time} per repeat (us)")
    fig.update_xaxes(title="" if steps else "size")
    fig.update_layout(template=TEMPLATE, boxmode="group", height=420 + LEGEND_ROOM - 60,
                      margin={"t": 80, "b": LEGEND_ROOM},
                      title=title or f"evidence gate ({placement}): {result.attrs.get('verdict', '')}",
                      legend=LEGEND_BELOW)
    return fig


def _prediction_frame(pred: Prediction, reference: pd.DataFrame | None) -> pd.DataFrame:
    if isinstance(pred, pd.DataFrame):
        if "size" not in pred.columns or "time_us" not in pred.columns:
            raise ValueError("a prediction DataFrame needs columns size and time_us")
        p = pred.sort_values("size").copy()
    elif callable(pred):
        if reference is None:
            raise ValueError("a prediction function needs a measured run to take sizes from")
        p = pd.DataFrame({"size": reference["size"].to_numpy()})
        p["time_us"] = [1e6 * float(pred(float(s))) for s in p["size"]]
    else:
        raise TypeError("a prediction is a DataFrame (size, time_us) or a function nbytes -> seconds")
    if "busbw" not in p.columns and reference is not None:
        ref = reference.set_index("size")
        bytes_per_us = (ref["busbw"] * ref["time_us"]).reindex(p["size"]).to_numpy()
        if np.isfinite(bytes_per_us).any():
            p["busbw"] = bytes_per_us / p["time_us"].to_numpy()
    return p


def crossover_plot(predictions: pd.DataFrame, *, measured: pd.DataFrame | None = None,
                   title: str = "Predicted time by algorithm and protocol") -> go.Figure:
    """Predicted time of each algorithm/protocol against size, the winner marked.

    Parameters
    ----------
    predictions
        Long DataFrame with columns ``size``, ``algorithm``, ``protocol`` and
        ``time_us`` (e.g. the lab's re-implementation of NCCL's tuner).
    measured
        Optional bench DataFrame drawn on top (out-of-place rows).

    The lowest line at each size is what a tuner picks; a band along the top
    shows the winner and dotted lines mark the sizes where it changes.

    Example
    -------
    >>> import pandas as pd
    >>> p = pd.DataFrame({"size": [1e3, 1e6] * 2, "algorithm": ["tree"] * 2 + ["ring"] * 2,
    ...                   "protocol": "simple", "time_us": [10, 400, 20, 300]})
    >>> fig = crossover_plot(p)
    >>> [a.text for a in fig.layout.annotations]
    ['tree/simple', 'ring/simple']
    """
    need = {"size", "algorithm", "protocol", "time_us"}
    if not need <= set(predictions.columns):
        raise ValueError(f"predictions need columns {sorted(need)}; got {list(predictions.columns)}")
    p = predictions.reset_index(drop=True)
    p = p.assign(choice=p["algorithm"].astype(str) + "/" + p["protocol"].astype(str))
    choices = sorted(p["choice"].unique())
    colors = {c: chunk_color(k) for k, c in enumerate(choices)}
    fig = go.Figure()
    for c in choices:
        g = p[p["choice"] == c].sort_values("size")
        fig.add_trace(go.Scatter(x=g["size"], y=g["time_us"], mode="lines", name=c,
                                 line={"color": colors[c]}))
    best = p.loc[p.groupby("size")["time_us"].idxmin()].sort_values("size")
    fig.add_trace(go.Scatter(x=best["size"], y=best["time_us"], mode="markers", name="fastest",
                             marker={"color": [colors[c] for c in best["choice"]], "size": 9,
                                     "symbol": "star", "line": {"width": 1, "color": "black"}},
                             text=best["choice"], hovertemplate="%{x:.3s}B: %{text}<extra></extra>"))
    if measured is not None:
        m = measured
        if "placement" in m.columns:
            m = m[m["placement"] == "out-of-place"]
        fig.add_trace(go.Scatter(x=m["size"], y=m["time_us"], mode="markers", name="measured",
                                 marker={"color": "black", "symbol": "x"}))
    winners = best["choice"].tolist()
    sizes = best["size"].tolist()
    labels = [(sizes[0], winners[0])] if winners else []  # the first region's winner, then each change
    for i in range(1, len(winners)):
        if winners[i] != winners[i - 1]:
            x = float(np.sqrt(sizes[i - 1] * sizes[i]))
            fig.add_vline(x=x, line={"dash": "dot", "color": "gray"})
            labels.append((x, winners[i]))
    rows = _label_rows([(np.log10(x), text) for x, text in labels], np.log10(p["size"].min()),
                       np.log10(p["size"].max()))
    for (x, text), row in zip(labels, rows):
        fig.add_annotation(x=np.log10(x), y=1.02 + 0.07 * row, yref="paper", text=text, showarrow=False,
                           xanchor="left", yanchor="bottom", font={"color": colors[text]})
    fig.update_xaxes(**byte_ticks(p["size"]))
    fig.update_yaxes(type="log", title="time (us)")
    fig.update_layout(template=TEMPLATE, title=title, height=420 + LEGEND_ROOM - 60 + 25 * max(rows, default=0),
                      margin={"t": 80 + 25 * max(rows, default=0), "b": LEGEND_ROOM}, legend=LEGEND_BELOW)
    return fig


def _label_rows(labels: list[tuple[float, str]], lo: float, hi: float) -> list[int]:
    """A row for each label (x on a log axis, text) so that no two in a row overlap, even in the
    narrowest notebook: a label goes in the lowest row whose last label ends before it starts."""
    per_char = max(hi - lo, 1e-9) * 7.0 / (0.75 * DESIGN_WIDTH)   # about 7 px a character
    ends: list[float] = []
    rows = []
    for x, text in labels:
        row = next((r for r, end in enumerate(ends) if x >= end), len(ends))
        if row == len(ends):
            ends.append(x)
        ends[row] = x + per_char * (len(text) + 1)
        rows.append(row)
    return rows


# nvidia-smi topo -m codes from closest to farthest.
_LINK_ORDER = ["X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"]


def _link_rank(code: str) -> float:
    code = str(code).strip().upper()
    for k, prefix in enumerate(_LINK_ORDER):
        if code.startswith(prefix):
            return float(k)
    return float("nan")


def topology_heatmap(matrix, labels: Sequence[str] | None = None, *,
                     title: str = "Topology", value_name: str = "GB/s") -> go.Figure:
    """A device-by-device matrix as a heatmap with each cell's value written in it.

    Parameters
    ----------
    matrix
        A square DataFrame (index and columns name the devices) or 2-D array.
        Numbers (e.g. link bandwidth in GB/s) are coloured by value; strings
        (``nvidia-smi topo -m`` codes such as NV12, PIX, SYS) by closeness.
    labels
        Device names when ``matrix`` is an array.
    value_name
        What the numbers are, for the colour bar.

    Example
    -------
    >>> fig = topology_heatmap([["X", "NV12"], ["NV12", "X"]], labels=["GPU0", "GPU1"])
    >>> fig.data[0].text.tolist()
    [['X', 'NV12'], ['NV12', 'X']]
    """
    if isinstance(matrix, pd.DataFrame):
        labels = [str(x) for x in matrix.columns] if labels is None else list(labels)
        values = matrix.to_numpy()
    else:
        values = np.asarray(matrix, dtype=object)
    if values.ndim != 2 or values.shape[0] != values.shape[1]:
        raise ValueError(f"the topology matrix must be square; got shape {values.shape}")
    n = values.shape[0]
    labels = list(labels) if labels is not None else [f"rank {i}" for i in range(n)]
    numeric = all(isinstance(v, (int, float, np.number)) for v in values.ravel())
    text = np.array([[("" if numeric and not np.isfinite(float(v)) else
                       (f"{float(v):.3g}" if numeric else str(v))) for v in row] for row in values])
    if numeric:
        z = values.astype(float)
        colorbar = {"title": value_name}
        scale = "Viridis"
    else:
        z = np.vectorize(_link_rank, otypes=[float])(values)
        colorbar = {"title": "distance", "tickvals": list(range(len(_LINK_ORDER))),
                    "ticktext": _LINK_ORDER}
        scale = "Viridis_r"
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, text=text, texttemplate="%{text}",
                               colorscale=scale, colorbar=colorbar,
                               hovertemplate="%{y} -> %{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(template=TEMPLATE, title=title, height=120 + 40 * n, width=220 + 40 * n)
    return fig
