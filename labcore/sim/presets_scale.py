"""Deprecated (kept for one release): the scale-out presets are entries of the one registry,
:mod:`labcore.sim.presets`, and the analysis of their traces is :mod:`labcore.sim.scaleout`.

Every name here still works and warns (DeprecationWarning) with its new place:

* ``preset(name, nodes, sharp)`` -> ``labcore.sim.presets.topology(name, nodes=nodes, sharp=sharp)``;
  ``dgx_h100_ib``, ``ib_8x200``, ``roce_8x400``, ``tcp_100g`` the same for one preset;
* ``PRESETS``, ``SHARP_CAPABLE`` -> ``presets.names("cluster")``, ``presets.entry(name).sharp``;
* ``PUBLISHED``, ``PUBLISHED_AS`` -> ``presets.PUBLISHED``, ``presets.PUBLISHED_AS``;
* ``nic_bytes``, ``per_gpu_nic_bandwidth``, ``internode_bytes_per_gpu``, ``published_run``,
  ``NCCL_TESTS_78``, ``scale_sweep`` -> ``labcore.sim.scaleout``; ``ALGORITHMS`` ->
  ``scaleout.SCALE_ALGORITHMS``.
"""
from __future__ import annotations

import functools
import warnings

from labcore.sim import presets, scaleout

NETWORKS = ("dgx_h100_ib", "ib_8x200", "roce_8x400", "tcp_100g")


def _preset(name: str, nodes: int = 2, sharp: bool = False):
    if name not in NETWORKS:
        raise ValueError(f"unknown scale-out preset {name!r}; choose one of {', '.join(NETWORKS)}")
    return presets.topology(name, nodes=nodes, sharp=sharp)


_MOVED = {
    "preset": ("labcore.sim.presets.topology(name, nodes=..., sharp=...)", lambda: _preset),
    "PRESETS": ("labcore.sim.presets.names('cluster')", lambda: {n: functools.partial(_preset, n) for n in NETWORKS}),
    "SHARP_CAPABLE": ("labcore.sim.presets.entry(name).sharp",
                      lambda: tuple(n for n in NETWORKS if presets.entry(n).sharp)),
    "PUBLISHED": ("labcore.sim.presets.PUBLISHED", lambda: presets.PUBLISHED),
    "PUBLISHED_AS": ("labcore.sim.presets.PUBLISHED_AS", lambda: presets.PUBLISHED_AS),
    "ALGORITHMS": ("labcore.sim.scaleout.SCALE_ALGORITHMS", lambda: scaleout.SCALE_ALGORITHMS),
    **{n: (f"labcore.sim.presets.topology({n!r}, nodes=..., sharp=...)",
           lambda n=n: functools.partial(_preset, n)) for n in NETWORKS},
    **{n: (f"labcore.sim.scaleout.{n}", lambda n=n: getattr(scaleout, n))
       for n in ("nic_bytes", "per_gpu_nic_bandwidth", "internode_bytes_per_gpu", "published_run", "NCCL_TESTS_78",
                 "scale_sweep")},
}

__all__: list[str] = []          # nothing new is meant to come from here


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where, value = _MOVED[name]
    warnings.warn(f"labcore.sim.presets_scale.{name} is deprecated: use {where}", DeprecationWarning, stacklevel=2)
    return value()
