"""Figures of NCCL's protocols and channels: one line of LL and LL128 against a Simple step,
predicted time per protocol with the crossovers, channels launched per message size.

The numbers come from :mod:`labcore.sim.nccl.tuner` (NCCL 2.30.7's model and constants).

Example
-------
>>> from labcore.sim.nccl.tuner import MACHINES
>>> fig = protocol_times("all_reduce", MACHINES["dgx_h100"])
>>> sorted({t.name for t in fig.data if t.mode == "lines"})
['LL', 'LL128', 'Simple']
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labcore.sim import tuner
from labcore.sim.nccl.tuner import constants as C
from labcore.viz.style import LEGEND_BELOW, LEGEND_ROOM, TEMPLATE, byte_ticks, chunk_color, format_bytes

DATA_COLOR, FLAG_COLOR, FENCE_COLOR = chunk_color(0), "#d62728", "#7f7f7f"
PROTOCOL_COLORS = {"LL": chunk_color(1), "LL128": chunk_color(2), "Simple": chunk_color(0)}


def _boxes(fig, row, pieces):
    """pieces: (start, width, kind, text) drawn as adjacent boxes on one subplot row."""
    colors = {"data": DATA_COLOR, "flag": FLAG_COLOR, "fence": FENCE_COLOR}
    for start, width, kind, text in pieces:
        fig.add_trace(go.Bar(x=[width], y=[""], base=[start], orientation="h", marker_color=colors[kind],
                             marker_line={"color": "white", "width": 1}, text=[text], textposition="inside",
                             insidetextanchor="middle", hovertemplate=f"{text}<extra></extra>", showlegend=False),
                      row=row, col=1)


def protocol_lines() -> go.Figure:
    """One LL line (16 B), one LL128 line (128 B) and one Simple step, data against flags.

    LL (``union ncclLLFifoLine``) pairs every 4 bytes of data with a 4-byte flag, so a receiver
    that sees the flag knows the data beside it arrived: no fence, half the bytes are payload.
    LL128 puts one 8-byte flag in each 128-byte line (120 bytes of data), which needs the whole
    line to arrive at once. Simple writes a whole step of data, then a memory fence, then one
    counter the receiver waits on: all payload, but the fence costs microseconds.

    Example
    -------
    >>> fig = protocol_lines()
    >>> len(fig.layout.annotations)                 # one title per protocol
    3
    """
    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.17,
                        subplot_titles=("LL: one 16-byte line (ticks in bytes), 50% data",
                                        f"LL128: one 128-byte line of 8-byte words, "
                                        f"{C.LL128_DATA_BYTES}/{C.LL128_LINE_BYTES} data",
                                        "Simple: one step of the buffer (not to scale), all data"))
    _boxes(fig, 1, [(0, 4, "data", "data 4 B"), (4, 4, "flag", "flag"), (8, 4, "data", "data 4 B"),
                    (12, 4, "flag", "flag")])
    _boxes(fig, 2, [(8 * i, 8, "data", "") for i in range(15)] + [(120, 8, "flag", "flag")])
    step = C.SIMPLE_BUFFSIZE // C.NCCL_STEPS
    _boxes(fig, 3, [(0, 80, "data", f"data: {format_bytes(step)} (NCCL_BUFFSIZE / NCCL_STEPS)"),
                    (80, 12, "fence", "fence"), (92, 8, "flag", "counter")])
    fig.update_xaxes(range=[0, 16], dtick=4, row=1, col=1)
    fig.update_xaxes(range=[0, 128], dtick=8, row=2, col=1)
    fig.update_xaxes(range=[0, 100], showticklabels=False, row=3, col=1)
    for name, color in (("data", DATA_COLOR), ("flag (the receiver polls it)", FLAG_COLOR),
                        ("memory fence", FENCE_COLOR)):
        fig.add_trace(go.Bar(x=[None], y=[None], marker_color=color, name=name), row=1, col=1)
    fig.update_layout(template=TEMPLATE, barmode="overlay", height=450, title="What each protocol sends",
                      legend={"orientation": "h", "x": 0, "y": -0.12}, margin={"t": 80, "l": 20, "r": 20})
    return fig


def protocol_times(op: str, machine: tuner.Machine, sizes=None, *, title: str | None = None) -> go.Figure:
    """NCCL's predicted time of ``op`` per protocol (the fastest algorithm for each) against size,
    with the sizes where the fastest protocol changes marked.

    Parameters
    ----------
    op : a collective :mod:`labcore.sim.nccl.tuner` covers.
    machine : a tuner Machine, e.g. ``tuner.MACHINES["dgx_h100"]``.
    sizes : bytes to plot (default 8 B to 4 GiB, powers of two).

    Example
    -------
    >>> from labcore.sim.nccl.tuner import MACHINES
    >>> fig = protocol_times("all_reduce", MACHINES["dgx_h100"], [8, 1 << 30])
    >>> [t.name for t in fig.data]
    ['LL', 'LL128', 'Simple', "NCCL's pick"]
    """
    sizes = [1 << k for k in range(3, 33)] if sizes is None else list(sizes)
    df = tuner.cost_sweep(op, machine, sizes)
    best = df.loc[df.groupby(["size", "protocol"])["time_us"].idxmin()]
    fig = go.Figure()
    for p in C.PROTOCOLS:
        g = best[best["protocol"] == p].sort_values("size")
        if g.empty:
            continue
        fig.add_trace(go.Scatter(x=g["size"], y=g["time_us"], mode="lines", name=p,
                                 line={"color": PROTOCOL_COLORS[p], "width": 2.5}, customdata=g["algorithm"],
                                 hovertemplate="%{x:.3s}B: %{y:.3g} us with %{customdata}<extra>" + p + "</extra>"))
    chosen = df[df["chosen"]].sort_values("size")
    fig.add_trace(go.Scatter(x=chosen["size"], y=chosen["time_us"], mode="markers", name="NCCL's pick",
                             marker={"color": [PROTOCOL_COLORS[p] for p in chosen["protocol"]], "size": 7,
                                     "line": {"width": 1, "color": "black"}},
                             text=chosen["option"], hovertemplate="%{x:.3s}B: %{text}<extra></extra>"))
    for k, (size, _before, after) in enumerate(protocol_crossovers(op, machine, min(sizes), max(sizes))):
        fig.add_vline(x=size, line={"dash": "dot", "color": "gray"})
        # one label above the other: crossovers a few MiB apart would print over each other
        fig.add_annotation(x=np.log10(size), y=1.0 + 0.07 * k, yref="paper", text=f"{after} from {format_bytes(size)}",
                           showarrow=False, xanchor="left", yanchor="bottom", font={"size": 11})
    fig.update_xaxes(**byte_ticks(df["size"]))
    fig.update_yaxes(type="log", title="predicted time (us)")
    fig.update_layout(template=TEMPLATE, height=430 + LEGEND_ROOM - 60, margin={"t": 90, "b": LEGEND_ROOM},
                      title=title or f"{op} on {machine.name or f'{machine.ranks} ranks'}: time per protocol",
                      legend=LEGEND_BELOW)
    return fig


def protocol_crossovers(op: str, machine: tuner.Machine, min_bytes: int = 8,
                        max_bytes: int = 16 << 30) -> list[tuple[int, str, str]]:
    """(first size, protocol before, protocol after) wherever NCCL's protocol changes.

    Example
    -------
    >>> from labcore.sim.nccl.tuner import MACHINES
    >>> protocol_crossovers("all_gather", MACHINES["dgx_h100"])[0][1:]
    ('LL', 'LL128')
    """
    out = []
    for size, before, after in tuner.crossovers(op, machine, min_bytes, max_bytes):
        p0, p1 = before.split("/")[1], after.split("/")[1]
        if p0 != p1:
            out.append((size, p0, p1))
    return out


def channels_by_size(op: str, machines: dict, sizes=None) -> go.Figure:
    """Channels (CTAs) NCCL launches for one call against message size, one line per machine.

    Parameters
    ----------
    op : a collective the tuner covers.
    machines : label -> tuner Machine (e.g. the same machine with and without NCCL_MAX_CTAS).
    sizes : bytes (default 1 KiB to 4 GiB, powers of two).

    Example
    -------
    >>> from labcore.sim.nccl.tuner import MACHINES
    >>> fig = channels_by_size("all_reduce", {"H100": MACHINES["dgx_h100"]}, [1 << 10, 1 << 20])
    >>> list(fig.data[0].y)
    [1, 24]
    """
    sizes = [1 << k for k in range(10, 33)] if sizes is None else list(sizes)
    fig = go.Figure()
    for k, (label, m) in enumerate(machines.items()):
        runs = [tuner.launch(op, s, m) for s in sizes]
        fig.add_trace(go.Scatter(x=sizes, y=[r["channels"] for r in runs], mode="lines+markers", name=label,
                                 line={"shape": "hv", "color": chunk_color(k)},
                                 text=[f"{r['algorithm']}/{r['protocol']}, {r['threads']} threads" for r in runs],
                                 hovertemplate="%{x:.3s}B: %{y} channels, %{text}<extra></extra>"))
    fig.update_xaxes(**byte_ticks(sizes))
    fig.update_yaxes(title="channels launched", rangemode="tozero")
    fig.update_layout(template=TEMPLATE, height=380 + LEGEND_ROOM - 60, title=f"Channels NCCL launches for one {op}",
                      legend=LEGEND_BELOW, margin={"b": LEGEND_ROOM})
    return fig


MECHANISM_STEPS = ((), ("channels",), ("channels", "chunks"), ("channels", "chunks", "correction"),
                   ("channels", "chunks", "correction", "caps"),
                   ("channels", "chunks", "correction", "caps", "plateau"))
"""The mechanisms switched on in turn by :func:`mechanism_effects` (:data:`labcore.sim.nccl.mechanisms.MECHANISMS`)."""


def _pick(topology, nbytes: int):
    """(algorithm, protocol, options) of NCCL's pick on a topology that knows its NCCL machine."""
    o = tuner.choose("all_reduce", nbytes, topology.nccl)
    algorithm, protocol, options, _ = tuner.simulated_as(o.algorithm, o.protocol, topology)
    return algorithm, protocol, options


def mechanism_effects(topologies: dict, sizes=None) -> go.Figure:
    """All-reduce busbw against size as the simulator plays NCCL's pick, with NCCL's mid-size
    mechanisms (:mod:`labcore.sim.nccl.mechanisms`) switched on one after another: none, the channels
    NCCL runs at a size, its chunk pipeline, its tree correction (which replaces the trees' chunk
    fill), its bus bandwidth caps on trees across nodes (the simulator's default, less the network's
    latency, which InfiniBand reports as 0), then the multi-node ring plateau. One panel per
    topology (label -> a topology that knows its NCCL machine, e.g. ``topologies.nvswitch(8)``).

    Example
    -------
    >>> from labcore.sim import topologies
    >>> fig = mechanism_effects({"8 x H100": topologies.nvswitch(8, issue_s=0)}, [1 << 16, 1 << 20])
    >>> len(fig.data)
    6
    """
    import labcore.sim as sim

    sizes = [1 << k for k in range(12, 29, 2)] if sizes is None else list(sizes)
    fig = make_subplots(rows=1, cols=len(topologies), subplot_titles=list(topologies), horizontal_spacing=0.08)
    names = ["no mechanism", "+ channels at a size", "+ chunk pipeline", "+ tree correction",
             "+ tree caps (default)", "+ ring plateau"]
    for col, topo in enumerate(topologies.values(), start=1):
        if getattr(topo, "nccl", None) is None:
            raise ValueError(f"{topo.name!r} does not know its NCCL machine; build it from a preset "
                             "(lc.sim.presets.topology), which names the machine that prices it")
        for k, (label, which) in enumerate(zip(names, MECHANISM_STEPS)):
            busbw, ran = [], []
            for s in sizes:
                algorithm, protocol, options = _pick(topo, s)
                t = sim.simulate("all_reduce", algorithm, topo.ranks, s, topology=topo, values=False,
                                 protocol=protocol, mechanisms=which, **options)
                busbw.append(t.busbw)
                ran.append(f"{t.schedule.algorithm}/{t.protocol}")
            fig.add_trace(go.Scatter(x=sizes, y=busbw, mode="lines+markers", name=label, legendgroup=label,
                                     showlegend=col == 1, line={"color": chunk_color(k), "dash": "solid" if k else "dot"},
                                     text=ran, hovertemplate="%{x:.3s}B: %{y:.1f} GB/s (%{text})<extra>" + label
                                     + "</extra>"), row=1, col=col)
        fig.update_xaxes(**byte_ticks(sizes), row=1, col=col)
    fig.update_yaxes(type="log", dtick=1)    # decades; the small sizes' GB/s differ by the same factors as the large ones'
    fig.update_yaxes(title="busbw GB/s (log)", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=420, title="all_reduce busbw, NCCL's mechanisms switched on in turn",
                      legend={"orientation": "h", "y": -0.18})
    return fig
