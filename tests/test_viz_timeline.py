"""Link timeline: one bar per chunk crossing a link, contention and idle time visible."""
import numpy as np

import labcore.sim as sim
from labcore.sim.core.network import Graph, Link
from labcore.sim.core.trace import Schedule
from labcore.viz import link_timeline, link_usage


def test_ring_keeps_every_link_busy_and_draws_every_crossing():
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20)
    fig = link_timeline(trace)
    bar = fig.data[0]
    assert len(bar.base) == trace.schedule.n_transfers          # one hop per transfer on a uniform mesh
    assert np.allclose(np.array(bar.base) + np.array(bar.x), trace.end * 1e6)
    usage = link_usage(trace)
    assert len(usage) == 4 and (usage["busy_share"] > 0.95).all() and (usage["max_sharing"] == 1).all()
    assert all("busy" in t for t in fig.layout.yaxis.ticktext)


def test_tree_leaves_links_idle():
    trace = sim.simulate("all_reduce", algorithm="tree", ranks=8, nbytes=1 << 20)
    usage = link_usage(trace)
    assert usage["busy_share"].min() < 0.9


def test_shared_link_is_hatched():
    # a star: rank 0 reaches ranks 1 and 2 through one uplink to a hub (node 3)
    links = [Link(0, 3, 1e9, 1e-6), Link(3, 1, 1e9, 1e-6), Link(3, 2, 1e9, 1e-6),
             Link(1, 3, 1e9, 1e-6), Link(2, 3, 1e9, 1e-6), Link(3, 0, 1e9, 1e-6)]
    star = Graph("star", 3, ["r0", "r1", "r2", "hub"], links)
    sched = Schedule.from_steps("broadcast", 3, 3000, 1, [[(0, 1, 0), (0, 2, 0)]])
    trace = sim.run(sched, star)
    usage = link_usage(trace).set_index("label")
    assert usage.loc["r0 -> hub", "max_sharing"] == 2
    fig = link_timeline(trace)
    shapes = list(fig.data[0].marker.pattern.shape)
    rows = [fig.layout.yaxis.ticktext[y] for y in fig.data[0].y]
    assert [s for s, r in zip(shapes, rows) if r.startswith("r0 -> hub")] == ["/", "/"]
    assert [s for s, r in zip(shapes, rows) if r.startswith("hub -> r1")] == [""]


def test_each_nic_carries_its_own_channel():
    topo = sim.topologies.multinode(2, 4)               # 4 channels, one per NIC
    trace = sim.simulate("all_reduce", "ring", 8, 1 << 20, topology=topo)
    assert trace.schedule.n_channels == 4
    usage = link_usage(trace)
    nics = usage[usage["label"].str.contains("nic")]
    assert len(nics) == 16 and (nics["max_sharing"] == 1).all()   # 8 NICs each way, one ring on each
    fig = link_timeline(trace)
    rows = [fig.layout.yaxis.ticktext[y] for y in fig.data[0].y]
    colour_of = {}
    for row, colour in zip(rows, fig.data[0].marker.color):
        if "(nic)" in row:
            colour_of.setdefault(row, set()).add(colour)
    assert all(len(c) == 1 for c in colour_of.values())            # one channel per NIC direction
    assert len({next(iter(c)) for c in colour_of.values()}) == 4
