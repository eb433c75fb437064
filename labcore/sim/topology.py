"""Topologies: where ranks sit, which links join them, and the route between two agents.

Two kinds cover every preset in :mod:`labcore.sim.topologies`:

* :class:`Uniform` -- every ordered pair of ranks has its own link (latency
  ``alpha``, bandwidth ``bandwidth``), plus one reducing switch joined to every
  rank by a link each way. The alpha-beta model of the textbooks.
* :class:`Graph` -- explicit nodes (ranks first, then switches, NICs, CPUs) and
  directed links; a route is a path with the fewest hops (ties: lowest total
  latency), found once per source and cached.

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

import heapq
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


class Topology:
    """Common interface; see the module docstring. Subclasses fill the attributes."""

    name: str
    ranks: int
    switch_agents: int
    bandwidth: np.ndarray
    latency: np.ndarray
    launch_s: float
    gamma: np.ndarray          # (ranks + switch_agents,) seconds per byte reduced
    node_of: np.ndarray        # (ranks,) machine index
    notes: dict

    @property
    def n_links(self) -> int:
        return int(self.bandwidth.size)

    def routes(self, src, dst) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def link_label(self, link: int) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def port_bandwidth(self) -> float:
        """The smallest bandwidth out of any rank (the bound used for busbw)."""
        out = self.routes(np.arange(self.ranks), (np.arange(self.ranks) + 1) % self.ranks)[:, 0]
        return float(self.bandwidth[out].min()) if self.ranks > 1 else float(self.bandwidth.max())

    def hop_latency(self) -> float:
        """The smallest latency between two ranks (the alpha of the latency bound)."""
        if self.ranks < 2:
            return 0.0
        r = np.arange(self.ranks)
        links = self.routes(r, (r + 1) % self.ranks)
        return float(np.where(links >= 0, self.latency[np.maximum(links, 0)], 0.0).sum(axis=1).min())

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

    Example
    -------
    >>> Uniform(3, alpha=2e-6, bandwidth=1e9).latency[:3].tolist()
    [2e-06, 2e-06, 2e-06]
    """

    def __init__(self, ranks: int, alpha: float = 1e-6, bandwidth: float = 10e9, gamma: float = 0.0,
                 gpus_per_node: int | None = None, launch_s: float = 0.0, name: str = "uniform"):
        if ranks < 1:
            raise ValueError(f"ranks must be at least 1, got {ranks}")
        if bandwidth <= 0 or alpha < 0 or gamma < 0:
            raise ValueError("bandwidth must be positive; alpha and gamma must not be negative")
        self.name, self.ranks, self.switch_agents = name, ranks, 1
        self.alpha, self.beta = float(alpha), 1.0 / float(bandwidth)
        n = ranks * ranks + 2 * ranks
        # broadcast views: a 1024-rank mesh has a million links but needs no memory for them
        self.bandwidth = np.broadcast_to(np.float64(bandwidth), (n,))
        self.latency = np.broadcast_to(np.float64(alpha), (n,))
        self.gamma = np.full(ranks + 1, float(gamma))
        self.launch_s = float(launch_s)
        g = gpus_per_node or ranks
        if ranks % g:
            raise ValueError(f"gpus_per_node={g} must divide ranks={ranks}")
        self.node_of = np.arange(ranks) // g
        self.notes = {"alpha": alpha, "bandwidth": bandwidth, "gamma": gamma}

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

    def __post_init__(self) -> None:
        self.switch_agents = len(self.reducing)
        self.bandwidth = np.array([l.bandwidth for l in self.links], dtype=np.float64)
        self.latency = np.array([l.latency for l in self.links], dtype=np.float64)
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
