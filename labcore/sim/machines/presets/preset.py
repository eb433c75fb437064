"""One machine the simulator knows by name: :class:`Preset`, and how it is built for any size.

A preset is built for a shape: ``ranks`` (GPUs in all), ``nodes``, ``gpus_per_node`` and
``nics_per_node``, any of them given and the rest from the preset's defaults. What a preset
cannot do (several nodes of a one-node machine, SHARP without InfiniBand switches, NCCL's tuner
on a textbook machine) is refused in one line that names what to use instead.

Example
-------
>>> from labcore.sim.machines.presets import entry
>>> p = entry("dgx_h100_ib")
>>> p.shape(ranks=32)                       # (nodes, GPUs per node): 8 a node when 8 divides
(4, 8)
>>> p.shape(ranks=12), p.shape(nodes=3)
((2, 6), (3, 8))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from labcore import validate
from labcore.sim.nccl import tuner

KINDS = ("textbook", "node", "cluster")
PROCESS_LAYOUTS = ("per_node", "per_gpu")
MAX_RANKS = 1 << 14


def with_processes(topology, processes: str):
    """``topology`` with the host time of the job's process layout (in place; returned): ``issue_s``
    is one launch of ``host_s`` for each GPU a process drives, a node's GPUs under "per_node" (nccl-tests
    ``-g 8``), one under "per_gpu" (mpirun, srun, torchrun). A topology without a host time a launch
    (the textbook machines, a PCIe box) keeps its own ``issue_s``.

    Example
    -------
    >>> from labcore.sim.machines import topologies
    >>> t = topologies.nvswitch(8)
    >>> round(with_processes(t, "per_gpu").issue_s * 1e6, 2), round(with_processes(t, "per_node").issue_s * 1e6, 2)
    (3.75, 30.0)
    """
    if processes not in PROCESS_LAYOUTS:
        raise ValueError(f"processes must be one of {', '.join(map(repr, PROCESS_LAYOUTS))}, not {processes!r}")
    if topology.host_s:
        topology.issue_s = topology.host_s * (topology.ranks // topology.nodes if processes == "per_node" else 1)
    return topology


class NoTuner(ValueError):
    """A preset (or a topology built by hand) that NCCL's tuner has no machine for; the message says why."""


def _whole(name: str, value, least: int = 1) -> int | None:
    if value is None:
        return None
    return validate.whole_number(value, name, least=least, most=MAX_RANKS)


def _largest_divisor(ranks: int, most: int) -> int:
    return max(d for d in range(1, min(most, ranks) + 1) if ranks % d == 0)


@dataclass(frozen=True)
class Preset:
    """A machine by name (see :mod:`labcore.sim.machines.presets` for the list and how to add one).

    Attributes
    ----------
    name : what it is called everywhere (``simulate(topology=...)``, ``replay``, the CLI).
    machine : the machine in a few words.
    builder : ``builder(nodes, gpus_per_node, nics_per_node, sharp)`` -> a topology.
    kind : "textbook" (the alpha-beta machines of the notebooks, any rank count), "node" (one
        real machine) or "cluster" (real machines joined by a network).
    gpus_per_node : GPUs a node (the default size of a "node" or "textbook" preset); a cluster
        asked for ``ranks`` GPUs puts the largest divisor of ``ranks`` up to this on a node.
    nodes : the default node count.
    nics_per_node : NICs a node (None: one per GPU); a cluster preset only. More NICs than GPUs
        (AWS p5: 4 a GPU) keep their number a GPU on smaller nodes.
    tuner : the :data:`labcore.sim.nccl.tuner.MACHINES` entry NCCL's tuner prices it with, or None;
        ``no_tuner`` then says why (one line).
    node_tuner : for a cluster preset, NCCL's machine for one of its nodes alone (its NVSwitch node:
        NCCL's search finds the node's graphs when no NIC is in use), where that is not ``tuner``.
    sharp : the network can reduce (InfiniBand SHARP, NCCL's CollNet); ``no_sharp`` says why not.
    several_nodes : for a one-node preset, what to use across nodes (one line); empty: nodes allowed.
    published : published all_reduce busbw (GB/s) and what each figure is:
        ``{"": (380.0, "GTC24: ..."), "sharp": (480.0, "...")}``.
    sources : where its numbers come from (the topology's ``notes`` give each number).
    """

    name: str
    machine: str
    builder: Callable = field(repr=False)
    kind: str = "cluster"
    gpus_per_node: int = 8
    nodes: int = 1
    nics_per_node: int | None = None
    tuner: str | None = None
    no_tuner: str = ""
    node_tuner: str | None = None
    sharp: bool = False
    no_sharp: str = ""
    several_nodes: str = ""
    published: dict = field(default_factory=dict)
    sources: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"preset {self.name!r}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if (self.tuner is None) == (not self.no_tuner):
            raise ValueError(f"preset {self.name!r}: give a tuner machine or say why there is none (no_tuner)")
        for name in (self.tuner, self.node_tuner):
            if name is not None and name not in tuner.MACHINES:
                raise ValueError(f"preset {self.name!r}: {name!r} is not one of NCCL's machines "
                                 f"({', '.join(tuner.MACHINES)})")
        if not self.sharp and not self.no_sharp:
            raise ValueError(f"preset {self.name!r}: say why it has no SHARP (no_sharp)")

    # --- the shape ---------------------------------------------------------------------------
    def shape(self, ranks: int | None = None, nodes: int | None = None,
              gpus_per_node: int | None = None) -> tuple[int, int]:
        """(nodes, GPUs per node) for what was asked, the rest from the defaults."""
        ranks, nodes, g = _whole("ranks", ranks), _whole("nodes", nodes), _whole("gpus_per_node", gpus_per_node)
        if self.several_nodes and (nodes or 1) > 1:
            raise ValueError(f"{self.name} is one machine; {self.several_nodes}")
        if ranks is None:
            return nodes or self.nodes, g or self.gpus_per_node
        if nodes is not None and g is not None and nodes * g != ranks:
            raise ValueError(f"{nodes} nodes of {g} GPUs are {nodes * g} GPUs, not ranks={ranks}; give two of the three")
        if nodes is None and g is None:
            g = _largest_divisor(ranks, self.gpus_per_node) if self.kind == "cluster" else ranks
        if nodes is not None:
            if ranks % nodes:
                raise ValueError(f"{ranks} GPUs do not split evenly over {nodes} nodes: give a multiple of {nodes}")
            return nodes, ranks // nodes
        if ranks % g:
            raise ValueError(f"{ranks} GPUs do not fill nodes of {g}: give a multiple of {g}")
        return ranks // g, g

    def build(self, ranks: int | None = None, nodes: int | None = None, gpus_per_node: int | None = None,
              nics_per_node: int | None = None, sharp: bool = False, processes: str | None = None):
        """This machine as a topology for the shape asked (see :meth:`shape`), tagged with its name.

        ``processes``: how the job drives its GPUs: "per_node" (one process drives a node's GPUs, as
        nccl-tests' ``-g 8``: its host launches every GPU's kernel in turn) or "per_gpu" (a process per
        GPU, as mpirun, srun and torchrun start them: one launch a process, NCCL's own model above it).
        The topology's ``issue_s`` is that many launches of ``host_s`` each (fitted on the one-process
        calibration tables, :data:`labcore.sim.machines.topologies.H100_HOST_S`). None: the preset's
        own, :meth:`default_processes`."""
        processes = self.default_processes if processes is None else processes
        if processes not in PROCESS_LAYOUTS:
            raise ValueError(f"processes must be one of {', '.join(map(repr, PROCESS_LAYOUTS))}, not {processes!r}")
        nodes, g = self.shape(ranks, nodes, gpus_per_node)
        nics = _whole("nics_per_node", nics_per_node)
        if nics is not None and self.kind != "cluster":
            raise ValueError(f"{self.name} has no NICs to count; nics_per_node is for a cluster preset "
                             "such as dgx_h100_ib")
        if not isinstance(sharp, bool):
            raise ValueError(f"sharp must be True or False, not {sharp!r}")
        if sharp and not self.sharp:
            raise ValueError(f"{self.name} has no SHARP: {self.no_sharp}")
        if nics is None and self.kind == "cluster":
            nics = g if self.nics_per_node is None else min(self.nics_per_node, g) \
                if self.nics_per_node <= self.gpus_per_node else max(1, self.nics_per_node * g // self.gpus_per_node)
        topo = self.builder(nodes, g, nics, sharp)
        topo.preset = self.name
        topo.nccl = self.nccl_machine(nodes * g, nodes)
        return with_processes(topo, processes)

    @property
    def default_processes(self) -> str:
        """The layout a preset is built for unless told: one process a node on one node (nccl-tests
        ``-g 8``, the layout its host time was fitted on), one a GPU across nodes (mpirun and srun, as
        every multi-node table of tests/data ran)."""
        return "per_node" if self.kind == "node" else "per_gpu"

    # --- NCCL's machine: decided here and nowhere else ---------------------------------------
    def nccl_machine(self, ranks: int, nodes: int = 1):
        """NCCL's view of this preset (a :class:`labcore.sim.nccl.tuner.Machine`, resized to ``ranks``
        GPUs on ``nodes`` nodes), or None where the lab has none: what a topology built here carries
        (``topology.nccl``) and :mod:`labcore.sim.nccl.mechanisms` reads."""
        name = self.node_tuner if nodes == 1 and self.node_tuner else self.tuner
        return None if name is None else tuner.MACHINES[name].with_ranks(ranks, nodes)

    def tuner_machine(self, ranks: int, nodes: int = 1, sharp: bool = False):
        """The :class:`labcore.sim.nccl.tuner.Machine` NCCL's tuner prices this preset with, resized to
        ``ranks`` GPUs on ``nodes`` nodes; :class:`NoTuner` (one line) where there is none."""
        machine = self.nccl_machine(ranks, nodes)
        if machine is None:
            raise NoTuner(f"NCCL's tuner has no machine for {self.name}: {self.no_tuner}")
        if sharp:
            raise NoTuner(f"NCCL's tuner machine for {self.name} ({self.tuner}) has no CollNet graphs, so it cannot "
                          "price SHARP; name the algorithm (e.g. in_network)")
        return machine

    @property
    def protocols(self) -> tuple[str, ...]:
        """NCCL's protocols its topology describes (empty for a textbook machine)."""
        return tuple(self.build().protocols)

    @property
    def nvls(self) -> bool:
        """Whether it has NVLink SHARP (an NVSwitch that reduces: NCCL's NVLS)."""
        return "NVLS" in self.protocols
