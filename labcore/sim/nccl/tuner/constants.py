"""The numbers NCCL's tuner is built from, as NVIDIA/nccl 2.30.7 has them.

Source: NVIDIA/nccl commit 5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL 2.30.7,
makefiles/version.mk), files src/graph/tuning.cc (``ncclTunerConstantsDefaults``,
``nvlsEfficiency``, ``treeCorrectionFactor``, ``getNetOverhead``), src/include/device.h
(thread counts, arities), src/include/comm.h (thread thresholds), src/include/graph.h
(path types) and src/graph/topo.h (bandwidths). Tables are indexed here by name rather
than by NCCL's enum positions; the order of :data:`ALGORITHMS`, :data:`PROTOCOLS` and
:data:`FUNCTIONS` is NCCL's own, which matters: NCCL keeps the first of equal times.
"""
from __future__ import annotations

from labcore.collectives import NCCL_NAMES

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
FUNCTION_OF = dict(sorted(NCCL_NAMES.items(), key=lambda item: FUNCTIONS.index(item[1])))
"""The lab's collective names -> NCCL's ``ncclFuncStr`` (from :mod:`labcore.collectives`), in NCCL's order."""

# GPU generations as NCCL indexes its tables (tuning.cc compCapIndex).
ARCHS = ("volta", "ampere", "hopper", "blackwell")


def arch_index(compcap: int) -> int:
    """Row of the per-architecture tables for a compute capability (e.g. 90 -> 2, Hopper)."""
    return 3 if compcap >= 100 else 2 if compcap >= 90 else 1 if compcap >= 80 else 0


# --- tuning.cc ncclTunerConstantsDefaults (microseconds, GB/s) ------------------------------
BASE_LATENCY = {
    "Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4),
    "CollNetDirect": (0.0, 0.0, 0.0), "CollNetChain": (0.0, 0.0, 0.0),
    "NVLS": (0.0, 0.0, 0.0), "NVLSTree": (0.0, 0.0, 0.0), "PAT": (8.0, 8.0, 8.0),
}
HW_LATENCY = {  # per hop, by hardware: NVLink, PCI, network
    "NVLINK": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4), "CollNetDirect": (0, 0, 3.7),
               "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 25.0), "NVLSTree": (0, 0, 25.0), "PAT": (0, 0, 4.0)},
    "PCI": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7), "CollNetDirect": (0, 0, 3.7),
            "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 0.0), "NVLSTree": (0, 0, 0.0), "PAT": (0, 0, 4.0)},
    "NET": {"Tree": (5.0, 8.5, 14.0), "Ring": (2.7, 4.0, 14.0), "CollNetDirect": (0, 0, 31.0),
            "CollNetChain": (0, 0, 30.0), "NVLS": (0, 0, 18.0), "NVLSTree": (0, 0, 20.9), "PAT": (0, 0, 14.0)},
}
# llMaxBws[row][column]: one node reads the GPU row (compIdx); several nodes read row 0
# (Intel and other CPUs) or row 1 (AMD or mixed) -- never the Hopper/Blackwell rows.
# Column: 1 node, 2 nodes, more.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
PER_CH_MAX_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)

# Network post overhead per ring step across nodes, us (getNetOverhead; NCCL_NET_OVERHEAD overrides).
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
NET_OVERHEAD_DEFAULT_US = 1.0

# treeCorrectionFactor[protocol][log2(bytes / 64)]: 24 entries (64 B .. 512 MiB). Tree all-reduce
# applies entries 0-22 (up to 256 MiB .. 512 MiB-1); NVLSTree all-reduce on Blackwell + x86 all 24.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
TREE_CORRECTION_ENTRIES = {"Tree": 23, "NVLSTree": 24}
RING_PLATEAU = {"before_ampere": 1.9, "ampere_on": 1.4}   # multi-node Ring/Simple all-reduce latency x
RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK = 64

# --- thread counts and thresholds (device.h, comm.h) -------------------------------------------
WARP_SIZE = 32
MAX_NTHREADS = 640
SIMPLE_MAX_NTHREADS = 512
LL_MAX_NTHREADS = 512
LL128_MAX_NTHREADS = 640
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
COLLNET_THREAD_THRESHOLD = 512
MAX_DIRECT_ARITY = 7         # CollNet: at most 8 GPUs a node
MAX_NVLS_ARITY = 32
NVLS_CHANNELS = {"hopper": 16, "blackwell_one_node": 24, "blackwell_nodes": 32}   # src/transport/nvls.cc

# --- protocols (device.h) -------------------------------------------------------------------
LL_LINE_BYTES = 16            # 8 bytes of data + two 4-byte flags (union ncclLLFifoLine)
LL128_LINE_BYTES = 128        # NCCL_LL128_LINESIZE; one 8-byte word of each line is the flag
LL128_DATA_BYTES = 120        # NCCL_LL128_DATAELEMS x 8
NCCL_STEPS = 8                # buffer slots per connection
LL_BUFFSIZE = 8 * LL_MAX_NTHREADS * NCCL_STEPS * LL_LINE_BYTES        # init.cc DEFAULT_LL_BUFFSIZE
LL128_BUFFSIZE = 120 * LL128_MAX_NTHREADS * NCCL_STEPS * 8            # DEFAULT_LL128_BUFFSIZE
SIMPLE_BUFFSIZE = 1 << 22                                             # NCCL_BUFFSIZE default, 4 MiB
GRAIN_BYTES = {"LL": 16, "LL128": WARP_SIZE * 8 // 16 * 15 * 8, "Simple": 512}   # ncclProtoGrainSize

# --- topology (graph.h path types, topo.h bandwidths) ----------------------------------------
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
PCI_BW = 12.0                 # GB/s, PCIe Gen3 x16: below it Ring/Simple runs 256 threads
NVLINK_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}  # GB/s a link (sm86: 12.0)
