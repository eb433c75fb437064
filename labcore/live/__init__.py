"""Real collectives: a persistent rank cluster on this machine (or on ipyparallel engines), ``%%ranks``,
recordings of what training sends, readers of real NCCL logs and of real jobs' profiler traces, machine facts."""
from labcore.live import flight
from labcore.live.cluster import Cluster
from labcore.live.context import RankInfo, device, rank_info
from labcore.live.engines import EngineCluster
from labcore.live.errors import ClusterError, CollectiveTimeout, HangReport, RankDied, RankError
from labcore.live.magic import get_cluster
from labcore.live.kineto import TRACES_DIR, kernel_choice, nccl_choices, read_trace, tuner_machine
from labcore.live.nccl_log import LOGS_DIR as NCCL_LOGS_DIR
from labcore.live.nccl_log import NcclLog
from labcore.live.nccl_log import parse as parse_nccl_log
from labcore.live.nccl_log import recorded as recorded_nccl_log
from labcore.live.recorder import FR_ENV, Recorder, Recording, combine, record
from labcore.live.scaleout import NodeGroups, hierarchical_all_reduce, node_groups
from labcore.live.sysinfo import explain_backend, has_gpus, machine_summary
from labcore.live.topology import LEGEND as TOPO_LEGEND
from labcore.live.topology import TopoMatrix, cpu_summary, machine_topology, parse_topo

__all__ = [
    "Cluster", "EngineCluster", "RankInfo", "device", "rank_info", "ClusterError", "CollectiveTimeout",
    "HangReport", "RankDied", "RankError", "has_gpus", "machine_summary", "record", "Recorder", "Recording",
    "combine", "FR_ENV", "NcclLog", "parse_nccl_log", "recorded_nccl_log", "NCCL_LOGS_DIR", "NodeGroups",
    "node_groups", "hierarchical_all_reduce", "TopoMatrix", "machine_topology", "parse_topo", "cpu_summary", "flight",
    "read_trace", "nccl_choices", "kernel_choice", "tuner_machine", "TRACES_DIR", "get_cluster", "explain_backend",
    "TOPO_LEGEND",
]
