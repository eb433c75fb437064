"""The presets: one entry per machine, with the numbers that set it apart and their sources.

The building blocks (NVSwitch nodes, PCIe boxes, multi-node fabrics, the textbook machines)
and their shared numbers are in :mod:`labcore.sim.topologies`; an entry here says which block,
with which numbers, how big by default, which of NCCL's tuner machines prices it and what it
cannot do. Published figures: GTC24 S62129 (nvidia.com/en-us/on-demand/session/gtc24-s62129/),
as reproduced in stas00/ml-engineering network/benchmarks.
"""
from __future__ import annotations

from labcore.sim import topologies
from labcore.sim.presets.preset import Preset

GTC24 = "GTC24 S62129 (nvidia.com/en-us/on-demand/session/gtc24-s62129/), via stas00/ml-engineering network/benchmarks"
COMMON = "NCCL 2.30.7 src/graph/tuning.cc (latencies); H100 datasheet (NVLink); nccl-tests#212 (NVLink achievable)"
# 100 GbE = 12.5 GB/s per direction; GTC24: 100GbE TCP all_reduce busbw 10 GB/s (80%).
TCP_100G_BW = 12.5e9
TCP_EFFICIENCY = 10 / 12.5
# NDR InfiniBand and 400 GbE: 50 GB/s per NIC and direction; HDR: 25 GB/s (line rates).
NDR_BW, HDR_BW = 50e9, 25e9

_TEXTBOOK_TUNER = "it is a textbook machine, and NCCL's tuner prices real GPUs from the graphs its search finds"
_NO_NETWORK = "it is one machine without a network; SHARP across nodes needs an InfiniBand preset such as dgx_h100_ib"
_ROCE_NO_SHARP = "SHARP needs InfiniBand switches; RoCE's Ethernet switches do not reduce"
_NO_GRAPHS = ("NCCL's graphs for its NICs are not worked out yet (dgx_h100_ib's 8 x 45 GB/s channels would "
              "overstate them); name the algorithm, or add a tuner machine from the graphs an INFO log prints")


def _fabric(name: str, machine: str, wire: str, nic_bandwidth: float, nic_efficiency: float | None = None,
            nics: int = 8):
    """A builder of NVSwitch nodes on one fabric (:func:`labcore.sim.topologies.multinode`); ``machine``
    names 8 GPUs with ``nics`` NICs a node (another shape says so in the name)."""
    def build(nodes, gpus_per_node, nics_per_node, sharp):
        title = f"{nodes} x {machine}" + (" + SHARP" if sharp else "")
        if (gpus_per_node, nics_per_node) != (8, nics):
            title += f" ({gpus_per_node} GPUs and {nics_per_node} NICs a node)"
        efficiency = {} if nic_efficiency is None else {"nic_efficiency": nic_efficiency}
        published = PUBLISHED.get(f"{name}_sharp" if sharp else name)
        return topologies.multinode(nodes, gpus_per_node, nic_bandwidth=nic_bandwidth, sharp=sharp, name=title,
                                    nics_per_node=nics_per_node, **efficiency,
                                    notes={"published busbw GB/s": published, "wire": wire,
                                           "sources": f"{GTC24}; {COMMON}"})
    return build


def _textbook(make, groups: bool = False):
    def build(nodes, gpus_per_node, nics_per_node, sharp):
        if groups:
            return make(nodes * gpus_per_node, gpus_per_node=gpus_per_node if nodes > 1 else None)
        return make(gpus_per_node)
    return build


ENTRIES = [
    Preset("nvswitch8", "8 x H100 SXM on NVSwitch (NVLink 4), one node",
           lambda nodes, g, nics, sharp: topologies.nvswitch(g), kind="node",
           tuner="dgx_h100", sharp=False, no_sharp="NVLink SHARP (NVLS) is built in; SHARP across nodes needs an "
           "InfiniBand preset such as dgx_h100_ib", several_nodes="for several nodes use dgx_h100_ib (the same "
           "nodes on 8 x 400 Gb/s InfiniBand)",
           sources="H100 datasheet; nccl-tests#212; GTC24 S62129; NCCL 2.30.7 tuning.cc; fitted to the Azure ND "
                   "H200 v5 table (tests/data); tuner: NCCL's graphs for DGX H100 (labcore.sim.tuner.machine)"),
    Preset("pcie8", "8 GPUs on PCIe Gen4 switches, two CPU sockets, no NVLink",
           lambda nodes, g, nics, sharp: topologies.pcie(g), kind="node", tuner="pcie_4090",
           no_sharp=_NO_NETWORK, several_nodes="the lab has no multi-node PCIe preset; use tcp_100g or roce_8x400",
           sources="PCIe spec; GTC24 S62129; NCCL 2.30.7 tuning.cc; tuner: the graphs NCCL printed for 8 x RTX "
                   "4090 on PCIe (nccl-tests#307)"),
    Preset("multinode", "DGX H100-like nodes, 8 GPUs and 8 x 400 Gb/s NICs each (dgx_h100_ib, 4 nodes by default)",
           lambda nodes, g, nics, sharp: topologies.multinode(nodes, g, sharp=sharp, nics_per_node=nics),
           nodes=4, tuner="dgx_h100_ib", sharp=True,
           sources="GTC24 S62129; NCCL 2.30.7 tuning.cc; H100 datasheet; nccl-tests#290, #309"),
    Preset("dgx_h100_ib", "DGX H100, 8 x 400 Gb/s NDR InfiniBand",
           _fabric("dgx_h100_ib", "DGX H100, 8 x 400 Gb/s IB",
                   "NDR InfiniBand: 400 Gb/s = 50 GB/s per NIC and direction, 48 achievable", NDR_BW),
           nodes=2, tuner="dgx_h100_ib", sharp=True,
           published={"": (380.0, "GTC24: DGX H100, 8 x 400Gb IB"), "sharp": (480.0, "GTC24: DGX H100 + SHARP")},
           sources=f"{GTC24}; {COMMON}"),
    Preset("ib_8x200", "8 NVSwitch GPUs a node, 8 x 200 Gb/s HDR InfiniBand (DGX A100's network; H100-class GPUs, "
           "which a NIC-bound all-reduce does not notice)",
           _fabric("ib_8x200", "8 GPUs, 8 x 200 Gb/s IB",
                   "HDR InfiniBand: 200 Gb/s = 25 GB/s per NIC and direction, 24 achievable", HDR_BW),
           nodes=2, no_tuner=_NO_GRAPHS, sharp=True,
           published={"": (192.0, "GTC24: DGX A100, 8 x 200Gb")}, sources=f"{GTC24}; {COMMON}"),
    Preset("roce_8x400", "8 GPUs a node, each with a 400 Gb/s RoCE NIC on lossless Ethernet (PFC/ECN)",
           _fabric("roce_8x400", "8 GPUs, 8 x 400 Gb/s RoCE",
                   "400 Gb/s RoCE: GTC24's '400Gb RDMA' busbw is 48 GB/s per NIC; SHARP is an InfiniBand "
                   "switch feature", NDR_BW),
           nodes=2, no_sharp=_ROCE_NO_SHARP,
           # NCCL's IB transport drives RoCE NICs through the same verbs, and a 400 GbE port reports NDR's speed,
           # so NCCL's search finds the graphs of the same DGX H100 nodes on InfiniBand.
           tuner="dgx_h100_ib",
           published={"": (8 * 48.0, "derived: 8 NICs x GTC24's one 400Gb RDMA NIC (48)")},
           sources=f"{GTC24}; {COMMON}; tuner: dgx_h100_ib's graphs (same nodes, NICs at the same speed)"),
    Preset("tcp_100g", "8 NVSwitch GPUs a node sharing one 100 GbE NIC, NCCL over TCP sockets (no RDMA)",
           _fabric("tcp_100g", "8 GPUs, one 100 GbE NIC per node (TCP)",
                   "100 GbE: 12.5 GB/s per direction, 10 achievable, one NIC shared by the node's 8 GPUs",
                   TCP_100G_BW, TCP_EFFICIENCY, nics=1),
           nodes=2, nics_per_node=1, no_tuner=_NO_GRAPHS, no_sharp="SHARP needs InfiniBand switches; this is TCP "
           "over Ethernet", published={"": (10.0, "GTC24: 100GbE TCP")}, sources=f"{GTC24}; {COMMON}"),
    Preset("uniform", "the textbook alpha-beta machine: every pair of ranks on its own link (1 us, 10 GB/s)",
           _textbook(topologies.uniform, groups=True), kind="textbook", no_tuner=_TEXTBOOK_TUNER,
           no_sharp="its switch reduces already (in_network runs on it); there is no network to add SHARP to",
           sources="Hockney's model, as in Thakur, Rabenseifner and Gropp 2005"),
    Preset("switch", "ranks on one crossbar switch, one port each (1 us, 10 GB/s), the switch reduces",
           _textbook(topologies.switch), kind="textbook", no_tuner=_TEXTBOOK_TUNER,
           no_sharp="its switch reduces already (in_network runs on it); there is no network to add SHARP to",
           several_nodes="it is one switch; for nodes use uniform (nodes group its ranks) or a cluster preset",
           sources="the lab's model"),
    Preset("ring", "ranks wired in a ring, each only to its two neighbours (1 us, 10 GB/s)",
           _textbook(topologies.ring), kind="textbook", no_tuner=_TEXTBOOK_TUNER,
           no_sharp="nothing in a ring of wires reduces", several_nodes="it is one ring of wires; for nodes use "
           "uniform (nodes group its ranks) or a cluster preset", sources="the lab's model"),
]

PUBLISHED = {p.name + (f"_{variant}" if variant else ""): gbs for p in ENTRIES for variant, (gbs, _) in p.published.items()}
"""Published all_reduce busbw (GB/s) by preset, ``<preset>_sharp`` with SHARP [GTC24 S62129]."""
PUBLISHED_AS = {p.name + (f"_{variant}" if variant else ""): what
                for p in ENTRIES for variant, (_, what) in p.published.items()}
"""What each figure of :data:`PUBLISHED` is (RoCE's is derived from a one-NIC figure, not measured on 8)."""
