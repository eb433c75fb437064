"""Scale-out presets: GPU nodes joined by InfiniBand, RoCE or TCP, and what crosses their NICs.

Four machines with published multi-node all_reduce figures (nccl-tests busbw, GTC24
S62129, reproduced in stas00/ml-engineering network/benchmarks):

================  =========================================  =====================
preset            network                                    published busbw GB/s
================  =========================================  =====================
``dgx_h100_ib``   8 GPUs/node, 8 x 400 Gb/s NDR InfiniBand   380, with SHARP 480
``ib_8x200``      8 GPUs/node, 8 x 200 Gb/s (HDR IB)         192 (DGX A100 8x200Gb)
``roce_8x400``    8 GPUs/node, 8 x 400 Gb/s RoCE (RDMA)      48 per 400Gb RDMA NIC
``tcp_100g``      8 GPUs/node, one 100 GbE NIC, TCP sockets  10
================  =========================================  =====================

The NIC-per-GPU presets are :func:`labcore.sim.topologies.multinode` with the NIC rate set
(its achievable fraction, 0.96, is GTC24's 400Gb RDMA figure: 48 of 50 GB/s); RoCE runs the
same RDMA wire rate as InfiniBand, so its preset differs only in what it cannot do:
in-network reduction (SHARP needs InfiniBand switches). ``tcp_100g`` shares one NIC per node.
Each preset's ``notes`` name their sources.

Example
-------
>>> t = preset("dgx_h100_ib", nodes=2)
>>> t.ranks, t.nodes, PUBLISHED["dgx_h100_ib"]
(16, 2, 380.0)
"""
from __future__ import annotations

import numpy as np

from labcore.sim import topologies
from labcore.sim.topology import Graph, Link

GPUS_PER_NODE = 8
GTC24 = "GTC24 S62129 (nvidia.com/en-us/on-demand/session/gtc24-s62129/), via stas00/ml-engineering network/benchmarks"
# Published nccl-tests all_reduce busbw (GB/s) of each preset's network [GTC24 S62129].
PUBLISHED = {"dgx_h100_ib": 380.0, "dgx_h100_ib_sharp": 480.0, "ib_8x200": 192.0, "roce_8x400": 8 * 48.0,
             "tcp_100g": 10.0}
# 100 GbE = 12.5 GB/s per direction; GTC24: 100GbE TCP all_reduce busbw 10 GB/s (80%).
TCP_100G_BW = 12.5e9
TCP_EFFICIENCY = 10 / 12.5


def dgx_h100_ib(nodes: int = 2, sharp: bool = False):
    """DGX H100 nodes, each GPU with its own 400 Gb/s NDR InfiniBand NIC; ``sharp``: the fabric
    reduces in the network (IB SHARP, NCCL's CollNet)."""
    topo = topologies.multinode(nodes, GPUS_PER_NODE, nic_bandwidth=50e9, sharp=sharp,
                                name=f"{nodes} x DGX H100, 8 x 400 Gb/s IB" + (" + SHARP" if sharp else ""))
    return _cite(topo, "dgx_h100_ib_sharp" if sharp else "dgx_h100_ib",
                 "NDR InfiniBand: 400 Gb/s = 50 GB/s per NIC and direction")


def ib_8x200(nodes: int = 2, sharp: bool = False):
    """Nodes of 8 NVSwitch GPUs with 8 x 200 Gb/s HDR InfiniBand NICs (DGX A100's network;
    the GPUs are H100-class here, which a NIC-bound all-reduce does not notice)."""
    topo = topologies.multinode(nodes, GPUS_PER_NODE, nic_bandwidth=25e9, sharp=sharp,
                                name=f"{nodes} x 8 GPUs, 8 x 200 Gb/s IB" + (" + SHARP" if sharp else ""))
    return _cite(topo, "ib_8x200", "HDR InfiniBand: 200 Gb/s = 25 GB/s per NIC and direction")


def roce_8x400(nodes: int = 2):
    """8 GPUs per node, each with a 400 Gb/s RoCE NIC on a lossless Ethernet fabric (PFC/ECN).
    RDMA over Ethernet runs at the same wire rate; no in-network reduction."""
    topo = topologies.multinode(nodes, GPUS_PER_NODE, nic_bandwidth=50e9,
                                name=f"{nodes} x 8 GPUs, 8 x 400 Gb/s RoCE")
    return _cite(topo, "roce_8x400", "400 Gb/s RoCE: GTC24's '400Gb RDMA' busbw is 48 GB/s per NIC; SHARP is "
                 "an InfiniBand switch feature")


def tcp_100g(nodes: int = 2):
    """8 NVSwitch GPUs per node sharing one 100 GbE NIC, NCCL over TCP sockets (no RDMA).

    Every GPU's traffic to another node goes GPU -> node switch -> NIC -> fabric -> NIC ->
    node switch -> GPU, so the node's one NIC carries all of it.
    """
    P = nodes * GPUS_PER_NODE
    nvlink = topologies.H100_NVLINK_BW * topologies.NVLINK_EFFICIENCY
    hop_nv, hop_net = topologies.NCCL_RING_LL_HOP_S["nvlink"], topologies.NCCL_RING_LL_HOP_S["net"]
    nic = TCP_100G_BW * TCP_EFFICIENCY
    names = [f"node {r // GPUS_PER_NODE} gpu {r % GPUS_PER_NODE}" for r in range(P)]
    names += [f"node {n} nvswitch" for n in range(nodes)] + ["ethernet switch"]
    fabric = P + nodes
    links = []
    for r in range(P):
        links += [Link(r, P + r // GPUS_PER_NODE, nvlink, hop_nv / 2, "nvlink"),
                  Link(P + r // GPUS_PER_NODE, r, nvlink, hop_nv / 2, "nvlink")]
    for n in range(nodes):
        links += [Link(P + n, fabric, nic, hop_net / 2, "nic"), Link(fabric, P + n, nic, hop_net / 2, "nic")]
    topo = Graph(f"{nodes} x 8 GPUs, one 100 GbE NIC per node (TCP)", P, names, links,
                 node_of=np.arange(P) // GPUS_PER_NODE, launch_s=topologies.NCCL_RING_LL_BASE_S,
                 notes={"nic B/s": TCP_100G_BW, "nic achievable fraction": TCP_EFFICIENCY,
                        "nvlink achievable B/s": nvlink})
    return _cite(topo, "tcp_100g", "100 GbE: 12.5 GB/s per direction, one NIC shared by the node's 8 GPUs")


def _cite(topo, key: str, wire: str):
    topo.notes.update({"published busbw GB/s": PUBLISHED[key], "wire": wire,
                       "sources": f"{GTC24}; NCCL 2.30.7 src/graph/tuning.cc (latencies); H100 datasheet"})
    return topo


PRESETS = {"dgx_h100_ib": dgx_h100_ib, "ib_8x200": ib_8x200, "roce_8x400": roce_8x400, "tcp_100g": tcp_100g}
SHARP_CAPABLE = ("dgx_h100_ib", "ib_8x200")


def preset(name: str, nodes: int = 2, sharp: bool = False):
    """A scale-out preset by name (see the module docstring) for ``nodes`` nodes of 8 GPUs.

    Example
    -------
    >>> preset("tcp_100g", 4).ranks
    32
    """
    if name not in PRESETS:
        raise ValueError(f"unknown scale-out preset {name!r}; choose one of {', '.join(PRESETS)}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be a whole number of at least 1, not {nodes!r}")
    if sharp and name not in SHARP_CAPABLE:
        raise ValueError(f"{name} has no in-network reduction (SHARP needs InfiniBand switches); "
                         f"use one of {', '.join(SHARP_CAPABLE)}")
    return PRESETS[name](nodes, sharp=True) if sharp else PRESETS[name](nodes)


def nic_bytes(trace) -> "object":
    """Bytes every NIC sent up into the fabric and received down from it, from a trace's routes.

    A transfer's route is its list of links; a link into the fabric switch is a NIC's send
    side ("up"), a link out of it the receive side ("down"). Returns a DataFrame indexed by
    node (the rank names of its NICs' GPUs) with columns ``up`` and ``down`` in bytes.

    Example
    -------
    >>> import labcore.sim as sim
    >>> t = sim.simulate("all_reduce", "in_network", 4, 4096, topology=topologies.multinode(4, 1, sharp=True),
    ...                  values=False)
    >>> nic_bytes(t)["up"].tolist()
    [4096.0, 4096.0, 4096.0, 4096.0]
    """
    import pandas as pd

    topo, sizes = trace.topology, trace.schedule.size
    up, down = {}, {}
    for link in np.unique(trace.links[trace.links >= 0]):
        label = topo.link_label(int(link))
        src, _, dst = label.partition(" -> ")
        dst = dst.split(" (")[0]
        carried = float(sizes[(trace.links == link).any(axis=1)].sum())
        if _is_fabric(dst):
            up[src] = up.get(src, 0.0) + carried
        elif _is_fabric(src):
            down[dst] = down.get(dst, 0.0) + carried
    names = sorted(set(up) | set(down), key=_natural)
    return pd.DataFrame({"up": [up.get(n, 0.0) for n in names], "down": [down.get(n, 0.0) for n in names]},
                        index=pd.Index(names, name="nic of"))


def _is_fabric(name: str) -> bool:
    return name in ("fabric switch", "ethernet switch")


def _natural(name: str):
    return [int(w) if w.isdigit() else w for w in name.split()]


def per_gpu_nic_bandwidth(busbw: float, nodes: int, gpus: int) -> float:
    """GB/s each GPU's NIC moves when an all-reduce of ``gpus`` GPUs on ``nodes`` nodes reaches ``busbw``.

    Hierarchically, each GPU sends 2(k-1)/k x S/g over its NIC (k nodes, g = n/k GPUs per node),
    while busbw = S/t x 2(n-1)/n; so NIC throughput = busbw x (k-1)/(n-1). (It reproduces
    ml-engineering's 4 x 8 B200 example: 381.8 GB/s busbw -> ~37 GB/s per GPU.)

    Example
    -------
    >>> round(per_gpu_nic_bandwidth(381.8, nodes=4, gpus=32), 1)
    36.9
    """
    return busbw * (nodes - 1) / (gpus - 1)


def internode_bytes_per_gpu(algorithm: str, nbytes: float, nodes: int, gpus_per_node: int = GPUS_PER_NODE) -> float:
    """Bytes one GPU's NIC sends (and receives) in an all-reduce of ``nbytes`` on k = ``nodes`` nodes.

    ``flat_ring``: one rank per node (every link of the ring crosses the network):
    2(k-1)/k x S. ``hierarchical``: reduce-scatter inside the node first, so each GPU carries
    only its 1/g slice across: 2(k-1)/k x S/g. ``in_network``: S up to the switch, S back.

    Example
    -------
    >>> internode_bytes_per_gpu("hierarchical", 800, nodes=2, gpus_per_node=8)
    100.0
    """
    k, g = nodes, gpus_per_node
    if algorithm == "flat_ring":
        return 2 * (k - 1) / k * nbytes
    if algorithm == "hierarchical":
        return 2 * (k - 1) / k * nbytes / g
    if algorithm == "in_network":
        return float(nbytes)
    raise ValueError(f"algorithm must be 'flat_ring', 'hierarchical' or 'in_network', not {algorithm!r}")


# A real multi-node run: nccl-tests all_reduce_perf on 256 GPUs (16 per node, NCCL 2.8.4), out-of-place
# time per size in us, as posted in NVIDIA/nccl-tests issue 78 (the 256-GPU all-reduce table).
NCCL_TESTS_78 = {"ranks": 256, "gpus_per_node": 16, "source": "NVIDIA/nccl-tests issue 78",
                 "time_us": {33554432: 1464.2, 67108864: 2659.1, 134217728: 4263.8, 268435456: 7946.8,
                             536870912: 16129.0, 1073741824: 29896.0, 2147483648: 54309.0}}


def published_run(run: dict = NCCL_TESTS_78):
    """A posted multi-node nccl-tests run as a DataFrame in ``lc.bench.sweep``'s shape (op, size,
    ranks, placement, time_us, algbw, busbw), ready for ``lc.sim.calibrate``.

    Example
    -------
    >>> df = published_run()
    >>> float(round(df.busbw.iloc[-1], 1))        # nccl-tests issue 78 printed 78.7 for 2 GiB
    78.8
    """
    import pandas as pd

    from labcore.sim.collectives import busbw_factor

    sizes = sorted(run["time_us"])
    df = pd.DataFrame({"op": "all_reduce", "size": sizes, "ranks": run["ranks"], "placement": "out-of-place",
                       "time_us": [run["time_us"][s] for s in sizes]})
    df["algbw"] = df["size"] / df["time_us"] / 1e3
    df["busbw"] = df["algbw"] * busbw_factor("all_reduce", run["ranks"])
    df.attrs["source"] = run["source"]
    return df


ALGORITHMS = ("ring", "hierarchical", "double_tree", "in_network")


def scale_sweep(name: str = "dgx_h100_ib", nodes=(2, 8, 64), sizes=(1 << 30,), algorithms=ALGORITHMS):
    """Timing-only simulations of all_reduce on a preset: every algorithm x node count x size.

    ``in_network`` runs on the preset with SHARP (presets without it are skipped). Returns a
    DataFrame: preset, algorithm, nodes, gpus, size, time_us, busbw (GB/s), nic_per_gpu
    (busbw x (k-1)/(n-1), GB/s) and the preset's published busbw.

    Example
    -------
    >>> scale_sweep("tcp_100g", nodes=[2], sizes=[1 << 20], algorithms=["ring"])[["gpus", "algorithm"]].values.tolist()
    [[16, 'ring']]
    """
    import pandas as pd

    from labcore.sim import simulate

    rows = []
    for k in nodes:
        built = {}   # one topology per SHARP setting: its routes are found once for every algorithm
        for algo in algorithms:
            sharp = algo == "in_network"
            if sharp and name not in SHARP_CAPABLE:
                continue
            topo = built.get(sharp) or built.setdefault(sharp, preset(name, k, sharp=sharp))
            for size in sizes:
                t = simulate("all_reduce", algo, topo.ranks, size, topology=topo, values=False)
                rows.append({"preset": name, "algorithm": algo, "nodes": k, "gpus": topo.ranks, "size": size,
                             "time_us": t.time_s * 1e6, "busbw": t.busbw,
                             "nic_per_gpu": per_gpu_nic_bandwidth(t.busbw, k, topo.ranks) if k > 1 else 0.0,
                             "published": topo.notes["published busbw GB/s"]})
    return pd.DataFrame(rows)


__all__ = ["PUBLISHED", "NCCL_TESTS_78", "published_run", "PRESETS", "preset", "dgx_h100_ib", "ib_8x200", "roce_8x400", "tcp_100g", "nic_bytes",
           "per_gpu_nic_bandwidth", "internode_bytes_per_gpu", "scale_sweep", "ALGORITHMS"]
