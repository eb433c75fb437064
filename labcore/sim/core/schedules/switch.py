"""In-network reduction: a switch adds the ranks' data (InfiniBand SHARP, NVLink SHARP / NVLS).

* ``in_network`` (SHARP-style): every rank sends piece j of its buffer up to the
  switch, which reduces the p copies and multicasts the sum back down: k+1 steps
  of S/k bytes, each rank sending S and receiving S in all (instead of the
  ring's 2(n-1)/n S each way, n ranks). busbw can exceed the link bandwidth.
  With g = ``gpus_per_node`` > 1 it runs as NCCL's CollNetDirect does across
  nodes (src/device/all_reduce.h, NCCL 2.30.7): each GPU scatters slice l of a
  piece to local GPU l (the head of NIC l), which reduces the node's g copies
  over NVLink, sends the slice up its NIC to the switch (one SHARP reduction per
  NIC, a channel each), receives the sum and broadcasts it to the node's other
  GPUs. Each NIC then carries S/g up and S/g down (S with one GPU a node).
* ``nvls`` (NVLink SHARP on an NVSwitch, as NCCL drives it): piece j is split in
  p segments; every rank pushes its piece to the switch, which reduces (the
  multimem load-reduce), each rank fetches its reduced segment and stores it
  back to the switch, which multicasts it to the other ranks (the multimem
  store). Per rank S(1+1/n) bytes go up and S down, so algbw tends to
  bandwidth x n/(n+1): the relation algbw = busbw-related n/(n+1) that
  nccl-tests' maintainers give for NVLS (nccl-tests issue 239).

* ``nvls`` across nodes (``gpus_per_node`` g < ranks: NCCL's NVLS and NVLSTree algorithms,
  src/device/all_reduce.h): every node's NVSwitch reduces the node's pieces (push), GPU l of each
  node fetches slice l of the node's sum (it is the head of NIC l), the heads of slice l combine
  their nodes' sums across the network, store the total back into their switch and the switch
  multicasts it to the node's other GPUs. Across nodes ``across="switch"`` sends each slice up to
  the fabric's reducing switch and back (InfiniBand SHARP: NCCL's NVLS with CollNet), ``"ring"``
  runs a ring all-reduce among the heads of a slice (NCCL's NVLSTree runs a tree there; on two
  nodes both are one exchange, beyond that the ring stands in for the tree). The engines are
  agents ``engine + node`` (default ``engine`` = ``ranks``; after the fabric's switch, agent
  ``ranks``, when there is one).

The switch is agent ``ranks`` (its buffer starts empty).

Example
-------
>>> in_network_all_reduce_schedule(4, 400, pipeline=2).n_steps
3
>>> in_network_all_reduce_schedule(8, 800, pipeline=2, gpus_per_node=4).n_steps   # scatter, up, down, broadcast
5
"""
from __future__ import annotations

import numpy as np

from labcore.sim.core import steps
from labcore.sim.core.registry import algorithm
from labcore.sim.core.schedules._parts import Parts, ring_phase
from labcore.sim.core.steps import default_pipeline
from labcore.sim.core.trace import Layout, Schedule


def _nvls_steps(p, n, k, ports):
    seg = n / (k * p)
    table = []
    for s in range(k + 3):
        push = (1, n / k, n / k) if s < k else None            # reduced at the switch
        store = (1, seg, 0) if 2 <= s <= k + 1 else None
        fetch = (1, seg, 0) if 1 <= s <= k else None
        mcast = (1, (p - 1) * seg, 0) if 3 <= s <= k + 2 else None
        out, into = [x for x in (push, store) if x], [x for x in (fetch, mcast) if x]
        if ports == "single":
            cands = [tuple(map(sum, zip(*side))) for side in (out, into) if side]
        else:
            cands = out + into
        table.append(steps.step(1, *cands))
    return table


def _collnet_steps(m, k, g, ports):
    """In-network all-reduce with g > 1 GPUs a node, slices of m bytes: in step s piece s is
    scattered to the heads (g-1 messages a GPU, reduced there), piece s-1 goes up to the switch
    (reduced there), piece s-2 comes down, piece s-3 is broadcast from the heads (g-1 messages)."""
    table = []
    for s in range(k + 3):
        scatter, up, down, bcast = s < k, 1 <= s <= k, 2 <= s <= k + 1, 3 <= s <= k + 2
        if ports == "single":       # a GPU's messages out, and in, one after the other
            sent = (g - 1) * (scatter + bcast) + up
            got = (g - 1) * (scatter + bcast) + down
            cands = [(sent, sent * m, ((g - 1) * scatter + up) * m), (got, got * m, (g - 1) * scatter * m)]
        else:
            cands = [(1, m, m)] if scatter or up else [(1, m, 0)]
        table.append(steps.step(1, *cands))
    return table


def _in_network_form(collective, p, n, k, channels, ports, options):
    # k pieces up (reduced at the switch) and down, one step apart: k + 1 steps; with g GPUs a
    # node (CollNetDirect) a scatter to the heads before and a broadcast from them after: k + 3
    k = default_pipeline(n) if k is None else k
    g = int(options.get("gpus_per_node") or 1)
    if g == 1:
        return [steps.step(k, (1, n / k, n / k)), steps.step(1, (1, n / k, 0))]
    return _collnet_steps(n / (k * g), k, g, ports)


def _nvls_form(collective, p, n, k, channels, ports, options):
    # k pushes of n/k (reduced at the switch); each segment is fetched, stored back and multicast
    k = default_pipeline(n) if k is None else k
    return _nvls_steps(p, n, k, ports)


def _nvls_transfers(p, k, c, g):
    g = g or p
    return k * (p * g + 3 * p + 2 * p * (p // g))


@algorithm("all_reduce", "in_network", form=_in_network_form, nccl="CollNetDirect",
           transfers=lambda p, k, c, g: 2 * p * k * (g or 1))
def in_network_all_reduce_schedule(ranks: int, nbytes: float, pipeline: int | None = None,
                          gpus_per_node: int | None = None) -> Schedule:
    """SHARP-style all-reduce through one reducing switch, pipelined in k = ``pipeline`` pieces.

    ``gpus_per_node`` g (a divisor of ``ranks``; default 1): ranks r*g..r*g+g-1 share a node and
    reach the switch through their own NICs; g > 1 reduces inside the node first (NCCL's
    CollNetDirect, see the module docstring). Chunk j*g + l is slice l of piece j.
    """
    g = 1 if gpus_per_node is None else int(gpus_per_node)
    if g < 1 or ranks % g:
        raise ValueError(f"gpus_per_node must divide ranks={ranks}, got {gpus_per_node!r}")
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    sw, nodes = ranks, ranks // g
    j = np.arange(k)[:, None, None, None]
    home = np.arange(nodes)[None, :, None, None] * g            # first GPU of every node
    head = np.arange(g)[None, None, :, None]                    # local GPU l: the head of slice l (NIC l)
    peer = (head + 1 + np.arange(g - 1)[None, None, None, :]) % g   # the node's other GPUs
    chunk = j * g + head
    inside = 1 if g > 1 else 0                                  # steps of the in-node phase before the network
    parts = Parts()
    if ranks > 1:
        if g > 1:
            parts.add(j, home + peer, home + head, chunk, True, channel=head, label="scatter: heads reduce the node")
        parts.add(j + inside, home + head, sw, chunk, True, channel=head, label="up: switch reduces")
        parts.add(j + inside + 1, sw, home + head, chunk, False, channel=head, label="down: switch multicasts")
        if g > 1:
            parts.add(j + 3, home + head, home + peer, chunk, False, channel=head, label="broadcast in the node")
    layout = Layout("switch", switches=1) if g == 1 else Layout(
        "hierarchical", order=tuple(range(g)), nodes=tuple((np.arange(ranks) // g).tolist()), switches=1)
    params = {"pipeline": k} if g == 1 else {"pipeline": k, "gpus_per_node": g}
    return parts.schedule("all_reduce", "in_network", ranks, nbytes, k * g, switches=1, layout=layout,
                          params=params, distinct=True)


@algorithm("all_reduce", "nvls", form=_nvls_form, nccl="NVLS", transfers=_nvls_transfers)
def nvls_all_reduce_schedule(ranks: int, nbytes: float, pipeline: int | None = None, gpus_per_node: int | None = None,
                    engine: int | None = None, across: str = "switch") -> Schedule:
    """NVLS all-reduce (reduce at the switch, fetch own segment, multicast it); chunk j*p + c is
    segment c of piece j. With ``gpus_per_node`` below ``ranks``, NVLS in every node and
    ``across`` ("switch" or "ring") between them (see the module docstring)."""
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    g = ranks if gpus_per_node is None else int(gpus_per_node)
    if g < 1 or ranks % g:
        raise ValueError(f"gpus_per_node must divide ranks={ranks}, got {gpus_per_node!r}")
    if across not in ("switch", "ring"):
        raise ValueError(f"across must be 'switch' (SHARP in the fabric) or 'ring', not {across!r}")
    engine = ranks if engine is None else int(engine)
    if g < ranks:
        return _nvls_nodes(ranks, nbytes, k, g, engine, across)
    p, sw = ranks, engine
    parts = Parts()
    if p > 1:
        j = np.arange(k)[:, None, None]
        r = np.arange(p)[None, :, None]
        c = np.arange(p)[None, None, :]
        parts.add(j, r, sw, j * p + c, True, label="push: switch reduces")
        jj, cc = np.arange(k)[:, None], np.arange(p)[None]
        # fetch and store use a second channel: they overlap the next pushes and multicasts
        parts.add(jj + 1, sw, cc, jj * p + cc, False, channel=1, label="load-reduce: fetch own segment")
        parts.add(jj + 2, cc, sw, jj * p + cc, False, channel=1, label="store: segment back to switch")
        others = (np.arange(p)[:, None] + 1 + np.arange(p - 1)[None]) % p      # (segment c, every rank but c)
        parts.add(j + 3, sw, others[None], j * p + np.arange(p)[None, :, None], False, label="multicast")
    return parts.schedule("all_reduce", "nvls", ranks, nbytes, k * p, switches=sw - ranks + 1,
                          layout=Layout("switch", switches=sw - ranks + 1), params={"pipeline": k})


def _nvls_nodes(ranks: int, nbytes: float, k: int, g: int, engine: int, across: str) -> Schedule:
    """NVLS in each of ``ranks // g`` nodes, slices combined across them; chunk (j*g + l)*m + s is
    part s of slice l of piece j (m parts: one per node for the ring, one for the switch)."""
    nodes = ranks // g
    m = nodes if across == "ring" else 1
    j = np.arange(k)[:, None, None, None]
    node = np.arange(nodes)[None, :, None, None]
    head = np.arange(g)[None, None, :, None]
    part = np.arange(m)[None, None, None, :]
    chunk = (j * g + head) * m + part                        # (k, nodes, g, m)
    eng = engine + node
    parts = Parts()
    # push: every GPU of a node sends all its slices to the node's switch, which reduces them
    for r in range(g):
        parts.add(j, node * g + r, eng, chunk, True, channel=head, label="push: node's switch reduces")
    parts.add(j + 1, eng, node * g + head, chunk, False, channel=head, label="load-reduce: head fetches its slice")
    first = 2
    if across == "switch":
        parts.add(j + 2, node * g + head, ranks, chunk, True, channel=head, label="up: fabric switch reduces")
        parts.add(j + 3, ranks, node * g + head, chunk, False, channel=head, label="down: fabric multicasts")
        first = 4
    else:
        rings = (np.arange(nodes)[None, :] * g + np.arange(g)[:, None])           # (g slices, nodes): the heads
        for jj in range(k):
            blocks = ((jj * g + np.arange(g))[:, None, None] * m + np.arange(m)[None, :, None])   # (g, m parts, 1)
            nxt = ring_phase(parts, rings, blocks, jj + 2, -1, True, "across: heads reduce-scatter",
                             channel=np.arange(g))
            ring_phase(parts, rings, blocks, nxt, 0, False, "across: heads all-gather", channel=np.arange(g))
        first = 2 + 2 * (nodes - 1)
    parts.add(j + first, node * g + head, eng, chunk, False, channel=head, label="store: total back to the switch")
    others = (np.arange(g)[:, None] + 1 + np.arange(g - 1)[None]) % g            # (head, the node's other GPUs)
    if g > 1:
        parts.add(j[..., None] + first + 1, eng[..., None], node[..., None] * g + others[None, None, :, None, :],
                  chunk[..., None], False, channel=head[..., None], label="multicast in the node")
    switches = engine - ranks + nodes
    return parts.schedule("all_reduce", "nvls", ranks, nbytes, k * g * m, switches=switches,
                          layout=Layout("hierarchical", order=tuple(range(g)),
                                        nodes=tuple((np.arange(ranks) // g).tolist()), switches=switches),
                          params={"pipeline": k, "gpus_per_node": g, "across": across}, distinct=True)
