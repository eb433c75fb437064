"""The hierarchical all-reduce by hand (live, gloo) and the NIC byte counts behind SHARP (simulated)."""
import pytest

import labcore as lc
import labcore.sim as sim
from labcore.live.scaleout import hierarchical_all_reduce, node_groups
from labcore.sim import presets_scale as ps
from labcore.sim import topologies


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
    assert (ps.nic_bytes(ring) == 2 * (nodes - 1) / nodes * size).all().all()
    assert (ps.nic_bytes(sharp) == size).all().all()


def test_hierarchical_nic_bytes_fall_by_the_node_size():
    size, nodes, g = 1 << 20, 4, 8
    t = sim.simulate("all_reduce", "hierarchical", nodes * g, size, topology=ps.preset("dgx_h100_ib", nodes),
                     values=False)
    per_nic = ps.nic_bytes(t)
    assert len(per_nic) == nodes * g
    assert (per_nic == ps.internode_bytes_per_gpu("hierarchical", size, nodes, g)).all().all()


def test_presets_carry_sources_and_refuse_sharp_without_infiniband():
    for name in ps.PRESETS:
        topo = ps.preset(name, 2)
        assert topo.ranks == 16 and "GTC24" in topo.notes["sources"]
        assert topo.notes["published busbw GB/s"] > 0
    with pytest.raises(ValueError, match="SHARP needs InfiniBand"):
        ps.preset("roce_8x400", 2, sharp=True)
    with pytest.raises(ValueError, match="unknown scale-out preset"):
        ps.preset("dgx", 2)
