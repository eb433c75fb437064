"""Figures and explorers of the lab (plotly and ipywidgets).

- measurements (bench DataFrames): :func:`measurement_plot`, :func:`crossover_plot`,
  :func:`topology_heatmap`.
"""
from labcore.viz.measure import crossover_plot, measurement_plot, topology_heatmap

__all__ = ["crossover_plot", "measurement_plot", "topology_heatmap"]
