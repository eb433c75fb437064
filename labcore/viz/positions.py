"""Where to draw each agent of a schedule, from its :class:`~labcore.sim.core.trace.Layout`.

Ranks sit the way the algorithm sees them: around a circle in ring order, as a
tree under its root, in boxes per node for hierarchical runs, around a
reducing switch for in-network reduction. Reducing switches are agents too
(ids ``ranks ..``), drawn in the middle.

Example
-------
>>> from labcore.sim.core.trace import Layout
>>> p = place(Layout("ring", order=(0, 1, 2, 3)), ranks=4)
>>> p.xy.shape, len(p.edges)
((4, 2), 4)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Placement", "place"]


@dataclass
class Placement:
    """Coordinates of every agent plus the static picture around them.

    Attributes
    ----------
    xy : (agents, 2) positions.
    edges : list of (a, b, style) lines drawn under the arrows; style is
        "solid" or "dash" (the second tree of a double binary tree).
    boxes : list of (x0, y0, x1, y1, label) rectangles (one per node).
    radius : how far from an agent's centre an arrow starts and ends.
    """

    xy: np.ndarray
    edges: list[tuple[int, int, str]] = field(default_factory=list)
    boxes: list[tuple[float, float, float, float, str]] = field(default_factory=list)
    radius: float = 0.08


def _circle(n: int, r: float = 1.0, cx: float = 0.0, cy: float = 0.0) -> np.ndarray:
    """n points clockwise from the top."""
    a = np.pi / 2 - 2 * np.pi * np.arange(n) / max(n, 1)
    return np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], axis=1)


def _ring_edges(order) -> list[tuple[int, int, str]]:
    n = len(order)
    if n < 2:
        return []
    if n == 2:
        return [(order[0], order[1], "solid")]
    return [(order[i], order[(i + 1) % n], "solid") for i in range(n)]


def _ring(order, ranks: int) -> Placement:
    order = list(order) or list(range(ranks))
    xy = np.zeros((ranks, 2))
    xy[order] = _circle(len(order))
    return Placement(xy, _ring_edges(order), radius=min(0.12, 1.6 / max(ranks, 1)))


def _tree(parents: tuple[tuple[int, ...], ...], ranks: int) -> Placement:
    """Levels of the first tree from its root down; leaves spread evenly left to right."""
    first = list(parents[0])
    children: dict[int, list[int]] = {r: [] for r in range(ranks)}
    roots = []
    for r, p in enumerate(first):
        (children[p].append(r) if p >= 0 else roots.append(r))
    depth = np.zeros(ranks)
    x = np.zeros(ranks)
    next_leaf = [0.0]

    def walk(r: int, d: int) -> None:  # depth-first: a parent sits above the middle of its children
        depth[r] = d
        kids = sorted(children[r])
        if not kids:
            x[r] = next_leaf[0]
            next_leaf[0] += 1
            return
        for k in kids:
            walk(k, d + 1)
        x[r] = (x[kids[0]] + x[kids[-1]]) / 2

    for root in roots:
        walk(root, 0)
    width = max(next_leaf[0] - 1, 1)
    levels = max(depth.max(), 1)
    xy = np.stack([2 * x / width - 1, 1 - 2 * depth / levels], axis=1)
    edges = []
    for t, tree in enumerate(parents):
        edges += [(p, r, "solid" if t == 0 else "dash") for r, p in enumerate(tree) if p >= 0]
    return Placement(xy, edges, radius=min(0.12, 1.2 / max(next_leaf[0], 1)))


def _hierarchical(nodes: tuple[int, ...], order, ranks: int) -> Placement:
    """Nodes side by side (wrapping after four), ranks on a small circle inside each box."""
    node_of = np.asarray(nodes) if len(nodes) else np.zeros(ranks, dtype=int)
    n_nodes = int(node_of.max()) + 1
    cols = min(n_nodes, 4)
    order = list(order)
    xy = np.zeros((ranks, 2))
    boxes, edges = [], []
    for k in range(n_nodes):
        local = [r for r in range(ranks) if node_of[r] == k]
        if sorted(order) == list(range(len(local))):   # order of local ranks, the same on every node
            members = [local[i] for i in order]
        else:                                           # order of global ranks, or none
            members = [r for r in order if node_of[r] == k] or local
        cx, cy = 2.6 * (k % cols), -2.6 * (k // cols)
        xy[members] = _circle(len(members), r=0.8, cx=cx, cy=cy) if len(members) > 1 else (cx, cy)
        boxes.append((cx - 1.15, cy - 1.15, cx + 1.15, cy + 1.15, f"node {k}"))
        edges += _ring_edges(members)
    # centre the picture and scale its width to 2, like the other layouts
    scale = 2.0 / (2.6 * (cols - 1) + 2.3)
    shift = np.array([2.6 * (cols - 1) / 2, -2.6 * ((n_nodes - 1) // cols) / 2])
    xy = (xy - shift) * scale
    boxes = [((x0 - shift[0]) * scale, (y0 - shift[1]) * scale, (x1 - shift[0]) * scale,
              (y1 - shift[1]) * scale, label) for x0, y0, x1, y1, label in boxes]
    per_node = max(np.bincount(node_of).max(), 1)
    return Placement(xy, edges, boxes, radius=min(0.1, 0.9 * scale * 2.5 / per_node))


def _switch(ranks: int, switches: int) -> Placement:
    xy = np.zeros((ranks + switches, 2))
    xy[:ranks] = _circle(ranks)
    if switches:
        xy[ranks:] = _circle(switches, r=0.25) if switches > 1 else (0.0, 0.0)
    edges = [(r, ranks + s, "solid") for s in range(switches) for r in range(ranks)]
    return Placement(xy, edges, radius=min(0.12, 1.6 / max(ranks, 1)))


def place(layout, ranks: int, switches: int = 0) -> Placement:
    """Positions for ``ranks`` ranks and ``switches`` switch agents drawn as ``layout`` says.

    Parameters
    ----------
    layout
        A :class:`labcore.sim.core.trace.Layout` (kind "ring", "tree", "hierarchical",
        "switch" or "mesh").
    ranks, switches
        How many agents of each kind the schedule has.
    """
    kind = getattr(layout, "kind", "mesh")
    switches = max(switches, getattr(layout, "switches", 0) or 0)
    if kind == "ring":
        p = _ring(layout.order, ranks)
    elif kind == "tree" and layout.parents:
        p = _tree(layout.parents, ranks)
    elif kind == "hierarchical":
        p = _hierarchical(layout.nodes, layout.order, ranks)
    elif kind == "switch" or switches:
        return _switch(ranks, switches)
    else:  # mesh: a circle, no edges (every pair is connected)
        p = Placement(_circle(ranks), [], radius=min(0.12, 1.6 / max(ranks, 1)))
    if switches:  # a switch agent in a layout that did not plan one: put it in the middle
        p.xy = np.vstack([p.xy, _circle(switches, r=0.25) if switches > 1 else [[0.0, 0.0]]])
    return p
