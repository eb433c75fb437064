"""NCCL's mid-size mechanisms: what NCCL's kernels do to a collective between 64 KiB and 16 MiB
that a bandwidth-and-latency model of its links leaves out (docs/nccl_mechanisms.md).

They apply to every collective NCCL's tuner prices (all_reduce, all_gather, reduce_scatter,
broadcast, reduce) where it runs as NCCL runs it: channels, the network's latency and the netOverhead
floor on every ring (the simulator's ``ring`` and ``chain``), chunks on trees, NVLS and the pipelined
chains of broadcast and reduce, the tree correction, the plateau and the tree caps on all_reduce only,
as tuning.cc and enqueue.cc apply them.

Each is a formula from NVIDIA/nccl 2.30.7 (commit 5067397), with NCCL's constants, applied by
:func:`labcore.sim.simulate` (all but the plateau and the netOverhead floor by default,
:data:`DEFAULT`) to a topology that knows its NCCL machine (``topology.nccl``: the tuner's :class:`~labcore.sim.nccl.tuner.Machine`, set by the
presets built on NVSwitch nodes):

* ``"channels"`` -- NCCL runs a small message on fewer channels than it has: Ring and Tree drop
  one while ``S < nc x nt x threadThreshold`` (src/enqueue.cc:2092-2104; thresholds comm.h:49-51,
  Ring/LL x nRanks tuning.cc:589-595; :func:`labcore.sim.nccl.tuner.channels_at`). Every channel has
  ``1/nChannels`` of the bandwidth (NCCL's model gives each channel of a graph the same), so the
  collective gets ``nc(S) / nChannels`` of it; a ring's LL gets NCCL's ``min(llMaxBw, 0.5 x busBw)``
  (tuning.cc:327) for the ``nc(S)`` channels it runs, so where llMaxBw caps all of them together, fewer
  lose less.
* ``"chunks"`` -- the chunk a pipelined algorithm moves per step (calcCollChunking,
  src/enqueue.cc:2182-2420): a ring broadcast or reduce (a pipeline from or to the root,
  enqueue.cc:2190-2195) hands on a Simple step of 512 KiB whole (src/device/prims_simple.h:183-226,
  the simulator's pieces of 512 KiB) but LL and LL128 lines as they land (prims_ll.h, prims_ll128.h:
  the finest pieces the simulator keeps); Tree/LL one 32 KiB LL step (enqueue.cc:2222-2226: 512 KiB buffer / 8
  NCCL_STEPS, half of it data), Tree/LL128 the 562.5 KiB of data of a LL128 step halved while the
  message holds few of them per channel (enqueue.cc:2227, 2286-2294), NVLS 128 KiB (nvls.cc:160)
  cut to 64, 32 and 16 KiB below 64, 8 and 2 rounds of all channels and heads (enqueue.cc:2258-2275), NVLSTree
  the same from min(128 KiB, 64 KiB from 4 nodes) (nvls.cc:226-229) cut at 32, 16, 4 and 1 rounds
  to 256, 128, 64, 32 KiB (enqueue.cc:2276-2285). The simulator then cuts the buffer into that
  many pieces, so a tree's or NVLS's pipeline pays its fill (depth + k - 1 chunk times, not k).
* ``"plateau"`` -- a multi-node Ring/Simple all-reduce of at least 64 bytes per channel and rank
  pays 1.4 times its latency (1.9 before Ampere), tuning.cc:646-650.
* ``"netlatency"`` -- the network's own latency, which the net plugin reports (``props.latency``,
  NCCL's ``graph->latencyInter``, src/graph/search.cc:745; 0 for InfiniBand, 75 us from aws-ofi-nccl
  on AWS p4d/p4de/p5): NCCL adds it to every inter-node step, twice for Simple (the flush),
  tuning.cc:384-391. The simulator adds it to every route across nodes: the topology's own
  ``net_latency_s`` where it has one (what runs on the machine show: the EFA presets' values are
  fitted on their calibration tables), else the plugin's, which NCCL's picks use either way.
* ``"netoverhead"`` -- NCCL's floor on the intra-node steps of a ring across nodes (every step
  posts to the proxy): ``netOverhead`` 1 us on Intel hosts, 2 us on AMD, x3 for Simple
  (getNetOverhead, tuning.cc:226-234; applied 402-412). The simulator raises a multi-node ring's
  NVLink hops to it.
* ``"caps"`` -- NCCL's per-protocol caps on a Tree all-reduce across nodes (tuning.cc:306-382:
  ``min(0.92 busBw, nChannels x perChMaxTreeBw)``, LL128's ``120/128`` and ``nChannels x
  perChMaxTreeLL128Bw``) bound the collective's bus bandwidth, not one kind of link: the simulator
  slows every link by the factor that brings the tree's peak busbw (simulated at
  :data:`PEAK_BYTES`) down to NCCL's (:func:`tree_cap`), where it is above it. The NIC-side fractions
  of the presets (``labcore.sim.machines.topologies``) do not bind a 2-node tree, whose NICs carry less than
  its NVLink chain. Not for LL: its cap (``busBw / 3.8``, ``llMaxBw``) is far below the links, and
  slower links would charge LL's small messages the cap on every hop of the tree, where NCCL's model
  charges it once (LL forwards each 8-byte line as it arrives).
* ``"correction"`` -- NCCL's own size-indexed factor on a tree all-reduce's bandwidth,
  ``treeCorrectionFactor[protocol][log2(S / 64)]`` (0.4-1.0, the table at tuning.cc:620-627,
  applied at 638-645; NVLSTree likewise on Blackwell with x86 hosts): its admission that trees run
  slower in mid sizes than its model. It stands for the trees' pipeline fill, so with it the trees
  do not take the chunk pipeline too.

The kernel launch and host time (mechanism 4 of the design note) is the topology's ``issue_s``
(a launch of ``host_s`` for each GPU the job's process drives: 30 us for one process driving 8 H100s,
3.75 us for a process per GPU; :func:`labcore.sim.machines.presets.with_processes`), NCCL's p2p path for
all_to_all is :mod:`labcore.sim.nccl.p2p` (its protocol through :func:`nccl_protocol`), the per-protocol bandwidth caps
(mechanism 3) are the protocols' efficiencies (and, for trees across nodes, ``"caps"``), and the
network proxy's per-step latencies (mechanism 5) are the protocols' NET hop latencies; they are not
switched here.

Example
-------
>>> from labcore.sim import presets
>>> t = presets.topology("nvswitch8")            # a preset carries NCCL's machine (t.nccl)
>>> a = adjust("all_reduce", "ring", "LL", 64 << 10, t)
>>> a.nccl_channels, round(2 / 24, 4), round(a.bandwidth_scale, 4)   # 2 of 24 channels: llMaxBw capped all 24
(2, 0.0833, 0.1064)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labcore.sim.nccl import p2p
from labcore.sim.nccl.tuner import constants as C
from labcore.sim.nccl.tuner.model import channels_at, tune

MECHANISMS = ("channels", "chunks", "plateau", "correction", "netlatency", "netoverhead", "caps")
"""The mechanisms the simulator can play (``simulate(..., mechanisms=...)``)."""
DEFAULT = ("channels", "chunks", "correction", "netlatency", "caps")
"""What :func:`labcore.sim.simulate` plays unless told. Chosen on the calibration tables only: the tree
correction brings 3 (tuner's picks) and 5 (fastest schedule) more of their sizes within the goal; the
ring plateau is left out, since it brings none closer and puts the forced-ring calibration table
(nccl-tests#309, 2 nodes) 12% slow at 256 MiB (tests/data/README.md, "After the mid-size mechanisms");
the network's latency brings 18 (tuner) and 19 (fastest) more, all of the AWS p4de table; the ring's
netOverhead floor is left out, since it moves no size of either set (tests/data/README.md, "After the
network and launch mechanisms"); the trees' bus bandwidth caps bring 2 more under NCCL's picks (one fewer
with the fastest schedule; tests/data/README.md, "After a second p5 table ...")."""

NVLS_CHUNK_BYTES = 128 << 10            # NCCL_NVLS_CHUNKSIZE default, src/transport/nvls.cc:160
NVLS_TREE_MAX_CHUNK_BYTES = 64 << 10    # nvlsTreeMaxChunkSize from 4 nodes, nvls.cc:226-229
LL_STEP_DATA = C.LL_BUFFSIZE // C.NCCL_STEPS // 2                  # 32 KiB of data a LL step
LL128_STEP_BYTES = C.LL128_BUFFSIZE // C.NCCL_STEPS                # 600 KiB of buffer a LL128 step
# 120 of every 128 bytes of a LL128 step are data: 576000 B (NCCL_LL128_LINEELEMS, NCCL_LL128_DATAELEMS)
LL128_STEP_DATA = LL128_STEP_BYTES // (C.LL128_LINE_BYTES // 8) * (C.LL128_DATA_BYTES // 8)


@dataclass(frozen=True)
class Adjustment:
    """How the mechanisms change one run: the simulator's channels and pieces (None: leave the
    topology's), a factor on every link's bandwidth and one on every latency, and what NCCL runs."""

    channels: int | None = None
    pipeline: int | None = None
    bandwidth_scale: float = 1.0
    latency_scale: float = 1.0
    nccl_algorithm: str | None = None
    nccl_channels: int | None = None
    chunk_bytes: int | None = None
    net_latency_s: float = 0.0
    intra_floor_s: float = 0.0


def selected(mechanisms) -> tuple[str, ...]:
    """The mechanisms named by ``mechanisms``: "default" (:data:`DEFAULT`), "all", None or () for none,
    or an iterable of names."""
    if mechanisms == "all":
        return MECHANISMS
    if mechanisms == "default":
        return DEFAULT
    if mechanisms is None:
        return ()
    if isinstance(mechanisms, str):
        mechanisms = (mechanisms,)
    out = tuple(mechanisms)
    bad = [m for m in out if m not in MECHANISMS]
    if bad:
        raise ValueError(f"unknown mechanism(s) {bad}; choose from {', '.join(MECHANISMS)}, 'all' or ()")
    return out


def played_as(algorithm: str, topology, options: dict) -> str | None:
    """NCCL's algorithm that the simulator's ``algorithm`` plays on ``topology`` (None: none)."""
    if algorithm in ("ring", "chain"):          # broadcast's and reduce's ring is a chain from or to the root
        return "Ring"
    if algorithm in ("tree", "double_tree"):
        return "Tree"
    if algorithm == "nvls":
        across = options.get("across", "switch" if getattr(topology, "sharp", False) else "ring")
        return "NVLSTree" if topology.nodes > 1 and across == "ring" else "NVLS"
    return None


def _bus_share(op: str, algorithm: str, protocol: str, nc: int, full: int, machine) -> float:
    """The share of NCCL's bus bandwidth for all ``full`` channels that ``nc`` of them get, by NCCL's own
    formula (tuning.cc:306-330, LL at 327): ``nc / full``, but a ring's LL is ``min(llMaxBw, 0.5 x busBw)``, so
    where llMaxBw caps all channels together, fewer channels lose less (each a ``1 / full`` of the
    graph's channels x bw, at half rate)."""
    if (algorithm, protocol) != ("Ring", "LL") or nc >= full:
        return nc / full
    f = C.FUNCTION_OF[op]
    n = machine.ranks
    nsteps = {"AllReduce": 2 * (n - 1), "AllGather": n - 1, "ReduceScatter": n - 1}.get(f, n)
    capped = tune(machine).bandwidth.get((f, "Ring", "LL"), 0.0) * nsteps / n       # busBw, tuning.cc:376-382
    g = machine.ring
    per_channel = 0.5 * (g.bw_intra if machine.nodes <= 2 else g.bw_inter) * g.channels / full
    return min(capped, nc * per_channel) / capped if capped > 0 else nc / full


def _ll128_tree_chunk(nbytes: float, nc: int, machine) -> int:
    """Tree/LL128 chunk (enqueue.cc:2227, 2286-2294): the data of one LL128 step (120 of every 128
    bytes of 600 KiB: 576000 B), halved while the message holds fewer than (1 + log2 nNodes + 0.1 ppn)
    x 64/ppn of them per channel (not below 72000 B), then while fewer than that x 16/ppn (not below
    18000 B); NCCL divides whole numbers on the left."""
    nodes = machine.nodes
    ppn = machine.ranks / nodes
    nsteps = 1 + (nodes.bit_length() - 1) + 0.1 * ppn
    chunk = LL128_STEP_DATA
    nb = int(nbytes)
    while nb // (nc * chunk) < nsteps * 64 / ppn and chunk > 131072:
        chunk //= 2
    while nb // (nc * chunk) < nsteps * 16 / ppn and chunk > 32768:
        chunk //= 2
    return chunk


def _nvls_chunk(nbytes: float, nc: int, heads: int, tree: bool, nodes: int) -> int:
    """NVLS / NVLSTree chunk (enqueue.cc:2258-2285): NCCL's cut-downs while the message holds few
    rounds of ``nc x heads`` chunks. Not played: NVLS across nodes (with SHARP) caps the chunk at
    32 KiB when NCCL's NVLS bandwidth is under 150 GB/s (enqueue.cc:2264-2266), which the lab's
    tuner machines, without CollNet graphs, cannot price."""
    ops = nc * heads
    if tree:
        chunk = min(NVLS_CHUNK_BYTES, NVLS_TREE_MAX_CHUNK_BYTES if nodes >= 4 else NVLS_CHUNK_BYTES)
        cuts = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))
    else:
        chunk = NVLS_CHUNK_BYTES
        cuts = ((64, 65536), (8, 32768), (2, 16384))
    for rounds, size in cuts:
        if nbytes < rounds * ops * chunk and chunk > size:
            chunk = size
    return chunk


def nccl_protocol(op: str, algorithm: str, nbytes: float, topology) -> str | None:
    """The protocol NCCL itself runs ``algorithm`` with, where it is not the tuner's to choose: a
    p2p all-to-all's LL or Simple by the bytes to each peer (:func:`labcore.sim.nccl.p2p.protocol`).
    None: the simulator tries every protocol the topology describes."""
    machine = getattr(topology, "nccl", None)
    if op != "all_to_all" or algorithm != "p2p" or machine is None:
        return None
    name = p2p.protocol(int(nbytes) // max(1, topology.ranks), machine)
    return name if name in topology.protocols else None


def adjust(op: str, algorithm: str, protocol: str | None, nbytes: float, topology, options: dict | None = None,
           mechanisms="default") -> Adjustment:
    """What the mechanisms do to ``op``/``algorithm`` with ``protocol`` (the topology's protocol name:
    "NVLS" is NCCL's Simple through the engine) for ``nbytes`` (the size nccl-tests prints, which is
    the byte count NCCL's tuner is given: ncclFuncMaxSendRecvCount, enqueue.cc:2127) on ``topology``. A
    topology without an NCCL machine (``topology.nccl``), a collective NCCL's tuner does not price or an
    algorithm that is not NCCL's gets no adjustment: the textbook machines stay exact."""
    which = selected(mechanisms)
    machine = getattr(topology, "nccl", None)
    options = options or {}
    if algorithm == "p2p" and which and machine is not None and machine.nodes > 1 and protocol is not None:
        # a p2p transfer across nodes goes through the same proxy, network and flush as a ring's step
        return Adjustment(**_network(which, machine, "Ring", protocol, getattr(topology, "net_latency_s", None),
                                     ring_floor=False))
    a = played_as(algorithm, topology, options)
    if not which or machine is None or op not in C.FUNCTION_OF or a is None or protocol is None:
        return Adjustment()
    p = "Simple" if protocol == "NVLS" else protocol
    if p not in C.PROTOCOLS:
        return Adjustment()
    nb = int(nbytes)
    full = machine.nvls_ctas if a in ("NVLS", "NVLSTree") else machine.comm_channels
    nc = channels_at(nb, machine, a, p)[0] if "channels" in which else full
    out = dict(nccl_algorithm=a, nccl_channels=nc)
    sim_full = max(1, int(getattr(topology, "channels", 1)))
    share = _bus_share(op, a, p, nc, full, machine)
    if algorithm == "chain" and "channels" in which:       # one chain stands for all of NCCL's channels
        out.update(bandwidth_scale=share)
    elif a in ("Ring", "Tree") and "channels" in which and "channels" not in options:
        sim = min(sim_full, max(1, math.ceil(nc * sim_full / full)))
        out.update(channels=sim, bandwidth_scale=share * sim_full / sim)
    # NCCL's tree correction stands for the trees' pipeline fill: where it applies, not both
    corrected = "correction" in which and op == "all_reduce" and _corrected(machine, a)
    if "chunks" in which and "pipeline" not in options:
        # the simulator's own limit on a protocol's pieces (its cost grows with them) still holds
        most = topology.protocols[protocol].max_pieces if protocol in topology.protocols else 256
        chunk = None
        if algorithm == "chain" and p != "Simple":
            # LL and LL128 forward each line as it lands (src/device/prims_ll.h, prims_ll128.h), not a
            # step at a time: pieces as fine as the simulator keeps
            out["pipeline"] = most
        elif a == "Tree" and p == "LL":
            chunk = LL_STEP_DATA
        elif a == "Tree" and p == "LL128":
            chunk = _ll128_tree_chunk(nb, nc, machine)
        elif a in ("NVLS", "NVLSTree") and not corrected:
            heads = machine.nvls.channels if machine.nvls is not None else machine.local_ranks
            chunk = _nvls_chunk(nb, nc, heads, a == "NVLSTree", machine.nodes)
            out["pipeline"] = max(1, min(most, math.ceil(nb / (nc * heads * chunk))))
        if a == "Tree" and chunk and not corrected:
            sim = out.get("channels", sim_full)
            trees = sim * (2 if algorithm == "double_tree" else 1)
            out["pipeline"] = max(1, min(most, math.ceil(nb / (trees * chunk))))
        out["chunk_bytes"] = chunk
    if "correction" in which and op == "all_reduce" and a in ("Tree", "NVLSTree"):
        out["bandwidth_scale"] = out.get("bandwidth_scale", 1.0) * _tree_correction(nb, machine, a, p)
    if machine.nodes > 1:
        # rings of broadcast and reduce take no netOverhead (tuning.cc:395-401 price them apart)
        ring_floor = a == "Ring" and algorithm != "chain"
        out.update(_network(which, machine, a, p, getattr(topology, "net_latency_s", None), ring_floor))
    if "plateau" in which and op == "all_reduce" and (a, p) == ("Ring", "Simple") and machine.nodes > 1 \
            and nb // (machine.comm_channels * machine.ranks) >= C.RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK:
        out["latency_scale"] = C.RING_PLATEAU["before_ampere" if machine.compcap < 80 else "ampere_on"]
    return Adjustment(**out)


def _network(which, machine, algorithm: str, protocol: str, measured_s: float | None = None,
             ring_floor: bool = True) -> dict:
    """The network mechanisms across nodes: the network's latency on every inter-node step, twice
    for Simple (tuning.cc:388-391), and the ring's netOverhead floor on its intra-node steps
    (tuning.cc:226-234, 402-412), in seconds. The latency is the topology's own where it has one
    (``measured_s``: what runs on the machine show), else what the net plugin tells NCCL."""
    out = {}
    graph = machine.graph(algorithm)
    latency_s = measured_s if measured_s is not None else \
        (graph.latency_inter * 1e-6 if graph is not None else 0.0)
    if "netlatency" in which and latency_s:
        out["net_latency_s"] = latency_s * (2 if protocol == "Simple" else 1)
    if "netoverhead" in which and algorithm == "Ring" and ring_floor:
        overhead = C.NET_OVERHEAD_US.get(machine.cpu_vendor, C.NET_OVERHEAD_DEFAULT_US) \
            if machine.cpu_arch == "x86" else C.NET_OVERHEAD_DEFAULT_US
        out["intra_floor_s"] = overhead * (3 if protocol == "Simple" else 1) * 1e-6
    return out


PEAK_BYTES = 1 << 30    # where a tree's all-reduce is bandwidth-bound: its busbw there is its peak


def tree_cap(machine, protocol: str) -> float | None:
    """NCCL's bus bandwidth for a Tree all-reduce with ``protocol`` on ``machine``, in nccl-tests'
    busbw (B/s): the tuner's algorithm bandwidth (tuning.cc:306-382, its per-channel caps
    perChMaxTreeBw and perChMaxTreeLL128Bw, 0.92 and 120/128, LL's 1/3.8 and llMaxBw) times
    2(n-1)/n. None where NCCL has no such entry (one node, or the tuner skips it)."""
    if machine.nodes < 2:
        return None
    algbw = tune(machine).bandwidth.get(("AllReduce", "Tree", protocol), 0.0)
    return algbw * 1e9 * 2 * (machine.ranks - 1) / machine.ranks if algbw > 0 else None


def _corrected(machine, algorithm: str) -> bool:
    """Whether NCCL applies treeCorrectionFactor to ``algorithm`` on ``machine`` (tuning.cc:638-645)."""
    return algorithm == "Tree" or (algorithm == "NVLSTree" and machine.compcap >= 100 and machine.cpu_arch == "x86")


def _tree_correction(nbytes: int, machine, algorithm: str, protocol: str) -> float:
    """treeCorrectionFactor for a Tree (or, on Blackwell with x86 hosts, NVLSTree) all-reduce of
    ``nbytes`` (tuning.cc:620-645, the tuner's :data:`~labcore.sim.nccl.tuner.constants.TREE_CORRECTION`)."""
    index = (nbytes >> 6).bit_length() - 1
    if not _corrected(machine, algorithm):
        return 1.0
    if 0 <= index < C.TREE_CORRECTION_ENTRIES[algorithm]:
        return C.TREE_CORRECTION[protocol][index]
    return 1.0


def apply(view, adjustment: Adjustment):
    """A copy of the protocol's view of a topology with the adjustment's bandwidth and latency
    factors, the network's latency on its network links and the floor on its NVLink links (the
    view itself when nothing changes). A route crosses two links (out of one port or NIC, into
    another), so each carries half of a hop's latency."""
    import copy

    a = adjustment
    if a.bandwidth_scale == 1.0 and a.latency_scale == 1.0 and not a.net_latency_s and not a.intra_floor_s:
        return view
    other = copy.copy(view)
    other.bandwidth = view.bandwidth * a.bandwidth_scale
    if a.latency_scale != 1.0:
        other.latency = view.latency * a.latency_scale
        other.launch_s = view.launch_s * a.latency_scale
    kinds = getattr(view, "link_kind", None)
    if (a.net_latency_s or a.intra_floor_s) and kinds is not None and kinds.size:
        lat = other.latency.copy()
        lat[kinds == "net"] += a.net_latency_s / 2
        nvlink = kinds == "nvlink"
        lat[nvlink] = np.maximum(lat[nvlink], a.intra_floor_s / 2)
        other.latency = lat
    return other


__all__ = ["MECHANISMS", "DEFAULT", "Adjustment", "adjust", "apply", "selected", "played_as", "nccl_protocol"]
