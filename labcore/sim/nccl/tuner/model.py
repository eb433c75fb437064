"""NCCL's cost model, ported from NVIDIA/nccl 2.30.7 (commit 5067397).

Two stages, as in NCCL:

1. :func:`tune` is ``ncclTopoTuneModel`` (src/graph/tuning.cc), run once per
   communicator: for every collective x algorithm x protocol a latency (us) and an
   algorithm bandwidth (GB/s), then the ``NCCL_ALGO``/``NCCL_PROTO`` and default
   enable rules, which zero the bandwidth of whatever is off. Its numbers are the
   ``TUNING`` table an INFO log prints (:func:`labcore.sim.nccl.tuner.report.tuning_log`).
2. :func:`options` is ``updateCollCostTable`` + ``ncclTopoGetAlgoTime``
   (src/enqueue.cc, tuning.cc), run for each call: drop what this call cannot use
   (``NCCL_ALGO_PROTO_IGNORE``), apply the size-dependent corrections (tree
   correction factors, the ring "plateau"), and predict
   ``time = latency + bytes / (1000 x bandwidth)``. ``topoGetAlgoInfo`` then takes
   the lowest time, the first one on a tie, in NCCL's order of algorithms and protocols.

Assumed throughout: one collective per launch (``numPipeOps = 1``), a sum of a type
NVLS and CollNet can reduce (fp32, bf16, fp16), and no tuner plugin.

Example
-------
>>> from labcore.sim.nccl.tuner.machine import MACHINES
>>> best = choose("all_reduce", 1 << 30, MACHINES["dgx_h100"])
>>> best.name, round(best.algbw_gbs, 1)
('NVLS/Simple', 272.0)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from labcore import validate
from labcore.sim.nccl.tuner import constants as C
from labcore.sim.nccl.tuner.env import enable_matrix
from labcore.sim.nccl.tuner.machine import TopoGraph, Machine

_NO_GRAPH = TopoGraph(0, 0.0, 0.0, type_intra="LOC", type_inter="LOC", same_channels=False)  # memset 0


@dataclass(frozen=True)
class Tuned:
    """``comm->latencies``, ``comm->bandwidths`` and ``comm->maxThreads`` after ncclTopoTuneModel.

    ``latency[f, a, p]`` in us and ``bandwidth[f, a, p]`` in GB/s (algorithm bandwidth; 0 =
    not available) for f in FUNCTIONS, a in ALGORITHMS, p in PROTOCOLS; ``off[f, a, p]`` says
    why a bandwidth is 0.
    """

    machine: Machine
    latency: dict
    bandwidth: dict
    max_threads: dict
    off: dict


def _log2i(n: int) -> int:
    return n.bit_length() - 1          # floor(log2 n); -1 for 0, as NCCL's log2Down


def _net_overhead(m: Machine) -> float:
    if m.cpu_arch == "x86":
        return C.NET_OVERHEAD_US.get(m.cpu_vendor, C.NET_OVERHEAD_DEFAULT_US)
    return C.NET_OVERHEAD_DEFAULT_US


def _pat_enabled(m: Machine) -> bool:
    return m.compcap >= 60 and m.nodes == m.ranks and not m.net_offload


def _max_threads(m: Machine) -> dict:
    """comm->maxThreads (tuning.cc, no NCCL_NTHREADS): 0 where NCCL leaves it unset."""
    t = {(a, p): 0 for a in C.ALGORITHMS for p in C.PROTOCOLS}
    ring_simple = 256 if m.ring.bw_intra * m.ring.channels <= C.PCI_BW else C.SIMPLE_MAX_NTHREADS
    t["Ring", "Simple"], t["Tree", "Simple"] = ring_simple, C.SIMPLE_MAX_NTHREADS
    for a in ("CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"):
        t[a, "Simple"] = C.MAX_NTHREADS
    for a in ("Ring", "Tree"):
        t[a, "LL"], t[a, "LL128"] = C.LL_MAX_NTHREADS, C.LL128_MAX_NTHREADS
    return t


def _skip(func: str, a: str, p: str, m: Machine) -> str | None:
    """Why ncclTopoTuneModel computes nothing for (func, a, p), or None."""
    if func in ("Broadcast", "Reduce") and a != "Ring":
        return f"{func} runs on rings only"
    if func in ("AllGather", "ReduceScatter") and a not in ("PAT", "Ring", "NVLS", "CollNetDirect"):
        return f"no {a} {func}"
    if func == "AllReduce" and a == "PAT":
        return "PAT is for AllGather/ReduceScatter"
    if a in ("NVLS", "NVLSTree") and p != "Simple":
        return f"{a} is Simple only"
    if a == "PAT" and (p != "Simple" or not _pat_enabled(m)):
        return "PAT is Simple only" if p != "Simple" else "PAT needs one GPU a node"
    return None


def _bus_bandwidth(func, a, p, m: Machine, g: TopoGraph, caps: dict) -> float | None:
    """busBw before the conversion to algorithm bandwidth (None: NCCL skips the entry)."""
    bw = _channel_bandwidth(func, a, m, g, caps)
    if bw is None:
        return None
    bus = _PROTOCOL_CAPS.get(a, _uncapped)(func, p, m, g, caps, g.channels * bw)
    if a in ("NVLS", "CollNetDirect") and p == "Simple" and func in ("AllGather", "ReduceScatter") \
            and m.nodes > 1:
        # across nodes these need the CollNet plugin's all-gather/reduce-scatter and a head per GPU
        if not (m.collnet and m.collnet_gather and m.local_ranks <= m.collnet_heads):
            bus = 0.0
    return bus


def _channel_bandwidth(func, a, m: Machine, g: TopoGraph, caps: dict) -> float | None:
    """One channel's bandwidth: the graph's, or NVLS's share of it (None: NVLS needs 2 channels)."""
    collnet = a in ("CollNetDirect", "CollNetChain")
    bw = g.bw_intra if m.nodes <= 2 or collnet else g.bw_inter
    if a not in ("NVLS", "NVLSTree"):
        return bw
    if g.channels < 2:
        return None
    ppn = m.ranks / m.nodes
    intra = g.bw_intra * C.NVLS_EFFICIENCY[caps["arch"]] * (g.channels - 1) / g.channels
    intra *= 2.0 if func == "AllReduce" else (ppn - 1) / ppn     # all-reduce pipelines two ops
    inter = g.bw_inter * (2 if m.nodes <= 2 and a == "NVLSTree" else 1)
    return min(intra, inter, caps["nvls_tree"] if a == "NVLSTree" else math.inf)


def _uncapped(func, p, m, g, caps, bus):
    return bus


def _ring_caps(func, p, m, g, caps, bus):
    if p == "LL":
        return min(caps["ll"], bus * 0.5)
    if p == "LL128":
        return min(bus * 0.92, g.channels * caps["ring_ll128"])
    return bus


def _tree_caps(func, p, m, g, caps, bus):
    if func == "AllReduce":
        bus = min(bus * 0.92, g.channels * caps["tree"])
    if p == "LL":
        bus = min(bus / 3.8, caps["ll"])
    if p == "LL128":
        bus = min(bus * (7.0 / 9.0 if m.nodes == 1 else 120.0 / 128.0), g.channels * caps["tree_ll128"])
    if m.tree.pattern == "tree":
        bus *= 0.85                                       # all NIC traffic through one GPU
    return bus


def _collnet_direct_caps(func, p, m, g, caps, bus):
    if p != "Simple":
        return 0.0                                        # CollNet is Simple only
    ppn = m.ranks / m.nodes
    if func in ("AllGather", "ReduceScatter"):
        return ppn * min(g.bw_intra, g.bw_inter * 0.9)
    if g.channels:                           # full speed needs a NIC for every GPU
        factor = ppn / g.channels            # GPUs per NIC
        factor -= (factor - 1) / 2
        bus /= factor
        if m.compcap >= 90:
            bus *= 0.85
    return bus


_PROTOCOL_CAPS = {
    "Ring": _ring_caps, "Tree": _tree_caps, "PAT": lambda func, p, m, g, caps, bus: bus * 0.75,
    "CollNetDirect": _collnet_direct_caps,
    "CollNetChain": lambda func, p, m, g, caps, bus: bus if p == "Simple" else 0.0,
}
"""busBw of each algorithm after NCCL's per-protocol caps and corrections (tuning.cc, in its order)."""


def _latency(func, a, p, m: Machine, g: TopoGraph, nsteps: int, hw: dict) -> float:
    ppn = m.ranks / m.nodes
    lpn = m.ranks // m.nodes
    intra_hw = "NVLINK" if g.type_intra == "NVL" else "PCI"
    k = C.PROTOCOLS.index(p)
    lat = C.BASE_LATENCY[a][k]
    intra = hw[intra_hw][a][k]
    inter = hw["NET"]["Tree" if ppn == 1 else a][k]        # one GPU a node: latencies fully exposed
    inter += g.latency_inter
    if p == "Simple":
        inter += g.latency_inter                          # the flush
    if a == "Ring":
        step = hw[intra_hw if m.nodes == 1 else "NET"][a][k]
        if func in ("Broadcast", "Reduce"):
            if g.same_channels:
                return lat + step
            if p == "Simple":
                step = hw[intra_hw if m.nodes == 1 else "NET"]["Tree"][k]
            return lat + nsteps * step
        overhead = 0.0
        if m.nodes > 1:                                   # every inter-node step posts to the NIC
            overhead = _net_overhead(m) * (3 if p == "Simple" else 1)
        intra = max(intra, overhead)
        n_inter = 0 if m.nodes == 1 else 2 * (m.nodes - 1) if func == "AllReduce" else m.nodes - 1
        return lat + (nsteps - n_inter) * intra + n_inter * inter
    if a == "Tree":
        return lat + (2 * ((lpn - 1) * intra + _log2i(m.nodes) * inter) if func == "AllReduce" else 0)
    if a == "CollNetDirect":
        return lat + 2 * (min(1, lpn - 1) * intra + (lpn - 1) * 0.4) + inter   # 0.4 us per arity step
    if a == "CollNetChain":
        return lat + 2 * (lpn - 1) * intra + inter
    if a == "NVLS":
        return intra + (inter if m.nodes > 1 else 0.0)
    if a == "NVLSTree":
        return lat + intra + 2 * _log2i(m.nodes) * inter
    if a == "PAT" and func in ("AllGather", "ReduceScatter"):
        return lat + _log2i(m.nodes) * (inter / 3.5) + m.ranks * 2.8
    return lat


def _ll128_default(a: str, m: Machine) -> bool:
    """Whether LL128 is on by default for algorithm ``a`` (tuning.cc, NCCL_LL128_C2C=1)."""
    g = m.graph(a) or _NO_GRAPH
    limit = "PXN" if m.compcap >= 90 else "PXB"
    return (g.path_rank("inter") <= C.PATH_TYPES.index(limit)
            and g.path_rank("intra") <= C.PATH_TYPES.index("NVB")
            and (m.compcap == m.max_compcap or m.compcap >= 90)
            and m.compcap >= 70)


def _algo_disabled(a: str, m: Machine) -> str | None:
    if m.nodes == 1 and a == "NVLSTree":
        return "NVLSTree needs several nodes"
    if not m.collnet and (a in ("CollNetDirect", "CollNetChain") or (a == "NVLS" and m.nodes > 1)):
        return "needs CollNet (SHARP in the network)" if a != "NVLS" else "NVLS across nodes needs CollNet"
    if m.collnet and a == "CollNetChain" and not m.collnet_chain_support:
        return "the network has no CollNet chains"
    if not m.nvswitch and a == "CollNetDirect":
        return "CollNetDirect needs NVSwitches"
    return None


def tune(machine: Machine, algo_env: str | None = None, proto_env: str | None = None) -> Tuned:
    """ncclTopoTuneModel for ``machine``, with ``NCCL_ALGO``/``NCCL_PROTO`` values if given.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> t = tune(MACHINES["dgx_h100"])
    >>> t.latency["AllReduce", "Ring", "LL"], round(t.bandwidth["AllReduce", "Ring", "LL"], 1)
    (15.0, 80.6)
    """
    if not isinstance(machine, Machine):
        raise TypeError(f"machine must be a tuner Machine, e.g. MACHINES['dgx_h100'] (one of "
                        f"{', '.join(_machine_names())}), not {type(machine).__name__}")
    for name, value in (("NCCL_ALGO", algo_env), ("NCCL_PROTO", proto_env)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} is a string such as 'Ring,Tree' or '^LL128', not {type(value).__name__}")
    return _tune(machine, algo_env, proto_env)


def _machine_names() -> list[str]:
    from labcore.sim.nccl.tuner.machine import MACHINES

    return sorted(MACHINES)


@lru_cache(maxsize=256)
def _tune(machine: Machine, algo_env: str | None, proto_env: str | None) -> Tuned:
    m = machine
    ai = C.arch_index(m.compcap)
    col = m.nodes - 1 if m.nodes <= 2 else 2
    row = ai if m.nodes == 1 else 1 if m.cpu_vendor in ("amd", "mixed") else 0
    caps = {"arch": ai, "ll": C.LL_MAX_BW[row][col], "tree": C.PER_CH_MAX_TREE_BW[ai][col],
            "ring_ll128": C.PER_CH_MAX_RING_LL128_BW[ai][col], "tree_ll128": C.PER_CH_MAX_TREE_LL128_BW[ai][col],
            "nvls_tree": C.PER_CH_MAX_NVLS_TREE_BW[ai][col]}
    hw = {k: dict(v) for k, v in C.HW_LATENCY.items()}
    if m.cpu_arch == "power":        # favour Tree on POWER: its PCI Simple latency becomes Ring's
        tree = list(hw["PCI"]["Tree"])
        tree[2] = hw["PCI"]["Ring"][2]
        hw["PCI"]["Tree"] = tuple(tree)

    latency, bandwidth, off = {}, {}, {}
    for f in C.FUNCTIONS:
        nsteps = 2 * (m.ranks - 1) if f == "AllReduce" else m.ranks - 1 if f in ("AllGather", "ReduceScatter") \
            else m.ranks
        for a in C.ALGORITHMS:
            g = m.graph(a) or _NO_GRAPH
            for p in C.PROTOCOLS:
                key = (f, a, p)
                latency[key], bandwidth[key] = 0.0, 0.0
                if m.ranks <= 1:
                    off[key] = "one rank: nothing to communicate"
                    continue
                reason = _skip(f, a, p, m)
                bus = None if reason else _bus_bandwidth(f, a, p, m, g, caps)
                if bus is None:
                    off[key] = reason or f"{a} needs at least 2 channels"
                    continue
                if a == "Ring" or f not in ("AllGather", "ReduceScatter"):
                    bus *= m.ranks / nsteps if a in ("Ring", "NVLS", "NVLSTree") else 0.5
                bandwidth[key] = bus
                latency[key] = _latency(f, a, p, m, g, nsteps, hw)
                if not bus:
                    off[key] = _zero_reason(f, a, p, m, g)

    protos = enable_matrix(proto_env, C.PROTOCOLS, {"LL128": 2})
    algos = enable_matrix(algo_env, C.ALGORITHMS, {})
    for f in C.FUNCTIONS:
        for a in C.ALGORITHMS:
            why_algo = _algo_disabled(a, m) if algos[f][a] else "disabled by NCCL_ALGO"
            for p in C.PROTOCOLS:
                on = protos[f][p]
                why = None if on else "disabled by NCCL_PROTO"
                if on == 2:
                    why = None if _ll128_default(a, m) else "LL128 is off by default on this path"
                why = why or why_algo
                if why and bandwidth[f, a, p]:
                    bandwidth[f, a, p] = 0.0
                    off[f, a, p] = why
    return Tuned(m, latency, bandwidth, _max_threads(m), off)


def _zero_reason(f, a, p, m: Machine, g: TopoGraph) -> str:
    if a in ("CollNetDirect", "CollNetChain") and p != "Simple":
        return "CollNet is Simple only"
    if a in ("NVLS", "CollNetDirect") and f in ("AllGather", "ReduceScatter") and m.nodes > 1:
        return f"{f} across nodes needs CollNet's all-gather/reduce-scatter and a head per GPU"
    if g.channels == 0:
        return f"no {a} graph"
    return "zero bandwidth"


@dataclass(frozen=True)
class Option:
    """One (algorithm, protocol) for one call, as NCCL prices it.

    ``latency_us`` and ``algbw_gbs`` are what enter this call's time (the plateau and tree
    corrections included); ``time_us`` is None where NCCL cannot or may not use the option,
    and ``note`` then says why.
    """

    algorithm: str
    protocol: str
    latency_us: float
    algbw_gbs: float
    time_us: float | None
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.algorithm}/{self.protocol}"


def _ignored(f: str, a: str, m: Machine) -> str | None:
    """updateCollCostTable: options this call never considers (NCCL_ALGO_PROTO_IGNORE)."""
    collnet_ok = m.collnet                      # ncclGetCollNetSupport: assumes a sum of a supported type
    if a in ("CollNetDirect", "CollNetChain") and not collnet_ok:
        return "needs CollNet (SHARP in the network)"
    if a in ("CollNetDirect", "CollNetChain") and m.local_ranks > C.MAX_DIRECT_ARITY + 1:
        return "CollNet handles at most 8 GPUs a node"
    if a in ("NVLS", "NVLSTree") and (m.nvls is None or (f != "AllReduce" and m.local_ranks > C.MAX_NVLS_ARITY)):
        return "no NVLS on this machine" if m.nvls is None else "NVLS handles at most 32 GPUs a node"
    if a == "NVLS" and not collnet_ok and m.nodes > 1:
        return "NVLS across nodes needs CollNet"
    return None


def options(op: str, nbytes: int, machine: Machine, algo_env: str | None = None,
            proto_env: str | None = None) -> list[Option]:
    """Every (algorithm, protocol) for one call, in NCCL's order (7 x 3 entries).

    Parameters
    ----------
    op : "all_reduce", "all_gather", "reduce_scatter", "broadcast" or "reduce".
    nbytes : the size nccl-tests prints: the whole buffer for all_gather and reduce_scatter
        (per-rank count x ranks x element size), which is the byte count NCCL's tuner is given.
    machine : a :class:`~labcore.sim.nccl.tuner.machine.Machine`.
    algo_env, proto_env : values of NCCL_ALGO / NCCL_PROTO, if set.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> [o.name for o in options("broadcast", 1 << 20, MACHINES["dgx_h100"]) if o.time_us is not None]
    ['Ring/LL', 'Ring/LL128', 'Ring/Simple']
    """
    if op not in C.FUNCTION_OF:
        raise ValueError(f"NCCL's tuner covers {', '.join(C.FUNCTION_OF)}; not {op!r}")
    nbytes = check_nbytes(nbytes)
    f = C.FUNCTION_OF[op]
    m = machine
    t = tune(m, algo_env, proto_env)
    out = []
    for a in C.ALGORITHMS:
        why = _ignored(f, a, m) if m.ranks > 1 else None
        for p in C.PROTOCOLS:
            lat, bw = t.latency[f, a, p], t.bandwidth[f, a, p]
            if m.ranks == 1:
                ok = a == "Ring" and p == "Simple"          # one rank: a copy, time 0
                out.append(Option(a, p, 0.0, 0.0, 0.0 if ok else None, "" if ok else "one rank"))
                continue
            if why or not bw:
                out.append(Option(a, p, lat, bw, None, why or t.off.get((f, a, p), "")))
                continue
            lat, bw, note = _size_corrections(f, a, p, m, nbytes, lat, bw)
            out.append(Option(a, p, lat, bw, lat + nbytes / (1000 * bw), note))
    return out


def check_nbytes(nbytes) -> int:
    """``nbytes`` as an int, if it is a whole, finite number of bytes >= 0."""
    number = validate.real(nbytes)
    if number is None or number < 0 or number != int(number):
        raise ValueError(f"nbytes must be a whole number of bytes >= 0, not {nbytes!r}")
    return int(number)


def _size_corrections(f, a, p, m: Machine, nbytes: int, lat: float, bw: float):
    """ncclTopoGetAlgoTime's size-dependent factors: (latency, bandwidth, note)."""
    note = ""
    log_size = _log2i(nbytes >> 6)
    k = C.TREE_CORRECTION_ENTRIES.get(a, 0)
    nvls_tree_ok = a != "NVLSTree" or (m.compcap >= 100 and m.cpu_arch == "x86")
    if f == "AllReduce" and 0 <= log_size < k and nvls_tree_ok:
        factor = C.TREE_CORRECTION[p][log_size]
        bw *= factor
        note = f"tree correction x{factor:g}"
    if a == "Ring" and p == "Simple" and m.nodes > 1 and f == "AllReduce" \
            and nbytes // (m.comm_channels * m.ranks) >= C.RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK:
        factor = C.RING_PLATEAU["before_ampere" if m.compcap < 80 else "ampere_on"]
        lat *= factor
        note = f"ring plateau: latency x{factor:g}"
    return lat, bw, note


def choose(op: str, nbytes: int, machine: Machine, algo_env: str | None = None,
           proto_env: str | None = None) -> Option:
    """NCCL's pick for one call: the lowest predicted time, the first in NCCL's order on a tie.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> choose("all_reduce", 1 << 30, MACHINES["dgx_h100_ib"]).name
    'NVLSTree/Simple'
    """
    best = None
    for o in options(op, nbytes, machine, algo_env, proto_env):
        if o.time_us is not None and (best is None or o.time_us < best.time_us):
            best = o
    if best is None:
        raise ValueError(f"no algorithm/protocol is available for {op}"
                         + (f" with NCCL_ALGO={algo_env}" if algo_env else "")
                         + (f" NCCL_PROTO={proto_env}" if proto_env else "")
                         + "; allow more of them")
    return best


def launch(op: str, nbytes: int, machine: Machine, algo_env: str | None = None,
           proto_env: str | None = None) -> dict:
    """What NCCL launches for one call (topoGetAlgoInfo): algorithm, protocol, channels, threads.

    Small messages run on fewer channels: Ring and Tree drop one channel at a time while
    ``nbytes < channels x threads x threshold`` (threshold 8 bytes a thread for LL and LL128,
    64 for Simple, Ring/LL x ranks), then halve the threads the same way.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> [launch("all_reduce", s, MACHINES["dgx_h100"])["channels"] for s in (1 << 10, 1 << 18, 1 << 28)]
    [1, 8, 16]
    """
    best = choose(op, nbytes, machine, algo_env, proto_env)
    m, a, p = machine, best.algorithm, best.protocol
    nc, nt = channels_at(nbytes, m, a, p, tune(m, algo_env, proto_env).max_threads[a, p])
    if p == "Simple":
        nt += C.WARP_SIZE if a == "Ring" else 4 * C.WARP_SIZE if a == "Tree" else 0
    nt = 3 * C.WARP_SIZE if nt // C.WARP_SIZE < 3 else nt
    if a in ("Tree", "PAT"):
        nt = C.MAX_NTHREADS
    return {"algorithm": a, "protocol": p, "channels": nc, "threads": nt, "time_us": best.time_us}


def channels_at(nbytes: int, machine: Machine, algorithm: str, protocol: str,
                threads: int | None = None) -> tuple[int, int]:
    """(channels, threads) NCCL runs ``algorithm``/``protocol`` on for ``nbytes`` (topoGetAlgoInfo,
    src/enqueue.cc:2028-2118 of NCCL 2.30.7): Ring and Tree drop one channel at a time while
    ``nbytes < nc x nt x threadThreshold`` (enqueue.cc:2092-2104), then halve the threads the same
    way; the threshold is 8 bytes a thread for LL and LL128, 64 for Simple (comm.h:49-51), Ring/LL
    x nRanks (tuning.cc:589-595); CollNet 512. NVLS and NVLSTree always take the NVLS CTAs
    (enqueue.cc:2084-2090). ``threads``: comm->maxThreads (default NCCL's, tuning.cc:244-257).

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> [channels_at(s, MACHINES["dgx_h100"], "Ring", "LL")[0] for s in (1 << 15, 1 << 16, 1 << 20)]
    [1, 2, 24]
    """
    m, a, p = machine, algorithm, protocol
    nc = m.comm_channels
    nt = _max_threads(m)[a, p] if threads is None else threads
    threshold = C.THREAD_THRESHOLD[p] * (m.ranks if (a, p) == ("Ring", "LL") else 1)
    if a in ("CollNetDirect", "CollNetChain") and p == "Simple":
        threshold = C.COLLNET_THREAD_THRESHOLD
    if a == "CollNetDirect":
        switch, more = 16, True
        while switch >= 1 and more:
            while (more := nbytes < nc * nt * m.collnet_heads * threshold) and nc > switch:
                if nc == switch + switch // 2:
                    threshold //= 2
                nc -= 1
            switch //= 2
    elif a in ("NVLS", "NVLSTree"):
        nc = min(m.nvls_ctas, m.comm_channels) if m.nodes > 1 and a == "NVLS" else m.nvls_ctas
    else:
        while nbytes < nc * nt * threshold and nc >= 2:
            nc -= 1
    if a not in ("NVLS", "NVLSTree", "CollNetDirect"):
        while nbytes < nc * nt * threshold and nt % 128 == 0:
            nt //= 2
    return nc, nt


def ring_pipeline(op: str, nbytes: int, machine: Machine, protocol: str = "Simple", *,
                  buffsize: int | None = None, channels: int | None = None) -> dict:
    """How a ring cuts one call into pieces (enqueue.cc calcCollChunking, Ring only).

    Each connection has a buffer of ``NCCL_STEPS`` = 8 slots. A *step* is one slot
    (``buffsize / 8``); a Simple ring moves a *chunk* of 4 steps at a time in *slices* of 2
    (all-reduce, all-gather, reduce-scatter; 1 and 1 for broadcast/reduce); LL and LL128 move
    one step a chunk, of which LL carries half and LL128 120/128 as data. A loop sends one chunk
    per rank on every channel, so a big message takes ``loops`` rounds of ``steps`` ring steps.

    Parameters
    ----------
    op, nbytes, machine : as for :func:`options`.
    protocol : "LL", "LL128" or "Simple".
    buffsize : NCCL_BUFFSIZE for Simple (default 4 MiB); LL and LL128 keep NCCL's own sizes.
    channels : channels the call runs on (default: what :func:`launch` finds for a ring).

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> p = ring_pipeline("all_reduce", 1 << 30, MACHINES["dgx_h100"])
    >>> p["step_bytes"], p["chunk_bytes"], p["slice_bytes"], p["channels"], p["loops"]
    (524288, 2097152, 1048576, 24, 3)
    """
    if protocol not in C.PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(C.PROTOCOLS)}, not {protocol!r}")
    if buffsize is not None and (not isinstance(buffsize, int) or buffsize < C.NCCL_STEPS * 512):
        raise ValueError(f"buffsize is NCCL_BUFFSIZE in bytes, at least {C.NCCL_STEPS * 512}; got {buffsize!r}")
    buffers = {"LL": C.LL_BUFFSIZE, "LL128": C.LL128_BUFFSIZE, "Simple": buffsize or C.SIMPLE_BUFFSIZE}
    f = C.FUNCTION_OF.get(op)
    if f is None:
        raise ValueError(f"NCCL's tuner covers {', '.join(C.FUNCTION_OF)}; not {op!r}")
    step = buffers[protocol] // C.NCCL_STEPS
    chunk_steps, slice_steps = (4, 2) if protocol == "Simple" and f in ("AllReduce", "AllGather",
                                                                         "ReduceScatter") else (1, 1)
    chunk = step * chunk_steps
    if protocol == "LL":
        chunk //= 2
    elif protocol == "LL128":
        chunk = chunk // 16 * 15
    chunk = chunk // C.GRAIN_BYTES[protocol] * C.GRAIN_BYTES[protocol]
    nbytes = check_nbytes(nbytes)
    if channels is not None:
        validate.whole_number(channels, "channels", least=1, most=64)
    if channels is None:
        channels = launch(op, nbytes, machine, algo_env="Ring", proto_env=protocol)["channels"]
    n = machine.ranks
    per_loop = channels * n * chunk
    steps = {"AllReduce": 2 * (n - 1), "AllGather": n - 1, "ReduceScatter": n - 1}.get(f, n - 1)
    return {"protocol": protocol, "step_bytes": step, "chunk_bytes": chunk,
            "slice_bytes": step * slice_steps if protocol == "Simple" else chunk,
            "channels": channels, "loops": max(1, -(-nbytes // per_loop)), "steps": steps,
            "bytes_per_step": min(chunk, -(-nbytes // (n * channels)))}
