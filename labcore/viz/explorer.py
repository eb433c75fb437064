"""Explorer: pick algorithm, ranks, size and topology; the chunk flow and the numbers follow.

An ipywidgets panel around one plotly ``FigureWidget``: changing a control
re-runs the simulator and updates the same figure in place (traces and layout
replaced inside one ``batch_update``), and the step slider (with a play
button) only restyles the traces that change between steps. FigureWidget
cannot hold animation frames, so the explorer keeps the frames of
:func:`labcore.viz.chunk_flow` itself and applies one per step.

Example
-------
>>> ex = Explorer(ranks=4, nbytes=1 << 16)
>>> ex.controls["ranks"].value = 6            # the figure updates in place
>>> ex.trace.schedule.ranks, len(ex.figure.data[2].x)
(6, 6)
>>> ex.show_step(3); ex.figure.data[-1].text[0].startswith("step 2 of 0–9")   # 3 steps done
True
"""
from __future__ import annotations

import inspect

import ipywidgets as widgets
import plotly.graph_objects as go

from labcore.viz.chunk_flow import chunk_flow
from labcore.viz.style import format_bytes
from labcore.viz.timeline import link_timeline

__all__ = ["Explorer", "explore"]

_SIZES = [1 << k for k in range(10, 31, 2)]     # 1 KiB .. 1 GiB
# px: the controls (~100), the chunk flow and the link timeline (12 px a link) of an 8-rank run stay
# under 800 px together, instead of 1,430
FLOW_HEIGHT = 340
TIMELINE_ROW, TIMELINE_BASE, TIMELINE_HEIGHT = 12, 100, 340
CONTROL_WIDTH = "230px"


def _options_for(op: str, algorithm: str, ranks: int, topology) -> dict:
    """Builder options the explorer fills in: a hierarchical run takes its node size from the topology."""
    from labcore.sim.core.schedules import ALGORITHMS

    accepted = inspect.signature(ALGORITHMS[op][algorithm]).parameters
    if "gpus_per_node" not in accepted:
        return {}
    nodes = int(getattr(topology, "nodes", 1))
    if nodes > 1 and ranks % nodes == 0:
        return {"gpus_per_node": ranks // nodes}
    per_node = next((g for g in (4, 2, 3) if ranks % g == 0 and g < ranks), ranks)
    return {"gpus_per_node": per_node}


def _compact_timeline(layout: dict) -> None:
    """The link timeline at 12 px a link (at most :data:`TIMELINE_HEIGHT`); its labels shrink to fit,
    and where a row is too thin to label, the hover still names the link."""
    links = len(layout.get("yaxis", {}).get("ticktext", [])) or 1
    height = min(TIMELINE_BASE + TIMELINE_ROW * links, TIMELINE_HEIGHT)
    row_px = (height - TIMELINE_BASE) / links
    layout["height"] = height
    layout["margin"] = dict(t=36, b=40, r=20)
    layout["title"] = dict(layout.get("title", {}), font={"size": 13})
    layout["yaxis"] = dict(layout["yaxis"], tickfont={"size": max(7, min(10, row_px - 2))},
                           showticklabels=row_px >= 8)


class Explorer:
    """The widget panel; display it (last expression of a cell) or call :func:`explore`.

    Parameters
    ----------
    op, algorithm, ranks, nbytes, topology
        Starting values: the collective (fixed), a name from
        ``labcore.sim.ALGORITHMS[op]``, rank count, bytes, and a topology preset
        name from :func:`labcore.sim.presets.names`.
    max_ranks
        Largest rank count the slider offers.
    timeline
        Also show the link timeline of the run (updated with the controls).

    Attributes
    ----------
    figure : plotly FigureWidget of the chunk flow.
    timeline : FigureWidget of the link timeline, or None.
    controls : dict of the ipywidgets (algorithm, ranks, size, topology, step, play).
    numbers : HTML widget with the simulated and closed-form costs.
    trace : the current :class:`labcore.sim.core.trace.Trace`.
    """

    def __init__(self, op: str = "all_reduce", algorithm: str = "ring", ranks: int = 8,
                 nbytes: int = 1 << 20, topology: str = "uniform", *, max_ranks: int = 32,
                 timeline: bool = True):
        import labcore.sim as sim

        self.op = op
        algorithms = sorted(sim.ALGORITHMS[op])
        if algorithm not in algorithms:
            raise ValueError(f"no {algorithm!r} for {op}; choose one of {', '.join(algorithms)}")
        sizes = sorted(set(_SIZES) | {int(nbytes)})
        self.controls = {
            "algorithm": widgets.Dropdown(options=algorithms, value=algorithm, description="algorithm"),
            "ranks": widgets.IntSlider(value=ranks, min=2, max=max(max_ranks, ranks), description="ranks",
                                       continuous_update=False),
            "size": widgets.SelectionSlider(options=[(format_bytes(s), s) for s in sizes], value=int(nbytes),
                                            description="size", continuous_update=False),
            "topology": widgets.Dropdown(options=sim.presets.names(), value=topology,
                                         description="topology"),
            # how many steps are done: 0 is the start, k shows the buffers after step k - 1 (steps count from 0)
            "step": widgets.IntSlider(value=0, min=0, max=1, description="steps done"),
            "play": widgets.Play(value=0, min=0, max=1, interval=700, description="play"),
        }
        widgets.jslink((self.controls["play"], "value"), (self.controls["step"], "value"))
        self.numbers = widgets.HTML()
        self.message = widgets.HTML()
        self.figure = go.FigureWidget()
        self.timeline = go.FigureWidget() if timeline else None
        self._base: list[dict] = []
        self._frames: list[dict] = []
        self.trace = None
        for name in ("algorithm", "ranks", "size", "topology"):
            self.controls[name].observe(lambda _change: self.update(), names="value")
        self.controls["step"].observe(lambda change: self.show_step(change["new"]), names="value")
        self.update()

    # -- reacting to the controls ------------------------------------------------------
    def update(self) -> None:
        """Re-simulate with the current controls and redraw the figures in place."""
        import labcore.sim as sim

        c = self.controls
        algorithm, ranks, nbytes = c["algorithm"].value, c["ranks"].value, c["size"].value
        try:
            topo = sim.presets.topology(c["topology"].value, ranks)
            trace = sim.simulate(self.op, algorithm=algorithm, ranks=ranks, nbytes=nbytes, topology=topo,
                                 **_options_for(self.op, algorithm, ranks, topo))
        except (ValueError, TypeError) as err:   # e.g. an algorithm the machine cannot run
            self.message.value = f"<span style='color:#b00'>{err}</span>"
            return
        self.message.value = ""
        self.trace = trace
        spec = chunk_flow(trace, height=FLOW_HEIGHT).to_plotly_json()
        self._base = [dict(t) for t in spec["data"]]
        self._frames = spec["frames"]
        layout = dict(spec["layout"])
        layout.pop("updatemenus", None)
        layout.pop("sliders", None)
        layout["margin"] = dict(layout.get("margin", {}), b=40)
        with self.figure.batch_update():
            self.figure.data = []
            self.figure.add_traces(self._base)
            self.figure.layout = layout
        if self.timeline is not None:
            tl = link_timeline(trace).to_plotly_json()
            _compact_timeline(tl["layout"])
            with self.timeline.batch_update():
                self.timeline.data = []
                self.timeline.add_traces(tl["data"])
                self.timeline.layout = tl["layout"]
        self.numbers.value = self._numbers_html(trace, topo)
        steps = trace.schedule.n_steps
        for name in ("step", "play"):
            c[name].max = max(steps, 1)
        if c["step"].value != 0:
            c["step"].value = 0                  # observer draws step 0 (already the base data)

    def show_step(self, step: int) -> None:
        """Show the buffers and transfers after ``step`` steps (0 = before the first)."""
        if not self._frames:
            return
        step = max(0, min(int(step), len(self._frames)))
        if step == 0:
            indices = self._frames[0]["traces"]
            updates = [self._base[i] for i in indices]
        else:
            frame = self._frames[step - 1]
            indices, updates = frame["traces"], frame["data"]
        with self.figure.batch_update():
            for index, update in zip(indices, updates):
                self.figure.data[index].update({k: v for k, v in update.items() if k != "type"})

    def _numbers_html(self, trace, topo) -> str:
        from labcore.sim import cost

        s = trace.summary()
        rows = [("simulated time", f"{s['time_us']:.4g} us"), ("steps / transfers", f"{s['steps']} / {s['transfers']}"),
                ("channels" + (" / protocol" if s["protocol"] else ""),
                 f"{s['channels']}" + (f" / {s['protocol']}" if s["protocol"] else "")),
                *((k, f"{s[k]:.4g} GB/s" if s[k] is not None else "none (one rank)") for k in ("algbw", "busbw")),
                ("lower bound (any algorithm)", f"{s['bound_us']:.4g} us")]
        notes = getattr(topo, "notes", {}) or {}
        if "alpha" in notes and "bandwidth" in notes:
            sched = trace.schedule
            try:
                closed = cost.time(sched.collective, sched.algorithm, sched.ranks, sched.nbytes,
                                   alpha=notes["alpha"], beta=1.0 / notes["bandwidth"], ports=topo.ports,
                                   **sched.params)
                rows.append((f"alpha-beta closed form ({topo.ports}-port, no contention)", f"{closed * 1e6:.4g} us"))
            except (ValueError, TypeError):
                pass                             # no closed form for this algorithm
        # small and tight, beside the controls: about as tall as their three rows
        cells = "".join(f"<tr><td style='padding-right:0.8em'>{k}</td><td><b>{v}</b></td></tr>" for k, v in rows)
        return f"<table style='font-size:85%;white-space:nowrap;line-height:1.15'>{cells}</table>"

    # -- display -------------------------------------------------------------------------
    def widget(self) -> widgets.Widget:
        """The whole panel as one ipywidgets box, sized for a 1280 x 800 window.

        The controls sit in three short rows beside the numbers (about 100 px), above the chunk flow
        (:data:`FLOW_HEIGHT`) and the link timeline (12 px a link, at most :data:`TIMELINE_HEIGHT`):
        about 750 px for 8 ranks on an NVSwitch node, where it was 1,430.
        """
        c = self.controls
        for name in ("algorithm", "topology", "ranks", "size", "step"):
            c[name].layout = widgets.Layout(width=CONTROL_WIDTH)
            c[name].style = {"description_width": "72px"}
        rows = widgets.VBox([widgets.HBox([c["algorithm"], c["topology"]]), widgets.HBox([c["ranks"], c["size"]]),
                             widgets.HBox([c["play"], c["step"]])], layout=widgets.Layout(flex="0 0 auto"))
        self.numbers.layout = widgets.Layout(flex="1 1 auto", margin="0 0 0 24px")
        band = widgets.HBox([rows, self.numbers], layout=widgets.Layout(align_items="flex-start"))
        parts = [band, self.message, self.figure]
        if self.timeline is not None:
            parts.append(self.timeline)
        return widgets.VBox(parts)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget())


def explore(op: str = "all_reduce", algorithm: str = "ring", ranks: int = 8, nbytes: int = 1 << 20,
            topology: str = "uniform", **kwargs) -> Explorer:
    """An :class:`Explorer` for ``op`` starting from the given settings (display it in a cell).

    Example
    -------
    >>> ex = explore("all_reduce", "double_tree", ranks=8, timeline=False)
    >>> ex.trace.schedule.algorithm
    'double_tree'
    """
    return Explorer(op, algorithm, ranks, nbytes, topology, **kwargs)
