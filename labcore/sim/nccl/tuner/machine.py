"""What NCCL's tuner knows about a communicator, and NCCL's machines by name.

NCCL's model does not look at the hardware directly: it reads the *graphs* its
topology search found (src/graph/search.cc), one per algorithm family, each with
a channel count, a bandwidth per channel inside a node and across nodes, the kind
of path it uses, and whether every channel takes the same route
(``sameChannels``); plus the GPU generation, the CPU, the number of nodes and
whether CollNet (SHARP in the network) and NVLS (SHARP in the NVSwitch) are
there. :class:`Machine` holds exactly that. An INFO log prints the graphs as
``Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX,
sameChannels 1`` (pattern 4 = ring, 1-3 = trees, 5 = NVLS, 6 = CollNet direct):
copy those numbers into :class:`TopoGraph` to model your own machine.

The presets' graphs are what NCCL 2.30.7's search finds for that hardware,
worked through by hand from search.cc (each preset says how); where a public log
shows the same machine it is cited.

Example
-------
>>> m = MACHINES["dgx_h100"]
>>> m.ring.channels, m.ring.bw_intra, m.comm_channels
(12, 30.0, 24)
>>> m.with_ranks(4).ranks
4
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from labcore import validate
from labcore.sim.nccl.tuner.constants import PATH_TYPES, arch_index

CPU_ARCHS = ("x86", "power", "arm", "mixed")
CPU_VENDORS = ("intel", "amd", "zhaoxin", "mixed", "other")
PATTERNS = {"balanced_tree": 1, "split_tree": 2, "tree": 3, "ring": 4, "nvls": 5, "collnet_direct": 6}
GPU_ARCHS = {"volta": 70, "ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100}
MAXCHANNELS = 64   # src/include/device.h
# Compute capabilities the model takes (NCCL writes 9.0 as 90); below, 9 for 9.0 is the likely slip.
MIN_COMPCAP, MAX_COMPCAP = 30, 200


def _whole(value) -> bool:
    return validate.whole(value) is not None


@dataclass(frozen=True)
class TopoGraph:
    """One graph of NCCL's topology search (``struct ncclTopoGraph``, the fields the tuner reads).

    Parameters
    ----------
    channels : nChannels, the number of rings/trees found.
    bw_intra, bw_inter : GB/s per channel inside a node and across nodes (the log's
        ``bw intra/inter``); ``bw_inter`` defaults to ``bw_intra``.
    type_intra, type_inter : path kinds, closest first: LOC, NVL, NVB, C2C, PIX, PXB,
        P2C, PXN, PHB, SYS, NET (the log's ``type intra/inter``).
    same_channels : every channel takes the same GPU order (``sameChannels``).
    latency_inter : the network's extra latency in us (``latencyinter``, 0 for IB).
    pattern : "ring", "balanced_tree", "split_tree", "tree", "nvls" or "collnet_direct".

    Example
    -------
    >>> TopoGraph(12, 30.0).bw_inter                     # defaults to bw_intra
    30.0
    """

    channels: int
    bw_intra: float
    bw_inter: float | None = None
    type_intra: str = "NVL"
    type_inter: str = "PIX"
    same_channels: bool = True
    latency_inter: float = 0.0
    pattern: str = "ring"

    def __post_init__(self):
        if self.bw_inter is None:
            object.__setattr__(self, "bw_inter", self.bw_intra)
        if not _whole(self.channels) or self.channels < 0:
            raise ValueError(f"channels must be a whole number >= 0, not {self.channels!r}")
        object.__setattr__(self, "channels", int(self.channels))
        for name in ("bw_intra", "bw_inter", "latency_inter"):
            value = getattr(self, name)
            validate.finite_number(value, name, at_least=0,
                                   must="a finite number >= 0 (GB/s per channel; latency in us)")
        for name in ("type_intra", "type_inter"):
            if getattr(self, name) not in PATH_TYPES:
                raise ValueError(f"{name} must be one of {', '.join(PATH_TYPES)}; got {getattr(self, name)!r}")
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}; got {self.pattern!r}")

    def path_rank(self, which: str) -> int:
        """Position of type_intra/type_inter in NCCL's order (LOC = 0 ... DIS = 11)."""
        return PATH_TYPES.index(getattr(self, f"type_{which}"))


@dataclass(frozen=True)
class Machine:
    """A communicator as NCCL's tuner sees it.

    Parameters
    ----------
    ranks, nodes : GPUs in all, and machines (the same number of GPUs on each).
    gpu : "volta", "ampere", "ada", "hopper", "blackwell", or a compute capability
        such as 90 (the communicator's lowest); ``max_gpu`` the highest, default the same.
    cpu_arch : "x86", "power", "arm" or "mixed".
    cpu_vendor : "intel", "amd", "zhaoxin", "mixed" or "other".
    ring, tree : graphs of the Ring and Tree searches; PAT reads the tree graph.
    nvls : graph of the NVLS search, or None where NVLink SHARP is absent (NVLSTree reads it too).
    collnet : CollNet (SHARP in the network switches, ``NCCL_COLLNET_ENABLE=1``) in use.
    collnet_chain, collnet_direct : their graphs (needed when ``collnet``).
    collnet_chain_support : the network supports CollNet chains.
    collnet_heads : CollNet heads per node (``collNetHeadsNum``).
    collnet_gather : the CollNet plugin offers all-gather and reduce-scatter
        (``iallgather``/``ireducescatter``).
    nvswitch : the node has NVSwitches (CollNetDirect needs them).
    net_offload : the network does the protocol work on the NIC (PAT is off then).
    channels : the communicator's channel count (``N coll channels`` in the log); by
        default what src/graph/connect.cc makes of the graphs (rings doubled, ...).
    min_ctas, max_ctas : NCCL_MIN_CTAS / NCCL_MAX_CTAS (formerly NCCL_MIN/MAX_NCHANNELS).
    nvls_channels : CTAs an NVLS collective uses; by default NCCL's (16 on Hopper, 24/32 on Blackwell).
    name : a label for figures.
    """

    ranks: int
    nodes: int
    gpu: str | int
    ring: TopoGraph
    tree: TopoGraph
    cpu_arch: str = "x86"
    cpu_vendor: str = "intel"
    nvls: TopoGraph | None = None
    collnet: bool = False
    collnet_chain: TopoGraph | None = None
    collnet_direct: TopoGraph | None = None
    collnet_chain_support: bool = True
    collnet_heads: int = 0
    collnet_gather: bool = False
    nvswitch: bool = False
    net_offload: bool = False
    max_gpu: str | int | None = None
    channels: int | None = None
    min_ctas: int = 1
    max_ctas: int = MAXCHANNELS
    nvls_channels: int | None = None
    name: str = ""

    def __post_init__(self):
        self._check_size()
        self._check_gpus()
        self._check_graphs()
        self._check_channels()
        self._check_host()

    def _check_size(self):
        if not _whole(self.ranks) or self.ranks < 1:
            raise ValueError(f"ranks must be a whole number >= 1, not {self.ranks!r}")
        if not _whole(self.nodes) or self.nodes < 1 or self.ranks % self.nodes:
            raise ValueError(f"nodes must divide ranks ({self.ranks} ranks, {self.nodes!r} nodes): "
                             "NCCL's model assumes the same number of GPUs on every node")
        object.__setattr__(self, "ranks", int(self.ranks))
        object.__setattr__(self, "nodes", int(self.nodes))

    def _check_gpus(self):
        for name in ("gpu", "max_gpu"):
            value = getattr(self, name)
            if value is None or value in GPU_ARCHS:
                continue
            if not _whole(value) or not MIN_COMPCAP <= value < MAX_COMPCAP:
                raise ValueError(f"{name} must be a compute capability written as NCCL does (90 for 9.0, "
                                 f"from {MIN_COMPCAP}) or one of {', '.join(GPU_ARCHS)}; got {value!r}")

    def _check_graphs(self):
        for name in ("ring", "tree"):
            if not isinstance(getattr(self, name), TopoGraph):
                raise TypeError(f"{name} must be a Graph of NCCL's search (a TopoGraph: the log's 'Pattern ...' "
                                f"line), not {type(getattr(self, name)).__name__}")
        for name in ("nvls", "collnet_chain", "collnet_direct"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), TopoGraph):
                raise TypeError(f"{name} must be a Graph of NCCL's search (a TopoGraph) or None, not "
                                f"{type(getattr(self, name)).__name__}")

    def _check_channels(self):
        for name in ("channels", "nvls_channels"):
            value = getattr(self, name)
            if value is not None and (not _whole(value) or not 1 <= value <= MAXCHANNELS):
                raise ValueError(f"{name} must be a whole number from 1 to {MAXCHANNELS} (or None for "
                                 f"NCCL's own), not {value!r}")

    def _check_host(self):
        if self.cpu_arch not in CPU_ARCHS:
            raise ValueError(f"cpu_arch must be one of {', '.join(CPU_ARCHS)}; got {self.cpu_arch!r}")
        if self.cpu_vendor not in CPU_VENDORS:
            raise ValueError(f"cpu_vendor must be one of {', '.join(CPU_VENDORS)}; got {self.cpu_vendor!r}")
        if self.collnet and (self.collnet_chain is None or self.collnet_direct is None):
            raise ValueError("collnet=True needs the collnet_chain and collnet_direct graphs (from the log's "
                             "'Pattern 3'/'Pattern 6' lines)")
        if (not _whole(self.min_ctas) or not _whole(self.max_ctas)
                or not 1 <= self.min_ctas <= self.max_ctas <= MAXCHANNELS):
            raise ValueError(f"min_ctas and max_ctas must be whole numbers with 1 <= min_ctas <= max_ctas <= "
                             f"{MAXCHANNELS}, not {self.min_ctas!r} and {self.max_ctas!r}")

    # --- what NCCL derives --------------------------------------------------------------------
    @property
    def compcap(self) -> int:
        """The lowest compute capability (``minCompCap``)."""
        return GPU_ARCHS.get(self.gpu, self.gpu)

    @property
    def max_compcap(self) -> int:
        return self.compcap if self.max_gpu is None else GPU_ARCHS.get(self.max_gpu, self.max_gpu)

    @property
    def arch(self) -> str:
        """"volta", "ampere", "hopper" or "blackwell": the row of NCCL's tables."""
        return ("volta", "ampere", "hopper", "blackwell")[arch_index(self.compcap)]

    @property
    def local_ranks(self) -> int:
        return self.ranks // self.nodes

    @property
    def comm_channels(self) -> int:
        """``comm->nChannels``: the given ``channels``, or what src/graph/connect.cc derives."""
        if self.channels is not None:
            return self.channels
        c = min(MAXCHANNELS, 2 * min(self.ring.channels, self.tree.channels))   # every ring twice
        chain = self.collnet_chain
        if self.collnet and chain.bw_intra > chain.bw_inter and self.ranks > self.nodes:
            c = min(MAXCHANNELS, c + c // 2)
        if self.compcap >= 90 and self.nodes > 1 and self.ring.bw_intra > 45.0 and c < 16:
            c *= 2
        return max(self.min_ctas, min(self.max_ctas, c))

    @property
    def nvls_ctas(self) -> int:
        """CTAs an NVLS collective launches (src/transport/nvls.cc ncclNvlsTuning)."""
        if self.nvls_channels is not None:
            n = self.nvls_channels
        elif self.compcap >= 100:
            n = 32 if self.nodes > 1 else 24
        else:
            n = 16
        return max(self.min_ctas, min(self.max_ctas, n))

    def graph(self, algorithm: str) -> TopoGraph | None:
        """The graph NCCL hands the tuner for ``algorithm`` (init.cc: PAT reads the tree's)."""
        return {"Tree": self.tree, "Ring": self.ring, "CollNetDirect": self.collnet_direct,
                "CollNetChain": self.collnet_chain, "NVLS": self.nvls, "NVLSTree": self.nvls,
                "PAT": self.tree}[algorithm]

    def with_ranks(self, ranks: int, nodes: int | None = None) -> "Machine":
        """The same hardware with another communicator size (same graphs)."""
        return replace(self, ranks=ranks, nodes=nodes or self.nodes)


def graphs_from_log(graphs) -> dict[str, TopoGraph]:
    """Graphs from the "Pattern ..." lines of an INFO log, by pattern name ("ring", "balanced_tree", ...).

    Parameters
    ----------
    graphs : the ``graphs`` DataFrame of :func:`labcore.readers.nccl_log.parse` (or any frame with its
        columns: pattern, channels, bw_intra, bw_inter, type_intra, type_inter, same_channels).

    Example
    -------
    >>> import pandas as pd
    >>> row = dict(pattern="ring", cross_nic=0, channels=1, bw_intra=5.0, bw_inter=5.0,
    ...            type_intra="SYS", type_inter="PIX", same_channels=True)
    >>> graphs_from_log(pd.DataFrame([row]))["ring"].type_intra
    'SYS'
    """
    import pandas as pd

    if not isinstance(graphs, pd.DataFrame):
        raise TypeError(f"graphs_from_log takes the graphs DataFrame of labcore.readers.nccl_log.parse(log).graphs, "
                        f"not {type(graphs).__name__}")
    missing = sorted({"pattern", "channels", "bw_intra", "bw_inter", "type_intra", "type_inter",
                      "same_channels"} - set(graphs.columns))
    if missing:
        raise ValueError(f"the graphs lack the columns {missing}; pass labcore.readers.nccl_log.parse(log).graphs")
    out = {}
    for r in graphs.to_dict("records"):
        out.setdefault(r["pattern"], TopoGraph(int(r["channels"]), float(r["bw_intra"]), float(r["bw_inter"]),
                                           type_intra=r["type_intra"], type_inter=r["type_inter"],
                                           same_channels=bool(r["same_channels"]), pattern=r["pattern"]))
    return out


# --- presets ------------------------------------------------------------------------------------
# H100/H200 SXM: 18 NVLink-4 links x 20.6 GB/s (topo.h SM90_NVLINK_BW) = 370.8 GB/s to the
# NVSwitches, as the log of NVIDIA/nccl#1189 prints it ("NVL[370.8] - NVS/0").
# Ring search (sm90SpeedArrayIntra 60, 50, 40, 30, ...): 6 channels at 60 GB/s fit (360 <= 370.8),
# no slower speed beats 360; ncclTopoDupChannels doubles them at half speed: 12 x 30.
# Tree: 12 channels forced (the ring's); 30 GB/s is the first speed whose 12 channels fit.
# NVLS: one channel a GPU (8); each channel loads its head GPU twice, so 9 x speed <= 370.8 gives
# 40 GB/s intra; pass 2 raises bwInter, unused on one node, to the top speed 60.
# connect.cc doubles the 12 rings: 24 channels.
_H100_NODE = dict(gpu="hopper", cpu_vendor="intel", nvswitch=True,
                  ring=TopoGraph(12, 30.0, type_intra="NVL", type_inter="PIX", same_channels=True),
                  tree=TopoGraph(12, 30.0, type_intra="NVL", type_inter="PIX", pattern="balanced_tree"),
                  nvls=TopoGraph(8, 40.0, 60.0, type_intra="NVL", same_channels=False, pattern="nvls"))

# Multi-node DGX H100: one 400 Gb/s NIC per GPU (NCCL counts 50 GB/s) behind PCIe Gen5 (48 GB/s,
# "maxBw 48.0" in nccl#1189). A ring enters at GPU i from NIC i and must leave through NIC i again
# (crossNic 0), which the last GPU reaches only through GPU i: path PXN. At 48 GB/s 8 channels
# would load every GPU's NVLink with 8 x 48 = 384 > 370.8, so 45 GB/s (sm90SpeedArrayInter) wins:
# 8 x 45. Each channel starts at another GPU: sameChannels 0. The tree must have the ring's 8
# channels; we take the ring's 45 GB/s (an assumption: check your log's "Pattern 1" line).
# NVLS: 8 heads; 9 x speed <= 370.8 gives 40 GB/s intra, pass 2 raises bwInter to 48.
_H100_IB = dict(gpu="hopper", cpu_vendor="intel", nvswitch=True,
                ring=TopoGraph(8, 45.0, type_intra="NVL", type_inter="PXN", same_channels=False),
                tree=TopoGraph(8, 45.0, type_intra="NVL", type_inter="PXN", same_channels=False,
                               pattern="balanced_tree"),
                nvls=TopoGraph(8, 40.0, 48.0, type_intra="NVL", type_inter="PIX", same_channels=False,
                               pattern="nvls"))

# DGX A100 across nodes: 8 x 200 Gb/s HDR InfiniBand, one NIC per GPU on its PCIe switch; AMD EPYC
# hosts. Derived (tests/data holds no INFO log of this machine): one ring per NIC, each at the
# slower of the NIC (NCCL counts 200 Gb/s as 25 GB/s) and the GPU's PCIe Gen4 path to it (24 GB/s
# achievable, GTC24 S62129), as dgx_h100_ib's search works out; the tree takes the ring's channels.
# Check against your log's "Pattern 4" / "Pattern 1" lines.
_A100_IB = dict(gpu="ampere", cpu_vendor="amd", nvswitch=True,
                ring=TopoGraph(8, 24.0, type_intra="NVL", type_inter="PIX", same_channels=False),
                tree=TopoGraph(8, 24.0, type_intra="NVL", type_inter="PIX", same_channels=False,
                               pattern="balanced_tree"))
# DGX B200 across nodes: 8 x 400 Gb/s ConnectX-7 behind PCIe Gen5, as on DGX H100 (DGX B200
# datasheet), Intel Xeon hosts. Derived like dgx_h100_ib (no log in tests/data): 8 rings at 45 GB/s
# (sm90/sm100 inter speed arrays step from 48 to 45); NVLS: 8 heads at dgx_b200's 80 GB/s intra, the
# NIC's 48 inter.
_B200_IB = dict(gpu="blackwell", cpu_vendor="intel", nvswitch=True,
                ring=TopoGraph(8, 45.0, type_intra="NVL", type_inter="PXN", same_channels=False),
                tree=TopoGraph(8, 45.0, type_intra="NVL", type_inter="PXN", same_channels=False,
                               pattern="balanced_tree"),
                nvls=TopoGraph(8, 80.0, 48.0, type_intra="NVL", type_inter="PIX", same_channels=False,
                               pattern="nvls"))

# AWS EFA (libfabric through the aws-ofi-nccl net plugin). The plugin reports the network's latency
# to NCCL (props.latency, which search.cc:745 copies into every graph's latencyInter): 75 us on
# p4d, p4de and p5 (aws/aws-ofi-nccl src/platform-aws.cpp, platform_data_map, commit 2daf7d3;
# "NET/OFI Internode latency set at 75.0 us" in tests/data/infolog_aws_p5_h100_2node_efa.log). The
# plugin's own comment: "Empirical testing on P5 had shown that NCCL's internal tuner choices work
# better with this value" -- a setting for NCCL's tuner, not a measured latency.
EFA_LATENCY_US = 75.0
# p5.48xlarge: 8 x H100 SXM, 32 x 100 Gb/s EFA a node, 4 a GPU (AWS's p5 instance specification:
# 3200 Gbps EFA), Intel Xeon hosts (4th Gen Xeon Scalable, the same specification). The log's rings
# are 8 graphs doubled to "16 coll channels" (Channel 08-15 repeat 00-07) with "16 nvls channels" and
# 8 NVLS heads: what dgx_h100_ib's graphs give (8 rings, 16 channels, 8 heads), with each GPU's
# 4 x 100 Gb/s a 400 Gb/s NIC as the plugin groups them; the log prints no "Pattern" lines, so the
# 45 GB/s a channel is dgx_h100_ib's (an assumption).
_P5_EFA = {**_H100_IB,
           "ring": replace(_H100_IB["ring"], latency_inter=EFA_LATENCY_US),
           "tree": replace(_H100_IB["tree"], latency_inter=EFA_LATENCY_US),
           "nvls": replace(_H100_IB["nvls"], latency_inter=EFA_LATENCY_US)}
# p4de.24xlarge: 8 x A100 SXM 80 GB, 4 x 100 Gb/s EFA a node (AWS's p4d/p4de specification: 400 Gbps
# EFA), Intel Xeon hosts (2nd Gen Xeon Scalable, P-8275CL). Derived (no INFO log of it in tests/data):
# one ring a NIC at NCCL's 12 GB/s (the inter speed below its 12.5 GB/s), so 4 rings and the tree on
# the ring's channels; connect.cc doubles them to 8 channels. Check against a log's "Pattern" lines.
_P4DE_EFA = dict(gpu="ampere", cpu_vendor="intel", nvswitch=True,
                 ring=TopoGraph(4, 12.0, type_intra="NVL", type_inter="PIX", same_channels=False,
                                latency_inter=EFA_LATENCY_US),
                 tree=TopoGraph(4, 12.0, type_intra="NVL", type_inter="PIX", same_channels=False,
                                pattern="balanced_tree", latency_inter=EFA_LATENCY_US))

# Google Cloud A3 Mega (a3-megagpu-8g): 8 x H100 SXM, 8 x 200 Gb/s Ethernet NICs a node, which NCCL drives
# through the GPUDirect-TCPXO net plugin (Google Cloud's A3 Mega documentation), Intel Xeon hosts. Derived like
# dgx_h100_ib (no INFO log of it in tests/data): NCCL counts a 200 Gb/s NIC as 25 GB/s, so the inter speed
# array (sm90: ..., 30, 24, ...) gives 8 rings at 24 GB/s; NVLS: 8 heads at dgx_h100_ib's 40 GB/s intra, 24 inter.
# What latency the plugin reports to NCCL is not known here (0).
_H100_TCPXO = {**_H100_IB,
               "ring": replace(_H100_IB["ring"], bw_intra=24.0, bw_inter=24.0),
               "tree": replace(_H100_IB["tree"], bw_intra=24.0, bw_inter=24.0),
               "nvls": replace(_H100_IB["nvls"], bw_inter=24.0)}


def _pcie(bw: float, name: str) -> Machine:
    """A PCIe box (no NVLink): one ring and one tree through the CPUs, at ``bw`` GB/s a channel."""
    return Machine(8, 1, gpu="ampere", cpu_vendor="intel", name=name,
                   ring=TopoGraph(1, bw, type_intra="SYS", type_inter="PIX"),
                   tree=TopoGraph(1, bw, type_intra="SYS", type_inter="PIX", pattern="balanced_tree"))


MACHINES: dict[str, Machine] = {
    "dgx_h100": Machine(8, 1, name="DGX H100 (8 x H100 SXM, NVSwitch)", **_H100_NODE),
    # Same SM90 GPU and the same 18 NVLink-4 links: NCCL's model cannot tell an H200 from an H100.
    "dgx_h200": Machine(8, 1, name="DGX H200 (8 x H200 SXM, NVSwitch)", **_H100_NODE),
    # A100 SXM: 12 NVLink-3 links x 20 GB/s = 240; AMD EPYC hosts. Ring: 6 x 40 = 240 fills the
    # links at once; doubled to 12 x 20; 24 channels, as the log of NVIDIA/nccl-tests#100 shows
    # ("Channel 23/24" on an HGX A100). No NVLS before Hopper.
    "dgx_a100": Machine(8, 1, gpu="ampere", cpu_vendor="amd", nvswitch=True,
                        name="DGX A100 (8 x A100 SXM, NVSwitch)",
                        ring=TopoGraph(12, 20.0, type_intra="NVL"),
                        tree=TopoGraph(12, 20.0, type_intra="NVL", pattern="balanced_tree")),
    # 8 x RTX 4090 on PCIe through the CPUs: the graphs of the log in NVIDIA/nccl-tests#307
    # ("Pattern 4, crossNic 0, nChannels 1, bw 5.000000/5.000000, type SYS/PIX, sameChannels 1",
    # the same for pattern 1). Compute capability 8.9 reads NCCL's Ampere rows.
    "pcie_4090": Machine(8, 1, gpu="ada", cpu_vendor="intel", name="8 x RTX 4090 on PCIe",
                         ring=TopoGraph(1, 5.0, type_intra="SYS", type_inter="PIX"),
                         tree=TopoGraph(1, 5.0, type_intra="SYS", type_inter="PIX", pattern="balanced_tree")),
    "dgx_h100_ib": Machine(32, 4, name="4 DGX H100 nodes, 8 x 400 Gb/s InfiniBand each", **_H100_IB),
    "dgx_h200_ib": Machine(32, 4, name="4 DGX H200 nodes, 8 x 400 Gb/s InfiniBand each", **_H100_IB),
    "dgx_a100_ib": Machine(16, 2, name="2 DGX A100 nodes, 8 x 200 Gb/s InfiniBand each", **_A100_IB),
    "dgx_b200_ib": Machine(16, 2, name="2 DGX B200 nodes, 8 x 400 Gb/s InfiniBand each", **_B200_IB),
    "aws_p5": Machine(16, 2, name="2 AWS p5.48xlarge, 32 x 100 Gb/s EFA each", **_P5_EFA),
    "aws_p4de": Machine(16, 2, name="2 AWS p4de.24xlarge, 4 x 100 Gb/s EFA each", **_P4DE_EFA),
    "gcp_a3mega": Machine(16, 2, name="2 Google Cloud A3 Mega, 8 x 200 Gb/s GPUDirect-TCPXO each", **_H100_TCPXO),
    # PCIe boxes. Without P2P (GPUs exchange through host memory, NCCL's SHM transport): the graphs
    # NCCL printed for 8 x RTX 4090, whose GeForce cards have no P2P (nccl-tests#307, the pcie_4090
    # machine: 1 channel at 5 GB/s, type SYS; two coll channels, as the P2P-less box of pytorch#72835
    # prints "2 coll channels"). Gen5 without P2P: derived, twice Gen4's 5 GB/s (twice the line rate).
    # With P2P: derived (no log in tests/data), one channel at the achievable x16 rate, Gen4 24 and
    # Gen5 48 GB/s (GTC24 S62129's PCIe all_reduce busbw). Compute capability 8.0 reads NCCL's
    # Ampere rows, as for PCIe A100s and Ada cards.
    "pcie_gen4": _pcie(24.0, "PCIe Gen4 box with P2P"),
    "pcie_gen5": _pcie(48.0, "PCIe Gen5 box with P2P"),
    "pcie_gen4_nop2p": _pcie(5.0, "PCIe Gen4 box without P2P (through host memory)"),
    "pcie_gen5_nop2p": _pcie(10.0, "PCIe Gen5 box without P2P (through host memory)"),
    # B200: 18 NVLink-5 links x 40.1 GB/s = 721.8. Ring (sm100SpeedArrayIntra 90, 80, ...): 8 x 90 =
    # 720, doubled to 16 x 45; 32 channels, as a DGX B200's log prints them (NVIDIA/nccl#1646, NCCL 2.25.1:
    # "32 coll channels"). NVLS: 9 x speed <= 721.8 gives 80 intra; bwInter 90.
    "dgx_b200": Machine(8, 1, gpu="blackwell", cpu_vendor="intel", nvswitch=True,
                        name="DGX B200 (8 x B200, NVSwitch)",
                        ring=TopoGraph(16, 45.0, type_intra="NVL"),
                        tree=TopoGraph(16, 45.0, type_intra="NVL", pattern="balanced_tree"),
                        nvls=TopoGraph(8, 80.0, 90.0, type_intra="NVL", same_channels=False, pattern="nvls")),
}
