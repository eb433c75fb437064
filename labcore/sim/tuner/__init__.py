"""NCCL's choice of algorithm and protocol, ported from its cost model.

For every collective, NCCL prices each algorithm (Tree, Ring, CollNetDirect,
CollNetChain, NVLS, NVLSTree, PAT) with each protocol (LL, LL128, Simple) as
``latency + bytes / bandwidth`` and runs the cheapest. This package follows
NVIDIA/nccl **2.30.7, commit 5067397c2676d5aed50042fc39e5c8ee96eb0027**:
src/graph/tuning.cc (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``), src/enqueue.cc
(``updateCollCostTable``, ``topoGetAlgoInfo``), src/graph/connect.cc (channel counts),
src/graph/search.cc (how the presets' graphs come about).

- :mod:`~labcore.sim.tuner.constants`: NCCL's tables;
- :mod:`~labcore.sim.tuner.machine`: :class:`Machine` (what the tuner reads) and :data:`MACHINES`;
- :mod:`~labcore.sim.tuner.model`: the two stages (:func:`tune`, :func:`options`, :func:`choose`,
  :func:`launch`);
- :mod:`~labcore.sim.tuner.report`: :func:`cost_table` (one call, every option),
  :func:`tuning_table` / :func:`tuning_log` (the TUNING debug output), :func:`cost_sweep` (a cost table per
  size), :func:`crossovers`;
- :mod:`~labcore.sim.tuner.env`: NCCL_ALGO / NCCL_PROTO strings.

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

from labcore.sim.tuner.constants import ALGORITHMS, FUNCTIONS, OPS, PROTOCOLS
from labcore.sim.tuner.machine import MACHINES, Machine, TopoGraph, graphs_from_log
from labcore.sim.tuner.model import Option, Tuned, channels_at, choose, launch, options, ring_pipeline, tune
from labcore.sim.tuner.report import cost_sweep, cost_table, crossovers, protocol_table, tuning_log, tuning_table

predict = choose
"""NCCL's pick for one call (an :class:`Option` with ``name``, ``time_us``, ...)."""
table = options
"""Every (algorithm, protocol) for one call, as :class:`Option` objects."""

SIM_ALGORITHM = {"Ring": "ring", "Tree": "double_tree", "NVLS": "nvls", "NVLSTree": "nvls",
                 "PAT": "ring", "CollNetDirect": "in_network", "CollNetChain": "in_network"}
"""Which simulator schedule stands in for each NCCL algorithm (protocols are not simulated;
NVLink SHARP plays NVLS, the node-then-switch in-network reduction plays CollNet; PAT's
Bruck-like exchange has no schedule yet)."""



def simulated_as(algorithm: str, protocol: str, topology) -> tuple[str, str, dict, str]:
    """How the simulator plays NCCL's pick (``algorithm``, ``protocol``) on ``topology``:
    (simulator algorithm, its protocol, builder options, a note where it stands in), or a
    one-line ValueError saying what the topology lacks and what to do.

    Ring and Tree run with NCCL's protocol; NVLS runs on the NVSwitches' engines (its "Simple" is
    the topology's "NVLS" protocol), across nodes with SHARP in the fabric when the topology has it;
    NVLSTree is NVLS in every node and a ring among the heads across nodes (standing in for NCCL's
    tree: the same exchange on two nodes); CollNetDirect and CollNetChain are the ``in_network``
    all-reduce through the fabric's SHARP switch; PAT (one GPU a node) is played as a ring.

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
    return SIM_ALGORITHM[algorithm], protocol if have else None, {}, note


__all__ = ["ALGORITHMS", "PROTOCOLS", "FUNCTIONS", "OPS", "Machine", "TopoGraph", "MACHINES", "graphs_from_log",
           "Option", "Tuned",
           "tune", "options", "choose", "launch", "channels_at", "ring_pipeline", "predict", "table", "cost_table",
           "tuning_table", "protocol_table",
           "tuning_log", "cost_sweep", "crossovers", "SIM_ALGORITHM", "simulated_as"]

# Old names, kept for one release: they warn and forward (sweep: lc.bench.sweep measures; Graph: the
# simulator's topology.Graph is a network).
_RENAMED = {"sweep": ("cost_sweep", cost_sweep), "Graph": ("TopoGraph", TopoGraph)}


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        new, value = _RENAMED[name]
        warnings.warn(f"lc.sim.tuner.{name} is deprecated: use lc.sim.tuner.{new}", DeprecationWarning, stacklevel=2)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
