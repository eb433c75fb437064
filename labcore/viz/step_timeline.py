"""A training step as a timeline: compute, and each collective on its group's stream.

The top panel is the step as recorded (on this machine); each further panel the same step
replayed on another topology (:func:`labcore.sim.replay`, module :mod:`labcore.sim.apps.replay`). Bars share one colour per op across
panels, so a bucket's all-reduce can be followed from the recording to each prediction.
Compute keeps its recorded length in every panel (unless the replay scaled it), so what
changes is how much communication shows beside it.

A real job's trace (:func:`labcore.read_trace`) draws the same way: compute is its GPU's
compute kernels, each collective its NCCL kernels (the hover names NCCL's algorithm, protocol
and channels), and ``exposed=True`` adds a lane with the communication no compute ran beside.

Example
-------
>>> fig = step_timeline(recording, [lc.sim.replay(recording, "nvswitch8")], step=1)  # doctest: +SKIP
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labcore.collectives import COLLECTIVES
from labcore.viz.style import CHUNK_COLORS, TEMPLATE, format_bytes

__all__ = ["step_timeline", "replay_slider"]

_COMPUTE = "#9aa0a6"
_EXPOSED = "#d62728"
_EXPOSED_LANE = "exposed communication"
_OPS = tuple(COLLECTIVES)         # a colour per collective, in the order the lab describes them


def _colour(name: str) -> str:
    if name == "compute":
        return _COMPUTE
    if name == _EXPOSED_LANE:
        return _EXPOSED
    return CHUNK_COLORS[_OPS.index(name) % len(CHUNK_COLORS)] if name in _OPS else CHUNK_COLORS[-1]


def _kernel_notes(recording, rank: int, step: int, start: float) -> dict:
    """{rounded start in the step: "Ring/Simple, 24 channels"} for the rows NCCL kernels ran."""
    f = recording.frame
    if "algorithm" not in f:
        return {}
    rows = f[(f["rank"] == rank) & (f["step"] == step) & (f["kernel"] != "")]
    return {round(a - start, 9): f"{alg or '?'}/{proto or '?'}, {ch} channels"
            for a, alg, proto, ch in zip(rows["start_s"], rows["algorithm"], rows["protocol"], rows["channels"])}


def _recorded_panel(recording, rank: int, step: int, exposed: bool):
    """The recorded step's timeline rows, with an exposed-communication lane, and its kernel notes."""
    import pandas as pd

    from labcore.sim.apps.replay import recorded_timeline

    t = recorded_timeline(recording, rank, step)
    s = recording.steps
    start = float(s[(s["rank"] == rank) & (s["step"] == step)]["start_s"].iloc[0])
    if exposed:
        spans = recording.exposed_spans(rank, step)
        t = pd.concat([t, pd.DataFrame([dict(rank=rank, step=step, lane=_EXPOSED_LANE, name=_EXPOSED_LANE,
                                             start_s=a - start, end_s=b - start) for a, b in spans])],
                      ignore_index=True)
    return t, _kernel_notes(recording, rank, step, start)


def step_timeline(recording, replays=(), rank: int | None = None, step: int | None = None,
                  title: str | None = None, shared_x: bool = True, exposed: bool = False) -> go.Figure:
    """Recorded step of ``rank`` beside its replay on each of ``replays``.

    Parameters
    ----------
    recording : :class:`labcore.readers.recording.Recording`.
    replays : :class:`labcore.sim.apps.replay.Replay` objects of that recording.
    rank : which rank (default: the lowest).
    step : which step (default: the last one, usually warm).
    title : figure title.
    shared_x : one time axis for all panels (compute keeps its length, so what moves is the
        communication); False gives each panel its own, for predictions much shorter than the recording.
    exposed : add a lane to the recorded panel with the spans where communication ran and no
        compute did (:meth:`labcore.readers.recording.Recording.exposed_spans`).
    """
    rank = min(recording.ranks) if rank is None else rank
    step = recording.n_steps - 1 if step is None else step
    recorded, notes = _recorded_panel(recording, rank, step, exposed)
    panels = [(f"recorded: {recording.world_size} ranks, {recording.backend}", recorded)]
    for r in replays:
        t = r.timeline
        panels.append((f"replayed: {r.label}", t[(t["rank"] == rank) & (t["step"] == step)]))
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=shared_x, vertical_spacing=0.09 if shared_x else 0.12,
                        subplot_titles=[p[0] for p in panels])
    shown = set()
    for row, (_, t) in enumerate(panels, start=1):
        lanes = ["compute"] + sorted(set(t["lane"]) - {"compute", _EXPOSED_LANE}) if len(t) else ["compute"]
        lanes += [_EXPOSED_LANE] if _EXPOSED_LANE in set(t["lane"]) else []
        kernel = notes if row == 1 else {}
        for name, g in t.groupby("name", sort=False):
            size = g["bytes"] if "bytes" in g else [None] * len(g)
            hover = [f"{name}" + (f", {format_bytes(b)}" if b == b and b is not None else "")
                     + (f", {kernel[round(s, 9)]}" if round(s, 9) in kernel else "")
                     + f"<br>{(e - s) * 1e6:,.1f} us" for s, e, b in zip(g["start_s"], g["end_s"], size)]
            fig.add_trace(go.Bar(y=g["lane"], x=(g["end_s"] - g["start_s"]) * 1e3, base=g["start_s"] * 1e3,
                                 orientation="h", name=name, legendgroup=name, showlegend=name not in shown,
                                 marker={"color": _colour(name), "line": {"width": 0.5, "color": "white"}},
                                 hovertext=hover, hoverinfo="text"), row=row, col=1)
            shown.add(name)
        fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], row=row, col=1)
    fig.update_xaxes(title_text="time in the step (ms)", row=len(panels), col=1)
    fig.update_layout(template=TEMPLATE, barmode="overlay", height=170 + (150 if shared_x else 175) * len(panels),
                      title=title or f"step {step}, rank {rank}: {recording.name}",
                      legend={"x": 0.99, "xanchor": "right", "y": 1.0, "yanchor": "bottom",
                              "orientation": "h", "bgcolor": "rgba(255,255,255,0.8)"},
                      margin={"l": 80, "r": 20, "t": 90, "b": 50})
    return fig


def replay_slider(replays: dict, rank: int = 0, step: int | None = None, title: str = "",
                  prefix: str = "") -> go.Figure:
    """One replayed step per slider position: ``replays`` maps a label (e.g. a bucket size) to a
    list of :class:`labcore.sim.apps.replay.Replay` (one per topology, drawn one above the other).

    The slider's label and each panel's title give the predicted step time, so moving the
    slider shows how the choice behind the label trades latency against overlap. ``prefix``
    names what the slider moves (e.g. "bucket size: ").

    Example
    -------
    >>> fig = replay_slider({"64 KiB": [r_nv, r_mn], "1 MiB": [r2_nv, r2_mn]})   # doctest: +SKIP
    """
    labels = list(replays)
    if not labels:
        raise ValueError("replay_slider needs at least one labelled list of replays")
    n_panels = len(replays[labels[0]])
    fig = make_subplots(rows=n_panels, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[r.label for r in replays[labels[0]]])
    owner, shown = [], set()
    for k, label in enumerate(labels):
        for row, r in enumerate(replays[label], start=1):
            t = r.timeline
            s = (t["step"].max() if step is None else step) if len(t) else 0
            t = t[(t["rank"] == rank) & (t["step"] == s)]
            for name, g in t.groupby("name", sort=False):
                fig.add_trace(go.Bar(y=g["lane"], x=(g["end_s"] - g["start_s"]) * 1e6, base=g["start_s"] * 1e6,
                                     orientation="h", name=name, legendgroup=name,
                                     showlegend=k == 0 and name not in shown, visible=k == 0,
                                     marker={"color": _colour(name)},
                                     hovertext=[f"{name}<br>{(e - b) * 1e6:,.1f} us" for b, e in
                                                zip(g["start_s"], g["end_s"])], hoverinfo="text"), row=row, col=1)
                owner.append(k)
                if k == 0:
                    shown.add(name)
            lanes = ["compute"] + sorted(set(t["lane"]) - {"compute"})
            fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], row=row, col=1)
    steps = []
    for k, label in enumerate(labels):
        times = [f"{r.topology}: {r.steps['overlap_us'].iloc[-1]:,.0f} us" for r in replays[label]]
        steps.append({"method": "update", "label": str(label),
                      "args": [{"visible": [o == k for o in owner]},
                               {"title.text": f"{title or 'replayed step'}, {label}: " + "; ".join(times)}]})
    first = "; ".join(f"{r.topology}: {r.steps['overlap_us'].iloc[-1]:,.0f} us" for r in replays[labels[0]])
    fig.update_xaxes(title_text="time in the step (us, predicted)", row=n_panels, col=1)
    fig.update_layout(template=TEMPLATE, barmode="overlay", height=200 + 170 * n_panels,
                      title=f"{title or 'replayed step'}, {labels[0]}: {first}",
                      sliders=[{"active": 0, "steps": steps, "currentvalue": {"prefix": prefix},
                                "pad": {"t": 50}}],
                      legend={"x": 0.99, "xanchor": "right", "y": 1.0, "yanchor": "bottom", "orientation": "h"},
                      margin={"l": 80, "r": 20, "t": 100, "b": 40})
    return fig
