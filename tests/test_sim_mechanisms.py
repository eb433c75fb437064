"""NCCL's mid-size mechanisms (labcore.sim.nccl.mechanisms): NCCL's numbers, a switch that turns them off,
and nothing changed on the textbook machines."""
import pytest

import labcore.sim as sim
from labcore.sim import mechanisms, presets, topologies


def _node(**attrs):
    """One DGX H100 node as its preset builds it: the catalog gives it NCCL's machine (a block built by hand
    has none, and no mechanism applies to it)."""
    t = presets.topology("nvswitch8")
    for name, value in attrs.items():
        setattr(t, name, value)
    return t


def _two_nodes():
    return presets.topology("dgx_h100_ib", nodes=2)


def test_ring_ll_runs_on_nccls_channels_at_a_size():
    """8 GPUs: Ring/LL takes one of 24 channels per 32 KiB (threshold 8 B x 8 ranks x 512 threads). NCCL's
    Ring/LL busBw is min(llMaxBw, 0.5 x nChannels x bw) (tuning.cc:327): on one H100 node llMaxBw (141 GB/s)
    caps all 24 channels, so nc of them get min(141, nc x 0.5 x 12 graph channels x 30 GB/s / 24)."""
    t = _node(issue_s=0)
    for nbytes, nc in ((32 << 10, 1), (64 << 10, 2), (256 << 10, 8), (1 << 20, 24)):
        a = mechanisms.adjust("all_reduce", "ring", "LL", nbytes, t)
        assert (a.nccl_algorithm, a.nccl_channels) == ("Ring", nc)
        assert a.bandwidth_scale == pytest.approx(min(141.0, nc * 0.5 * 12 * t.nccl.ring.bw_intra / 24) / 141.0)
    simple = mechanisms.adjust("all_reduce", "ring", "Simple", 64 << 10, t)      # Simple: a channel a share
    assert simple.bandwidth_scale == pytest.approx(simple.nccl_channels / 24)
    on = sim.simulate("all_reduce", "ring", 8, 64 << 10, topology=t, protocol="LL", values=False)
    off = sim.simulate("all_reduce", "ring", 8, 64 << 10, topology=t, protocol="LL", values=False, mechanisms=())
    assert on.time_s > off.time_s


def test_nvls_chunks_follow_nccls_cut_downs():
    """16 MiB on 8 x H100: 16 CTAs x 8 heads; 128 KiB cut to 32 KiB, so 4 chunks a channel and head."""
    a = mechanisms.adjust("all_reduce", "nvls", "NVLS", 16 << 20, _node())
    assert (a.nccl_algorithm, a.nccl_channels, a.chunk_bytes, a.pipeline) == ("NVLS", 16, 32 << 10, 4)
    tree = mechanisms.adjust("all_reduce", "nvls", "NVLS", 16 << 20, _two_nodes(),
                             {"across": "ring"})
    assert (tree.nccl_algorithm, tree.chunk_bytes, tree.pipeline) == ("NVLSTree", 64 << 10, 2)


def test_tree_ll128_chunk_is_halved_for_mid_sizes():
    """2 x 8 H100 at 1 MiB: the 600 KiB LL128 step halved to 19200 B, 18000 of them data."""
    a = mechanisms.adjust("all_reduce", "double_tree", "LL128", 1 << 20, _two_nodes())
    assert (a.nccl_algorithm, a.nccl_channels, a.chunk_bytes) == ("Tree", 16, 18000)


def test_plateau_only_when_asked_and_only_across_nodes():
    t = _two_nodes()
    assert mechanisms.adjust("all_reduce", "ring", "Simple", 1 << 28, t).latency_scale == 1.0
    assert mechanisms.adjust("all_reduce", "ring", "Simple", 1 << 28, t, mechanisms="all").latency_scale == 1.4
    assert mechanisms.adjust("all_reduce", "ring", "Simple", 1 << 28, _node(),
                             mechanisms="all").latency_scale == 1.0


def test_textbook_machines_and_collectives_outside_the_tuner_are_untouched():
    assert mechanisms.adjust("all_reduce", "ring", None, 1 << 16, topologies.uniform(8)) == mechanisms.Adjustment()
    assert mechanisms.adjust("all_to_all", "pairwise", "LL", 1 << 16, _node()) == mechanisms.Adjustment()
    assert mechanisms.adjust("all_gather", "bruck", "LL", 1 << 16, _node()) == mechanisms.Adjustment()
    u = topologies.uniform(8, alpha=2e-6, bandwidth=1e10)
    t = sim.simulate("all_reduce", "ring", 8, 1 << 20, topology=u, contention=False)
    assert t.time_s == pytest.approx(sim.simulate("all_reduce", "ring", 8, 1 << 20, topology=u, contention=False,
                                                  mechanisms=()).time_s)


def test_unknown_mechanism_is_refused_with_the_names():
    with pytest.raises(ValueError, match="choose from channels, chunks, plateau"):
        sim.simulate("all_reduce", "ring", 8, 1 << 20, topology="h100_sxm8", mechanisms=("fill",))


def test_tree_correction_replaces_the_trees_chunk_fill():
    """2 x 8 H100, Tree/LL128 at 1 MiB: treeCorrectionFactor[LL128][log2(1 MiB / 64) = 14] = 0.6 on the
    bandwidth, and no chunk pipeline beside it; NVLSTree on Hopper keeps its chunks (no correction)."""
    t = _two_nodes()
    a = mechanisms.adjust("all_reduce", "double_tree", "LL128", 1 << 20, t)
    assert a.bandwidth_scale == pytest.approx(0.6) and a.pipeline is None
    chunks_only = mechanisms.adjust("all_reduce", "double_tree", "LL128", 1 << 20, t, mechanisms=("channels", "chunks"))
    assert chunks_only.bandwidth_scale == 1.0 and chunks_only.pipeline > 1
    tree = mechanisms.adjust("all_reduce", "nvls", "NVLS", 16 << 20, _two_nodes(),
                             {"across": "ring"})
    assert tree.bandwidth_scale == 1.0 and tree.pipeline == 2


def test_the_networks_latency_on_every_step_across_nodes():
    """AWS p5: aws-ofi-nccl tells NCCL 75 us (latencyInter: NCCL's picks keep it); the simulator plays the
    latency p5's runs show (the preset's net_latency_s, fitted on its calibration table) on every
    inter-node step, twice for Simple (tuning.cc:388-391), or the plugin's where a topology has none;
    InfiniBand reports 0, so dgx_h100_ib is untouched."""
    import copy

    t = sim.presets.topology("aws_p5", 16, processes="per_gpu")
    assert t.nccl.ring.latency_inter == t.nccl.tree.latency_inter == t.nccl.nvls.latency_inter == 75.0
    assert t.net_latency_s == sim.presets.catalog.P5_EFA_LATENCY_S < 75e-6
    lat = t.net_latency_s
    assert mechanisms.adjust("all_reduce", "double_tree", "LL", 1 << 10, t).net_latency_s == pytest.approx(lat)
    assert mechanisms.adjust("all_reduce", "ring", "Simple", 1 << 28, t).net_latency_s == pytest.approx(2 * lat)
    told = copy.copy(t)
    told.net_latency_s = None
    assert mechanisms.adjust("all_reduce", "double_tree", "LL", 1 << 10, told).net_latency_s == pytest.approx(75e-6)
    assert mechanisms.adjust("all_reduce", "ring", "LL", 1 << 10, t, mechanisms=()).net_latency_s == 0.0
    assert mechanisms.adjust("all_reduce", "ring", "LL", 1 << 10, _two_nodes()).net_latency_s == 0.0
    # a 2-node tree crosses the network once up and once down: twice the latency more
    for topo, each in ((t, lat), (told, 75e-6)):
        on = sim.simulate("all_reduce", "double_tree", 16, 1 << 10, topology=topo, protocol="LL", values=False)
        off = sim.simulate("all_reduce", "double_tree", 16, 1 << 10, topology=topo, protocol="LL", values=False,
                           mechanisms=("channels", "chunks", "correction"))
        assert on.time_s - off.time_s == pytest.approx(2 * each, rel=0.05)
    # a group of the machine's ranks (replay's placement) keeps the latency
    from labcore.sim.apps.replay import _Placed

    assert _Placed(t, list(range(4, 12))).net_latency_s == lat


def test_net_overhead_floor_only_on_rings_across_nodes_when_asked():
    """getNetOverhead (tuning.cc:226-234): 1 us on Intel hosts, 2 on AMD, x3 for Simple; rings only."""
    h100, a100 = _two_nodes(), sim.presets.topology("dgx_a100_ib", 16)
    assert mechanisms.adjust("all_reduce", "ring", "LL", 1 << 16, h100).intra_floor_s == 0.0      # off by default
    assert mechanisms.adjust("all_reduce", "ring", "LL", 1 << 16, h100, mechanisms="all").intra_floor_s == 1e-6
    assert mechanisms.adjust("all_reduce", "ring", "Simple", 1 << 16, a100, mechanisms="all").intra_floor_s \
        == pytest.approx(6e-6)
    assert mechanisms.adjust("all_reduce", "double_tree", "LL", 1 << 16, h100, mechanisms="all").intra_floor_s == 0
    view = mechanisms.apply(h100.with_protocol("LL", "ring"), mechanisms.Adjustment(intra_floor_s=1e-6))
    assert view.latency[view.link_kind == "nvlink"].min() == pytest.approx(0.5e-6)       # half a hop a link
    slow = sim.simulate("all_reduce", "ring", 16, 1 << 12, topology=h100, protocol="LL", values=False,
                        mechanisms="all")
    assert slow.time_s > sim.simulate("all_reduce", "ring", 16, 1 << 12, topology=h100, protocol="LL",
                                      values=False).time_s


def test_a_trees_bus_bandwidth_is_capped_where_nccl_caps_it():
    """NCCL caps a Tree all-reduce's busBw at nChannels x perChMaxTreeLL128Bw (and 120/128) for LL128:
    on 2 x p5, 8 x 36.7 GB/s = 293.6, 275 in nccl-tests' busbw. The simulator's peak would pass it (its NICs
    carry less than its NVLink chain); with "caps" the tree runs at NCCL's figure; where the simulator is
    already below NCCL's cap (4 x DGX H100), nothing changes; one node has no such cap."""
    t = sim.presets.topology("aws_p5", 16)
    cap = mechanisms.tree_cap(t.nccl, "LL128")
    assert cap == pytest.approx(8 * 36.7e9 * 0.5 * 2 * 15 / 16)
    capped = sim.simulate("all_reduce", "double_tree", 16, 1 << 30, topology=t, protocol="LL128", values=False)
    free = sim.simulate("all_reduce", "double_tree", 16, 1 << 30, topology=t, protocol="LL128", values=False,
                        mechanisms=("channels", "chunks", "correction", "netlatency"))
    assert capped.busbw * 1e9 == pytest.approx(cap, rel=0.01) and free.busbw * 1e9 > 1.1 * cap
    four = sim.presets.topology("dgx_h100_ib", 32, nodes=4)
    on, off = (sim.simulate("all_reduce", "double_tree", 32, 8 << 20, topology=four, protocol="LL128", values=False,
                            mechanisms=m) for m in ("default", ("channels", "chunks", "correction", "netlatency")))
    assert on.busbw * 1e9 < mechanisms.tree_cap(four.nccl, "LL128") and on.time_s == off.time_s
    assert mechanisms.tree_cap(_node().nccl, "LL128") is None
    # LL is left to its links: the cap would be charged on every hop of a small message's tree
    deep = sim.presets.topology("dgx_h100_ib", 512, nodes=64)
    ll = [sim.simulate("all_reduce", "double_tree", 512, 8 << 10, topology=deep, protocol="LL", values=False,
                       mechanisms=m).time_s for m in ("default", ("channels", "chunks", "correction", "netlatency"))]
    assert ll[0] == ll[1]


def test_the_trees_peak_is_not_reused_by_a_copy_that_changed_the_network():
    import copy

    t = sim.presets.topology("aws_p5", 16)
    sim.simulate("all_reduce", "double_tree", 16, 16 << 20, topology=t, protocol="LL128", values=False)
    told = copy.copy(t)
    told.net_latency_s = 75e-6
    fresh = sim.presets.topology("aws_p5", 16)
    fresh.net_latency_s = 75e-6
    a, b = (sim.simulate("all_reduce", "double_tree", 16, 16 << 20, topology=x, protocol="LL128", values=False)
            for x in (told, fresh))
    assert a.time_s == b.time_s
    # a builder option that is a list (a rank order) is part of what the peak is kept for
    order = list(range(16))[::-1]
    assert sim.simulate("all_reduce", "double_tree", 16, 1 << 20, topology=t, protocol="LL128", values=False,
                        order=order).time_s > 0


def test_every_collective_of_nccls_tuner_plays_the_mechanisms_as_nccl_applies_them():
    """all_gather, reduce_scatter, broadcast and reduce run their rings on nc(S) channels (Ring/LL x nRanks,
    enqueue.cc:2092-2104) and pay the network's latency across nodes; the tree correction and the plateau
    are all_reduce's only (tuning.cc:638-650)."""
    p5 = sim.presets.topology("aws_p5", 16)
    for op, algorithm in (("all_gather", "ring"), ("reduce_scatter", "ring"), ("broadcast", "chain"),
                          ("reduce", "chain")):
        a = mechanisms.adjust(op, algorithm, "LL", 64 << 10, p5)
        assert (a.nccl_algorithm, a.nccl_channels) == ("Ring", 1), op                # 64 KiB < 2 x 512 x 8 x 16
        assert a.net_latency_s == pytest.approx(p5.net_latency_s), op
        assert mechanisms.adjust(op, algorithm, "Simple", 1 << 30, p5, mechanisms="all").latency_scale == 1.0
    assert mechanisms.adjust("all_reduce", "ring", "Simple", 1 << 30, p5, mechanisms="all").latency_scale == 1.4
    # the ring's netOverhead floor is the rings' of all-reduce, all-gather and reduce-scatter (tuning.cc:395-412)
    assert mechanisms.adjust("broadcast", "chain", "LL", 1 << 16, p5, mechanisms="all").intra_floor_s == 0.0
    assert mechanisms.adjust("all_gather", "ring", "LL", 1 << 16, p5, mechanisms="all").intra_floor_s > 0
    # a small 2-node all-gather is slower with NCCL's network latency, as the runs show
    on, off = (sim.simulate("all_gather", "ring", 16, 1 << 10, topology=p5, protocol="LL", values=False,
                            mechanisms=m).time_s for m in ("default", ("channels", "chunks")))
    assert on > off + p5.net_latency_s


def test_a_chain_forwards_ll_lines_as_they_land_and_simple_steps_whole():
    """LL and LL128 hand each line on as it arrives (src/device/prims_ll.h): the chain takes as many pieces
    as the protocol keeps; Simple keeps the simulator's 512 KiB pieces (NCCL's step, prims_simple.h:183)."""
    t = _node()
    ll = mechanisms.adjust("broadcast", "chain", "LL", 1 << 20, t)
    assert ll.pipeline == t.protocols["LL"].max_pieces
    assert mechanisms.adjust("broadcast", "chain", "Simple", 1 << 20, t).pipeline is None
    trace = sim.simulate("reduce", "chain", 8, 1 << 20, topology=t, root=3)
    trace.verify()
    assert trace.schedule.params["pipeline"] > 1


def test_p2p_runs_the_protocol_nccl_picks_for_each_peer():
    """NCCL's p2p path: LL while a peer's bytes fit in its channels x 16 KiB (enqueue.cc:931-933), else Simple;
    the simulator's "best" all-to-all is it, every peer at once."""
    t = presets.topology("h100_sxm8", processes="per_gpu")
    small = sim.simulate("all_to_all", "best", 8, 8 << 10, topology=t, values=False)
    big = sim.simulate("all_to_all", "best", 8, 64 << 20, topology=t, values=False)
    assert (small.schedule.algorithm, small.protocol) == ("p2p", "LL")
    assert (big.schedule.algorithm, big.protocol) == ("p2p", "Simple")
    pairwise = sim.simulate("all_to_all", "pairwise", 8, 8 << 10, topology=t, values=False)
    assert small.time_s < pairwise.time_s                     # one step, not n-1 in turn
    two = presets.topology("dgx_h100_ib", 16)
    across = mechanisms.adjust("all_to_all", "p2p", "Simple", 1 << 20, two)
    assert across.net_latency_s == 0.0                         # InfiniBand: the plugin reports none
    p5 = presets.topology("aws_p5", 16)
    assert mechanisms.adjust("all_to_all", "p2p", "Simple", 1 << 20, p5).net_latency_s == \
        pytest.approx(2 * p5.net_latency_s)                    # and twice for Simple, the flush


def test_p2p_channels_follow_nccls_rules_and_its_logs():
    """p2pnChannels = nChannels rounded up to a power of two, a peer on NVSwitch worth 2 x 18 links' channels
    (src/graph/paths.cc:918-1003): what DGX B200's and H800's INFO logs print ("32 p2p channels, 32 p2p channels
    per peer", tests/data/nccl_info_dgx_b200_1node.log; "16 p2p channels, 16 p2p channels per peer",
    nccl_info_h800_1node.log). Across nodes a peer is worth a channel per 14 GB/s of its NIC, halved while
    the peers need more than one round of channels (2.30.7's rule)."""
    from dataclasses import replace

    from labcore.sim.nccl import p2p
    from labcore.sim.nccl.tuner import MACHINES

    assert p2p.p2p_channels(MACHINES["dgx_b200"])[:2] == (32, 32)
    assert p2p.p2p_channels(replace(MACHINES["dgx_h100"], channels=16))[:2] == (16, 16)
    four = MACHINES["dgx_h100_ib"].with_ranks(32, 4)
    assert p2p.p2p_channels(four) == (16, 4, 1)
    assert [p2p.channels(b, four) for b in (4096, 1 << 20, 1 << 24)] == [1, 4, 4]
    assert [p2p.transfer_chunk(b, four) for b in (64 << 10, 512 << 10, 16 << 20)] == \
        [32 << 10, 64 << 10, 128 << 10]          # a quarter, half and a whole 128 KiB chunk
