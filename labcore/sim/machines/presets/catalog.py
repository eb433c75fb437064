"""The presets: one entry per machine, with the numbers that set it apart and their sources.

The building blocks (NVSwitch nodes, PCIe boxes, multi-node fabrics, the textbook machines)
and their shared numbers are in :mod:`labcore.sim.machines.topologies`; an entry here says which block,
with which numbers, how big by default, which of NCCL's tuner machines prices it and what it
cannot do. Published figures: GTC24 S62129 (nvidia.com/en-us/on-demand/session/gtc24-s62129/),
as reproduced in stas00/ml-engineering network/benchmarks.
"""
from __future__ import annotations

from labcore.sim.machines import topologies
from labcore.sim.machines.presets.preset import Preset

GTC24 = "GTC24 S62129 (nvidia.com/en-us/on-demand/session/gtc24-s62129/), via stas00/ml-engineering network/benchmarks"
COMMON = "NCCL 2.30.7 src/graph/tuning.cc (latencies); H100 datasheet (NVLink); nccl-tests#212 (NVLink achievable)"
# 100 GbE = 12.5 GB/s per direction; GTC24: 100GbE TCP all_reduce busbw 10 GB/s (80%).
TCP_100G_BW = 12.5e9
TCP_EFFICIENCY = 10 / 12.5
# NDR InfiniBand and 400 GbE: 50 GB/s per NIC and direction; HDR: 25 GB/s (line rates).
NDR_BW, HDR_BW = 50e9, 25e9
# AWS EFA: 100 Gb/s = 12.5 GB/s per NIC and direction (AWS instance specifications: p5 3200 Gbps in 32
# NICs, p4d/p4de 400 Gbps in 4).
EFA_BW = 12.5e9
# EFA's latency on a step across nodes, as the runs show it: fitted (tests/published.py fit_net_latency) on
# the sizes up to 64 KiB of each machine's calibration tables (tests/data/README.md), p5 on KeitaW's 2 x p5
# run, p4de on awsome-distributed-training's 2 x p4de. aws-ofi-nccl tells NCCL 75 us on both (its tuner's
# picks keep that); p5's second-generation EFA shows a third of it.
P5_EFA_LATENCY_S, P4DE_EFA_LATENCY_S = 23e-6, 73.5e-6
# GPUDirect-TCPXO's latency on a step across nodes, fitted the same way on the A3 Mega calibration table.
A3_MEGA_TCPXO_LATENCY_S = 51.5e-6
# OCI's RoCE cluster network, fitted the same way on oracle-japan/ocitutorials' 2 x BM.GPU4.8 run.
OCI_ROCE_LATENCY_S = 7e-6
# Google Cloud A4's RoCE network, fitted the same way on the A4 all_gather calibration table (cluster-toolkit's
# gke-a4-highgpu run, 2 x a4-highgpu-8g): NCCL's tuning.cc has no Blackwell network latency of its own.
GCP_A4_ROCE_LATENCY_S = 17.5e-6
# Google Cloud A3 Ultra's RoCE network, fitted the same way on its two all_gather calibration tables (SkyPilot's and
# Google's test pods on 2 x a3-ultragpu-8g, skypilot-org/skypilot examples/gcp_gpu_direct_tcpx).
A3_ULTRA_ROCE_LATENCY_S = 5e-6
_EFA_NO_SHARP = "EFA's switches do not reduce (AWS offers no SHARP); NVLS inside the nodes is there"

_TEXTBOOK_TUNER = "it is a textbook machine, and NCCL's tuner prices real GPUs from the graphs its search finds"
_NO_NETWORK = "it is one machine without a network; SHARP across nodes needs an InfiniBand preset such as dgx_h100_ib"
_ROCE_NO_SHARP = "SHARP needs InfiniBand switches; RoCE's Ethernet switches do not reduce"
_NO_GRAPHS = ("NCCL's graphs for its NICs are not worked out yet (dgx_h100_ib's 8 x 45 GB/s channels would "
              "overstate them); name the algorithm, or add a tuner machine from the graphs an INFO log prints")


GTC25 = "GTC25 S72583, via stas00/ml-engineering network/README.md (all-reduce-bw-2025.png)"
MLE_H200 = "stas00/ml-engineering network/README.md (8 x H200, nccl-tests 8 GiB)"


def _fabric(name: str, machine: str, wire: str, nic_bandwidth: float, nic_efficiency: float | None = None,
            nics: int = 8, gpu: str = "h100", nvls: bool | None = None, net_latency_s: float | None = None):
    """A builder of NVSwitch nodes on one fabric (:func:`labcore.sim.machines.topologies.multinode`); ``machine``
    names 8 GPUs with ``nics`` NICs a node (another shape says so in the name). Nodes of one GPU are
    an NVSwitch node (:func:`labcore.sim.machines.topologies.nvswitch`, NVLS where the GPU has it); several
    nodes carry the NVSwitches' NVLS engines too (``nvls``, default: where the GPU has NVLS).
    ``net_latency_s`` is the network's latency on
    a step across nodes as runs show it, where it is not what the net plugin tells NCCL."""
    engines = topologies.GPUS[gpu].nvls_efficiency is not None if nvls is None else nvls

    def build(nodes, gpus_per_node, nics_per_node, sharp):
        title = f"{nodes} x {machine}" + (" + SHARP" if sharp else "")
        if (gpus_per_node, nics_per_node) != (8, nics):
            title += f" ({gpus_per_node} GPUs and {nics_per_node} NICs a node)"
        efficiency = {} if nic_efficiency is None else {"nic_efficiency": nic_efficiency}
        published = PUBLISHED.get(f"{name}_sharp" if sharp else name)
        topo = topologies.multinode(nodes, gpus_per_node, nic_bandwidth=nic_bandwidth, sharp=sharp, name=title,
                                    nics_per_node=nics_per_node, gpu=gpu, nvls=engines and nodes > 1, **efficiency,
                                    notes={"published busbw GB/s": published, "wire": wire,
                                           "sources": f"{GTC24}; {COMMON}"})
        if net_latency_s is not None and nodes > 1:
            topo.net_latency_s = net_latency_s
        return topo
    return build


def _node(gpu: str, **kwargs):
    """A builder of one NVSwitch node of ``gpu`` (:data:`labcore.sim.machines.topologies.GPUS`); ``kwargs`` go to
    :func:`labcore.sim.machines.topologies.nvswitch`."""
    return lambda nodes, gpus_per_node, nics, sharp: topologies.nvswitch(gpus_per_node, gpu=gpu, **kwargs)


def _pcie_box(gen: int, p2p: bool):
    return lambda nodes, gpus_per_node, nics, sharp: topologies.pcie(gpus_per_node, gen=gen, p2p=p2p)


_PCIE_SOURCES = ("PCIe spec (x16: Gen4 31.5, Gen5 63 GB/s a direction); GTC24 S62129 (PCIe all_reduce busbw: Gen4 24, "
                 "Gen5 48); NCCL 2.30.7 tuning.cc")


def _pcie_entries() -> list:
    """PCIe boxes of 4 and 8 GPUs, Gen4 and Gen5, with P2P and without (through host memory)."""
    out = []
    for gen in (4, 5):
        for gpus in (4, 8):
            for p2p in (True, False):
                name = f"pcie{gpus}_gen{gen}" + ("" if p2p else "_nop2p")
                how = ("GPUs reach each other's memory (P2P) through the switches" if p2p else
                       "no P2P: every transfer goes through host memory (NCCL's SHM transport)")
                out.append(Preset(
                    name, f"{gpus} GPUs on PCIe Gen{gen} x16 switches (4 a switch), two CPU sockets; {how}",
                    _pcie_box(gen, p2p), kind="node", gpus_per_node=gpus,
                    tuner=f"pcie_gen{gen}" + ("" if p2p else "_nop2p"), no_sharp=_NO_NETWORK,
                    several_nodes="the lab has no multi-node PCIe preset; use tcp_100g or roce_8x400",
                    published={"": ({4: 24.0, 5: 48.0}[gen], f"GTC24: PCIe Gen{gen}")} if p2p else {},
                    sources=_PCIE_SOURCES + ("" if p2p else "; pytorch#72835 INFO log (SHM without P2P); tuner: "
                                             "nccl-tests#307's graphs of a P2P-less PCIe box")))
    return out


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
                   "H200 v5 table (tests/data); tuner: NCCL's graphs for DGX H100 (labcore.sim.nccl.tuner.machine)"),
    Preset("pcie8", "8 GPUs on PCIe Gen4 switches, two CPU sockets, no NVLink",
           lambda nodes, g, nics, sharp: topologies.pcie(g), kind="node", tuner="pcie_4090",
           no_sharp=_NO_NETWORK, several_nodes="the lab has no multi-node PCIe preset; use tcp_100g or roce_8x400",
           sources="PCIe spec; GTC24 S62129; NCCL 2.30.7 tuning.cc; tuner: the graphs NCCL printed for 8 x RTX "
                   "4090 on PCIe (nccl-tests#307)"),
    Preset("multinode", "DGX H100-like nodes, 8 GPUs and 8 x 400 Gb/s NICs each (dgx_h100_ib, 4 nodes by default)",
           lambda nodes, g, nics, sharp: topologies.multinode(nodes, g, sharp=sharp, nics_per_node=nics,
                                                              nvls=nodes > 1),
           nodes=4, tuner="dgx_h100_ib", sharp=True,
           node_tuner="dgx_h100", sources="GTC24 S62129; NCCL 2.30.7 tuning.cc; H100 datasheet; nccl-tests#290, #309"),
    Preset("dgx_h100_ib", "DGX H100, 8 x 400 Gb/s NDR InfiniBand",
           _fabric("dgx_h100_ib", "DGX H100, 8 x 400 Gb/s IB",
                   "NDR InfiniBand: 400 Gb/s = 50 GB/s per NIC and direction, 48 achievable", NDR_BW),
           nodes=2, tuner="dgx_h100_ib", sharp=True,
           published={"": (380.0, "GTC24: DGX H100, 8 x 400Gb IB"), "sharp": (480.0, "GTC24: DGX H100 + SHARP")},
           node_tuner="dgx_h100", sources=f"{GTC24}; {COMMON}"),
    Preset("ib_8x200", "8 NVSwitch GPUs a node, 8 x 200 Gb/s HDR InfiniBand (DGX A100's network; H100-class GPUs, "
           "which a NIC-bound all-reduce does not notice)",
           _fabric("ib_8x200", "8 GPUs, 8 x 200 Gb/s IB",
                   "HDR InfiniBand: 200 Gb/s = 25 GB/s per NIC and direction, 24 achievable", HDR_BW),
           nodes=2, no_tuner=_NO_GRAPHS, sharp=True,
           published={"": (192.0, "GTC24: DGX A100, 8 x 200Gb")}, node_tuner="dgx_h100", sources=f"{GTC24}; {COMMON}"),
    Preset("roce_8x400", "8 GPUs a node, each with a 400 Gb/s RoCE NIC on lossless Ethernet (PFC/ECN)",
           _fabric("roce_8x400", "8 GPUs, 8 x 400 Gb/s RoCE",
                   "400 Gb/s RoCE: GTC24's '400Gb RDMA' busbw is 48 GB/s per NIC; SHARP is an InfiniBand "
                   "switch feature", NDR_BW),
           nodes=2, no_sharp=_ROCE_NO_SHARP,
           # NCCL's IB transport drives RoCE NICs through the same verbs, and a 400 GbE port reports NDR's speed,
           # so NCCL's search finds the graphs of the same DGX H100 nodes on InfiniBand.
           tuner="dgx_h100_ib",
           published={"": (8 * 48.0, "derived: 8 NICs x GTC24's one 400Gb RDMA NIC (48)")},
           node_tuner="dgx_h100", sources=f"{GTC24}; {COMMON}; tuner: dgx_h100_ib's graphs (same nodes, NICs at the same speed)"),
    Preset("tcp_100g", "8 NVSwitch GPUs a node sharing one 100 GbE NIC, NCCL over TCP sockets (no RDMA)",
           _fabric("tcp_100g", "8 GPUs, one 100 GbE NIC per node (TCP)",
                   "100 GbE: 12.5 GB/s per direction, 10 achievable, one NIC shared by the node's 8 GPUs",
                   TCP_100G_BW, TCP_EFFICIENCY, nics=1),
           nodes=2, nics_per_node=1, no_tuner=_NO_GRAPHS, no_sharp="SHARP needs InfiniBand switches; this is TCP "
           "over Ethernet", published={"": (10.0, "GTC24: 100GbE TCP")}, node_tuner="dgx_h100", sources=f"{GTC24}; {COMMON}"),
    # --- the machines people run: one NVSwitch node ------------------------------------------
    Preset("a100_sxm8", "8 x A100 SXM on NVSwitch (NVLink 3: 12 links, 600 GB/s both directions per GPU)",
           _node("a100"), kind="node", tuner="dgx_a100", no_sharp="A100 has no NVLink SHARP (NVLS came with "
           "Hopper); SHARP across nodes needs an InfiniBand preset such as dgx_a100_ib",
           several_nodes="for several nodes use dgx_a100_ib (the same nodes on 8 x 200 Gb/s InfiniBand)",
           published={"": (232.0, "GTC24: A100")},
           sources="A100 datasheet (NVLink 600 GB/s); GTC24 S62129 (A100 busbw 232); NCCL 2.30.7 tuning.cc; "
                   "one-process host time 36 us fitted on SuperBench's 8 x A100 run (tests/data); "
                   "tuner: NCCL's graphs for DGX A100 (labcore.sim.nccl.tuner.machine, nccl-tests#100 channels)"),
    Preset("h100_sxm8", "8 x H100 SXM on NVSwitch (NVLink 4: 18 links, 900 GB/s both directions per GPU)",
           _node("h100"), kind="node", tuner="dgx_h100", no_sharp="NVLink SHARP (NVLS) is built in; SHARP across "
           "nodes needs an InfiniBand preset such as dgx_h100_ib",
           several_nodes="for several nodes use dgx_h100_ib (the same nodes on 8 x 400 Gb/s InfiniBand)",
           published={"": (370.0, "GTC24: H100"), "nvls": (480.0, "GTC24: H100 + NVLS")},
           sources="H100 datasheet; nccl-tests#212; GTC24 S62129; NCCL 2.30.7 tuning.cc; tuner: NCCL's graphs "
                   "for DGX H100 (NVL[370.8] of nccl#1189's log, worked through search.cc)"),
    Preset("h200_sxm8", "8 x H200 SXM on NVSwitch (NVLink 4, as H100: 18 links, 900 GB/s both directions)",
           _node("h200"), kind="node", tuner="dgx_h200", no_sharp="NVLink SHARP (NVLS) is built in; SHARP across "
           "nodes needs an InfiniBand preset such as dgx_h200_ib",
           several_nodes="for several nodes use dgx_h200_ib (the same nodes on 8 x 400 Gb/s InfiniBand)",
           published={"": (365.6, "ml-engineering: 8 x H200 ring, 8 GiB"),
                      "nvls": (473.1, "ml-engineering: 8 x H200 NVLS, 8 GiB")},
           sources=f"H200 datasheet (NVLink 900 GB/s); {MLE_H200}; NCCL 2.30.7 tuning.cc; tuner: dgx_h200 "
                   "(the same SM90 GPU and NVLink-4 links: NCCL's search cannot tell it from an H100)"),
    Preset("b200_sxm8", "8 x B200 on NVSwitch (NVLink 5: 18 links, 1.8 TB/s both directions per GPU)",
           _node("b200"), kind="node", tuner="dgx_b200", no_sharp="NVLink SHARP (NVLS) is built in; SHARP "
           "across nodes needs an InfiniBand preset such as dgx_b200_ib",
           several_nodes="for several nodes use dgx_b200_ib (the same nodes on 8 x 400 Gb/s InfiniBand)",
           published={"": (700.0, "GTC25: B200"), "nvls": (850.0, "GTC25: B200 + NVLS")},
           sources=f"B200 datasheet (NVLink 1.8 TB/s); {GTC25}; NCCL 2.30.7 tuning.cc (Blackwell NVLS 0.74); "
                   "tuner: NCCL's graphs for DGX B200 (NVLink-5 40.1 GB/s links, worked through search.cc)"),
    *_pcie_entries(),
    # --- the machines people run: NVSwitch nodes on InfiniBand --------------------------------
    Preset("dgx_a100_ib", "DGX A100 nodes: 8 x A100 SXM, 8 x 200 Gb/s HDR InfiniBand",
           _fabric("dgx_a100_ib", "DGX A100, 8 x 200 Gb/s IB",
                   "HDR InfiniBand: 200 Gb/s = 25 GB/s per NIC and direction, 24 achievable", HDR_BW, gpu="a100"),
           nodes=2, tuner="dgx_a100_ib", sharp=True,
           published={"": (192.0, "GTC24: DGX A100, 8 x 200Gb")},
           node_tuner="dgx_a100", sources=f"{GTC24}; A100 datasheet; NCCL 2.30.7 tuning.cc; tuner: derived (one ring per NIC, "
                   "labcore.sim.nccl.tuner.machine)"),
    Preset("dgx_h200_ib", "DGX H200 nodes: 8 x H200 SXM, 8 x 400 Gb/s NDR InfiniBand",
           _fabric("dgx_h200_ib", "DGX H200, 8 x 400 Gb/s IB",
                   "NDR InfiniBand: 400 Gb/s = 50 GB/s per NIC and direction, 48 achievable", NDR_BW, gpu="h200"),
           nodes=2, tuner="dgx_h200_ib", sharp=True,
           published={"": (380.0, "GTC24: DGX H100, 8 x 400Gb IB (the same network and NVLink)"),
                      "sharp": (480.0, "GTC24: DGX H100 + SHARP (the same network and NVLink)")},
           node_tuner="dgx_h200", sources=f"{GTC24}; {COMMON}; tuner: dgx_h100_ib's graphs (the same NVLink and NICs)"),
    Preset("dgx_b200_ib", "DGX B200 nodes: 8 x B200, 8 x 400 Gb/s NDR InfiniBand",
           _fabric("dgx_b200_ib", "DGX B200, 8 x 400 Gb/s IB",
                   "NDR InfiniBand: 400 Gb/s = 50 GB/s per NIC and direction, 48 achievable", NDR_BW, gpu="b200"),
           nodes=2, tuner="dgx_b200_ib", sharp=True,
           node_tuner="dgx_b200", sources=f"DGX B200 datasheet (8 x 400 Gb/s ConnectX-7); {GTC24} (NDR achievable 48); NCCL 2.30.7 "
                   "tuning.cc; tuner: derived like dgx_h100_ib (labcore.sim.nccl.tuner.machine)"),
    Preset("oci_a100_roce", "Oracle Cloud BM.GPU4.8 nodes: 8 x A100 SXM 40 GB, 16 x 100 Gb/s RoCE (2 a GPU)",
           _fabric("oci_a100_roce", "OCI BM.GPU4.8, 16 x 100 Gb/s RoCE",
                   "100 Gb/s RoCE: 12.5 GB/s per NIC and direction, 16 a node (1.6 Tb/s), 2 a GPU; RDMA at GTC24's "
                   "0.96",
                   TCP_100G_BW, nics=16, gpu="a100", net_latency_s=OCI_ROCE_LATENCY_S),
           nodes=2, nics_per_node=16, tuner="dgx_a100_ib", no_sharp=_ROCE_NO_SHARP,
           # each GPU's two 100 Gb/s NICs carry what DGX A100's one 200 Gb/s NIC does, behind the same PCIe
           # Gen4 path (24 GB/s), so NCCL's search finds DGX A100's rate a GPU
           node_tuner="dgx_a100", sources=f"OCI BM.GPU4.8 shape (8 x A100 40 GB, 1.6 Tb/s RDMA in 16 x 100 Gb/s RoCE NICs; oracle-quickstart/"
                   f"oci-hpc-oke, tests/data); {GTC24} (RDMA achievable 0.96); NCCL 2.30.7 tuning.cc; RoCE latency 7 us "
                   "fitted on oracle-japan/ocitutorials' 2 x BM.GPU4.8 run (tests/data); tuner: dgx_a100_ib's "
                   "derived graphs (the same rate a GPU)"),
    Preset("a3_mega", "Google Cloud A3 Mega nodes (a3-megagpu-8g): 8 x H100, 8 x 200 Gb/s Ethernet through "
           "GPUDirect-TCPXO (TCP, not RDMA)",
           _fabric("a3_mega", "Google Cloud A3 Mega, 8 x 200 Gb/s TCPXO",
                   "200 Gb/s Ethernet: 25 GB/s per NIC and direction, GPUDirect-TCPXO moving TCP payloads straight "
                   "to GPU memory", HDR_BW, net_latency_s=A3_MEGA_TCPXO_LATENCY_S),
           nodes=2, tuner="gcp_a3mega", no_sharp="SHARP needs InfiniBand switches; this is TCP over Ethernet",
           node_tuner="dgx_h100", sources=f"Google Cloud A3 Mega machine type (8 x H100, 8 GPU NICs of 200 Gb/s, GPUDirect-TCPXO); {GTC24} "
                   "(achievable 0.96 of the line rate, as RDMA: the calibration table's 8 GiB run says no less); "
                   "NCCL 2.30.7 tuning.cc; TCPXO latency fitted on the A3 Mega calibration table (tests/data); "
                   "tuner: derived (labcore.sim.nccl.tuner.machine, gcp_a3mega)"),
    Preset("a3_ultra", "Google Cloud A3 Ultra nodes (a3-ultragpu-8g): 8 x H200, 8 x 400 Gb/s RoCE (3.2 Tb/s a node)",
           _fabric("a3_ultra", "Google Cloud A3 Ultra, 8 x 400 Gb/s RoCE",
                   "400 Gb/s RoCE (GPUDirect RDMA): 50 GB/s per NIC and direction, 48 achievable (GTC24's 400Gb RDMA)",
                   NDR_BW, gpu="h200", net_latency_s=A3_ULTRA_ROCE_LATENCY_S),
           nodes=2, tuner="dgx_h200_ib", no_sharp=_ROCE_NO_SHARP,
           # as gcp_a4: NCCL drives the RoCE NICs through the IB verbs at NDR's speed, so its search finds the
           # graphs of DGX H200 nodes on 8 x 400 Gb/s
           node_tuner="dgx_h200", sources=f"Google Cloud A3 Ultra machine type (8 x H200, 3.2 Tb/s GPUDirect RDMA over RoCE in 8 "
                   f"NICs; skypilot-org/skypilot examples/gcp_gpu_direct_tcpx, tests/data); {GTC24} (400Gb RDMA achievable "
                   "48); NCCL 2.30.7 tuning.cc; RoCE latency 5 us fitted on its all_gather calibration tables (tests/data); "
                   "tuner: dgx_h200_ib's graphs (the same GPUs and NIC speed)"),
    Preset("gcp_a4", "Google Cloud A4 nodes (a4-highgpu-8g): 8 x B200, 8 x 400 Gb/s RoCE (3.2 Tb/s a node)",
           _fabric("gcp_a4", "Google Cloud A4, 8 x 400 Gb/s RoCE",
                   "400 Gb/s RoCE: 50 GB/s per NIC and direction, 48 achievable (GTC24's 400Gb RDMA)", NDR_BW,
                   gpu="b200", net_latency_s=GCP_A4_ROCE_LATENCY_S),
           nodes=2, tuner="dgx_b200_ib", no_sharp=_ROCE_NO_SHARP,
           # as roce_8x400: NCCL drives the RoCE NICs through the IB verbs at NDR's speed, so its search
           # finds DGX B200's graphs
           node_tuner="dgx_b200", sources=f"Google Cloud A4 machine type (8 x B200, 3.2 Tb/s RDMA over RoCE; dstack's GCP cluster page, "
                   f"tests/data); {GTC24} (400Gb RDMA achievable 48); NCCL 2.30.7 tuning.cc; RoCE latency 17.5 us fitted "
                   "on its all_gather calibration table (tests/data); tuner: dgx_b200_ib's graphs (the same GPUs and "
                   "NIC speed)"),
    # --- the machines people run: AWS EFA ----------------------------------------------------
    Preset("aws_p5", "AWS p5.48xlarge nodes: 8 x H100 SXM, 32 x 100 Gb/s EFA (4 a GPU)",
           _fabric("aws_p5", "AWS p5.48xlarge, 32 x 100 Gb/s EFA",
                   "EFA: 100 Gb/s = 12.5 GB/s per NIC and direction, 32 a node (3200 Gbps); RDMA at GTC24's 0.96",
                   EFA_BW, nics=32, net_latency_s=P5_EFA_LATENCY_S),
           nodes=2, nics_per_node=32, tuner="aws_p5", no_sharp=_EFA_NO_SHARP,
           node_tuner="dgx_h100", sources=f"AWS p5 instance specification (8 x H100, 3200 Gbps EFA, 32 NICs); {GTC24} (RDMA achievable "
                   "0.96); aws-ofi-nccl src/platform-aws.cpp (latency 75 us); tests/data/infolog_aws_p5_h100_2node_"
                   "efa.log (16 channels, 8 NVLS heads, 75 us); NCCL 2.30.7 tuning.cc; EFA latency 23 us fitted "
                   "on KeitaW's 2 x p5 run (tests/data)"),
    Preset("aws_p4de", "AWS p4de.24xlarge nodes: 8 x A100 SXM 80 GB, 4 x 100 Gb/s EFA",
           _fabric("aws_p4de", "AWS p4de.24xlarge, 4 x 100 Gb/s EFA",
                   "EFA: 100 Gb/s = 12.5 GB/s per NIC and direction, 4 a node (400 Gbps); RDMA at GTC24's 0.96",
                   EFA_BW, nics=4, gpu="a100", net_latency_s=P4DE_EFA_LATENCY_S),
           nodes=2, nics_per_node=4, tuner="aws_p4de", no_sharp=_EFA_NO_SHARP,
           node_tuner="dgx_a100", sources=f"AWS p4d/p4de instance specification (8 x A100, 400 Gbps EFA, 4 NICs); {GTC24} (RDMA "
                   "achievable 0.96); aws-ofi-nccl src/platform-aws.cpp (latency 75 us); NCCL 2.30.7 tuning.cc; "
                   "EFA latency 73.5 us fitted on awsome-distributed-training's 2 x p4de run (tests/data)"),
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
