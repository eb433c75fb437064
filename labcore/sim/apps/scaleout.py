"""Scale-out analysis: what crosses the NICs of a multi-node run, and sweeps of the cluster presets.

The machines are presets (:mod:`labcore.sim.machines.presets`: ``dgx_h100_ib``, ``ib_8x200``, ``roce_8x400``,
``tcp_100g``, ``multinode``) with their published figures (``presets.PUBLISHED``); this module reads
traces run on them: the bytes every NIC carried (from the trace's routes), the per-GPU NIC
throughput behind a busbw figure, the bytes an algorithm must send across nodes, and a sweep of
algorithms x node counts x sizes.

Example
-------
>>> from labcore.sim import presets
>>> t = presets.topology("dgx_h100_ib", nodes=2)
>>> t.ranks, t.nodes, presets.PUBLISHED["dgx_h100_ib"]
(16, 2, 380.0)
>>> round(t.notes["nic achievable fraction"] * t.notes["nic B/s"] / 1e9)      # GB/s per NIC
48
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core.buffers import busbw_factor
from labcore.sim.machines import presets
from labcore.sim.simulation import simulate

__all__ = ["NCCL_TESTS_78", "published_run", "nic_bytes", "per_gpu_nic_bandwidth", "internode_bytes_per_gpu",
           "scale_sweep", "SCALE_ALGORITHMS"]


def nic_bytes(trace) -> "object":
    """Bytes every NIC sent up into the fabric and received down from it, from a trace's routes.

    A transfer's route is its list of links; every NIC of the trace's topology (a
    :class:`~labcore.sim.core.network.NVSwitchNodes`) has a link up into the fabric and one down from it.
    Returns a DataFrame indexed by NIC (named after its GPU) with columns ``up`` and ``down``
    in bytes.

    Example
    -------
    >>> import labcore.sim as sim
    >>> t = sim.simulate("all_reduce", "in_network", 4, 4096, topology=sim.topologies.multinode(4, 1, sharp=True),
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


def internode_bytes_per_gpu(algorithm: str, nbytes: float, nodes: int, gpus_per_node: int = 8) -> float:
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

    sizes = sorted(run["time_us"])
    df = pd.DataFrame({"op": "all_reduce", "size": sizes, "ranks": run["ranks"], "placement": "out-of-place",
                       "time_us": [run["time_us"][s] for s in sizes]})
    df["algbw"] = df["size"] / df["time_us"] / 1e3
    df["busbw"] = df["algbw"] * busbw_factor("all_reduce", run["ranks"])
    df.attrs["source"] = run["source"]
    return df


SCALE_ALGORITHMS = ("ring", "hierarchical", "double_tree", "in_network")
"""The all-reduce algorithms :func:`scale_sweep` compares by default."""


def scale_sweep(name: str = "dgx_h100_ib", nodes=(2, 8, 64), sizes=(1 << 30,), algorithms=SCALE_ALGORITHMS):
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

    rows = []
    spec = presets.entry(name)
    for k in nodes:
        built = {}   # one topology per SHARP setting, shared by the algorithms
        for algo in algorithms:
            sharp = algo == "in_network"
            if sharp and not spec.sharp:
                continue
            topo = built.get(sharp) or built.setdefault(sharp, presets.topology(name, nodes=k, sharp=sharp))
            for size in sizes:
                t = simulate("all_reduce", algo, topo.ranks, size, topology=topo, values=False)
                nic = float(nic_bytes(t)["up"].max()) / t.time_s / 1e9 if k > 1 else 0.0
                rows.append({"preset": name, "algorithm": algo, "protocol": t.protocol, "nodes": k,
                             "gpus": topo.ranks, "size": size, "time_us": t.time_s * 1e6, "busbw": t.busbw,
                             "nic_per_gpu": nic,
                             "nic_formula": per_gpu_nic_bandwidth(t.busbw, k, topo.ranks) if k > 1 else 0.0,
                             "published": topo.notes.get("published busbw GB/s")})
    return pd.DataFrame(rows)
