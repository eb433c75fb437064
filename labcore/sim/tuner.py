"""NCCL's choice of algorithm and protocol, re-implemented from its cost model.

NCCL predicts, for every (algorithm, protocol), ``time = latency + bytes / algbw``
and runs the fastest (src/graph/tuning.cc). This module reproduces that model
for Ring, Tree and NVLS with the LL, LL128 and Simple protocols, so a learner
can see *why* small messages use Tree/LL and large ones Ring/Simple or NVLS,
and where the choice crosses over.

Constants are NCCL 2.30.7 src/graph/tuning.cc (as summarised in the lab's
REFERENCES.md): base latencies, per-hop hardware latencies, the protocol
bandwidth factors (Ring LL x0.5 capped at llMaxBw = 141 GB/s on one Hopper
node; LL128 x0.92 capped at 36.7 GB/s per channel; Tree x0.92; Tree LL x1/3.8;
Tree LL128 x7/9 on one node or 120/128; NVLS efficiency 0.85 on Hopper, 0.74 on
Blackwell, x(nCh-1)/nCh, x2 for all-reduce), the algbw conversions (Ring and
NVLS x nRanks/nSteps, Tree x0.5), the ring "plateau" factor 1.4 for multi-node
Simple all-reduce, and the size-indexed tree correction factors. The per-channel
Simple tree cap (38.7 / 41.4 / 36.0 GB/s for 1 / 2 / 4+ Hopper nodes) is from
NCCL 2.2x's tuning.cc (``perChMaxTreeBws``). Machine bandwidths follow NCCL's
topology model: an H100 NVLink counts 20.6 GB/s (src/graph/topo.h
SM90_NVLINK_BW), 18 links per GPU.

This is NCCL's *model*: it ranks the choices; it does not promise the measured
time (see :mod:`labcore.sim.topologies` for a model matched to measurements).

Example
-------
>>> m = MACHINES["nvswitch8"]
>>> predict("all_reduce", 1 << 10, m).name
'Ring/LL'
>>> predict("all_reduce", 1 << 30, m).name
'NVLS/Simple'
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

ALGORITHMS = ("Tree", "Ring", "NVLS")
PROTOCOLS = ("LL", "LL128", "Simple")

# NCCL 2.30.7 src/graph/tuning.cc, microseconds.
BASE_LAT = {"Tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
            "Ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
            "NVLS": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0}}
HW_LAT = {
    "nvlink": {"Tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "Ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
               "NVLS": {"Simple": 25.0}},
    "pci": {"Tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "Ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
            "NVLS": {"Simple": 0.0}},
    "net": {"Tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "Ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
            "NVLS": {"Simple": 18.0}},
}
LL_MAX_BW_1NODE = {"hopper": 141.0, "blackwell": 141.0, "ampere": 87.7, "volta": 39.0}
LL128_PER_CH_MAX = 36.7
TREE_PER_CH_MAX = (38.7, 41.4, 36.0)          # 1, 2, 4+ nodes (Hopper)
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
RING_PLATEAU = 1.4
# tuning.cc treeCorrectionFactor[protocol][log2(bytes / 64)], for 64 B .. 128 MiB
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
}
H100_NVLINK_GBS = 18 * 20.6                     # NCCL src/graph/topo.h: SM90_NVLINK_BW x 18 links


@dataclass(frozen=True)
class Machine:
    """What NCCL's tuner knows about a communicator.

    Parameters
    ----------
    ranks, nodes : GPUs in all and machines.
    intra : "nvlink" or "pci" (how GPUs in a node talk).
    arch : "volta", "ampere", "hopper" or "blackwell".
    channels : rings/trees NCCL runs in parallel.
    bus_intra, bus_inter : GB/s of all channels together inside a node and across nodes.
    nvls : NVLink SHARP available (NVSwitch, Hopper or newer).
    """

    ranks: int = 8
    nodes: int = 1
    intra: str = "nvlink"
    arch: str = "hopper"
    channels: int = 16
    bus_intra: float = H100_NVLINK_GBS
    bus_inter: float = 8 * 50.0
    nvls: bool = True

    def with_ranks(self, ranks: int, nodes: int | None = None) -> "Machine":
        """The same machine with another communicator size."""
        return replace(self, ranks=ranks, nodes=nodes or self.nodes)


MACHINES = {
    "nvswitch8": Machine(),
    "pcie8": Machine(intra="pci", arch="hopper", channels=2, bus_intra=24.0, nvls=False),
    "multinode": Machine(ranks=32, nodes=4, bus_inter=8 * 48.0, nvls=False),
}


@dataclass(frozen=True)
class Estimate:
    """One (algorithm, protocol) as NCCL's model sees it; ``time_us`` is None when disabled."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_gbs: float
    time_us: float | None

    @property
    def name(self) -> str:
        return f"{self.algorithm}/{self.protocol}"


def _nsteps(op: str, n: int) -> int:
    return 2 * (n - 1) if op == "all_reduce" else n - 1 if op in ("all_gather", "reduce_scatter") else n


def _bandwidth(op: str, algo: str, proto: str, m: Machine, nbytes: float) -> float:
    """algbw in GB/s (0 = not available)."""
    n, nodes, ch = m.ranks, m.nodes, m.channels
    scale = 0 if nodes == 1 else 1 if nodes == 2 else 2
    bus = m.bus_intra if nodes <= 2 else m.bus_inter
    if algo == "NVLS":
        if not (m.nvls and op == "all_reduce" and proto == "Simple" and m.arch in NVLS_EFFICIENCY):
            return 0.0
        bus = m.bus_intra * NVLS_EFFICIENCY[m.arch] * (ch - 1) / ch * 2
        return bus * n / _nsteps(op, n)
    if algo == "Tree" and op != "all_reduce":
        return 0.0
    if proto == "LL128" and m.intra != "nvlink":
        return 0.0                               # NCCL enables LL128 by default only on NVLink paths
    ll_max = LL_MAX_BW_1NODE.get(m.arch, 39.0) if nodes == 1 else 22.5
    if algo == "Ring":
        if proto == "LL":
            bus = min(ll_max, bus * 0.5)
        elif proto == "LL128":
            bus = min(bus * 0.92, ch * LL128_PER_CH_MAX)
        return bus * n / _nsteps(op, n)
    bus = min(bus * 0.92, ch * TREE_PER_CH_MAX[scale])
    if proto == "LL":
        bus = min(bus / 3.8, ll_max)
    elif proto == "LL128":
        bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), ch * LL128_PER_CH_MAX)
    bw = bus * 0.5
    log_size = int(math.log2(max(nbytes, 64) / 64))
    if log_size < len(TREE_CORRECTION[proto]):
        bw *= TREE_CORRECTION[proto][log_size]
    return bw


def _latency(op: str, algo: str, proto: str, m: Machine, nbytes: float) -> float:
    n, nodes = m.ranks, m.nodes
    intra_hw = "nvlink" if m.intra == "nvlink" else "pci"
    intra, inter = HW_LAT[intra_hw][algo].get(proto, 0.0), HW_LAT["net"][algo].get(proto, 0.0)
    if algo == "NVLS":
        return intra + (inter if nodes > 1 else 0.0)
    lat = BASE_LAT[algo][proto]
    if algo == "Tree":
        return lat + 2 * ((n // nodes - 1) * intra + math.log2(nodes) * inter)
    steps = _nsteps(op, n)
    inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if op == "all_reduce" else nodes - 1)
    lat += (steps - inter_steps) * intra + inter_steps * inter
    if proto == "Simple" and nodes > 1 and op == "all_reduce" and nbytes >= n / 16 * 65536:
        lat *= RING_PLATEAU
    return lat


def table(op: str, nbytes: float, machine: Machine) -> list[Estimate]:
    """Every (algorithm, protocol) NCCL's model considers for ``op`` of ``nbytes``.

    Example
    -------
    >>> [e.name for e in table("all_gather", 1 << 20, MACHINES["nvswitch8"]) if e.time_us]
    ['Ring/LL', 'Ring/LL128', 'Ring/Simple']
    """
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        raise ValueError(f"NCCL's tuner covers all_reduce, all_gather, reduce_scatter, broadcast, reduce; not {op!r}")
    out = []
    for algo in ALGORITHMS:
        for proto in PROTOCOLS:
            bw = _bandwidth(op, algo, proto, machine, nbytes) if machine.ranks > 1 else 0.0
            lat = _latency(op, algo, proto, machine, nbytes) if bw else 0.0
            out.append(Estimate(algo, proto, lat, bw, lat + nbytes / (1e3 * bw) if bw else None))
    return out


def predict(op: str, nbytes: float, machine: Machine) -> Estimate:
    """The (algorithm, protocol) with the lowest predicted time: NCCL's choice."""
    candidates = [e for e in table(op, nbytes, machine) if e.time_us is not None]
    if not candidates:
        raise ValueError("a single rank needs no communication; NCCL picks nothing")
    return min(candidates, key=lambda e: e.time_us)


def crossovers(op: str, machine: Machine, min_bytes: int = 8, max_bytes: int = 16 << 30) -> list[tuple[int, str, str]]:
    """Sizes where NCCL's choice changes as the message grows: (first byte count of the new
    choice, old choice, new choice), found by bisection between powers of two.

    Example
    -------
    >>> [(size, new) for size, _, new in crossovers("all_reduce", MACHINES["nvswitch8"])][-1][1]
    'NVLS/Simple'
    """
    out = []
    size = min_bytes
    prev = predict(op, size, machine).name
    while size < max_bytes:
        nxt = min(size * 2, max_bytes)
        choice = predict(op, nxt, machine).name
        if choice != prev:
            lo, hi = size, nxt                       # prev at lo, something else at hi
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if predict(op, mid, machine).name == prev else (lo, mid)
            out.append((hi, prev, predict(op, hi, machine).name))
            prev = predict(op, hi, machine).name
            if prev != choice:
                continue                             # another change inside the same octave
        size = nxt
    return out


def sweep(op: str, machine: Machine, sizes) -> "object":
    """pandas DataFrame: size, algorithm, protocol, latency_us, algbw, time_us, chosen (one row per option)."""
    import pandas as pd

    rows = []
    for size in sizes:
        best = predict(op, size, machine).name
        for e in table(op, size, machine):
            if e.time_us is not None:
                rows.append({"size": int(size), "algorithm": e.algorithm, "protocol": e.protocol, "option": e.name,
                             "latency_us": e.latency_us, "algbw": e.algbw_gbs, "time_us": e.time_us,
                             "chosen": e.name == best})
    return pd.DataFrame(rows)


SIM_ALGORITHM = {"Ring": "ring", "Tree": "double_tree", "NVLS": "nvls"}
"""Which simulator schedule plays each NCCL algorithm (protocols are not simulated)."""
