"""The hierarchical all-reduce by hand (live, gloo), the NIC byte counts behind SHARP and the scale-out
presets against their published figures (simulated)."""
import math

import numpy as np
import pytest

import labcore as lc
import labcore.sim as sim
from labcore.live.scaleout import hierarchical_all_reduce, node_groups
from labcore.sim import presets, scaleout
from labcore.sim import topologies

pytestmark = pytest.mark.live


def _by_hand_and_flat():
    import torch
    import torch.distributed as dist

    rank = lc.rank_info().rank
    groups = node_groups(2)
    data = torch.arange(12.0) * (rank + 1) + rank
    mine = data.clone()
    counted = hierarchical_all_reduce(mine, groups)
    flat = data.clone()
    dist.all_reduce(flat)
    return bool(torch.equal(mine, flat)), counted, flat.numel() * flat.element_size(), (groups.node, groups.local)


def test_hierarchical_all_reduce_by_hand_matches_all_reduce_and_sends_1_over_g_between_nodes():
    with lc.Cluster(4, backend="gloo") as cl:
        results = cl.run(_by_hand_and_flat)
    assert [r[0] for r in results] == [True] * 4
    assert [r[3] for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for _, counted, whole, _ in results:
        assert counted["between_nodes"] * 2 == whole          # S/g with g = 2 ranks per node
        assert counted["inside_node"] == whole + whole // 2


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_nic_bytes_ring_2_n_minus_1_over_n_vs_in_network_one_s_each_way(nodes):
    size = 1 << 16
    topo = topologies.multinode(nodes, 1, sharp=True)          # one GPU and one NIC per node
    ring = sim.simulate("all_reduce", "ring", nodes, size, topology=topo)
    sharp = sim.simulate("all_reduce", "in_network", nodes, size, topology=topo)
    ring.verify(), sharp.verify()
    assert (scaleout.nic_bytes(ring) == 2 * (nodes - 1) / nodes * size).all().all()
    assert (scaleout.nic_bytes(sharp) == size).all().all()


def test_hierarchical_nic_bytes_fall_by_the_node_size():
    size, nodes, g = 1 << 20, 4, 8
    t = sim.simulate("all_reduce", "hierarchical", nodes * g, size, topology=presets.topology("dgx_h100_ib", nodes=nodes),
                     values=False)
    per_nic = scaleout.nic_bytes(t)
    assert len(per_nic) == nodes * g
    assert (per_nic == scaleout.internode_bytes_per_gpu("hierarchical", size, nodes, g)).all().all()


def test_collnet_across_nodes_sends_one_slice_up_and_down_per_nic():
    size, nodes, g = 1 << 20, 2, 8
    plain, sharp = presets.topology("dgx_h100_ib", nodes=nodes), presets.topology("dgx_h100_ib", nodes=nodes, sharp=True)
    collnet = sim.simulate("all_reduce", "in_network", nodes * g, size, topology=sharp)
    ring = sim.simulate("all_reduce", "ring", nodes * g, size, topology=plain)
    collnet.verify(), ring.verify()
    assert collnet.schedule.params["gpus_per_node"] == g and collnet.schedule.n_channels == g   # a head per NIC
    assert (scaleout.nic_bytes(collnet) == size / g).all().all()                                    # S/g up, S/g down
    assert (scaleout.nic_bytes(ring) == 2 * (nodes * g - 1) / (nodes * g) * size / g).all().all()    # a ring per NIC
    s = collnet.schedule
    far = (s.src < s.ranks) & (s.dst < s.ranks) & (s.src // g != s.dst // g)
    assert not far.any()                              # GPUs talk across nodes only through the switch


@pytest.mark.parametrize("nodes", [2, 8])
def test_sharp_preset_beats_the_rings_but_stays_under_its_nvlink_ceiling(nodes):
    n, size = nodes * 8, 1 << 30
    plain, sharp = presets.topology("dgx_h100_ib", nodes=nodes), presets.topology("dgx_h100_ib", nodes=nodes, sharp=True)
    ring = sim.simulate("all_reduce", "ring", n, size, topology=plain, values=False)
    collnet = sim.simulate("all_reduce", "in_network", n, size, topology=sharp, values=False)
    assert collnet.time_s >= collnet.lower_bound_s() and collnet.protocol == "Simple"
    # the scatter and broadcast move 2(g-1)/g S through every NVLink port: algbw <= 370 x 8 / 14
    ceiling = 2 * (n - 1) / n * sharp.notes["nvlink achievable B/s"] / 1e9 * 8 / 14
    assert ring.busbw < collnet.busbw < ceiling
    assert collnet.busbw > 0.98 * ceiling                                  # NVLink-bound, not NIC-bound
    assert 0.8 < collnet.busbw / presets.PUBLISHED["dgx_h100_ib_sharp"] < 0.9   # GTC24: 480 (with NVLink SHARP too)


@pytest.mark.parametrize("name, nodes, tolerance", [("dgx_h100_ib", 2, 0.05), ("dgx_h100_ib", 8, 0.05),
                                                    ("ib_8x200", 2, 0.1), ("roce_8x400", 2, 0.05),
                                                    ("tcp_100g", 2, 0.05)])
def test_rings_on_each_preset_land_on_the_published_figure(name, nodes, tolerance):
    topo = presets.topology(name, nodes=nodes)
    ring = sim.simulate("all_reduce", "ring", topo.ranks, 8 << 30, topology=topo, values=False)
    assert ring.schedule.n_channels == 8
    assert abs(ring.busbw / topo.notes["published busbw GB/s"] - 1) < tolerance, ring.busbw


def test_tcp_nodes_share_one_nic():
    topo = presets.topology("tcp_100g", nodes=2)
    ring = sim.simulate("all_reduce", "ring", 16, 1 << 20, topology=topo)
    ring.verify()
    per_nic = scaleout.nic_bytes(ring)
    assert per_nic.index.tolist() == ["node 0 nic 0", "node 1 nic 0"]
    assert (per_nic == 2 * 15 / 16 * (1 << 20)).all().all()        # every channel through the node's NIC
    assert math.isclose(topo.cuts()[-1].out_bandwidth, 10e9)        # the node's whole way out: 10 GB/s


def test_scale_sweep_measures_nic_throughput_from_the_routes():
    df = scaleout.scale_sweep("dgx_h100_ib", nodes=[2, 4], sizes=[64 << 20], algorithms=["ring", "hierarchical"])
    hier, ring = df[df.algorithm == "hierarchical"], df[df.algorithm == "ring"]
    assert np.allclose(hier.nic_per_gpu, hier.nic_formula)         # ml-engineering's busbw x (k-1)/(n-1)
    assert np.allclose(ring.nic_per_gpu, ring.busbw / 8)            # NCCL's rings: busbw / g
    assert set(df.protocol) <= {"LL", "LL128", "Simple"}


def test_presets_carry_sources_and_refuse_sharp_without_infiniband():
    for name in ("dgx_h100_ib", "ib_8x200", "roce_8x400", "tcp_100g"):
        topo = presets.topology(name, nodes=2)
        assert topo.ranks == 16 and "GTC24" in topo.notes["sources"]
        assert topo.notes["published busbw GB/s"] > 0
    with pytest.raises(ValueError, match="SHARP needs InfiniBand"):
        presets.topology("roce_8x400", nodes=2, sharp=True)
    with pytest.raises(ValueError, match="unknown topology 'dgx'"):
        presets.topology("dgx", nodes=2)
    with pytest.raises(ValueError, match="nodes must be a whole number"):
        presets.topology("dgx_h100_ib", nodes=0)
    with pytest.raises(ValueError, match="has no NICs"):
        scaleout.nic_bytes(sim.simulate("all_reduce", "ring", 8, 1024, topology=topologies.nvswitch(8)))
    # a NIC count that does not divide the GPUs is shared out, not refused: 3 NICs' bandwidth a node
    three = topologies.multinode(2, 8, nics_per_node=3)
    assert (three.nic_links, three.nic_share, three.nics_per_node) == (2, 1.5, 3)
    assert three.cuts()[1].out_bandwidth == pytest.approx(3 * 48e9)
    with pytest.raises(ValueError, match="nics_per_node must be a whole number"):
        topologies.multinode(2, 8, nics_per_node=0)


def test_every_published_figure_says_what_it_is():
    assert set(presets.PUBLISHED_AS) == set(presets.PUBLISHED)
    assert presets.PUBLISHED_AS["roce_8x400"].startswith("derived")          # 8 x the one-NIC figure, not a run on 8
    assert presets.PUBLISHED["roce_8x400"] == 8 * 48.0
