"""Link timeline: which link carries which chunk, when (a Gantt chart of a simulated run).

One row per link the run uses, one bar per chunk crossing it, coloured like
the chunk in :func:`labcore.viz.chunk_flow` (or, when the run has several
channels, like the channel: a NIC's row then shows which of NCCL's rings
cross it). Gaps in a row are idle time; a
hatched bar shares its link with other messages in the same step (contention),
which is why it takes longer. Each row's label ends with how busy it was.

Example
-------
>>> import labcore.sim as sim
>>> fig = link_timeline(sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20))
>>> len(fig.layout.yaxis.ticktext)       # the four ring links
4
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from labcore.viz.style import CHUNK_COLORS, format_bytes, template_dict

__all__ = ["link_timeline", "link_usage"]


def _busy_time(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals."""
    order = np.argsort(starts)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in zip(starts[order].tolist(), ends[order].tolist()):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


def link_usage(trace):
    """Per link the run uses: its label, messages, bytes, busy time and the most messages sharing it in a step.

    Returns a pandas DataFrame with columns ``link, label, transfers, bytes,
    busy_us, busy_share, max_sharing`` sorted by link id.
    """
    import pandas as pd

    trace = trace.per_chunk()
    s = trace.schedule
    hops = trace.links.shape[1]
    t_idx = np.repeat(np.arange(s.n_transfers), hops)
    link = trace.links.ravel()
    keep = link >= 0
    t_idx, link = t_idx[keep], link[keep]
    msg = ((s.step[t_idx] * (s.agents + 1) + s.src[t_idx]) * (s.agents + 1) + s.dst[t_idx]) * s.n_channels \
        + s.channel[t_idx]
    rows = []
    for l in np.unique(link).tolist():
        sel = t_idx[link == l]
        m = msg[link == l]
        steps = s.step[sel]
        pairs = np.unique(np.stack([steps, m], axis=1), axis=0)
        sharing = int(np.bincount(pairs[:, 0]).max()) if pairs.size else 0
        busy = _busy_time(trace.start[sel], trace.end[sel]) * 1e6
        rows.append({"link": l, "label": trace.topology.link_label(l), "transfers": sel.size,
                     "bytes": float(s.size[sel].sum()), "busy_us": busy,
                     "busy_share": busy / (trace.time_s * 1e6) if trace.time_s > 0 else 0.0,
                     "max_sharing": sharing})
    return pd.DataFrame(rows, columns=["link", "label", "transfers", "bytes", "busy_us", "busy_share",
                                       "max_sharing"])


def link_timeline(trace, *, max_links: int = 48, title: str | None = None) -> go.Figure:
    """Gantt chart of every link's traffic in a simulated run.

    Parameters
    ----------
    trace
        A :class:`labcore.sim.core.trace.Trace` (values are not needed).
    max_links
        Rows to draw at most; the busiest links are kept when a run uses more.
    title
        Figure title; by default the run and its total time.

    Returns
    -------
    plotly.graph_objects.Figure
        One horizontal bar per (chunk, link) crossing, from its start to its
        end time in microseconds. Hatched bars share the link with other
        messages of the same step; dotted lines separate the steps. With several
        channels the bars take the colour of their channel.
    """
    trace = trace.per_chunk()
    s = trace.schedule
    usage = link_usage(trace)
    if len(usage) > max_links:
        usage = usage.nlargest(max_links, "busy_us").sort_values("link")
    rows = {l: k for k, l in enumerate(usage["link"].tolist())}
    labels = [f"{lab}  ({share:.0%} busy)" for lab, share in zip(usage["label"], usage["busy_share"])]
    hops = trace.links.shape[1]
    t_idx = np.repeat(np.arange(s.n_transfers), hops)
    link = trace.links.ravel()
    keep = np.isin(link, list(rows))
    t_idx, link = t_idx[keep], link[keep]
    # messages sharing a link in a step: count distinct (src, dst, channel) per (step, link)
    msg = (s.src[t_idx] * (s.agents + 1) + s.dst[t_idx]) * s.n_channels + s.channel[t_idx]
    key = s.step[t_idx].astype(np.int64) * (int(link.max(initial=0)) + 1) + link
    pairs = np.unique(np.stack([key, msg], axis=1), axis=0)
    per_key = np.unique(pairs[:, 0], return_counts=True)
    share = dict(zip(per_key[0].tolist(), per_key[1].tolist()))
    sharing = np.array([share[k] for k in key.tolist()], dtype=int)
    start_us, end_us = trace.start[t_idx] * 1e6, trace.end[t_idx] * 1e6
    chunk = s.chunk[t_idx]
    by_channel = s.n_channels > 1
    colour = s.channel[t_idx] if by_channel else chunk
    hover = [f"step {st}: {'reduce' if r else 'copy'} chunk {c}"
             + (f" on channel {h}" if by_channel else "") + f" ({format_bytes(b)}), "
             f"rank {a} → {'rank ' + str(d) if d < s.ranks else 'switch ' + str(d - s.ranks)}<br>"
             f"{t0:.4g}–{t1:.4g} us" + (f"<br>link shared by {k} messages" if k > 1 else "")
             for st, r, c, h, b, a, d, t0, t1, k in zip(
                 s.step[t_idx].tolist(), s.reduce[t_idx].tolist(), chunk.tolist(), s.channel[t_idx].tolist(),
                 s.size[t_idx].tolist(), s.src[t_idx].tolist(), s.dst[t_idx].tolist(), start_us.tolist(),
                 end_us.tolist(), sharing.tolist())]
    bar = {"type": "bar", "orientation": "h", "base": start_us.tolist(),
           "x": np.maximum(end_us - start_us, 1e-9).tolist(), "y": [rows[l] for l in link.tolist()],
           "hovertext": hover, "hoverinfo": "text", "showlegend": False, "width": 0.8,
           "marker": {"color": [CHUNK_COLORS[c % len(CHUNK_COLORS)] for c in colour.tolist()],
                      "opacity": 0.85, "line": {"width": 0.5, "color": "white"},
                      "pattern": {"shape": ["/" if k > 1 else "" for k in sharing.tolist()],
                                  "fgcolor": "black", "size": 6}}}
    shapes = []
    if s.n_steps <= 64:
        shapes = [{"type": "line", "x0": x, "x1": x, "y0": 0, "y1": 1, "yref": "paper",
                   "line": {"dash": "dot", "width": 1, "color": "#bbb"}} for x in (trace.step_end * 1e6).tolist()]
    n = len(rows)
    layout = {"template": template_dict(), "barmode": "overlay", "height": 160 + 22 * n, "autosize": True,
              "title": {"text": title or (f"Link timeline: {s.collective} ({s.algorithm}), {s.ranks} rank{'' if s.ranks == 1 else 's'}, "
                                          f"{format_bytes(s.nbytes)}, {trace.time_s * 1e6:.4g} us")},
              "xaxis": {"title": {"text": "simulated time (us)"}, "range": [0, trace.time_s * 1e6 * 1.01]},
              "yaxis": {"tickvals": list(range(n)), "ticktext": labels, "autorange": "reversed", "automargin": True},
              "shapes": shapes}
    return go.Figure({"data": [bar], "layout": layout}, _validate=False)
