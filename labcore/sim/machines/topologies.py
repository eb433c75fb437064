"""Ready-made topologies: the textbook uniform machine, a switch, a ring, real machines, a fitted one.

Bandwidths are bytes/s, latencies seconds. The presets for real machines give
every number with its source in ``topology.notes``. Their links carry
*achievable* bandwidth (line rate x an efficiency from a published
measurement). They describe NCCL's protocols (:class:`~labcore.sim.core.network.Protocol`):
per-hop latencies and base latencies from NCCL's tuner (src/graph/tuning.cc,
NCCL 2.30.7; see :mod:`labcore.sim.nccl.tuner`), bandwidth fractions, and pipeline
slices; :func:`labcore.sim.simulate` runs the fastest protocol unless told one.

Example
-------
>>> t = nvswitch(8)
>>> round(t.port_bandwidth() / 1e9)           # GB/s achievable per GPU and direction
370
>>> sorted(t.protocols)
['LL', 'LL128', 'NVLS', 'Simple']
>>> ring(6).routes([0], [3]).shape            # three hops around the ring
(1, 3)
"""
from __future__ import annotations

from typing import NamedTuple

from labcore import validate
from labcore.sim.core.schedules import ALGORITHMS
from labcore.sim.core.network import NVSwitchNodes, Graph, Link, Protocol, Topology, Uniform
from labcore.sim.nccl.tuner import constants as C
from labcore.sim.nccl.tuner.constants import BASE_LATENCY, HW_LATENCY, PROTOCOLS

# --- published numbers used by the presets -------------------------------------------------
# NVLink 4 on H100 SXM: 18 links x 25 GB/s per direction = 450 GB/s per direction (NVIDIA H100
# datasheet: "900 GB/s" NVLink bandwidth, both directions).
H100_NVLINK_BW = 450e9
# nccl-tests maintainers: ~370 GB/s busbw is achievable on H100 out of the 450 line rate, about
# 20% protocol overhead (nccl-tests issue 212; GTC24 S62129 slide: H100 all_reduce busbw 370).
NVLINK_EFFICIENCY = 370 / 450
# NCCL's NVLS bandwidth efficiency on Hopper (NCCL 2.30.7 src/graph/tuning.cc: 0.85).
NVLS_EFFICIENCY_HOPPER = 0.85
# NCCL 2.30.7 src/graph/tuning.cc (the tuner's port, labcore.sim.nccl.tuner.constants): base latency and
# per-hop hardware latency (s) of the Ring and the Tree algorithms for the LL, LL128 and Simple
# protocols, by link type. Ring LL, for one: 6.6 us, and 0.6 / 1.0 / 2.7 us a hop over NVLink / PCI
# / the network; Tree LL: 6.8 us, and 0.6 / 1.0 / 5.0 us.
_LINK_KINDS = {"nvlink": "NVLINK", "pci": "PCI", "net": "NET"}


def _nccl_latencies(algorithm: str) -> tuple[dict, dict]:
    base = {p: v / 1e6 for p, v in zip(PROTOCOLS, BASE_LATENCY[algorithm])}
    hops = {p: {kind: HW_LATENCY[hw][algorithm][i] / 1e6 for kind, hw in _LINK_KINDS.items()}
            for i, p in enumerate(PROTOCOLS)}
    return base, hops


NCCL_RING_BASE_S, NCCL_RING_HOP_S = _nccl_latencies("Ring")
NCCL_TREE_BASE_S, NCCL_TREE_HOP_S = _nccl_latencies("Tree")
# ... and NVLS (Simple only): 25 us on NVLink (its whole latency: NVLS has no base latency).
NCCL_NVLS_LATENCY_S = 25e-6
# NCCL 2.30.7 tuning.cc: LL moves 8 bytes of data with 8 of flags (x0.5 of the bandwidth) and is
# capped at llMaxBw on one node (141 GB/s on Hopper; :func:`_ll_max_bw`); LL128 uses 120 of every 128 bytes (x0.92
# in the tuner).
LL_FRACTION, LL128_FRACTION = 0.5, 0.92
# PCIe x16 per direction: Gen4 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s; Gen5 twice that.
PCIE_X16_BW = {4: 31.5e9, 5: 63.0e9}
# GTC24 S62129: all_reduce busbw on PCIe Gen4 24 GB/s, Gen5 48 GB/s: 76% of line rate.
PCIE_EFFICIENCY = 24 / 31.5
# Inter-socket link (3 UPI links at 16 GT/s x 2 B ~ 62 GB/s per direction, Intel Xeon).
UPI_BW = 62e9
# NDR InfiniBand / 400G RoCE: 400 Gb/s = 50 GB/s per NIC and direction; GTC24 S62129: 400 Gb RDMA
# all_reduce busbw 48 GB/s (96%); nccl-tests issue 290 (maintainer): "For NDR @ 400Gbps you should
# see 46-48GB/s per NIC".
NIC_400G_BW = 50e9
NIC_EFFICIENCY = 48 / 50


# Fitted to the published all_reduce_perf tables in tests/data/published_allreduce_*.txt (8 GPUs,
# NVLink 4; see tests/test_sim_published.py): the host time per collective when one process drives
# eight GPUs (nccl-tests -g 8: the flat 29.9-31.2 us from 1 KiB to 512 KiB of the Azure ND H200 v5
# table), and how NCCL's NVLS kernel pipelines (slice, most slices, fixed time per pipeline step on
# top of NCCL's 25 us), fitted from 1 MiB to 8 GiB.
H100_ISSUE_S = 30e-6
NVLS_PIECE_BYTES, NVLS_MAX_PIECES, NVLS_STEP_S = 128 << 10, 64, 0.5e-6
# The same host time on 8 x A100 under one process, fitted (tests/published.py fit_issue_s) on the A100
# one-process calibration table (SuperBench's all_reduce run).
A100_ISSUE_S = 36e-6
# A process that drives k GPUs launches each one's kernel in turn from one thread (nccl-tests src/common.cu
# startColl, lines 548-619 of 2.19.6: the nGpus collectives in one group; NCCL 2.30.7 src/group.cc:309-380
# doLaunches: per communicator cudaSetDevice, ncclLaunchPrepare and ncclLaunchKernel, one after another), so
# the host time is k launches: the fitted 8-GPU times / 8 a GPU.
H100_HOST_S, A100_HOST_S = H100_ISSUE_S / 8, A100_ISSUE_S / 8


class GpuSpec(NamedTuple):
    """A GPU's NVLink numbers as the presets use them (each with its source at :data:`GPUS`)."""

    label: str
    nvlink_bandwidth: float      # line rate per GPU and direction, B/s
    efficiency: float            # achievable fraction (a published all_reduce busbw / line rate)
    nvls_efficiency: float | None  # NCCL's NVLS efficiency for the generation; None: no NVLink SHARP
    compcap: int                 # compute capability as NCCL writes it (the row of its tables)
    host_s: float                # host time to launch one GPU's collective (fitted, see H100_HOST_S)


GPUS = {
    # A100 SXM, NVLink 3: 12 links x 25 GB/s = 300 GB/s per direction (A100 datasheet: "600 GB/s"
    # NVLink, both directions); GTC24 S62129: 8 x A100 all_reduce busbw 232 GB/s. No NVLS before Hopper.
    "a100": GpuSpec("A100 SXM, NVLink 3", 300e9, 232 / 300, None, 80, A100_HOST_S),
    # H100 and H200 SXM, NVLink 4: the same 18 links (H100/H200 datasheets: 900 GB/s both directions);
    # 370 achievable (see NVLINK_EFFICIENCY); NCCL's Hopper NVLS efficiency 0.85. The host time a launch
    # is the one fitted on the H200 (Azure ND H200 v5), the H100 its twin host.
    "h100": GpuSpec("H100 SXM, NVLink 4", H100_NVLINK_BW, NVLINK_EFFICIENCY, NVLS_EFFICIENCY_HOPPER, 90, H100_HOST_S),
    "h200": GpuSpec("H200 SXM, NVLink 4", H100_NVLINK_BW, NVLINK_EFFICIENCY, NVLS_EFFICIENCY_HOPPER, 90, H100_HOST_S),
    # B200, NVLink 5: 18 links x 50 GB/s = 900 GB/s per direction (B200 datasheet: 1.8 TB/s both
    # directions); GTC25 S72583: 8 x B200 all_reduce busbw 700 GB/s (ring), 850 with NVLS; NCCL 2.30.7
    # tuning.cc nvlsEfficiency for Blackwell 0.74. No one-process B200 table has set a host time of its
    # own: the H200's a launch.
    "b200": GpuSpec("B200, NVLink 5", 900e9, 700 / 900, C.NVLS_EFFICIENCY[3], 100, H100_HOST_S),
}
"""The NVSwitch GPUs the presets build nodes of, by name."""


def _gpu(gpu: str) -> GpuSpec:
    if gpu not in GPUS:
        raise ValueError(f"gpu must be one of {', '.join(GPUS)}, not {gpu!r}")
    return GPUS[gpu]


def _ll_max_bw(compcap: int) -> float:
    """NCCL's llMaxBw for one node of this GPU generation, B/s (tuning.cc; the tuner's table)."""
    return C.LL_MAX_BW[C.arch_index(compcap)][0] * 1e9


def _ring_protocols(nvlink_fraction_ll: float, net: dict | None = None) -> dict:
    """NCCL's three protocols for rings and trees, with NCCL's latencies (see the constants).

    ``net`` (across nodes, from :func:`_nccl_net_fractions`): the fraction of a NIC each protocol
    gets, ``{"ring": {protocol: fraction}, "tree": {...}}``.
    """
    eff = {"LL": {"nvlink": nvlink_fraction_ll, "net": LL_FRACTION, "pci": LL_FRACTION},
           "LL128": {"nvlink": LL128_FRACTION, "net": LL128_FRACTION, "pci": LL128_FRACTION},
           "Simple": {}}
    # NCCL's p2p path (the p2p all-to-all) runs LL or Simple, never LL128 (src/enqueue.cc:934-936)
    runs = {"LL": ("ring", "chain", "tree", "double_tree", "p2p"), "LL128": ("ring", "chain", "tree", "double_tree"),
            "Simple": tuple(sorted({a for table in ALGORITHMS.values() for a in table} - {"nvls"}))}
    protocols = {}
    for name in ("LL", "LL128", "Simple"):
        # NCCL's trees (its Tree algorithm: the simulator's tree and double tree) pay Tree latencies
        tree = {"launch_s": NCCL_TREE_BASE_S[name], "hop_s": NCCL_TREE_HOP_S[name]}
        if net:
            eff[name]["net"] = net["ring"][name]
            tree["efficiency"] = {"net": net["tree"][name]}
        protocols[name] = Protocol(name, NCCL_RING_BASE_S[name], NCCL_RING_HOP_S[name], eff[name],
                                   algorithms=runs[name], by_algorithm={"tree": tree, "double_tree": tree})
    return protocols


def _nccl_net_fractions(nodes: int, channels: int, nic_gbs: float, compcap: int = 90) -> dict:
    """The fraction of its NICs each protocol reaches across ``nodes`` DGX H100-like nodes.

    NCCL 2.30.7 tuning.cc caps a collective's bus bandwidth across nodes by protocol (the tuner's
    port, :mod:`labcore.sim.nccl.tuner.model`; Hopper GPUs, Intel hosts): a ring's LL at llMaxBw (39
    GB/s on 2 nodes, 20.4 on more), LL128 at a per-channel maximum (rings 36.7 GB/s, trees 36.7 /
    29.0), a tree all-reduce at 0.92 and a per-channel maximum (41.4 / 36.0), a tree's LL at 1/3.8.
    ``nic_gbs`` is the achievable bandwidth of a node's NICs together (GB/s), which ``channels``
    rings or trees share; the simulator's NICs then deliver the capped bandwidth. The tree's LL
    is not held to llMaxBw as well: the simulator runs a small message on fewer channels (one per
    32 KiB), where a cap on the total would fall on a single NIC (against the 4-node table of
    nccl-tests#309 it then runs 50% slow at 32-64 KiB; without it within 31% at every size).
    """
    arch, col = C.arch_index(compcap), min(nodes, 3) - 1
    ll = C.LL_MAX_BW[0][col] / nic_gbs
    per_channel = {name: min(1.0, channels * table[arch][col] / nic_gbs) for name, table in (
        ("ring LL128", C.PER_CH_MAX_RING_LL128_BW), ("tree LL128", C.PER_CH_MAX_TREE_LL128_BW),
        ("tree", C.PER_CH_MAX_TREE_BW))}
    return {"ring": {"LL": min(LL_FRACTION, ll), "LL128": min(LL128_FRACTION, per_channel["ring LL128"]),
                     "Simple": 1.0},
            "tree": {"LL": 1 / 3.8, "LL128": min(120 / 128, per_channel["tree LL128"]),
                     "Simple": min(0.92, per_channel["tree"])}}


def uniform(ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, gamma: float = 0.0,
            gpus_per_node: int | None = None, ports: str = "multi") -> Uniform:
    """Every pair of ranks joined by its own link of latency ``alpha`` (s) and ``bandwidth`` (B/s).

    The textbook alpha-beta machine (beta = 1/bandwidth): with it, and contention
    off, every algorithm costs exactly its closed form in :mod:`labcore.sim.core.cost`.
    A reducing switch is joined to every rank by links of the same kind. ``ports="single"``
    gives every rank one port (Thakur, Rabenseifner and Gropp's model): what a rank sends
    to two peers in one step goes one message after the other.

    Example
    -------
    >>> uniform(4, alpha=2e-6, bandwidth=1e9).notes["alpha"]
    2e-06
    >>> uniform(4, ports="single").ports
    'single'
    """
    return Uniform(ranks, alpha=alpha, bandwidth=bandwidth, gamma=gamma, gpus_per_node=gpus_per_node, ports=ports)


def _check_fractions(**fractions) -> None:
    for name, value in fractions.items():
        if not (isinstance(value, (int, float)) and 0 < value <= 1):
            raise ValueError(f"{name} is the achievable fraction of the line rate, above 0 and at most 1, not {value!r}")


def _duplex(links: list[Link], a: int, b: int, bw: float, lat: float, kind: str) -> None:
    links.append(Link(a, b, bw, lat, kind))
    links.append(Link(b, a, bw, lat, kind))


def switch(ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, gamma: float = 0.0,
           reducing: bool = True, name: str = "switch") -> Graph:
    """Ranks joined by one crossbar switch: each rank has one port (``bandwidth`` each way).

    A rank-to-rank route crosses two links of latency ``alpha/2`` each, so it costs
    alpha + m/bandwidth like the uniform machine, but everything a rank sends in one step
    shares its port: a parent sending to two children takes twice as long. With
    ``reducing`` the switch can add (in-network reduction).

    Example
    -------
    >>> switch(4).routes([0], [2]).tolist()
    [[0, 5]]
    """
    names = [f"rank {r}" for r in range(ranks)] + ["switch"]
    links: list[Link] = []
    for r in range(ranks):
        _duplex(links, r, ranks, bandwidth, alpha / 2, "port")
    return Graph(name, ranks, names, links, reducing=(ranks,) if reducing else (), gamma_rank=gamma,
                 gamma_switch=gamma, notes={"alpha": alpha, "bandwidth": bandwidth})


def ring(ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, bidirectional: bool = True) -> Graph:
    """Ranks wired in a ring (each only to its two neighbours); other pairs route around it.

    Algorithms that are not rings pay for it here: a tree's messages take several
    hops and share links (with contention on).

    Example
    -------
    >>> ring(4, bidirectional=False).routes([1], [0]).shape
    (1, 3)
    """
    names = [f"rank {r}" for r in range(ranks)]
    links: list[Link] = []
    for r in range(ranks if ranks > 1 else 0):
        nxt = (r + 1) % ranks
        if ranks == 2 and r == 1:
            break
        if bidirectional:
            _duplex(links, r, nxt, bandwidth, alpha, "ring")
        else:
            links.append(Link(r, nxt, bandwidth, alpha, "ring"))
    if ranks == 2 and not bidirectional:
        links.append(Link(1, 0, bandwidth, alpha, "ring"))
    return Graph("ring", ranks, names, links, notes={"alpha": alpha, "bandwidth": bandwidth})


def nvswitch(gpus: int = 8, nvlink_bandwidth: float | None = None, efficiency: float | None = None,
             nvls_efficiency: float | None = None, issue_s: float | None = None,
             name: str | None = None, gpu: str = "h100", nvls: bool = True) -> NVSwitchNodes:
    """An 8-GPU NVSwitch node, H100-class (NVLink 4): every GPU has one 450 GB/s port into the
    NVSwitch fabric; the fabric can reduce in the network (NVLink SHARP, NCCL's NVLS).

    Parameters and sources (also in ``.notes``):

    * port bandwidth 450 GB/s per direction (H100 datasheet: 900 GB/s bidirectional) x 0.822
      achievable (nccl-tests issue 212: ~370 GB/s busbw out of 450, ~20% protocol overhead)
      = 370 GB/s, the figure NCCL's own topology model also uses (src/graph/topo.h counts
      20.6 GB/s per H100 NVLink, x 18 links = 370.8 GB/s);
    * the reduction engine takes a further 0.85 of a GPU's port (NCCL 2.30.7 tuning.cc, Hopper
      NVLS efficiency);
    * protocols LL, LL128 and Simple for rings and trees with NCCL's base and per-hop latencies
      (tuning.cc), LL at half the link and at most NCCL's llMaxBw (141 GB/s), LL128 at 0.92;
      NVLS (the Simple protocol through the engine) with NCCL's 25 us latency (its hops inside
      the NVSwitch are folded into it) and a pipeline fitted to published tables (128 KiB slices,
      at most 64, 0.5 us a step);
    * ``issue_s``: the host time per collective when one process drives all the GPUs (nccl-tests
      ``-g 8``): one launch a GPU (``host_s`` each, :data:`H100_HOST_S`: the 30 us fitted to the flat
      1 KiB-512 KiB part of the Azure ND H200 v5 table over its 8 GPUs), 30 us on 8 GPUs, 15 on 4;
      pass ``issue_s=0`` for the GPU time alone.

    With these, a ring all-reduce of 8 GPUs reaches ~370 GB/s busbw and NVLS ~480 GB/s at 8 GiB
    (published: ~370 and ~480, GTC24 S62129), and the fastest protocol's curve stays within 20%
    of the published 8-GPU tables at every size (tests/test_sim_published.py).

    ``gpu`` ("a100", "h100", "h200", "b200", :data:`GPUS`) sets the NVLink line rate, its achievable
    fraction, NVLS (none on A100) and NCCL's llMaxBw for the generation; the other parameters override
    them. ``nvls=False`` leaves the reduction engine out.

    Example
    -------
    >>> nvswitch().switch_agents
    1
    >>> round(nvswitch(issue_s=0).with_protocol("LL").hop_latency() * 1e6, 2)   # NCCL's Ring/LL NVLink hop
    0.6
    """
    spec = _gpu(gpu)
    issue_s = gpus * spec.host_s if issue_s is None else issue_s
    nvlink_bandwidth = spec.nvlink_bandwidth if nvlink_bandwidth is None else nvlink_bandwidth
    efficiency = spec.efficiency if efficiency is None else efficiency
    nvls_efficiency = (spec.nvls_efficiency if nvls_efficiency is None else nvls_efficiency) if nvls else None
    _check_fractions(efficiency=efficiency, **({} if nvls_efficiency is None else {"nvls_efficiency": nvls_efficiency}))
    bw = nvlink_bandwidth * efficiency
    protocols = _ring_protocols(min(LL_FRACTION, _ll_max_bw(spec.compcap) / bw))
    if nvls_efficiency is not None:
        protocols["NVLS"] = _nvls_protocol()
    simple = protocols["Simple"]
    node = NVSwitchNodes(1, gpus, bw, simple.hop_s["nvlink"],
                   nvls_bandwidth=None if nvls_efficiency is None else bw * nvls_efficiency,
                   launch_s=simple.launch_s, issue_s=issue_s, host_s=spec.host_s, protocols=protocols,
                   name=name or f"nvswitch{gpus} ({spec.label})",
                   notes={"gpu": spec.label, "nvlink line rate B/s": nvlink_bandwidth, "achievable fraction": efficiency,
                          "nvls efficiency": nvls_efficiency, "issue s": issue_s,
                          "protocols": {k: (p.launch_s, p.hop_s, p.efficiency) for k, p in protocols.items()},
                          "nvls pipeline": (NVLS_PIECE_BYTES, NVLS_MAX_PIECES, NVLS_STEP_S),
                          "sources": "H100 datasheet; nccl-tests#212; GTC24 S62129; NCCL 2.30.7 tuning.cc; "
                                     "fitted: Azure/AI-benchmarking-guide ND H200 v5 table, nccl-tests#290"})
    return node


def _nvls_protocol() -> Protocol:
    """NCCL's NVLS (Simple through the NVSwitch's engine): its 25 us, a network hop at NCCL's NVLS
    NET latency (18 us, tuning.cc) across nodes, and the pipeline fitted to the 8-GPU tables (see
    the constants)."""
    net = C.HW_LATENCY["NET"]["NVLS"][2] * 1e-6
    return Protocol("NVLS", NCCL_NVLS_LATENCY_S, {"nvlink": 0.0, "nvls": 0.0, "net": net}, step_s=NVLS_STEP_S,
                    piece_bytes=NVLS_PIECE_BYTES, max_pieces=NVLS_MAX_PIECES, algorithms=("nvls",))


def pcie(gpus: int = 8, gen: int = 4, gpus_per_switch: int = 4, name: str | None = None, p2p: bool = True) -> Graph:
    """A PCIe box without NVLink: GPUs under PCIe switches, half the switches on each CPU socket,
    the sockets joined by UPI. GPU traffic between sockets crosses the CPUs.

    Sources: PCIe x16 line rate (Gen4 31.5 GB/s, Gen5 63 GB/s per direction) x 0.76 achievable
    (GTC24 S62129: all_reduce busbw 24 GB/s on Gen4, 48 on Gen5); UPI ~62 GB/s; per-hop latency
    1.0 us (NCCL 2.30.7 tuning.cc Ring/LL PCI) split over the two links of a GPU-switch-GPU route.

    ``p2p=False``: GPUs that cannot reach each other's memory (P2P off: ACS/IOMMU, or GeForce cards)
    exchange through host memory (NCCL's SHM transport: "via direct shared memory" in
    tests/data/nccl_info_pcie_no_p2p.log): every route goes up to the CPU and down again, so a
    switch's uplink carries all its GPUs' traffic, and the host hop costs NCCL's PCI latency again.

    Example
    -------
    >>> round(pcie(8).port_bandwidth() / 1e9, 1)
    24.0
    >>> len(pcie(4, p2p=False).routes([0], [1])[0])      # GPU, switch, CPU, switch, GPU
    4
    """
    if gen not in PCIE_X16_BW:
        raise ValueError(f"gen must be 4 or 5, got {gen}")
    if isinstance(gpus_per_switch, bool) or not isinstance(gpus_per_switch, int) or gpus_per_switch < 1:
        raise ValueError(f"gpus_per_switch must be a whole number of at least 1, got {gpus_per_switch!r}")
    if not isinstance(p2p, bool):
        raise ValueError(f"p2p must be True or False, not {p2p!r}")
    bw = PCIE_X16_BW[gen] * PCIE_EFFICIENCY
    hop = NCCL_RING_HOP_S["LL"]["pci"]
    n_sw = -(-gpus // gpus_per_switch)
    # without P2P a switch forwards nothing between its GPUs: its up and down sides are apart
    sides = 1 if p2p else 2
    sw0 = gpus
    cpu0 = gpus + sides * n_sw
    names = [f"gpu {g}" for g in range(gpus)]
    names += [f"pcie switch {s}" + ("" if p2p else f" {side}") for side in ("up", "down")[:sides] for s in range(n_sw)]
    names += ["cpu 0", "cpu 1"]
    down0 = sw0 + (n_sw if not p2p else 0)
    links: list[Link] = []
    for g in range(gpus):
        s_ = g // gpus_per_switch
        links.append(Link(g, sw0 + s_, bw, hop / 2, "pcie"))
        links.append(Link(down0 + s_, g, bw, hop / 2, "pcie"))
    for s_ in range(n_sw):
        cpu = cpu0 + (s_ * 2 // n_sw if n_sw > 1 else 0)
        links.append(Link(sw0 + s_, cpu, bw, hop / 2, "pcie"))
        links.append(Link(cpu, down0 + s_, bw, hop / 2, "pcie"))
    _duplex(links, cpu0, cpu0 + 1, UPI_BW, hop / 2, "upi")
    label = name or f"pcie{gpus} (Gen{gen}, no NVLink" + ("" if p2p else ", no P2P: through host memory") + ")"
    return Graph(label, gpus, names, links, launch_s=NCCL_RING_BASE_S["LL"],
                 notes={"pcie x16 B/s": PCIE_X16_BW[gen], "achievable fraction": PCIE_EFFICIENCY,
                        "upi B/s": UPI_BW, "per-hop latency s": hop, "p2p": p2p,
                        "sources": "PCIe spec; GTC24 S62129; NCCL 2.30.7 tuning.cc"
                                   + ("" if p2p else "; pytorch#72835 INFO log (SHM transport without P2P)")})


def multinode(nodes: int = 4, gpus_per_node: int = 8, nic_bandwidth: float = NIC_400G_BW, sharp: bool = False,
              name: str | None = None, nic_efficiency: float = NIC_EFFICIENCY, nics_per_node: int | None = None,
              notes: dict | None = None, gpu: str = "h100", nvls: bool = False) -> NVSwitchNodes:
    """Several NVSwitch nodes (see :func:`nvswitch`) joined by one non-blocking InfiniBand/RoCE
    fabric; each GPU has its own NIC (the DGX H100 layout, 8 x 400 Gb/s per node).

    Sources: 400 Gb/s = 50 GB/s per NIC and direction x 0.96 achievable (GTC24 S62129:
    400 Gb RDMA all_reduce busbw 48 GB/s); NCCL's per-hop network latencies (tuning.cc:
    Ring LL 2.7, LL128 4.0, Simple 14 us). One channel per GPU (``gpus_per_node`` channels):
    NCCL's rings each cross nodes on their own NIC, so a flat ring all-reduce reaches the
    NICs' 8 x 48 = 384 GB/s busbw (published: ~380 GB/s on DGX H100 with 8 x 400 Gb/s,
    GTC24 S62129; 392 GB/s with NCCL_ALGO=Ring on two HGX H100, nccl-tests#309). With
    ``sharp`` the fabric switch reduces in the network (IB SHARP; the ``in_network``
    all-reduce then runs as NCCL's CollNetDirect, a head per NIC). One process per GPU
    issues the collectives (no host floor), as in the nccl-tests#309 runs.

    Parameters
    ----------
    nodes, gpus_per_node : int
    nic_bandwidth : line rate per NIC and direction, bytes/s.
    sharp : the fabric reduces in the network.
    name : the machine's name (default: from the other parameters).
    nic_efficiency : the achievable fraction of ``nic_bandwidth`` (default 0.96, GTC24's RDMA figure).
    nics_per_node : NICs per node (default one per GPU); fewer are shared by the node's GPUs, more
        give each GPU several (:class:`~labcore.sim.core.network.NVSwitchNodes` computes the share).
    notes : more notes (sources of the parameters) for ``topology.notes``.
    gpu : the nodes' GPUs (:data:`GPUS`): NVLink rate, NCCL's per-generation caps.
    nvls : give every node's NVSwitch its NVLink SHARP engine (H100 and later), for NCCL's NVLS
        and NVLSTree algorithms across nodes (the ``nvls`` schedule with ``gpus_per_node``).

    Example
    -------
    >>> t = multinode(2, 4)
    >>> t.ranks, t.nodes, t.channels
    (8, 2, 4)
    >>> len(multinode(2, 8, nics_per_node=1).nics())        # one NIC a node
    2
    """
    _check_fractions(nic_efficiency=nic_efficiency)
    spec = _gpu(gpu)
    if nvls and spec.nvls_efficiency is None:
        raise ValueError(f"{spec.label} has no NVLink SHARP (NVLS came with Hopper); leave nvls=False")
    nvlink = spec.nvlink_bandwidth * spec.efficiency
    nics = gpus_per_node if nics_per_node is None else nics_per_node
    if validate.whole(nics) is None or nics < 1:
        raise ValueError(f"nics_per_node must be a whole number of at least 1, not {nics_per_node!r}")
    across = validate.whole(nodes) is not None and nodes > 1     # (NVSwitchNodes checks the numbers)
    net = (_nccl_net_fractions(nodes, gpus_per_node, nics * nic_bandwidth * nic_efficiency / 1e9, spec.compcap)
           if across else None)
    protocols = _ring_protocols(min(LL_FRACTION, _ll_max_bw(spec.compcap) / nvlink), net)
    if nvls:
        protocols["NVLS"] = _nvls_protocol()
    simple = protocols["Simple"]
    default_name = (f"{nodes} x {gpus_per_node} GPUs, {nic_bandwidth * 8 / 1e9:.0f} Gb/s NIC "
                    + ("per GPU" if nics == gpus_per_node else f"x {nics} per node"))
    topo = NVSwitchNodes(nodes, gpus_per_node, nvlink, simple.hop_s["nvlink"], nic_bandwidth * nic_efficiency,
                   simple.hop_s["net"], sharp=sharp, launch_s=simple.launch_s, channels=gpus_per_node,
                   protocols=protocols, nics_per_node=nics_per_node, name=name or default_name, host_s=spec.host_s,
                   nvls_bandwidth=nvlink * spec.nvls_efficiency if nvls else None,
                   notes={"gpu": spec.label, "nic B/s": nic_bandwidth, "nic achievable fraction": nic_efficiency,
                          "nics per node": nics, "nvlink achievable B/s": nvlink, "channels": "one per GPU",
                          "protocols": {k: (p.launch_s, p.hop_s, p.efficiency) for k, p in protocols.items()},
                          "sources": "GTC24 S62129; NCCL 2.30.7 tuning.cc; H100 datasheet; nccl-tests#290, #309",
                          **(notes or {})})
    return topo


def calibrated(fit, ranks: int | None = None) -> Uniform:
    """A uniform topology whose alpha and beta were fitted to measurements.

    ``fit`` is a :class:`labcore.sim.apps.calibration.Calibration` (the fit for ``ranks``, or the only
    one) or any object with ``alpha`` and ``beta`` attributes (and ``ranks``).

    Example
    -------
    >>> from types import SimpleNamespace
    >>> round(calibrated(SimpleNamespace(alpha=5e-5, beta=1e-9, ranks=2)).notes["bandwidth"])
    1000000000
    """
    if not (hasattr(fit, "params") or all(hasattr(fit, a) for a in ("alpha", "beta"))):
        raise TypeError(f"calibrated takes a Calibration (labcore.sim.calibrate(df)) or a fit with alpha and beta, "
                        f"not {type(fit).__name__}")
    params = fit.params(ranks) if hasattr(fit, "params") else fit
    p = ranks or params.ranks
    topo = Uniform(p, alpha=params.alpha, bandwidth=1.0 / params.beta, name=f"calibrated ({p} ranks)")
    topo.notes["fitted from"] = getattr(fit, "source", "measurements")
    return topo


__all__ = ["uniform", "switch", "ring", "nvswitch", "pcie", "multinode", "calibrated", "GPUS", "GpuSpec",
           "Graph", "Link", "Uniform", "Topology"]
