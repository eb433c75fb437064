"""What NCCL ran in a real job beside what the lab's port of its tuner predicts for the same machine.

A profiler trace (:func:`labcore.readers.read_trace`) names the GPU and how many each process saw,
and each NCCL kernel says which algorithm and protocol ran; :func:`tuner_machine` takes the NCCL
machine of :data:`labcore.sim.nccl.tuner.MACHINES` that fits the trace's machine and
:func:`nccl_choices` sets each collective's kernel beside the tuner's pick.
"""
from __future__ import annotations

from labcore.collectives import NCCL_NAMES
from labcore.sim.nccl import tuner

__all__ = ["tuner_machine", "nccl_choices"]


def tuner_machine(machine: dict):
    """The :data:`labcore.sim.nccl.tuner.MACHINES` entry for a trace's machine (``Recording.machine``), resized.

    Returns ``(name, Machine, note)``; ``(None, None, why)`` when no tuner machine fits. The trace
    names the GPU and how many the process saw, not how they connect: an A100 or H100 node is
    taken as the NVSwitch machine of that GPU (``note`` says so), and the tuner keeps the graphs
    of its 8-GPU preset for any number of ranks on it.

    Example
    -------
    >>> name, m, note = tuner_machine(dict(gpu="NVIDIA A100-SXM4-80GB", compute_capability="8.0",
    ...                                    gpus_seen=8, world_size=8, nodes=1))
    >>> name, m.ranks
    ('dgx_a100', 8)
    >>> tuner_machine(dict(gpu="Tesla V100-SXM2-16GB", compute_capability="7.0", gpus_seen=2,
    ...                    world_size=2, nodes=1))[2]
    'no machine of lc.sim.tuner fits: Tesla V100-SXM2-16GB (compute capability 7.0); it has none before Ampere'
    """
    gpu, cc = str(machine.get("gpu", "")), str(machine.get("compute_capability", ""))
    world, nodes, seen = machine.get("world_size", 0), machine.get("nodes", 0), machine.get("gpus_seen", 0)
    none = "no machine of lc.sim.tuner fits: "
    if not gpu or not cc:
        return None, None, none + "the trace does not name its GPUs (no deviceProperties)"
    if not nodes:
        return None, None, none + f"{world} ranks do not fill whole nodes of the {seen} GPUs each process saw"
    sm, upper, per_node = int(cc.replace(".", "")), gpu.upper(), f"{world // nodes} GPUs a node"
    if sm < 80:
        return None, None, none + f"{gpu} (compute capability {cc}); it has none before Ampere"
    if "PCIE" in upper and "4090" not in upper:
        return None, None, none + f"{gpu} is a PCIe card; the tuner's machines of that GPU are NVSwitch nodes"
    if nodes > 1 and "H100" not in upper:
        return None, None, none + f"{nodes} nodes of {gpu}; its only multi-node machine is of H100s (dgx_h100_ib)"
    names = (("A100", "dgx_a100", "an NVSwitch node (DGX/HGX A100)"),
             ("H200", "dgx_h200", "an NVSwitch node (DGX/HGX H200)"),
             ("H100", "dgx_h100" if nodes == 1 else "dgx_h100_ib",
              "an NVSwitch node (DGX/HGX H100)" if nodes == 1 else "NVSwitch nodes with 8 x 400 Gb/s InfiniBand each"),
             ("B200", "dgx_b200", "an NVSwitch node (DGX/HGX B200)"), ("4090", "pcie_4090", "RTX 4090s on PCIe"))
    for key, name, what in names:
        if key in upper:
            m = tuner.MACHINES[name].with_ranks(world, nodes)
            note = (f"assumed {what}, {per_node}: the trace names the GPU, not how they connect; the tuner keeps "
                    f"the graphs of its {tuner.MACHINES[name].ranks}-GPU machine")
            return name, m, note
    return None, None, none + f"{gpu} (compute capability {cc}) is none of its GPUs"


def _agreement(ran: str, predicted: str) -> str:
    if not ran:
        return "not in the trace"
    options = ran.split(" or ")
    if predicted not in options:
        return "differs"
    return "agrees" if len(options) == 1 else "possible"


def nccl_choices(recording, rank: int | None = None):
    """What NCCL ran for each collective of a trace (one rank's) beside what ``lc.sim.tuner`` predicts.

    One row per collective NCCL tunes (all_reduce, all_gather, reduce_scatter, broadcast, reduce):
    op, bytes, group_size, time_us, busbw_gbs, kernel, the algorithm and protocol NCCL ran
    (:func:`labcore.readers.profiler_trace.kernel_choice`), its channels (CTAs) and threads a block; the tuner's machine
    (:func:`tuner_machine`), its pick (``tuner.launch``: algorithm, protocol, channels, threads)
    and whether each agrees: "agrees", "possible" (the trace allows several, the pick among
    them), "differs", "not in the trace", or "no machine". ``attrs["machine"]`` holds the
    tuner machine's note. The tuner is NCCL 2.30.7's model; the traces ran older releases.

    Example
    -------
    >>> from labcore.readers import TRACES_DIR, read_trace
    >>> t = nccl_choices(read_trace(TRACES_DIR / "a100_8ranks_rank3.json.gz"))
    >>> t[["bytes", "ran_protocol", "tuner_protocol", "protocol"]].head(3).values.tolist()
    [[181240752, 'Simple', 'Simple', 'agrees'], [1068160, 'LL', 'LL', 'agrees'], [17728292, 'LL128', 'LL128', 'agrees']]
    """
    import pandas as pd

    rows = recording.bandwidth(rank)
    rows = rows[rows["op"].isin(list(NCCL_NAMES))]
    name, machine, note = tuner_machine(recording.machine)
    out = []
    for r in rows.itertuples(index=False):
        row = dict(step=r.step, op=r.op, bytes=int(r.bytes), group_size=int(r.group_size), time_us=r.time_us,
                   busbw_gbs=r.busbw_gbs, kernel=r.kernel, ran_algorithm=r.algorithm, ran_protocol=r.protocol,
                   channels=int(r.channels), threads=int(r.threads), tuner_machine=name or "")
        if machine is None or r.group_size != machine.ranks:
            why = "no machine" if machine is None else f"group of {r.group_size}, not the machine's {machine.ranks}"
            row.update(tuner_algorithm="", tuner_protocol="", tuner_channels=-1, tuner_threads=-1,
                       algorithm=why, protocol=why)
        else:
            pick = tuner.launch(r.op, int(r.bytes), machine)
            row.update(tuner_algorithm=pick["algorithm"], tuner_protocol=pick["protocol"],
                       tuner_channels=pick["channels"], tuner_threads=pick["threads"],
                       algorithm=_agreement(r.algorithm, pick["algorithm"]),
                       protocol=_agreement(r.protocol, pick["protocol"]))
        out.append(row)
    table = pd.DataFrame(out, columns=["step", "op", "bytes", "group_size", "time_us", "busbw_gbs", "kernel",
                                       "ran_algorithm", "ran_protocol", "channels", "threads", "tuner_machine",
                                       "tuner_algorithm", "tuner_protocol", "tuner_channels", "tuner_threads",
                                       "algorithm", "protocol"])
    table.attrs["machine"] = note
    return table
