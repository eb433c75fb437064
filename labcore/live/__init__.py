"""Real collectives: a persistent rank cluster on this machine (or on ipyparallel engines), ``%%ranks``, machine facts."""
from labcore.live.cluster import Cluster
from labcore.live.context import RankInfo, device, rank_info
from labcore.live.engines import EngineCluster
from labcore.live.errors import ClusterError, CollectiveTimeout, HangReport, RankDied, RankError
from labcore.live.recorder import FR_ENV, Recorder, Recording, combine, record
from labcore.live.sysinfo import has_gpus, machine_summary

__all__ = [
    "Cluster", "EngineCluster", "RankInfo", "device", "rank_info", "ClusterError", "CollectiveTimeout",
    "HangReport", "RankDied", "RankError", "has_gpus", "machine_summary", "record", "Recorder", "Recording",
    "combine", "FR_ENV",
]
