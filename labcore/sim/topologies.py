"""Ready-made topologies: the textbook uniform machine, a switch, a ring, real machines, a fitted one.

Bandwidths are bytes/s, latencies seconds. The presets for real machines give
every number with its source in ``topology.notes``. Their links carry
*achievable* bandwidth (line rate x an efficiency from a published
measurement) and their per-hop latency is NCCL's LL-protocol hardware latency
(the protocol NCCL picks for small messages) with NCCL's LL base latency as
the fixed launch cost, so the model follows the lower envelope of NCCL's own
tuner curves (see :mod:`labcore.sim.tuner`).

Example
-------
>>> t = nvswitch(8)
>>> round(t.port_bandwidth() / 1e9)           # GB/s achievable per GPU and direction
370
>>> ring(6).routes([0], [3]).shape            # three hops around the ring
(1, 3)
"""
from __future__ import annotations

import numpy as np

from labcore.sim.topology import Graph, Link, Topology, Uniform

# --- published numbers used by the presets -------------------------------------------------
# NVLink 4 on H100 SXM: 18 links x 25 GB/s per direction = 450 GB/s per direction (NVIDIA H100
# datasheet: "900 GB/s" NVLink bandwidth, both directions).
H100_NVLINK_BW = 450e9
# nccl-tests maintainers: ~370 GB/s busbw is achievable on H100 out of the 450 line rate, about
# 20% protocol overhead (nccl-tests issue 212; GTC24 S62129 slide: H100 all_reduce busbw 370).
NVLINK_EFFICIENCY = 370 / 450
# NCCL's NVLS bandwidth efficiency on Hopper (NCCL 2.30.7 src/graph/tuning.cc: 0.85).
NVLS_EFFICIENCY_HOPPER = 0.85
# NCCL 2.30.7 src/graph/tuning.cc: Ring/LL base latency 6.6 us; per-hop hw latency (Ring, LL):
# NVLink 0.6 us, PCI 1.0 us, network 2.7 us.
NCCL_RING_LL_BASE_S = 6.6e-6
NCCL_RING_LL_HOP_S = {"nvlink": 0.6e-6, "pci": 1.0e-6, "net": 2.7e-6}
# PCIe x16 per direction: Gen4 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s; Gen5 twice that.
PCIE_X16_BW = {4: 31.5e9, 5: 63.0e9}
# GTC24 S62129: all_reduce busbw on PCIe Gen4 24 GB/s, Gen5 48 GB/s: 76% of line rate.
PCIE_EFFICIENCY = 24 / 31.5
# Inter-socket link (3 UPI links at 16 GT/s x 2 B ~ 62 GB/s per direction, Intel Xeon).
UPI_BW = 62e9
# NDR InfiniBand / 400G RoCE: 400 Gb/s = 50 GB/s per NIC and direction; GTC24 S62129: 400 Gb RDMA
# all_reduce busbw 48 GB/s (96%).
NIC_400G_BW = 50e9
NIC_EFFICIENCY = 48 / 50


def uniform(ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, gamma: float = 0.0,
            gpus_per_node: int | None = None) -> Uniform:
    """Every pair of ranks joined by its own link of latency ``alpha`` (s) and ``bandwidth`` (B/s).

    The textbook alpha-beta machine (beta = 1/bandwidth): with it, and contention
    off, every algorithm costs exactly its closed form in :mod:`labcore.sim.cost`.
    A reducing switch is joined to every rank by links of the same kind.

    Example
    -------
    >>> uniform(4, alpha=2e-6, bandwidth=1e9).notes["alpha"]
    2e-06
    """
    return Uniform(ranks, alpha=alpha, bandwidth=bandwidth, gamma=gamma, gpus_per_node=gpus_per_node)


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


def nvswitch(gpus: int = 8, nvlink_bandwidth: float = H100_NVLINK_BW, efficiency: float = NVLINK_EFFICIENCY,
             nvls_efficiency: float = NVLS_EFFICIENCY_HOPPER, name: str = "nvswitch8 (H100 SXM, NVLink 4)") -> Graph:
    """An 8-GPU NVSwitch node, H100-class (NVLink 4): every GPU has one 450 GB/s port into the
    NVSwitch fabric; the fabric can reduce in the network (NVLink SHARP, NCCL's NVLS).

    Parameters and sources (also in ``.notes``):

    * port bandwidth 450 GB/s per direction (H100 datasheet: 900 GB/s bidirectional) x 0.822
      achievable (nccl-tests issue 212: ~370 GB/s busbw out of 450, ~20% protocol overhead)
      = 370 GB/s, the figure NCCL's own topology model also uses (src/graph/topo.h counts
      20.6 GB/s per H100 NVLink, x 18 links = 370.8 GB/s);
    * traffic into/out of the switch's reduction engine runs at a further 0.85 (NCCL 2.30.7
      tuning.cc, Hopper NVLS efficiency);
    * per-hop latency 0.6 us split over the two links of a GPU-GPU route, launch 6.6 us
      (NCCL 2.30.7 tuning.cc: Ring/LL NVLink hw latency and base latency).

    With these, a ring all-reduce of 8 GPUs reaches ~370 GB/s busbw and NVLS ~488 GB/s at
    large sizes (published: ~370 and ~480, GTC24 S62129), and a 8-byte ring all-reduce takes
    6.6 + 14 x 0.6 = 15 us, NCCL's own Ring/LL latency for 8 GPUs.

    Example
    -------
    >>> nvswitch().switch_agents
    1
    """
    bw = nvlink_bandwidth * efficiency
    hop = NCCL_RING_LL_HOP_S["nvlink"]
    fabric, engine = gpus, gpus + 1
    names = [f"gpu {g}" for g in range(gpus)] + ["nvswitch", "nvswitch reduction engine"]
    links: list[Link] = []
    for g in range(gpus):
        _duplex(links, g, fabric, bw, hop / 2, "nvlink")
    for g in range(gpus):
        _duplex(links, g, engine, bw * nvls_efficiency, hop / 2, "nvls")
    return Graph(name, gpus, names, links, reducing=(engine,), launch_s=NCCL_RING_LL_BASE_S, no_transit=(engine,),
                 notes={"nvlink line rate B/s": nvlink_bandwidth, "achievable fraction": efficiency,
                        "nvls efficiency": nvls_efficiency, "per-hop latency s": hop,
                        "launch s": NCCL_RING_LL_BASE_S,
                        "sources": "H100 datasheet; nccl-tests#212; GTC24 S62129; NCCL 2.30.7 tuning.cc"})


def pcie(gpus: int = 8, gen: int = 4, gpus_per_switch: int = 4, name: str | None = None) -> Graph:
    """A PCIe box without NVLink: GPUs under PCIe switches, half the switches on each CPU socket,
    the sockets joined by UPI. GPU traffic between sockets crosses the CPUs.

    Sources: PCIe x16 line rate (Gen4 31.5 GB/s, Gen5 63 GB/s per direction) x 0.76 achievable
    (GTC24 S62129: all_reduce busbw 24 GB/s on Gen4, 48 on Gen5); UPI ~62 GB/s; per-hop latency
    1.0 us (NCCL 2.30.7 tuning.cc Ring/LL PCI) split over the two links of a GPU-switch-GPU route.

    Example
    -------
    >>> round(pcie(8).port_bandwidth() / 1e9, 1)
    24.0
    """
    if gen not in PCIE_X16_BW:
        raise ValueError(f"gen must be 4 or 5, got {gen}")
    bw = PCIE_X16_BW[gen] * PCIE_EFFICIENCY
    hop = NCCL_RING_LL_HOP_S["pci"]
    n_sw = -(-gpus // gpus_per_switch)
    sw0, cpu0 = gpus, gpus + n_sw
    names = [f"gpu {g}" for g in range(gpus)] + [f"pcie switch {s}" for s in range(n_sw)] + ["cpu 0", "cpu 1"]
    links: list[Link] = []
    for g in range(gpus):
        _duplex(links, g, sw0 + g // gpus_per_switch, bw, hop / 2, "pcie")
    for s in range(n_sw):
        _duplex(links, sw0 + s, cpu0 + (s * 2 // n_sw if n_sw > 1 else 0), bw, hop / 2, "pcie")
    _duplex(links, cpu0, cpu0 + 1, UPI_BW, hop / 2, "upi")
    return Graph(name or f"pcie{gpus} (Gen{gen}, no NVLink)", gpus, names, links, launch_s=NCCL_RING_LL_BASE_S,
                 notes={"pcie x16 B/s": PCIE_X16_BW[gen], "achievable fraction": PCIE_EFFICIENCY,
                        "upi B/s": UPI_BW, "per-hop latency s": hop,
                        "sources": "PCIe spec; GTC24 S62129; NCCL 2.30.7 tuning.cc"})


def multinode(nodes: int = 4, gpus_per_node: int = 8, nic_bandwidth: float = NIC_400G_BW, sharp: bool = False,
              name: str | None = None) -> Graph:
    """Several NVSwitch nodes (see :func:`nvswitch`) joined by one non-blocking InfiniBand/RoCE
    fabric; each GPU has its own NIC (the DGX H100 layout, 8 x 400 Gb/s per node).

    Sources: 400 Gb/s = 50 GB/s per NIC and direction x 0.96 achievable (GTC24 S62129:
    400 Gb RDMA all_reduce busbw 48 GB/s); per-hop network latency 2.7 us (NCCL 2.30.7
    tuning.cc, Ring/LL NET). With ``sharp`` the fabric switch reduces in the network.

    Example
    -------
    >>> t = multinode(2, 4)
    >>> t.ranks, t.nodes
    (8, 2)
    """
    P = nodes * gpus_per_node
    nv = NCCL_RING_LL_HOP_S["nvlink"]
    net = NCCL_RING_LL_HOP_S["net"]
    bw = H100_NVLINK_BW * NVLINK_EFFICIENCY
    nic = nic_bandwidth * NIC_EFFICIENCY
    names = [f"node {r // gpus_per_node} gpu {r % gpus_per_node}" for r in range(P)]
    names += [f"node {n} nvswitch" for n in range(nodes)] + ["fabric switch"]
    fabric = P + nodes
    links: list[Link] = []
    for r in range(P):
        _duplex(links, r, P + r // gpus_per_node, bw, nv / 2, "nvlink")
    for r in range(P):
        _duplex(links, r, fabric, nic, net / 2, "nic")
    return Graph(name or f"{nodes} x {gpus_per_node} GPUs, {nic_bandwidth * 8 / 1e9:.0f} Gb/s NIC per GPU", P, names,
                 links, reducing=(fabric,) if sharp else (), node_of=np.arange(P) // gpus_per_node,
                 launch_s=NCCL_RING_LL_BASE_S,
                 notes={"nic B/s": nic_bandwidth, "nic achievable fraction": NIC_EFFICIENCY,
                        "net per-hop latency s": net, "nvlink achievable B/s": bw,
                        "sources": "GTC24 S62129; NCCL 2.30.7 tuning.cc; H100 datasheet"})


def calibrated(fit, ranks: int | None = None) -> Uniform:
    """A uniform topology whose alpha and beta were fitted to measurements.

    ``fit`` is a :class:`labcore.sim.calibration.Calibration` (the fit for ``ranks``, or the only
    one) or any object with ``alpha`` and ``beta`` attributes (and ``ranks``).

    Example
    -------
    >>> from types import SimpleNamespace
    >>> round(calibrated(SimpleNamespace(alpha=5e-5, beta=1e-9, ranks=2)).notes["bandwidth"])
    1000000000
    """
    params = fit.params(ranks) if hasattr(fit, "params") else fit
    p = ranks or params.ranks
    topo = Uniform(p, alpha=params.alpha, bandwidth=1.0 / params.beta, name=f"calibrated ({p} ranks)")
    topo.notes["fitted from"] = getattr(fit, "source", "measurements")
    return topo


def _per_node(ranks: int) -> int:
    """GPUs per node for ``ranks`` GPUs: 8 when it divides, else the largest divisor below 8."""
    return max(d for d in range(1, 9) if ranks % d == 0)


PRESETS = {
    "nvswitch8": lambda ranks=8: nvswitch(ranks),
    "pcie8": lambda ranks=8: pcie(ranks),
    "multinode": lambda ranks=32: multinode(ranks // _per_node(ranks), _per_node(ranks)),
    "uniform": lambda ranks=8: uniform(ranks),
    "switch": lambda ranks=8: switch(ranks),
    "ring": lambda ranks=8: ring(ranks),
}


def preset(name: str, ranks: int | None = None) -> Topology:
    """A topology by name: one of ``PRESETS`` (nvswitch8, pcie8, multinode, uniform, switch, ring).

    Example
    -------
    >>> preset("nvswitch8").ranks
    8
    """
    if name not in PRESETS:
        raise ValueError(f"unknown topology {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]() if ranks is None else PRESETS[name](ranks)


__all__ = ["uniform", "switch", "ring", "nvswitch", "pcie", "multinode", "calibrated", "preset", "PRESETS",
           "Graph", "Link", "Uniform", "Topology"]
