"""The one registry of machines the simulator knows by name.

Every entry point resolves a preset name here: :func:`labcore.sim.simulate` (``topology="..."``),
:func:`labcore.sim.replay`, the DDP-step predictor, :func:`labcore.sim.simulate_sizes`, the sim
CLI (``--topology``) and the notebooks. A :class:`Preset` builds its topology for any shape
(``ranks``, ``nodes``, ``gpus_per_node``, ``nics_per_node``, ``sharp``), names the NCCL tuner
machine that prices it, and says in one line what it cannot do. A topology built here carries
its preset's name (``topology.preset``), so replay and the DDP predictor find its tuner machine
from the object too; a topology built by hand has none and runs the simulator's default
algorithms unless one is named.

==============  ========  =====================================================  ===========
preset          kind      machine                                                tuner
==============  ========  =====================================================  ===========
``nvswitch8``   node      8 x H100 SXM on NVSwitch                               dgx_h100
``pcie8``       node      8 GPUs on PCIe Gen4, two sockets                       pcie_4090
``multinode``   cluster   DGX H100-like nodes, 8 x 400 Gb/s, 4 nodes by default  dgx_h100_ib
``dgx_h100_ib`` cluster   DGX H100, 8 x 400 Gb/s NDR InfiniBand (SHARP)          dgx_h100_ib
``ib_8x200``    cluster   8 GPUs, 8 x 200 Gb/s HDR InfiniBand (SHARP)            none yet
``roce_8x400``  cluster   8 GPUs, 8 x 400 Gb/s RoCE                              dgx_h100_ib
``tcp_100g``    cluster   8 GPUs sharing one 100 GbE NIC, TCP                    none yet
``a100_sxm8``   node      8 x A100 SXM, NVLink 3 (600 GB/s bidir), no NVLS       dgx_a100
``h100_sxm8``   node      8 x H100 SXM, NVLink 4 (900 GB/s bidir), NVLS          dgx_h100
``h200_sxm8``   node      8 x H200 SXM, NVLink 4 (900 GB/s bidir), NVLS          dgx_h200
``b200_sxm8``   node      8 x B200, NVLink 5 (1.8 TB/s bidir), NVLS              dgx_b200
``pcieN_genG``  node      N = 4 or 8 GPUs on PCIe Gen G = 4 or 5 with P2P        pcie_genG
``..._nop2p``   node      the same without P2P: through host memory (SHM)        pcie_genG_nop2p
``dgx_a100_ib`` cluster   DGX A100, 8 x 200 Gb/s HDR InfiniBand (SHARP)          dgx_a100_ib
``dgx_h200_ib`` cluster   DGX H200, 8 x 400 Gb/s NDR InfiniBand (SHARP)          dgx_h200_ib
``dgx_b200_ib`` cluster   DGX B200, 8 x 400 Gb/s NDR InfiniBand (SHARP)          dgx_b200_ib
``uniform``     textbook  every pair of ranks on its own link                    none
``switch``      textbook  one crossbar switch that reduces                       none
``ring``        textbook  a ring of wires                                        none
==============  ========  =====================================================  ===========

How to add a preset (one entry in one file)
-------------------------------------------
``labcore/sim/machines/presets/catalog.py``: a ``Preset(...)`` in ``ENTRIES``: its name, the machine
in a few words, a builder ``(nodes, gpus_per_node, nics_per_node, sharp) -> topology`` from the
blocks of :mod:`labcore.sim.machines.topologies` (``nvswitch``, ``pcie``, ``multinode``, or
``_fabric`` for NVSwitch nodes on a network) with the machine's numbers, ``kind``, its default
shape, its NCCL machine (``tuner``, a key of :data:`labcore.sim.nccl.tuner.MACHINES`, whose graphs
come from an INFO log or a worked search, or ``no_tuner``, why not; ``node_tuner`` for one node of a
cluster), ``sharp`` or ``no_sharp``, the published figures it is compared with, and the sources of
every number. ``tests/test_sim_presets.py`` runs every check (simulate, replay, the CLI, the DDP
predictor, its NCCL machine) on every preset by name; a published figure gets its own check there.
A machine the blocks cannot express also needs a block in :mod:`labcore.sim.machines.topologies` (or
a machine in :mod:`labcore.sim.nccl.tuner.machine`): then it is two or three files.

The catalog is the one place that pairs a topology with NCCL's machine (:meth:`Preset.nccl_machine`):
a topology built here carries it as ``topology.nccl``, and :func:`tuner_for` returns it.

Example
-------
>>> t = topology("dgx_h100_ib", nodes=4)
>>> t.ranks, t.nodes, t.preset
(32, 4, 'dgx_h100_ib')
>>> topology("nvswitch8", 4).ranks
4
>>> entry("tcp_100g").tuner_machine(16, 2)
Traceback (most recent call last):
...
labcore.sim.machines.presets.preset.NoTuner: NCCL's tuner has no machine for tcp_100g: NCCL's graphs for its NICs are \
not worked out yet (dgx_h100_ib's 8 x 45 GB/s channels would overstate them); name the algorithm, or add a tuner \
machine from the graphs an INFO log prints
"""
from __future__ import annotations

from labcore.sim.machines.presets.catalog import ENTRIES, PUBLISHED, PUBLISHED_AS
from labcore.sim.machines.presets.preset import KINDS, PROCESS_LAYOUTS, NoTuner, Preset, with_processes

__all__ = ["Preset", "NoTuner", "PRESETS", "PROCESS_LAYOUTS", "with_processes", "PUBLISHED", "PUBLISHED_AS", "KINDS", "entry", "topology", "names", "summary",
           "tuner_for"]

PRESETS: dict[str, Preset] = {p.name: p for p in ENTRIES}
"""Every preset by name."""


def names(kind: str | None = None) -> list[str]:
    """The presets' names, of one ``kind`` ("textbook", "node", "cluster") or all."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return [name for name, p in PRESETS.items() if kind in (None, p.kind)]


def entry(name: str) -> Preset:
    """The preset called ``name``; ValueError listing them otherwise."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown topology {name!r}; choose one of {', '.join(PRESETS)} or pass a topology object")
    return PRESETS[name]


def topology(name: str, ranks: int | None = None, *, nodes: int | None = None, gpus_per_node: int | None = None,
             nics_per_node: int | None = None, sharp: bool = False, processes: str | None = None):
    """The topology of preset ``name`` for the shape asked (see :meth:`Preset.shape`) and the job's
    process layout (``processes``, "per_node" or "per_gpu"; None: the preset's own, see :meth:`Preset.build`)."""
    return entry(name).build(ranks, nodes=nodes, gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                             sharp=sharp, processes=processes)


def tuner_for(topology):
    """The NCCL tuner machine of a topology built from a preset, sized to it; :class:`NoTuner` (one
    line) for a preset without one or a topology built by hand."""
    name = getattr(topology, "preset", None)
    if name is None:
        raise NoTuner(f"{topology.name!r} was built by hand, so the lab does not know which NCCL tuner machine "
                      "prices it; build it from a preset (labcore.sim.machines.presets.topology) or name the algorithm")
    return entry(name).tuner_machine(topology.ranks, topology.nodes, bool(getattr(topology, "sharp", False)))


def summary(names_: list[str] | None = None):
    """The presets as a DataFrame, one row each: kind, machine, default shape, NIC bandwidth, SHARP,
    NVLS, NCCL tuner machine (or why none), published busbw and sources.

    Example
    -------
    >>> summary(["dgx_h100_ib", "tcp_100g"])[["nodes", "NICs per node", "SHARP", "published busbw GB/s"]]
                 nodes  NICs per node  SHARP  published busbw GB/s
    preset
    dgx_h100_ib      2              8   True                 380.0
    tcp_100g         2              1  False                  10.0
    """
    import pandas as pd

    rows = []
    for name in names_ or list(PRESETS):
        p = entry(name)
        t = p.build()
        notes = t.notes
        nic = notes.get("nic B/s", 0) * notes.get("nic achievable fraction", 0) / 1e9 or None
        rows.append({"preset": name, "kind": p.kind, "machine": t.name, "nodes": t.nodes,
                     "GPUs per node": t.ranks // t.nodes, "NICs per node": notes.get("nics per node", 0),
                     "GB/s per NIC": nic, "SHARP": p.sharp, "NVLS": "NVLS" in t.protocols,
                     "tuner": p.tuner or "none", "published busbw GB/s": p.published.get("", (None,))[0],
                     "wire": notes.get("wire", ""), "sources": p.sources})
    return pd.DataFrame(rows).set_index("preset")
