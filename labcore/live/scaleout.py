"""A hierarchical all-reduce by hand, on ranks pretending to be nodes (run it on every rank).

Ranks ``n*g .. n*g+g-1`` form "node" n. Two kinds of process groups, made with
``dist.new_group`` (every rank must create every group, in the same order):

- the node's own group (NVLink inside a real server);
- a "rail": the ranks with the same local index on every node (one NIC each in a
  DGX: GPU l of every node talks to GPU l of the others).

The all-reduce: reduce-scatter inside the node (each rank ends with 1/g of the
node's sum), all-reduce of that slice along the rail (the only step that crosses
nodes), all-gather inside the node. Per rank, only S/g bytes enter a collective
that crosses nodes, against S for a flat all-reduce over all ranks.

Example
-------
>>> import labcore as lc
>>> def step():
...     import torch
...     groups = node_groups(2)
...     t = torch.arange(8.0) + lc.rank_info().rank
...     return hierarchical_all_reduce(t, groups)["between_nodes"]
>>> with lc.Cluster(4, backend="gloo") as cl:   # doctest: +SKIP
...     cl.run(step)
[16, 16, 16, 16]
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class NodeGroups:
    """This rank's two groups and where it sits."""

    gpus_per_node: int
    nodes: int
    node: int
    local: int
    intra: object    # torch ProcessGroup of this rank's node
    rail: object     # torch ProcessGroup of this rank's local index across nodes


def node_groups(gpus_per_node: int) -> NodeGroups:
    """Make the node groups and the rails for ``gpus_per_node`` ranks per node (a divisor of the world)."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    g = gpus_per_node
    if isinstance(g, bool) or not isinstance(g, int) or g < 1 or world % g:
        raise ValueError(f"gpus_per_node must divide the {world} ranks, not {g!r}")
    nodes = world // g
    intra = [dist.new_group(list(range(n * g, (n + 1) * g))) for n in range(nodes)]
    rails = [dist.new_group([n * g + local for n in range(nodes)]) for local in range(g)]
    return NodeGroups(g, nodes, rank // g, rank % g, intra[rank // g], rails[rank % g])


def hierarchical_all_reduce(tensor, groups: NodeGroups) -> dict:
    """Sum ``tensor`` over every rank in place, in three phases; return the bytes each phase handed in.

    ``tensor`` must have a multiple of ``gpus_per_node`` elements. The returned dict
    counts the bytes this rank passed to the collectives inside its node (``inside_node``:
    S to the reduce-scatter, S/g to the all-gather) and to the one that crosses nodes
    (``between_nodes``: S/g).
    """
    import torch
    import torch.distributed as dist

    g = groups.gpus_per_node
    flat = tensor.view(-1)
    if flat.numel() % g:
        raise ValueError(f"the tensor has {flat.numel()} elements; use a multiple of gpus_per_node={g}")
    pieces = list(flat.chunk(g))
    mine = torch.empty_like(pieces[0])
    dist.reduce_scatter(mine, pieces, group=groups.intra)          # 1/g of the node's sum
    dist.all_reduce(mine, group=groups.rail)                        # across nodes: only the slice
    gathered = [torch.empty_like(mine) for _ in range(g)]
    dist.all_gather(gathered, mine, group=groups.intra)             # everyone gets every slice
    flat.copy_(torch.cat(gathered))
    whole, part = flat.numel() * flat.element_size(), mine.numel() * mine.element_size()
    return {"inside_node": whole + part, "between_nodes": part}
