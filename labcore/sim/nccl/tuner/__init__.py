"""NCCL's choice of algorithm and protocol, ported from its cost model.

For every collective, NCCL prices each algorithm (Tree, Ring, CollNetDirect,
CollNetChain, NVLS, NVLSTree, PAT) with each protocol (LL, LL128, Simple) as
``latency + bytes / bandwidth`` and runs the cheapest. This package follows
NVIDIA/nccl **2.30.7, commit 5067397c2676d5aed50042fc39e5c8ee96eb0027**:
src/graph/tuning.cc (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``), src/enqueue.cc
(``updateCollCostTable``, ``topoGetAlgoInfo``), src/graph/connect.cc (channel counts),
src/graph/search.cc (how the presets' graphs come about).

- :mod:`~labcore.sim.nccl.tuner.constants`: NCCL's tables;
- :mod:`~labcore.sim.nccl.tuner.machine`: :class:`Machine` (what the tuner reads) and :data:`MACHINES`;
- :mod:`~labcore.sim.nccl.tuner.model`: the two stages (:func:`tune`, :func:`options`, :func:`choose`,
  :func:`launch`);
- :mod:`~labcore.sim.nccl.tuner.report`: :func:`cost_table` (one call, every option),
  :func:`tuning_table` / :func:`tuning_log` (the TUNING debug output), :func:`cost_sweep` (a cost table per
  size), :func:`crossovers`;
- :mod:`~labcore.sim.nccl.tuner.env`: NCCL_ALGO / NCCL_PROTO strings.

Where the lab differs from NCCL: it assumes one collective per launch and a sum of
fp32/fp16/bf16 (NCCL also checks the reduction and type for NVLS and CollNet, and
demotes deep fp8 rings); it takes the topology search's results as inputs instead of
running the search; it ignores tuner plugins, NCCL_NTHREADS, NCCL_NET_OVERHEAD,
NCCL_LL128_C2C=0, and the CUDA 11.8 two-rank LL128 exception. This is NCCL's *model*:
it ranks the options; it does not promise the measured time.

Example
-------
>>> m = MACHINES["dgx_h100"]
>>> predict("all_reduce", 1 << 10, m).name
'Ring/LL'
>>> predict("all_reduce", 1 << 30, m).name
'NVLS/Simple'
>>> cost_table("all_reduce", 1 << 30, m).query("chosen")["time_us"].round(1).item()
3972.6
"""
from __future__ import annotations

from labcore.sim.core import schedules
from labcore.sim.nccl.tuner.constants import ALGORITHMS, FUNCTION_OF, FUNCTIONS, PROTOCOLS
from labcore.sim.nccl.tuner.machine import MACHINES, Machine, TopoGraph, graphs_from_log
from labcore.sim.nccl.tuner.model import Option, Tuned, channels_at, choose, launch, options, ring_pipeline, tune
from labcore.sim.nccl.tuner.report import cost_sweep, cost_table, crossovers, protocol_table, tuning_log, tuning_table

predict = choose
"""NCCL's pick for one call (an :class:`Option` with ``name``, ``time_us``, ...)."""
table = options
"""Every (algorithm, protocol) for one call, as :class:`Option` objects."""


def simulated_as(algorithm: str, protocol: str, topology, op: str = "all_reduce") -> tuple[str, str, dict, str]:
    """How the simulator plays NCCL's pick (``algorithm``, ``protocol``) for ``op`` on ``topology``:
    (simulator algorithm, its protocol, builder options, a note where it stands in), or a
    one-line ValueError saying what the topology lacks and what to do. The schedule that plays
    each NCCL algorithm is the one registered with it (:func:`labcore.sim.core.schedules.playing`).

    Ring and Tree run with NCCL's protocol; NVLS runs on the NVSwitches' engines (its "Simple" is
    the topology's "NVLS" protocol), across nodes with SHARP in the fabric when the topology has it;
    NVLSTree is NVLS in every node and a ring among the heads across nodes (standing in for NCCL's
    tree: the same exchange on two nodes); CollNetDirect and CollNetChain are the ``in_network``
    all-reduce through the fabric's SHARP switch; PAT (one GPU a node) is played as a ring. Collectives other
    than all_reduce play every pick as their ring schedule (broadcast's and reduce's chain), and say so.

    Example
    -------
    >>> from labcore.sim import presets
    >>> simulated_as("NVLSTree", "Simple", presets.topology("dgx_h100_ib", nodes=2))[:3]
    ('nvls', 'NVLS', {'across': 'ring'})
    """
    if algorithm not in ALGORITHMS or protocol not in PROTOCOLS:
        raise ValueError(f"NCCL's tuner has no {algorithm}/{protocol}; algorithms are {', '.join(ALGORITHMS)}, "
                         f"protocols {', '.join(PROTOCOLS)}")
    have = getattr(topology, "protocols", {}) or {}
    name, nodes = getattr(topology, "name", "this topology"), getattr(topology, "nodes", 1)
    if op != "all_reduce" and algorithm != "Ring":     # the simulator's other collectives play NCCL's Ring only
        ring = schedules.playing(op, "Ring")
        if ring is None:
            raise ValueError(f"the simulator has no schedule that plays NCCL's {algorithm} or Ring for {op}; name one "
                             f"of {', '.join(sorted(schedules.ALGORITHMS.get(op, {}))) or 'none'}")
        if have and protocol not in have:
            protocol = "Simple"
        return ring, protocol if have else None, {}, f"{algorithm} played as {ring} (its schedule for {op})"
    if algorithm in ("NVLS", "NVLSTree"):
        if not getattr(topology, "has_engine", False) or "NVLS" not in have:
            raise ValueError(f"NCCL's tuner picks {algorithm}/{protocol}, which needs NVLink SHARP in the NVSwitch; "
                             f"{name!r} has none: build it from an H100-or-later preset or name another algorithm")
        if algorithm == "NVLSTree" and nodes > 1:
            return "nvls", "NVLS", {"across": "ring"}, "NVLS in the nodes, a ring among the heads for NCCL's tree"
        if nodes > 1 and not getattr(topology, "sharp", False):
            raise ValueError(f"NCCL's tuner picks NVLS/{protocol} across nodes, which needs SHARP in the network; "
                             f"{name!r} has none: build it with sharp=True on an InfiniBand preset, or name NVLSTree")
        return "nvls", "NVLS", {}, ""
    if algorithm in ("CollNetDirect", "CollNetChain"):
        if not getattr(topology, "sharp", False) or topology.switch_agents == 0:
            raise ValueError(f"NCCL's tuner picks {algorithm}/{protocol}, which needs SHARP in the network; "
                             f"{name!r} has none: build it with sharp=True on an InfiniBand preset")
        return "in_network", "Simple" if "Simple" in have else None, {}, \
            ("" if algorithm == "CollNetDirect" else "CollNetChain played as CollNetDirect (a head per NIC)")
    if have and protocol not in have:
        raise ValueError(f"NCCL's tuner picks {algorithm}/{protocol}, but {name!r} does not describe {protocol}; "
                         f"it describes {', '.join(have)}: name the protocol")
    note = "PAT played as a ring (the simulator has no PAT schedule)" if algorithm == "PAT" else ""
    played = schedules.playing(op, "Ring" if algorithm == "PAT" else algorithm)
    if played is None:
        raise ValueError(f"the simulator has no schedule that plays NCCL's {algorithm} for {op}; name one of "
                         f"{', '.join(sorted(schedules.ALGORITHMS.get(op, {}))) or 'none'}")
    return played, protocol if have else None, {}, note


__all__ = ["ALGORITHMS", "PROTOCOLS", "FUNCTIONS", "FUNCTION_OF", "Machine", "TopoGraph", "MACHINES", "graphs_from_log",
           "Option", "Tuned",
           "tune", "options", "choose", "launch", "channels_at", "ring_pipeline", "predict", "table", "cost_table",
           "tuning_table", "protocol_table",
           "tuning_log", "cost_sweep", "crossovers", "simulated_as"]
