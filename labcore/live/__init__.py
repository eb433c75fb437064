"""Real collectives: a persistent rank cluster on this machine (or on ipyparallel engines), ``%%ranks``, the
hang report, the in-rank recorder of what training sends, torch's flight recorder on the ranks, and this
machine's facts (GPUs, backend, how its devices connect).

What real jobs leave behind (profiler traces, NCCL logs, nccl-tests output, flight-recorder dumps) is read
by :mod:`labcore.readers`, into the same :class:`~labcore.readers.recording.Recording` the recorder returns.
Names load on first use: a rank imports this package before its worker, and the forkserver that forks the
ranks should import as little as a rank does.
"""
from __future__ import annotations

import importlib
import importlib.util

# module -> the public names it defines
_MODULES = {
    "labcore.live.cluster": ["Cluster"],
    "labcore.live.engines": ["EngineCluster"],
    "labcore.live.context": ["RankInfo", "device", "rank_info"],
    "labcore.live.errors": ["ClusterError", "CollectiveTimeout", "RankDied", "RankError"],
    "labcore.live.hang": ["HangReport"],
    "labcore.live.magic": ["get_cluster"],
    "labcore.live.recorder": ["FR_ENV", "Recorder", "record"],
    "labcore.live.scaleout": ["NodeGroups", "hierarchical_all_reduce", "node_groups"],
    "labcore.live.sysinfo": ["explain_backend", "has_gpus", "machine_summary", "cpu_summary", "machine_topology"],
}
_NAMES = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [*_NAMES, "flight"]


def __getattr__(name: str):
    """A public name, or a submodule (``lc.live.flight``, ``lc.live.recorder``), imported when first asked for."""
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
