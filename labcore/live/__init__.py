"""Real collectives: a persistent rank cluster on this machine (or on ipyparallel engines), ``%%ranks``,
recordings of what training sends, readers of real NCCL logs and of real jobs' profiler traces, machine facts.

Names load on first use: a rank imports this package before its worker, and the readers (pandas, the
trace reader, the tuner) would otherwise load in every rank and in the forkserver that forks them.
"""
from __future__ import annotations

import importlib
import importlib.util

# public name -> (module, its name there)
_NAMES = {
    "Cluster": ("cluster", "Cluster"), "EngineCluster": ("engines", "EngineCluster"),
    "RankInfo": ("context", "RankInfo"), "device": ("context", "device"), "rank_info": ("context", "rank_info"),
    "ClusterError": ("errors", "ClusterError"), "CollectiveTimeout": ("errors", "CollectiveTimeout"),
    "HangReport": ("errors", "HangReport"), "RankDied": ("errors", "RankDied"), "RankError": ("errors", "RankError"),
    "get_cluster": ("magic", "get_cluster"),
    "TRACES_DIR": ("kineto", "TRACES_DIR"), "kernel_choice": ("kineto", "kernel_choice"),
    "nccl_choices": ("kineto", "nccl_choices"), "read_trace": ("kineto", "read_trace"),
    "tuner_machine": ("kineto", "tuner_machine"),
    "NCCL_LOGS_DIR": ("nccl_log", "LOGS_DIR"), "NcclLog": ("nccl_log", "NcclLog"),
    "parse_nccl_log": ("nccl_log", "parse"), "recorded_nccl_log": ("nccl_log", "recorded"),
    "FR_ENV": ("recorder", "FR_ENV"), "Recorder": ("recorder", "Recorder"), "Recording": ("recorder", "Recording"),
    "combine": ("recorder", "combine"), "record": ("recorder", "record"),
    "NodeGroups": ("scaleout", "NodeGroups"), "hierarchical_all_reduce": ("scaleout", "hierarchical_all_reduce"),
    "node_groups": ("scaleout", "node_groups"),
    "explain_backend": ("sysinfo", "explain_backend"), "has_gpus": ("sysinfo", "has_gpus"),
    "machine_summary": ("sysinfo", "machine_summary"),
    "TOPO_LEGEND": ("topology", "LEGEND"), "TopoMatrix": ("topology", "TopoMatrix"),
    "cpu_summary": ("topology", "cpu_summary"), "machine_topology": ("topology", "machine_topology"),
    "parse_topo": ("topology", "parse_topo"),
}

__all__ = [*_NAMES, "flight"]


def __getattr__(name: str):
    """A public name, or a submodule (``lc.live.flight``, ``lc.live.recorder``), imported when first asked for."""
    if name in _NAMES:
        module, attr = _NAMES[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
