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

Every preset is :func:`labcore.sim.topologies.multinode` (NVSwitch nodes, NCCL's protocols,
one ring per GPU across nodes) with its fabric's numbers: the NIC's line rate, the fraction
of it that is achievable, how many NICs a node has, and whether the switches reduce (SHARP).
RoCE runs the same RDMA wire rate as InfiniBand, so its preset differs only in what it cannot
do: in-network reduction (SHARP needs InfiniBand switches). ``tcp_100g`` shares one NIC per
node. Each preset's ``notes`` name their sources.

Example
-------
>>> t = preset("dgx_h100_ib", nodes=2)
>>> t.ranks, t.nodes, PUBLISHED["dgx_h100_ib"]
(16, 2, 380.0)
>>> round(t.notes["nic achievable fraction"] * t.notes["nic B/s"] / 1e9)      # GB/s per NIC
48
"""
from __future__ import annotations

import numpy as np

from labcore.sim import topologies

GPUS_PER_NODE = 8
GTC24 = "GTC24 S62129 (nvidia.com/en-us/on-demand/session/gtc24-s62129/), via stas00/ml-engineering network/benchmarks"
COMMON = "NCCL 2.30.7 src/graph/tuning.cc (latencies); H100 datasheet (NVLink); nccl-tests#212 (NVLink achievable)"
# Published nccl-tests all_reduce busbw (GB/s) of each preset's network [GTC24 S62129].
PUBLISHED = {"dgx_h100_ib": 380.0, "dgx_h100_ib_sharp": 480.0, "ib_8x200": 192.0, "roce_8x400": 8 * 48.0,
             "tcp_100g": 10.0}
# What each figure of PUBLISHED is: RoCE's is derived from a one-NIC figure, not measured on 8.
PUBLISHED_AS = {"dgx_h100_ib": "GTC24: DGX H100, 8 x 400Gb IB", "dgx_h100_ib_sharp": "GTC24: DGX H100 + SHARP",
                "ib_8x200": "GTC24: DGX A100, 8 x 200Gb", "tcp_100g": "GTC24: 100GbE TCP",
                "roce_8x400": "derived: 8 NICs x GTC24's one 400Gb RDMA NIC (48)"}
# 100 GbE = 12.5 GB/s per direction; GTC24: 100GbE TCP all_reduce busbw 10 GB/s (80%).
TCP_100G_BW = 12.5e9
TCP_EFFICIENCY = 10 / 12.5


def _fabric(nodes: int, key: str, name: str, wire: str, nic_bandwidth: float, sharp: bool = False, **fabric):
    """``multinode`` with one fabric's numbers and their sources in ``notes``."""
    return topologies.multinode(nodes, GPUS_PER_NODE, nic_bandwidth=nic_bandwidth, sharp=sharp, name=name,
                                notes={"published busbw GB/s": PUBLISHED[key], "wire": wire,
                                       "sources": f"{GTC24}; {COMMON}"}, **fabric)


def dgx_h100_ib(nodes: int = 2, sharp: bool = False):
    """DGX H100 nodes, each GPU with its own 400 Gb/s NDR InfiniBand NIC; ``sharp``: the fabric
    reduces in the network (IB SHARP, NCCL's CollNet)."""
    return _fabric(nodes, "dgx_h100_ib_sharp" if sharp else "dgx_h100_ib",
                   f"{nodes} x DGX H100, 8 x 400 Gb/s IB" + (" + SHARP" if sharp else ""),
                   "NDR InfiniBand: 400 Gb/s = 50 GB/s per NIC and direction, 48 achievable", 50e9, sharp)


def ib_8x200(nodes: int = 2, sharp: bool = False):
    """Nodes of 8 NVSwitch GPUs with 8 x 200 Gb/s HDR InfiniBand NICs (DGX A100's network;
    the GPUs are H100-class here, which a NIC-bound all-reduce does not notice)."""
    return _fabric(nodes, "ib_8x200", f"{nodes} x 8 GPUs, 8 x 200 Gb/s IB" + (" + SHARP" if sharp else ""),
                   "HDR InfiniBand: 200 Gb/s = 25 GB/s per NIC and direction, 24 achievable", 25e9, sharp)


def roce_8x400(nodes: int = 2):
    """8 GPUs per node, each with a 400 Gb/s RoCE NIC on a lossless Ethernet fabric (PFC/ECN).
    RDMA over Ethernet runs at the same wire rate; no in-network reduction."""
    return _fabric(nodes, "roce_8x400", f"{nodes} x 8 GPUs, 8 x 400 Gb/s RoCE",
                   "400 Gb/s RoCE: GTC24's '400Gb RDMA' busbw is 48 GB/s per NIC; SHARP is an InfiniBand "
                   "switch feature", 50e9)


def tcp_100g(nodes: int = 2):
    """8 NVSwitch GPUs per node sharing one 100 GbE NIC, NCCL over TCP sockets (no RDMA): every
    GPU's traffic to another node goes through the node's one NIC, at 80% of its line rate."""
    return _fabric(nodes, "tcp_100g", f"{nodes} x 8 GPUs, one 100 GbE NIC per node (TCP)",
                   "100 GbE: 12.5 GB/s per direction, 10 achievable, one NIC shared by the node's 8 GPUs",
                   TCP_100G_BW, nic_efficiency=TCP_EFFICIENCY, nics_per_node=1)


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

    A transfer's route is its list of links; every NIC of the trace's topology (a
    :class:`~labcore.sim.topology.Cluster`) has a link up into the fabric and one down from it.
    Returns a DataFrame indexed by NIC (named after its GPU) with columns ``up`` and ``down``
    in bytes.

    Example
    -------
    >>> import labcore.sim as sim
    >>> t = sim.simulate("all_reduce", "in_network", 4, 4096, topology=topologies.multinode(4, 1, sharp=True),
    ...                  values=False)
    >>> nic_bytes(t)["up"].tolist()
    [4096.0, 4096.0, 4096.0, 4096.0]
    """
    import pandas as pd

    nics = getattr(trace.topology, "nics", lambda: [])()
    if not nics:
        raise ValueError(f"topology {trace.topology.name!r} has no NICs; simulate on a multi-node preset")
    names, up, down = zip(*nics)
    sizes = trace.schedule.size
    ids = np.r_[up, down]
    lookup = np.full(trace.topology.n_links, -1)
    lookup[ids] = np.arange(ids.size)
    carried = np.zeros(ids.size)
    for h in range(trace.links.shape[1]):         # a transfer crosses a link at most once
        hit = lookup[np.maximum(trace.links[:, h], 0)]
        ok = (trace.links[:, h] >= 0) & (hit >= 0)
        carried += np.bincount(hit[ok], weights=sizes[ok], minlength=ids.size)
    return pd.DataFrame({"up": carried[:len(up)], "down": carried[len(up):]}, index=pd.Index(names, name="nic of"))


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
    """Bytes one GPU's NIC sends (and receives) in an all-reduce of ``nbytes`` on k = ``nodes``
    nodes of g = ``gpus_per_node`` GPUs (n = kg), each GPU with its own NIC.

    ``ring``: NCCL's rings, one per GPU (channel), each crossing every node boundary on its own
    NIC: 2(n-1)/n x S/g. ``hierarchical``: reduce-scatter inside the node first, so each GPU
    carries only its 1/g slice across: 2(k-1)/k x S/g. ``in_network``: the slice up to the
    switch and the sum back, S/g each way. With one GPU a node (g = 1): 2(k-1)/k x S for both
    rings, S for in-network reduction.

    Example
    -------
    >>> internode_bytes_per_gpu("hierarchical", 800, nodes=2, gpus_per_node=8)
    100.0
    >>> internode_bytes_per_gpu("in_network", 800, nodes=16, gpus_per_node=1)
    800.0
    """
    k, g = nodes, gpus_per_node
    if algorithm == "ring":
        return 2 * (k * g - 1) / (k * g) * nbytes / g
    if algorithm == "hierarchical":
        return 2 * (k - 1) / k * nbytes / g
    if algorithm == "in_network":
        return nbytes / g
    raise ValueError(f"algorithm must be 'ring', 'hierarchical' or 'in_network', not {algorithm!r}")


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

    ``in_network`` runs on the preset with SHARP (presets without it are skipped). NCCL's
    protocols are tried and the fastest kept. Returns a DataFrame: preset, algorithm, protocol,
    nodes, gpus, size, time_us, busbw (GB/s), nic_per_gpu (what the busiest NIC sent up, over
    the time, GB/s: from the trace's routes), nic_formula (busbw x (k-1)/(n-1), ml-engineering's
    per-accelerator figure, exact for the hierarchical algorithm) and the preset's published busbw.

    Example
    -------
    >>> scale_sweep("tcp_100g", nodes=[2], sizes=[1 << 20], algorithms=["ring"])[["gpus", "algorithm"]].values.tolist()
    [[16, 'ring']]
    """
    import pandas as pd

    from labcore.sim import simulate

    rows = []
    for k in nodes:
        built = {}   # one topology per SHARP setting, shared by the algorithms
        for algo in algorithms:
            sharp = algo == "in_network"
            if sharp and name not in SHARP_CAPABLE:
                continue
            topo = built.get(sharp) or built.setdefault(sharp, preset(name, k, sharp=sharp))
            for size in sizes:
                t = simulate("all_reduce", algo, topo.ranks, size, topology=topo, values=False)
                nic = float(nic_bytes(t)["up"].max()) / t.time_s / 1e9 if k > 1 else 0.0
                rows.append({"preset": name, "algorithm": algo, "protocol": t.protocol, "nodes": k,
                             "gpus": topo.ranks, "size": size, "time_us": t.time_s * 1e6, "busbw": t.busbw,
                             "nic_per_gpu": nic,
                             "nic_formula": per_gpu_nic_bandwidth(t.busbw, k, topo.ranks) if k > 1 else 0.0,
                             "published": topo.notes["published busbw GB/s"]})
    return pd.DataFrame(rows)


__all__ = ["PUBLISHED", "PUBLISHED_AS", "NCCL_TESTS_78", "published_run", "PRESETS", "SHARP_CAPABLE", "preset", "dgx_h100_ib",
           "ib_8x200", "roce_8x400", "tcp_100g", "nic_bytes", "per_gpu_nic_bandwidth", "internode_bytes_per_gpu",
           "scale_sweep", "ALGORITHMS"]
