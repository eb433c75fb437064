"""Topologies: where ranks sit, which links join them, and the route between two agents.

Three kinds cover every preset (:mod:`labcore.sim.machines.presets`, built from :mod:`labcore.sim.machines.topologies`):

* :class:`Uniform` -- every ordered pair of ranks has its own link (latency
  ``alpha``, bandwidth ``bandwidth``), plus one reducing switch joined to every
  rank by a link each way. The alpha-beta model of the textbooks.
* :class:`Graph` -- explicit nodes (ranks first, then switches, NICs, CPUs) and
  directed links; a route is a path with the fewest hops (ties: lowest total
  latency), found once per source and cached.
* :class:`NVSwitchNodes` -- GPU servers with an NVSwitch inside and NICs into one
  fabric, routes computed rather than searched (a thousand GPUs cost nothing to set up).

Both give the engine the same things: ``bandwidth``/``latency`` arrays indexed
by link id, ``routes(src, dst)`` (vectorised, ``-1`` padded), ``gamma`` (seconds
per reduced byte, per agent), ``launch_s`` (fixed start-up time of a
collective), ``node_of`` (which machine each rank is on) and ``link_label``.
Bandwidths are in bytes/s, latencies in seconds.

Example
-------
>>> t = Uniform(4, alpha=1e-6, bandwidth=10e9)
>>> t.routes([0, 3], [1, 0]).tolist()
[[1], [12]]
>>> t.link_label(12)
'rank 3 -> rank 0'
"""
from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from labcore import validate


PORT_MODELS = ("multi", "single")


@dataclass(frozen=True)
class Protocol:
    """How one of NCCL's protocols moves data: its fixed start-up, per-hop latency and bandwidth.

    Parameters
    ----------
    name : "LL", "LL128" or "Simple" (NCCL's protocols).
    launch_s : fixed start-up of a collective (NCCL's base latency).
    hop_s : per-hop latency by link kind ("nvlink", "net", "nvls"), seconds for a whole route.
    step_s : fixed cost of every step on top of its bandwidth (with the "path" latency model).
    efficiency : fraction of each link kind's bandwidth the protocol delivers (default 1).
    piece_bytes, max_pieces : how pipelined algorithms cut the buffer: one piece per
        ``piece_bytes``, at most ``max_pieces`` (see :meth:`pieces`).
    algorithms : the simulator's algorithms that can run with this protocol (empty: all).
    by_algorithm : what differs for some of the simulator's algorithms, ``{algorithm: {"launch_s":
        ..., "hop_s": {...}, "efficiency": {...}}}`` (any of the three; efficiencies by link kind
        override the protocol's): NCCL's trees have latencies and, across nodes, bandwidth caps of
        their own.

    Example
    -------
    >>> Protocol("LL", 6.6e-6, {"nvlink": 0.6e-6}, {"nvlink": 0.5}).pieces(1 << 20)
    2
    """

    name: str
    launch_s: float
    hop_s: dict
    efficiency: dict = field(default_factory=dict)
    step_s: float = 0.0
    piece_bytes: int = 512 << 10
    max_pieces: int = 256
    algorithms: tuple = ()
    by_algorithm: dict = field(default_factory=dict)

    def pieces(self, nbytes: float) -> int:
        """Pipeline pieces for ``nbytes``: one per ``piece_bytes``, between 1 and ``max_pieces``."""
        return int(min(self.max_pieces, max(1, -(-int(nbytes) // self.piece_bytes))))


@dataclass(frozen=True)
class Cut:
    """A set of ranks and the bandwidth of the links leaving and entering it (bytes/s)."""

    ranks: int
    out_bandwidth: float
    in_bandwidth: float
    label: str


class Topology:
    """Common interface; see the module docstring. Subclasses fill the attributes.

    Besides links and routes a topology says how ranks use them:

    * ``ports`` -- the port model. ``"multi"``: a rank's messages to different peers in one
      step travel at the same time, each over its own links (NVSwitch, the textbook full mesh).
      ``"single"``: a rank sends one message and receives one at a time, so its messages of a
      step queue behind each other (the model of Thakur, Rabenseifner and Gropp 2005).
    * ``channels`` -- how many rings or trees NCCL runs at once here (schedules take it as
      their default), never more than one per ``channel_bytes`` of the message.
    * ``issue_s`` -- host time to issue one collective: back-to-back collectives, as
      nccl-tests times them, complete at most one per ``issue_s``.
    * ``host_s`` -- host time to launch one GPU's part of a collective (NCCL's enqueue and kernel
      launch): a process that drives ``k`` GPUs issues a collective in ``k x host_s``, which a
      preset sets as ``issue_s`` for the job's process layout (:mod:`labcore.sim.machines.presets`).
    * ``protocols`` -- NCCL's protocols (:class:`Protocol`) this machine is described with;
      :meth:`with_protocol` gives the same machine as one protocol sees it.
    * ``latency_model`` -- ``"step"`` (the alpha-beta textbook: every step pays the latency of
      its slowest message, so the closed forms of :mod:`labcore.sim.core.cost` hold) or ``"path"``
      (NCCL's pipelined kernels: a step costs its bandwidth and the protocol's per-step
      overhead ``step_s``, and latency is paid along each chunk's path from hop to hop, so a
      ring across nodes pays a network hop only where its chunks cross nodes).
    """

    name: str
    ranks: int
    switch_agents: int
    bandwidth: np.ndarray
    latency: np.ndarray
    launch_s: float
    gamma: np.ndarray          # (ranks + switch_agents,) seconds per byte reduced
    node_of: np.ndarray        # (ranks,) machine index
    notes: dict
    ports: str = "multi"
    channels: int = 1
    channel_bytes: float = 32 << 10
    issue_s: float = 0.0
    host_s: float = 0.0
    protocols: dict = {}
    protocol: str | None = None
    link_kind: np.ndarray | None = None
    latency_model: str = "step"
    step_s: float = 0.0
    preset: str | None = None      # the preset it was built from (labcore.sim.machines.presets), which names its tuner
    nccl = None                    # NCCL's view of it (a labcore.sim.nccl.tuner.Machine): labcore.sim.nccl.mechanisms
    # the network's latency on a step across nodes as runs show it, where it is not what the net plugin
    # tells NCCL (the graphs' latencyInter, which NCCL's picks keep using): labcore.sim.nccl.mechanisms
    net_latency_s: float | None = None

    @property
    def n_links(self) -> int:
        return int(self.bandwidth.size)

    def routes(self, src, dst) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def link_label(self, link: int) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def cuts(self) -> list[Cut]:  # pragma: no cover - interface
        """Sets of ranks with the bandwidth out of and into each (for lower bounds)."""
        raise NotImplementedError

    def port_bandwidth(self) -> float:
        """The smallest bandwidth of the first link from a rank toward its ring neighbour."""
        out = self.routes(np.arange(self.ranks), (np.arange(self.ranks) + 1) % self.ranks)[:, 0]
        return float(self.bandwidth[out].min()) if self.ranks > 1 else float(self.bandwidth.max())

    def hop_latency(self) -> float:
        """The smallest latency between two ranks (the alpha of the latency bound)."""
        if self.ranks < 2:
            return 0.0
        r = np.arange(self.ranks)
        links = self.routes(r, (r + 1) % self.ranks)
        return float(np.where(links >= 0, self.latency[np.maximum(links, 0)], 0.0).sum(axis=1).min())

    def channel_count(self, nbytes: float) -> int:
        """Channels NCCL would use for ``nbytes``: ``channels``, but at least ``channel_bytes`` each."""
        return int(max(1, min(self.channels, nbytes // self.channel_bytes)))

    def ring_orders(self, channels: int) -> np.ndarray:
        """(channels, ranks) the ring of every channel; here every channel uses 0, 1, ..., ranks-1."""
        return np.tile(np.arange(self.ranks), (channels, 1))

    def with_protocol(self, name: str, algorithm: str | None = None) -> "Topology":
        """This machine as protocol ``name`` sees it (running ``algorithm``, when the protocol's
        latencies depend on it): its start-up, hop latencies and bandwidths."""
        if name not in self.protocols:
            have = ", ".join(self.protocols) or "none"
            raise ValueError(f"topology {self.name!r} describes no protocol {name!r} (it has: {have})")
        proto = self.protocols[name]
        over = proto.by_algorithm.get(algorithm, {})
        hop_s, efficiency = over.get("hop_s", proto.hop_s), {**proto.efficiency, **over.get("efficiency", {})}
        kinds = self.link_kind
        other = copy.copy(self)
        other.latency = np.array([hop_s.get(k, 0.0) / 2 for k in kinds.tolist()]) if kinds.size else self.latency
        other.bandwidth = self.bandwidth * np.array([efficiency.get(k, 1.0) for k in kinds.tolist()])
        other.launch_s, other.protocol, other.step_s = over.get("launch_s", proto.launch_s), name, proto.step_s
        return other

    @property
    def nodes(self) -> int:
        return int(self.node_of.max()) + 1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {self.ranks} ranks, {self.nodes} node(s), {self.n_links} links>"


class Uniform(Topology):
    """Every pair of ranks joined by its own link; one reducing switch joined to all.

    Parameters
    ----------
    ranks : int
    alpha : float
        Latency of every link, seconds.
    bandwidth : float
        Bandwidth of every link, bytes/s (beta = 1 / bandwidth).
    gamma : float
        Seconds per byte to reduce (ranks and switch alike).
    gpus_per_node : int or None
        Group ranks into nodes for the hierarchical algorithm (links stay uniform).
    ports : "multi" or "single"
        Port model (see :class:`Topology`): with "multi" a rank drives all its links at once
        (a parent feeds both children of a tree together); with "single" it has one port, as in
        the cost model of Thakur, Rabenseifner and Gropp, and its messages of a step queue.

    Example
    -------
    >>> Uniform(3, alpha=2e-6, bandwidth=1e9).latency[:3].tolist()
    [2e-06, 2e-06, 2e-06]
    """

    def __init__(self, ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, gamma: float = 0.0,
                 gpus_per_node: int | None = None, launch_s: float = 0.0, name: str = "uniform",
                 ports: str = "multi"):
        _check_ranks(ranks)
        if not (bandwidth > 0 and alpha >= 0 and gamma >= 0) or not np.isfinite([alpha, bandwidth, gamma]).all():
            raise ValueError("bandwidth must be positive and finite; alpha and gamma finite and not negative")
        if ports not in PORT_MODELS:
            raise ValueError(f"ports must be one of {', '.join(PORT_MODELS)}, got {ports!r}")
        self.name, self.ranks, self.switch_agents, self.ports = name, ranks, 1, ports
        self.alpha, self.beta = float(alpha), 1.0 / float(bandwidth)
        n = ranks * ranks + 2 * ranks
        # broadcast views: a 1024-rank mesh has a million links but needs no memory for them
        self.bandwidth = np.broadcast_to(np.float64(bandwidth), (n,))
        self.latency = np.broadcast_to(np.float64(alpha), (n,))
        self.gamma = np.full(ranks + 1, float(gamma))
        self.launch_s = float(launch_s)
        if gpus_per_node is not None:
            validate.whole_number(gpus_per_node, "gpus_per_node", least=1, must="a whole number of at least 1 (or None)")
        g = gpus_per_node or ranks
        if ranks % g:
            raise ValueError(f"gpus_per_node={g} must divide ranks={ranks}")
        self.node_of = np.arange(ranks) // g
        self.notes = {"alpha": alpha, "bandwidth": bandwidth, "gamma": gamma, "ports": ports}

    def routes(self, src, dst) -> np.ndarray:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        P = self.ranks
        link = src * P + dst
        link = np.where(dst == P, P * P + src, link)          # rank -> switch
        link = np.where(src == P, P * P + P + dst, link)      # switch -> rank
        return link[:, None]

    def link_label(self, link: int) -> str:
        P = self.ranks
        if link < P * P:
            return f"rank {link // P} -> rank {link % P}"
        if link < P * P + P:
            return f"rank {link - P * P} -> switch"
        return f"switch -> rank {link - P * P - P}"

    def cuts(self) -> list[Cut]:
        bw, P = 1.0 / self.beta, self.ranks
        # a rank's ports: one (single), or one link to every other rank and one to the switch (multi)
        one = bw if self.ports == "single" else P * bw
        cuts = [Cut(1, one, one, "one rank")]
        g = int(np.bincount(self.node_of).max())
        if 1 < g < P:
            node = g * bw if self.ports == "single" else g * (P - g + 1) * bw
            cuts.append(Cut(g, node, node, "one node"))
        return cuts


def _check_ranks(ranks) -> None:
    validate.whole_number(ranks, "ranks", least=1, must="a whole number of at least 1")


def _check_links(name: str, bandwidth: np.ndarray, latency: np.ndarray) -> None:
    """Every link carries something in finite time: bandwidth positive and finite, latency >= 0."""
    bad = ~(np.isfinite(bandwidth) & (bandwidth > 0))
    if bad.any():
        raise ValueError(f"topology {name!r}: a link's bandwidth must be a positive, finite number of bytes/s, "
                         f"not {bandwidth[bad][0]:g} (check the bandwidth and efficiency given)")
    bad = ~(np.isfinite(latency) & (latency >= 0))
    if bad.any():
        raise ValueError(f"topology {name!r}: a link's latency must be a finite number of seconds >= 0, "
                         f"not {latency[bad][0]:g}")


@dataclass
class Link:
    """A directed link of a :class:`Graph`: bandwidth in bytes/s, latency in seconds."""

    src: int
    dst: int
    bandwidth: float
    latency: float
    kind: str = ""


@dataclass
class Graph(Topology):
    """An explicit topology: nodes 0..ranks-1 are the ranks, then the other devices.

    Parameters
    ----------
    name : str
    ranks : int
    node_names : list of str, one per node (ranks included).
    links : list of :class:`Link` (directed; add both directions for a duplex cable).
    reducing : node ids of switches that can reduce in the network (agents ranks, ranks+1, ...).
    node_of : machine index of every rank.
    gamma_rank, gamma_switch : seconds per byte reduced by a rank / by a switch.
    launch_s : fixed start-up time of every collective.
    notes : where each number comes from.
    no_transit : nodes that routes may end at but not pass through (e.g. a switch's reduction engine).
    ports : port model, "multi" (default: the links are the ports) or "single" (see :class:`Topology`).

    Example
    -------
    >>> g = Graph("pair", 2, ["gpu0", "gpu1"], [Link(0, 1, 1e9, 1e-6), Link(1, 0, 1e9, 1e-6)])
    >>> g.routes([0, 1], [1, 0]).tolist()
    [[0], [1]]
    """

    name: str
    ranks: int
    node_names: list[str]
    links: list[Link]
    reducing: Sequence[int] = ()
    node_of: np.ndarray | None = None
    gamma_rank: float = 0.0
    gamma_switch: float = 0.0
    launch_s: float = 0.0
    notes: dict = field(default_factory=dict)
    no_transit: Sequence[int] = ()
    ports: str = "multi"

    def __post_init__(self) -> None:
        if self.ports not in PORT_MODELS:
            raise ValueError(f"ports must be one of {', '.join(PORT_MODELS)}, got {self.ports!r}")
        _check_ranks(self.ranks)
        self.switch_agents = len(self.reducing)
        self.bandwidth = np.array([l.bandwidth for l in self.links], dtype=np.float64)
        self.latency = np.array([l.latency for l in self.links], dtype=np.float64)
        _check_links(self.name, self.bandwidth, self.latency)
        self.gamma = np.array([self.gamma_rank] * self.ranks + [self.gamma_switch] * self.switch_agents)
        self.node_of = np.zeros(self.ranks, dtype=np.int64) if self.node_of is None else np.asarray(self.node_of)
        self._agent_node = list(range(self.ranks)) + list(self.reducing)
        self._out: list[list[int]] = [[] for _ in self.node_names]
        for i, l in enumerate(self.links):
            self._out[l.src].append(i)
        self._tree: dict[int, list[int]] = {}
        self._cache: dict[tuple[int, int], list[int]] = {}

    def _pred(self, s: int) -> list[int]:
        """Shortest-path tree from node s, (hops, latency) order: the link that reaches each node."""
        if s not in self._tree:
            best = {s: (0, 0.0)}
            pred = [-1] * len(self.node_names)
            heap = [(0, 0.0, s)]
            while heap:
                h, lat, u = heapq.heappop(heap)
                if best.get(u, (h, lat)) < (h, lat) or (u != s and u in self.no_transit):
                    continue
                for i in self._out[u]:
                    v, cand = self.links[i].dst, (h + 1, lat + self.links[i].latency)
                    if v not in best or cand < best[v]:
                        best[v], pred[v] = cand, i
                        heapq.heappush(heap, (cand[0], cand[1], v))
            self._tree[s] = pred
        return self._tree[s]

    def route(self, src_agent: int, dst_agent: int) -> list[int]:
        """Link ids from one agent to another."""
        key = (src_agent, dst_agent)
        if key not in self._cache:
            s, d = self._agent_node[src_agent], self._agent_node[dst_agent]
            pred, path, v = self._pred(s), [], d
            while v != s:
                i = pred[v]
                if i < 0:
                    raise ValueError(f"{self.name}: no route from {self.node_names[s]} to {self.node_names[d]}")
                path.append(i)
                v = self.links[i].src
            self._cache[key] = path[::-1]
        return self._cache[key]

    def routes(self, src, dst) -> np.ndarray:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if src.size == 0:
            return np.zeros((0, 1), dtype=np.int64)
        pairs, inv = np.unique(np.stack([src, dst], axis=1), axis=0, return_inverse=True)
        paths = [self.route(int(a), int(b)) for a, b in pairs]
        hops = max(1, max(len(p) for p in paths))
        table = np.full((len(paths), hops), -1, dtype=np.int64)
        for i, p in enumerate(paths):
            table[i, : len(p)] = p
        return table[inv.ravel()]

    def link_label(self, link: int) -> str:
        l = self.links[link]
        return f"{self.node_names[l.src]} -> {self.node_names[l.dst]}" + (f" ({l.kind})" if l.kind else "")

    def cuts(self) -> list[Cut]:
        out_bw = np.zeros(len(self.node_names))
        in_bw = np.zeros(len(self.node_names))
        for l in self.links:
            out_bw[l.src] += l.bandwidth
            in_bw[l.dst] += l.bandwidth
        r = slice(0, self.ranks)
        if self.ports == "single":      # one port: the fastest of its links at a time
            out_bw[r] = [max([l.bandwidth for l in self.links if l.src == k] or [0.0]) for k in range(self.ranks)]
            in_bw[r] = [max([l.bandwidth for l in self.links if l.dst == k] or [0.0]) for k in range(self.ranks)]
        cuts = [Cut(1, float(out_bw[r].min()), float(in_bw[r].min()), "one rank")]
        if self.nodes > 1:
            cuts += self._node_cuts()
        return cuts

    def _node_cuts(self) -> list[Cut]:
        """One cut per machine: its ranks plus the devices only its ranks are wired to."""
        owner = list(self.node_of.tolist()) + [-1] * (len(self.node_names) - self.ranks)
        for dev in range(self.ranks, len(self.node_names)):
            near = {owner[l.dst] for l in self.links if l.src == dev and l.dst < self.ranks}
            near |= {owner[l.src] for l in self.links if l.dst == dev and l.src < self.ranks}
            owner[dev] = near.pop() if len(near) == 1 else -1
        cuts = []
        for k in range(self.nodes):
            out = sum(l.bandwidth for l in self.links if owner[l.src] == k and owner[l.dst] != k)
            inn = sum(l.bandwidth for l in self.links if owner[l.dst] == k and owner[l.src] != k)
            cuts.append(Cut(int((self.node_of == k).sum()), out, inn, f"node {k}"))
        return cuts


class NVSwitchNodes(Topology):
    """GPU servers: NVSwitch inside every node, one NIC per GPU into a non-blocking fabric.

    Every GPU has one NVLink port into its node's NVSwitch (``nvlink_bandwidth`` each way) and,
    when ``nic_bandwidth`` is given, its own NIC into one fabric switch shared by all nodes (the
    DGX H100 layout: eight GPUs and eight NICs per node). A single node can carry an NVLink SHARP
    reduction engine (``nvls_bandwidth``: what the engine takes from each GPU's port); the fabric
    can reduce in the network (``sharp``, InfiniBand SHARP). Routes are computed, not searched,
    so a thousand GPUs cost nothing to set up. Latency follows the "path" model (see
    :class:`Topology`), as NCCL's pipelined kernels pay it.

    Routes: GPU to GPU in a node: port out, port in (two NVLink hops of half the hop latency);
    across nodes: NIC out, NIC in; GPU to engine: port out, the engine's lane for that GPU;
    GPU to the fabric switch: NIC out.

    Channels follow the NICs: channel ``c``'s ring visits the GPUs of every node starting at local
    GPU ``c`` (mod the node size), so each channel enters and leaves a node through its own pair of
    NICs and ``gpus_per_node`` channels keep every NIC busy, as NCCL's rings do (NCCL aligns them to
    the fabric's rails and, with PXN, moves data to the rail's GPU over NVLink first; in a
    non-blocking fabric that costs what this costs). With fewer NICs than GPUs
    (``nics_per_node``), every ``gpus_per_node / nics_per_node`` GPUs share one: the first GPU of
    the group owns it and the others' traffic across nodes goes through it. Any other count is
    computed, not refused: more NICs than GPUs give each GPU ``nics / gpus`` NICs' bandwidth (NCCL
    runs a channel per NIC), and a count that does not divide the GPUs is carried by the largest
    divisor of ``gpus_per_node`` below it, each with ``nics / divisor`` NICs' bandwidth, so a
    node's NICs together carry what ``nics_per_node`` NICs carry (``nic_links``, ``nic_share``).

    NVLink SHARP (``nvls_bandwidth``) on several nodes puts a reduction engine in every node's
    NVSwitch: agents ``engine_agent0 + node`` (after the fabric switch, agent ``ranks``, when
    ``sharp``), as NCCL's NVLS and NVLSTree algorithms use them inside each node.

    Parameters
    ----------
    nodes, gpus_per_node : int
    nvlink_bandwidth, nvlink_latency : per port and direction (B/s); per GPU-to-GPU route (s).
    nic_bandwidth, net_latency : per NIC and direction; per route across nodes. Needed for nodes > 1.
    nics_per_node : NICs per node, any number from 1 (default: one per GPU).
    nvls_bandwidth : the NVLS engine's intake per GPU, or None (no NVLink SHARP).
    sharp : the fabric switch reduces (an agent after the ranks).
    launch_s, issue_s, host_s, channels, channel_bytes, protocols : see :class:`Topology`.
    gamma : seconds per byte reduced (ranks and switches).

    Example
    -------
    >>> c = NVSwitchNodes(2, 4, nvlink_bandwidth=1e11, nvlink_latency=1e-6, nic_bandwidth=1e10, net_latency=4e-6)
    >>> c.routes([0, 0], [1, 4]).tolist()          # NVLink in the node, NICs across
    [[0, 9], [16, 28]]
    >>> c.ring_orders(2).tolist()
    [[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 0, 5, 6, 7, 4]]
    >>> [name for name, up, down in c.nics()][:2]
    ['node 0 gpu 0', 'node 0 gpu 1']
    """

    def __init__(self, nodes: int, gpus_per_node: int, nvlink_bandwidth: float, nvlink_latency: float,
                 nic_bandwidth: float | None = None, net_latency: float = 0.0, nvls_bandwidth: float | None = None,
                 sharp: bool = False, launch_s: float = 0.0, issue_s: float = 0.0, channels: int = 1,
                 channel_bytes: float = 32 << 10, protocols: dict | None = None, gamma: float = 0.0,
                 name: str = "cluster", notes: dict | None = None, nics_per_node: int | None = None,
                 host_s: float = 0.0):
        if validate.whole(nodes) is None or validate.whole(gpus_per_node) is None or nodes < 1 or gpus_per_node < 1:
            raise ValueError(f"nodes and gpus_per_node must be whole numbers of at least 1, not {nodes!r} and "
                             f"{gpus_per_node!r}")
        nodes, gpus_per_node = int(nodes), int(gpus_per_node)
        nics = gpus_per_node if nics_per_node is None else nics_per_node
        if validate.whole(nics) is None or nics < 1:
            raise ValueError(f"nics_per_node must be a whole number of at least 1, not {nics_per_node!r}")
        if nodes > 1 and not nic_bandwidth:
            raise ValueError("several nodes need NICs: give nic_bandwidth")
        if sharp and not nic_bandwidth:
            raise ValueError("in-network reduction (sharp) needs NICs: give nic_bandwidth")
        P = nodes * gpus_per_node
        self.name, self.ranks, self.g = name, P, gpus_per_node
        self.has_nic, self.has_engine, self.sharp = bool(nic_bandwidth), bool(nvls_bandwidth), bool(sharp)
        # NIC links: one per group of GPUs sharing NICs; each carries nic_share NICs' bandwidth
        links = min(int(nics), gpus_per_node)
        links = max(d for d in range(1, links + 1) if gpus_per_node % d == 0)
        self.nic_links, self.nic_share = links, int(nics) / links
        engines = nodes if self.has_engine else 0
        self.switch_agents = engines + int(self.sharp)
        self.engine_agent0 = P + int(self.sharp) if engines else None
        blocks = [("port_out", "nvlink", nvlink_bandwidth, nvlink_latency / 2),
                  ("port_in", "nvlink", nvlink_bandwidth, nvlink_latency / 2)]
        if self.has_nic:
            bw = nic_bandwidth * self.nic_share
            blocks += [("nic_out", "net", bw, net_latency / 2), ("nic_in", "net", bw, net_latency / 2)]
        if self.has_engine:
            blocks += [("eng_in", "nvls", nvls_bandwidth, 0.0), ("eng_out", "nvls", nvls_bandwidth, 0.0)]
        # link id = block index x ranks + rank
        self._block = {b[0]: i for i, b in enumerate(blocks)}
        kinds, bws, lats = ([b[k] for b in blocks] for k in (1, 2, 3))
        _check_links(name, np.array(bws, dtype=np.float64), np.array(lats, dtype=np.float64))
        self.link_kind = np.repeat(np.array(kinds), P)
        self.bandwidth = np.repeat(np.array(bws, dtype=np.float64), P)
        self.latency = np.repeat(np.array(lats, dtype=np.float64), P)
        self.gamma = np.full(P + self.switch_agents, float(gamma))
        self.node_of = np.arange(P) // gpus_per_node
        share = gpus_per_node // links
        self.nic_of = np.arange(P) // share * share          # the GPU whose NIC each GPU uses
        self.nics_per_node = int(nics)
        self.launch_s, self.issue_s, self.host_s = float(launch_s), float(issue_s), float(host_s)
        self.channels, self.channel_bytes = int(channels), float(channel_bytes)
        self.protocols = dict(protocols or {})
        self.latency_model = "path"
        self.notes = dict(notes or {})

    def _link(self, block: str, rank):
        return self._block[block] * self.ranks + rank

    def routes(self, src, dst) -> np.ndarray:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        P = self.ranks
        s, d = np.minimum(src, P - 1), np.minimum(dst, P - 1)
        out = np.empty((src.size, 2), dtype=np.int64)
        if self.has_nic:        # in the node: port out, port in; across nodes: NIC out, NIC in
            far = self.node_of[s] != self.node_of[d]
            if self.nic_links == self.g:                # every GPU its own NIC link: link ids by arithmetic
                far = far * (2 * P)
                np.add(src, far, out=out[:, 0])
                np.add(dst, far + P, out=out[:, 1])
            else:
                out[:, 0] = np.where(far, 2 * P + self.nic_of[s], src)
                out[:, 1] = np.where(far, 3 * P + self.nic_of[d], P + dst)
        else:
            out[:, 0], out[:, 1] = src, dst + P
        if self.switch_agents:
            if self.has_engine:         # a GPU and its own node's engine, over the GPU's lane
                e0 = self.engine_agent0
                up, down = (dst >= e0) & (dst < e0 + self.nodes), (src >= e0) & (src < e0 + self.nodes)
                out[up] = np.stack([self._link("port_out", src[up]), self._link("eng_in", src[up])], axis=1)
                out[down] = np.stack([self._link("eng_out", dst[down]), self._link("port_in", dst[down])], axis=1)
            if self.sharp:
                fabric = P
                up, down = dst == fabric, src == fabric
                nic_up, nic_down = self.nic_of[src[up]], self.nic_of[dst[down]]
                out[up] = np.stack([self._link("nic_out", nic_up), np.full(nic_up.size, -1)], axis=1)
                out[down] = np.stack([self._link("nic_in", nic_down), np.full(nic_down.size, -1)], axis=1)
        return out

    def nics(self) -> list[tuple[str, int, int]]:
        """Every NIC: (the GPU that owns it, its link up into the fabric, its link down from it)."""
        if not self.has_nic:
            return []
        owners = np.unique(self.nic_of).tolist()
        return [(self._nic_name(r), int(self._link("nic_out", r)), int(self._link("nic_in", r))) for r in owners]

    def _gpu_name(self, r: int) -> str:
        return f"node {r // self.g} gpu {r % self.g}" if self.nodes > 1 else f"gpu {r}"

    def _nic_name(self, r: int) -> str:
        """A NIC by its GPU, or by its number in the node when GPUs share NICs."""
        if self.nic_links == self.g and self.nic_share == 1:
            return self._gpu_name(r)
        return f"node {r // self.g} nic {r % self.g * self.nic_links // self.g}"

    def link_label(self, link: int) -> str:
        index, r = divmod(int(link), self.ranks)
        block = ("port_out", "port_in", "nic_out", "nic_in", "eng_in", "eng_out").index(list(self._block)[index])
        gpu = self._gpu_name(r)
        switch = f"node {r // self.g} nvswitch" if self.nodes > 1 else "nvswitch"
        return {0: f"{gpu} -> {switch} (nvlink)", 1: f"{switch} -> {gpu} (nvlink)",
                2: f"{self._nic_name(r)} -> fabric (nic)", 3: f"fabric -> {self._nic_name(r)} (nic)",
                4: f"nvswitch -> reduction engine, lane of {gpu} (nvls)",
                5: f"reduction engine -> nvswitch, lane of {gpu} (nvls)"}[block]

    def cuts(self) -> list[Cut]:
        nic = float(self.bandwidth[self._link("nic_out", 0)]) if self.has_nic else 0.0
        port = float(self.bandwidth[0]) + nic
        cuts = [Cut(1, port, port, "one GPU (NVLink port and NIC)")]
        if self.nodes > 1:
            node = self.nic_links * nic
            cuts.append(Cut(self.g, node, node, "one node (its NICs)"))
        return cuts

    def ring_orders(self, channels: int) -> np.ndarray:
        g, P = self.g, self.ranks
        c = np.arange(channels)[:, None, None]
        nodes = np.arange(P // g)[None, :, None] * g
        local = (c + np.arange(g)[None, None, :]) % g
        return (nodes + local).reshape(channels, P)
