"""The chunk-flow animation: a simulated collective, step by step.

Left, the ranks placed as the algorithm sees them, with every chunk in flight
drawn as an arrow in that chunk's colour. Right, every rank's buffer as a row
of cells, one per chunk, shaded by how many of the contributions it needs the
cell already holds (grey: none, blue: partial, green: complete); cells written
in the step are outlined in the colour of the chunk that arrived. A caption
names the step, its phase and its transfers, with the simulated time so far.
When the schedule runs several channels (NCCL's parallel rings or trees, or
the two trees of a double tree) arrows and outlines take the colour of their
channel instead, with a legend naming them.

The figure has one animation frame per schedule step. Frames are built as
plain dicts and carry only what changes (arrows, cells, caption); the ranks,
links and boxes are drawn once.

Example
-------
>>> import labcore.sim as sim
>>> trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20)
>>> fig = chunk_flow(trace)
>>> len(fig.frames) == trace.schedule.n_steps
True
>>> captions(trace)[0]
'step 0 of 0–5, reduce-scatter: 4 transfers at once, each a reduce: 0→1 chunk 3, 1→2 chunk 0, 2→3 chunk 1, 3→0 chunk 2'

Steps count from 0, as in the schedule (``trace.schedule.step``) and the exercises.
"""
from __future__ import annotations

import re

import numpy as np
import plotly.graph_objects as go

from labcore.collectives import describe
from labcore.sim.core import buffers
from labcore.viz.positions import Placement, place
from labcore.viz.style import CHUNK_COLORS, DESIGN_WIDTH, format_bytes, template_dict

__all__ = ["chunk_flow", "captions", "fill_levels", "still"]


def _fill_colorscale(most_needed: int) -> list:
    """Grey = holds nothing it needs, blues = partial, green = complete (a band at the top)."""
    full = 1.0 - 0.5 / max(most_needed, 1)
    return [[0.0, "#e8e8e8"], [1e-6, "#deebf7"], [full, "#2171b5"], [full, "#1a9850"], [1.0, "#1a9850"]]


_SHOWN_TRANSFERS = 8  # transfers spelled out in a caption before "and N more"


def _agent_name(a: int, ranks: int) -> str:
    return f"rank {a}" if a < ranks else f"switch {a - ranks}"


def captions(trace) -> list[str]:
    """One caption per step: "step 2 of 0–13, reduce-scatter: rank 2 sends chunk 1 to rank 3 (reduce)".

    Steps count from 0. A step with several transfers says how many run at once and
    lists up to eight of them briefly, sender→receiver and chunk ("0→1 chunk 3"),
    with the operation said once when every transfer shares it. With several
    channels each transfer names its channel, and the channels take turns in
    the list (the first transfer of each, then the second, ...).
    """
    s = trace.per_chunk().schedule
    multi = s.n_channels > 1
    out = []
    for k, sl in enumerate(s.step_slices()):
        phase = s.phases[k] if k < len(s.phases) and s.phases[k] else ""
        head = _step_name(k, s.n_steps) + (f", {phase}" if phase else "")
        src, dst, chunk, red, ch = s.src[sl], s.dst[sl], s.chunk[sl], s.reduce[sl], s.channel[sl]
        if multi:       # the channels in turn: the first transfer of each, then the second...
            seen = np.zeros(ch.size, dtype=np.int64)
            for c in np.unique(ch):
                seen[ch == c] = np.arange(int((ch == c).sum()))
            turn = np.lexsort((ch, seen))
            src, dst, chunk, red, ch = src[turn], dst[turn], chunk[turn], red[turn], ch[turn]
        ops = ["reduce" if r else "copy" for r in red.tolist()]
        on = [f", channel {h}" if multi else "" for h in ch.tolist()[:1]]
        n = src.size
        if n == 0:
            body = "nothing moves"
        elif n == 1:
            body = (f"{_agent_name(int(src[0]), s.ranks)} sends chunk {int(chunk[0])} to "
                    f"{_agent_name(int(dst[0]), s.ranks)} ({ops[0]}{on[0]})")
        else:
            same = len(set(ops)) == 1
            parts = [f"{_agent_label(int(a), s.ranks)}→{_agent_label(int(b), s.ranks)} chunk {int(c)}"
                     + ("" if same else f" ({op})") + (f" on channel {h}" if multi else "")
                     for a, b, c, op, h in zip(src.tolist(), dst.tolist(), chunk.tolist(), ops, ch.tolist())
                     ][:_SHOWN_TRANSFERS]
            more = f", and {n - _SHOWN_TRANSFERS} more" if n > _SHOWN_TRANSFERS else ""
            body = f"{n} transfers at once" + (f", each a {ops[0]}" if same else "") + ": " + ", ".join(parts) + more
        out.append(f"{head}: {body}")
    return out


def _agent_label(a: int, ranks: int) -> str:
    """How the figure labels an agent's marker: the rank's number, or S0, S1... for switches."""
    return str(a) if a < ranks else f"S{a - ranks}"


def _step_name(k: int, n_steps: int) -> str:
    return f"step {k} of 0–{n_steps - 1}" if n_steps > 1 else "step 0, the only one"


def fill_levels(trace) -> tuple[np.ndarray, np.ndarray]:
    """Per step, how full every buffer cell is.

    Returns
    -------
    counts : (n_steps + 1, agents, chunks) int
        How many ranks' contributions each cell holds; index 0 is the start.
    need : (agents, chunks) int
        How many contributions the cell must end with; for cells whose final
        content does not matter, all ranks if the collective reduces, else 1.
        ``counts / need`` (at most 1) is the shade.
    """
    s = trace.schedule
    if not trace.has_values:
        raise ValueError("chunk_flow needs the buffer state of every step: simulate with values=True")
    counts = np.stack([trace.holds_at(k).sum(axis=-1) for k in range(-1, s.n_steps)])
    want, care = buffers.target(s.collective, s.ranks, s.chunks, s.root)
    # a cell whose final content does not matter: a partial sum out of all ranks when the
    # collective reduces, else one rank's data, complete as it is
    reduces = describe(s.collective).reduces
    need = np.full((s.agents, s.chunks), s.ranks if reduces else 1, dtype=np.int64)
    needed = want.sum(axis=-1)
    use = care & (needed > 0)
    need[: s.ranks][use] = needed[use]
    return counts, need


_ARROW_POINTS = 5  # points per arrow: straight arrows are collinear, bent ones a curve


def _arrows(p: Placement, src, dst) -> np.ndarray:
    """(n, _ARROW_POINTS, 2) points of every arrow, tail first.

    Arrows between the same pair are offset side by side; an arrow whose straight
    path would cross another agent's marker bends around it (a quadratic curve).
    """
    a, b = p.xy[src], p.xy[dst]
    d = b - a
    length = np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-9)
    u = d / length
    normal = np.stack([-u[:, 1], u[:, 0]], axis=1)
    key = src.astype(np.int64) * (p.xy.shape[0] + 1) + dst
    order = np.argsort(key, kind="stable")
    sk = key[order]
    first = np.searchsorted(sk, sk)
    nth = np.empty_like(order)
    nth[order] = np.arange(order.size) - first
    off = p.radius * (0.35 + 0.5 * nth)[:, None] * normal
    return _bend(p, a + u * p.radius + off, b - u * p.radius * 1.3 + off, src, dst)


def _bend(p: Placement, tail: np.ndarray, head: np.ndarray, src, dst) -> np.ndarray:
    """Points from tail to head: straight, or curved where the straight line would cross an agent."""
    d = head - tail
    length = np.maximum(np.linalg.norm(d, axis=1), 1e-9)
    u = d / length[:, None]
    normal = np.stack([-u[:, 1], u[:, 0]], axis=1)
    # distance of every agent from every straight path, its own two ends excluded
    rel = p.xy[None, :, :] - tail[:, None, :]
    along = np.clip(np.einsum("nak,nk->na", rel, u), 0, length[:, None])
    gap = np.linalg.norm(rel - along[..., None] * u[:, None, :], axis=-1)
    agents = np.arange(p.xy.shape[0])[None, :]
    gap = np.where((agents == np.asarray(src)[:, None]) | (agents == np.asarray(dst)[:, None]), np.inf, gap)
    bend = np.where(gap.min(axis=1) < 1.2 * p.radius, 0.18 * length + p.radius, 0.0)
    control = (tail + head) / 2 + bend[:, None] * normal
    t = np.linspace(0, 1, _ARROW_POINTS)[None, :, None]
    return (1 - t) ** 2 * tail[:, None] + 2 * t * (1 - t) * control[:, None] + t ** 2 * head[:, None]


def _cell_text(counts: np.ndarray, need: np.ndarray) -> list[str]:
    return [f"{c}/{n}" for c, n in zip(counts.ravel().tolist(), need.ravel().tolist())]


def chunk_flow(trace, *, title: str | None = None, frame_ms: int = 800, width: int | None = None,
               height: int = 560) -> go.Figure:
    """Animate a simulated collective: one frame per step, with play/pause and a step slider.

    Parameters
    ----------
    trace
        A :class:`labcore.sim.core.trace.Trace` simulated with ``values=True``
        (any collective and algorithm of :mod:`labcore.sim`).
    title
        Figure title; by default collective, algorithm, ranks and size.
    frame_ms
        How long each step stays on screen while playing.
    width
        Figure width in pixels for a static export; by default none, so the figure
        takes the width of the notebook (markers and cells are sized for
        ``labcore.viz.style.DESIGN_WIDTH``).
    height
        Figure height in pixels.

    Returns
    -------
    plotly.graph_objects.Figure
        Frame ``k`` shows step ``k`` (0-based, as in the schedule): its
        transfers as arrows (hover for bytes and times), every buffer after
        the step, the caption and the simulated time so far. The figure as
        first shown is the state before step 0. Transfers of several chunks
        are drawn chunk by chunk.
    """
    trace = trace.per_chunk()
    canvas = _Canvas(trace, width, height)
    data = _static_traces(canvas)
    n_static = len(data)
    data += _changing_traces(canvas)
    changing = list(range(n_static, len(data)))
    frames = [{"name": str(k), "traces": changing, "data": _frame(canvas, k, sl)}
              for k, sl in enumerate(canvas.s.step_slices())]
    layout = _layout(canvas.s, title, width, height, canvas.box, canvas.A, canvas.C, canvas.P, canvas.p, frame_ms)
    return go.Figure({"data": data, "layout": layout, "frames": frames}, _validate=False)


class _Canvas:
    """What every part of the figure shares: the schedule, where agents sit, the sizes in pixels,
    the buffers' fill per step, the captions and the colour of each transfer."""

    def __init__(self, trace, width: int | None, height: int):
        self.trace = trace
        self.s = s = trace.schedule
        self.A, self.C, self.P = s.agents, s.chunks, s.ranks
        self.p = place(s.layout, self.P, s.switches)
        self.counts, self.need = fill_levels(trace)
        self.frac = np.clip(self.counts / self.need, 0.0, 1.0)
        self.text_cells = self.A * self.C <= 144
        self.caps = captions(trace)
        self.total_us = trace.time_s * 1e6
        self.names = [_agent_name(a, self.P) for a in range(self.A)]
        px_wide = width or DESIGN_WIDTH             # what marker and cell sizes are chosen for
        corners = np.vstack([self.p.xy] + [[[b[0], b[1]], [b[2], b[3]]] for b in self.p.boxes])
        x0, x1 = corners[:, 0].min() - 0.35, corners[:, 0].max() + 0.35
        # captions wrap to the left panel's width and get room above the picture for their lines
        self.wrap = max(40, int(0.5 * (px_wide - 80) / 6.5))
        lines = max((_wrap(c, self.wrap).count("<br>") + 2 for c in self.caps), default=2)   # + the time line
        y0, y1 = corners[:, 1].min() - 0.3, corners[:, 1].max() + max(0.75, 0.2 + 0.115 * lines)
        self.box = (x0, x1, y0, y1)
        px_per_unit = 0.5 * px_wide * 0.9 / max(x1 - x0, y1 - y0)
        self.node_px = float(np.clip(2 * self.p.radius * px_per_unit, 12, 44))
        grid_w, grid_h = 0.38 * (px_wide - 80), height - 170  # the grid's plot area in pixels
        self.cell_px = float(np.clip(0.85 * min(grid_w / self.C, grid_h / self.A), 3, 40))
        self.by_channel = s.n_channels > 1            # colour arrows by channel, else by chunk
        self.colour_key = s.channel if self.by_channel else s.chunk
        self.groups = min(s.n_channels if self.by_channel else self.C, len(CHUNK_COLORS))


def _static_traces(c: _Canvas) -> list[dict]:
    """Drawn once: the links (solid and dashed) and the agents' markers."""
    p, A, P = c.p, c.A, c.P
    data: list[dict] = []
    for style in ("solid", "dash"):
        ends = np.array([(a, b) for a, b, st in p.edges if st == style], dtype=np.int64).reshape(-1, 2)
        pts = np.full((len(ends), _ARROW_POINTS + 1, 2), np.nan)
        if len(ends):
            pts[:, :-1] = _bend(p, p.xy[ends[:, 0]], p.xy[ends[:, 1]], ends[:, 0], ends[:, 1])
        xs, ys = pts[..., 0].ravel(), pts[..., 1].ravel()
        data.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines", "hoverinfo": "skip",
                     "line": {"color": "#c8c8c8", "width": 2, "dash": style}, "showlegend": False})
    data.append({"type": "scatter", "x": p.xy[:, 0].tolist(), "y": p.xy[:, 1].tolist(),
                 "mode": "markers+text", "text": [_agent_label(a, P) for a in range(A)],
                 "textfont": {"size": max(9, c.node_px * 0.45), "color": "white"}, "hovertext": c.names,
                 "hoverinfo": "text", "showlegend": False,
                 "marker": {"size": c.node_px, "color": ["#444"] * P + ["#8c564b"] * (A - P),
                            "symbol": ["circle"] * P + ["square"] * (A - P)}})
    return data


def _changing_traces(c: _Canvas) -> list[dict]:
    """The traces every frame updates, as they are before step 0: one arrow trace per colour, the
    cells, the outlines of the cells written in a step, and the caption."""
    s = c.s
    data = [{"type": "scatter", "x": [], "y": [], "mode": "lines+markers", "showlegend": c.by_channel,
             "name": _channel_name(range(g, s.n_channels, c.groups)),
             "line": {"color": CHUNK_COLORS[g], "width": 3}, "hoverinfo": "text",
             "marker": {"symbol": "arrow", "angleref": "previous", "color": CHUNK_COLORS[g], "size": []}}
            for g in range(c.groups)]
    cell_x = np.tile(np.arange(c.C), c.A)
    cell_y = np.repeat(np.arange(c.A), c.C)
    cells = {"type": "scatter", "x": cell_x, "y": cell_y, "xaxis": "x2", "yaxis": "y2",
             "mode": "markers+text" if c.text_cells else "markers", "showlegend": False,
             "textfont": {"size": max(7, c.cell_px * 0.32)},
             "hovertemplate": "%{customdata}<br>%{marker.color:.0%} of what it needs<extra></extra>",
             "customdata": [f"{c.names[a]}, chunk {k}" for a, k in zip(cell_y.tolist(), cell_x.tolist())],
             "marker": {"symbol": "square", "size": c.cell_px, "color": c.frac[0].ravel(),
                        "cmin": 0, "cmax": 1, "colorscale": _fill_colorscale(int(c.need.max())),
                        "line": {"width": 0, "color": "white"},
                        "colorbar": {"title": {"text": "held"}, "tickvals": [0, 0.5, 1], "len": 0.5,
                                     "ticktext": ["none", "partial", "all"], "x": 1.02, "y": 0.4}}}
    if c.text_cells:
        cells["text"] = _cell_text(c.counts[0], c.need)
    data.append(cells)
    # cells written in a step: an outline in the colour of the chunk that arrived
    data.append({"type": "scatter", "x": [], "y": [], "xaxis": "x2", "yaxis": "y2", "mode": "markers",
                 "showlegend": False, "hoverinfo": "skip",
                 "marker": {"symbol": "square-open", "size": c.cell_px, "line": {"width": 3}, "color": []}})
    x0, x1, _, y1 = c.box
    data.append({"type": "scatter", "x": [(x0 + x1) / 2], "y": [y1], "mode": "text", "showlegend": False,
                 "hoverinfo": "skip", "textposition": "bottom center", "cliponaxis": False,
                 "text": [f"before step 0: the buffers as the collective starts<br>"
                          f"simulated time 0 us of {c.total_us:.4g} us"], "textfont": {"size": 11}})
    return data


def _frame(c: _Canvas, k: int, sl: slice) -> list[dict]:
    """Frame ``k``'s updates of the changing traces (plain dicts): arrows, cells, outlines, caption."""
    s, trace = c.s, c.trace
    src, dst, chunk = s.src[sl], s.dst[sl], s.chunk[sl]
    paths = _arrows(c.p, src, dst) if src.size else np.zeros((0, _ARROW_POINTS, 2))
    group = c.colour_key[sl] % c.groups
    arrow_traces = [_arrow_trace(c, sl, paths, np.flatnonzero(group == g)) for g in range(c.groups)]
    cell = {"marker": {"color": c.frac[k + 1].ravel()}}
    if c.text_cells:
        cell["text"] = _cell_text(c.counts[k + 1], c.need)
    outline = {"x": chunk.astype(float), "y": dst.astype(float),
               "marker": {"color": [CHUNK_COLORS[h % len(CHUNK_COLORS)] for h in c.colour_key[sl].tolist()]}}
    caption = {"text": [f"{_wrap(c.caps[k], c.wrap)}<br>simulated time {trace.step_end[k] * 1e6:.4g} us "
                        f"of {c.total_us:.4g} us"]}
    return arrow_traces + [cell, outline, caption]


def _arrow_trace(c: _Canvas, sl: slice, paths: np.ndarray, idx: np.ndarray) -> dict:
    """One colour's arrows of a step: their points (NaN between arrows), arrowheads and hover text."""
    s, trace = c.s, c.trace
    per = _ARROW_POINTS + 1                 # the points of one arrow, then a NaN gap
    n = idx.size
    pts = np.full((n, per, 2), np.nan)
    pts[:, :-1] = paths[idx]
    xs, ys = pts[..., 0].ravel().astype(np.float32), pts[..., 1].ravel().astype(np.float32)
    one = np.zeros(per)
    one[-2] = max(8.0, c.node_px * 0.45)  # the arrowhead sits on the last point
    hover = []
    for i in idx.tolist():
        label = (f"{c.names[s.src[sl][i]]} → {c.names[s.dst[sl][i]]}: chunk {int(s.chunk[sl][i])}, "
                 + (f"channel {int(s.channel[sl][i])}, " if c.by_channel else "") +
                 f"{'reduce' if s.reduce[sl][i] else 'copy'}, {format_bytes(s.size[sl][i])}, "
                 f"{trace.start[sl][i] * 1e6:.3g}–{trace.end[sl][i] * 1e6:.3g} us")
        hover += [""] * (_ARROW_POINTS - 1) + [label, ""]      # hover on the arrowhead
    ends = np.stack([s.src[sl][idx], s.dst[sl][idx], s.chunk[sl][idx]], axis=1).astype(np.int32)
    # NaN breaks the line between arrows; numpy arrays travel as compact typed arrays
    return {"x": xs, "y": ys, "hovertext": hover, "customdata": np.repeat(ends, per, axis=0),
            "marker": {"size": np.tile(one, n)}}


def _channel_name(channels) -> str:
    """Legend label of one arrow colour: 'channel 3', or 'channels 0, 10' when colours repeat."""
    channels = list(channels)
    return f"channel {channels[0]}" if len(channels) == 1 else "channels " + ", ".join(map(str, channels))


def _wrap(text: str, width: int = 80) -> str:
    """Break a long caption into lines of about ``width`` characters between its phrases (after ", ", ": " or
    "; "), so that "3→0 chunk 2" or "each a reduce" never splits across lines; a phrase longer than a line
    breaks between words.

    >>> _wrap("step 0: 4 transfers at once, each a reduce: 0→1 chunk 3, 3→0 chunk 2", 35).split("<br>")
    ['step 0: 4 transfers at once,', 'each a reduce: 0→1 chunk 3,', '3→0 chunk 2']
    """
    lines, line = [], ""
    for phrase in re.split(r"(?<=[,:;]) ", text):
        if line and len(line) + 1 + len(phrase) > width:
            lines.append(line)
            line = phrase
        else:
            line = f"{line} {phrase}" if line else phrase
        while len(line) > width and line.rfind(" ", 0, width + 1) > 0:
            cut = line.rfind(" ", 0, width + 1)
            lines.append(line[:cut])
            line = line[cut + 1:]
    return "<br>".join(lines + [line])


def _layout(s, title, width, height, box, A, C, P, p: Placement, frame_ms: int) -> dict:
    x0, x1, y0, y1 = box
    steps = [{"label": str(k), "method": "animate",
              "args": [[str(k)], {"mode": "immediate", "frame": {"duration": 0, "redraw": False},
                                  "transition": {"duration": 0}}]} for k in range(s.n_steps)]
    play = {"label": "▶ play", "method": "animate",
            "args": [None, {"frame": {"duration": frame_ms, "redraw": False}, "fromcurrent": True,
                            "transition": {"duration": 0}, "mode": "immediate"}]}
    pause = {"label": "❚❚ pause", "method": "animate",
             "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate",
                               "transition": {"duration": 0}}]}
    tick = max(1, int(np.ceil(A / 16)))
    ctick = max(1, int(np.ceil(C / 16)))
    shapes = [{"type": "rect", "x0": b[0], "y0": b[1], "x1": b[2], "y1": b[3], "xref": "x", "yref": "y",
               "line": {"color": "#9e9e9e", "dash": "dot"}, "layer": "below"} for b in p.boxes]
    notes = [{"x": b[0] + 0.02, "y": b[3] - 0.02, "xref": "x", "yref": "y", "text": b[4], "showarrow": False,
              "xanchor": "left", "yanchor": "top", "font": {"size": 10, "color": "#777"}} for b in p.boxes]
    return {
        "template": template_dict(), "height": height, "hovermode": "closest",
        **({"width": width} if width else {"autosize": True}),
        "title": {"text": title or (f"{s.collective} ({s.algorithm}) on {P} rank{'' if P == 1 else 's'}, "
                                    f"{format_bytes(s.nbytes)}, {C} chunks")},
        "margin": {"l": 20, "r": 60, "t": 60, "b": 90},
        "xaxis": {"domain": [0, 0.5], "range": [x0, x1], "visible": False},
        "yaxis": {"range": [y0, y1], "visible": False, "scaleanchor": "x"},
        "xaxis2": {"domain": [0.57, 0.95], "range": [-0.6, C - 0.4], "automargin": True,
                   "title": {"text": "chunk", "standoff": 2},
                   "tickvals": list(range(0, C, ctick)), "showgrid": False, "zeroline": False},
        "yaxis2": {"anchor": "x2", "range": [A - 0.4, -0.6], "showgrid": False, "zeroline": False,
                   "tickvals": list(range(0, A, tick)),
                   "ticktext": [_agent_name(a, P) for a in range(0, A, tick)]},
        "shapes": shapes, "annotations": notes,
        "legend": {"x": 0.0, "y": 1.0, "xanchor": "left", "yanchor": "top", "font": {"size": 10},
                   "bgcolor": "rgba(255,255,255,0.7)", "title": {"text": "arrows"}},
        "updatemenus": [{"type": "buttons", "direction": "left", "x": 0.0, "y": -0.02, "xanchor": "left",
                         "yanchor": "top", "pad": {"t": 30}, "showactive": False, "buttons": [play, pause]}],
        # the slider starts a fixed distance right of the buttons, whatever the figure's width
        "sliders": [{"active": 0, "x": 0.0, "len": 1.0, "y": -0.02, "yanchor": "top", "pad": {"t": 20, "l": 190},
                     "currentvalue": {"prefix": "step "}, "steps": steps}],
    }


def still(fig: go.Figure, step: int) -> go.Figure:
    """A copy of an animated figure frozen at ``step`` (0-based), without frames or controls.

    Static exports (PNG, PDF) show a figure's base data only; this applies
    frame ``step`` to it so an image shows that step.

    Example
    -------
    >>> import labcore.sim as sim
    >>> fig = chunk_flow(sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1024))
    >>> still(fig, 2).data[-1].text[0].startswith("step 2 of 0–5")
    True
    """
    if not 0 <= step < len(fig.frames):
        raise IndexError(f"step must be in 0..{len(fig.frames) - 1}, got {step}")
    spec = fig.to_plotly_json()
    frame = spec["frames"][step]
    data = [dict(t) for t in spec["data"]]
    for index, update in zip(frame["traces"], frame["data"]):
        _merge(data[index], update)
    layout = dict(spec["layout"])
    layout.pop("updatemenus", None)
    layout.pop("sliders", None)
    layout["margin"] = dict(layout.get("margin", {}), b=20)
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def _merge(target: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            target[key] = dict(target[key])
            _merge(target[key], value)
        else:
            target[key] = value
