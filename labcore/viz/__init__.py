"""Figures and explorers of the lab (plotly and ipywidgets).

- simulated collectives (labcore.sim traces): :func:`chunk_flow` (animation),
  :func:`captions`, :func:`still` (one step as a static figure), :func:`link_timeline`
  (which link carries what, when) and :func:`link_usage`;
- explorers (ipywidgets): :func:`explore` / :class:`Explorer`, where ranks, size,
  algorithm and topology update one FigureWidget in place;
- training steps (labcore.live recordings and their replays): :func:`step_timeline`, :func:`replay_slider`;
- measurements (bench DataFrames): :func:`measurement_plot`, :func:`crossover_plot`,
  :func:`topology_heatmap`, :func:`gate_plot` (a regression gate's verdicts);
- NCCL's protocols (from the tuner's model): :func:`protocol_lines`, :func:`protocol_times`,
  :func:`protocol_crossovers`, :func:`channels_by_size`, :func:`mechanism_effects` (the simulator with
  NCCL's mid-size mechanisms switched on in turn);
- evidence (labcore.evidence tables): :func:`control_chart`, :func:`interval_plot`,
  :func:`percentile_plot`, :func:`cost_plot`;
- axes in bytes: :func:`format_bytes` ("64 KiB") and :func:`byte_ticks` (a log axis labelled in bytes);
  :func:`facet_titles` names a faceted figure's panels by their value ("64 MiB", "4 ranks").
"""
from labcore.viz.chunk_flow import captions, chunk_flow, still
from labcore.viz.explorer import Explorer, explore
from labcore.viz.timeline import link_timeline, link_usage
from labcore.viz.measure import crossover_plot, gate_plot, measurement_plot, topology_heatmap
from labcore.viz.step_timeline import replay_slider, step_timeline
from labcore.viz.protocols import (channels_by_size, mechanism_effects, protocol_crossovers, protocol_lines,
                                  protocol_times)
from labcore.viz.control import control_chart
from labcore.viz.evidence import cost_plot, interval_plot, percentile_plot
from labcore.viz.style import byte_ticks, facet_titles, format_bytes

__all__ = [
    "captions", "chunk_flow", "still", "link_timeline", "link_usage", "Explorer", "explore",
    "crossover_plot", "gate_plot", "measurement_plot", "topology_heatmap", "step_timeline", "replay_slider",
    "channels_by_size", "mechanism_effects", "protocol_crossovers", "protocol_lines", "protocol_times",
    "control_chart", "cost_plot", "interval_plot", "percentile_plot", "format_bytes", "byte_ticks", "facet_titles",
]


def __dir__() -> list[str]:
    return sorted(__all__)
