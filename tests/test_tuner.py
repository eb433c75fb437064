"""NCCL's tuner (labcore.sim.nccl.tuner) against cost tables worked out by hand.

Every expected number below is written as the arithmetic of NVIDIA/nccl 2.30.7
(commit 5067397) src/graph/tuning.cc and src/enqueue.cc applied to the stated inputs,
not taken from the module. Notation: bus = channels x GB/s per channel; algbw =
bus x ranks / nsteps for Ring/NVLS/NVLSTree (nsteps = 2(n-1) all-reduce, n-1
all-gather, n broadcast) and bus x 0.5 for Tree/CollNet.
"""
from dataclasses import replace

import pytest

from labcore.sim import tuner as T
from labcore.sim.nccl.tuner import Machine, TopoGraph

H100 = T.MACHINES["dgx_h100"]      # 8 GPUs, 1 node; ring/tree 12 ch x 30 GB/s NVL; NVLS 8 ch 40/60; Intel
IB = T.MACHINES["dgx_h100_ib"]     # 4 nodes x 8; ring/tree 8 ch x 45 GB/s NVL/PXN; NVLS 8 ch 40/48; Intel
PCIE = T.MACHINES["pcie_4090"]     # 8 GPUs; ring/tree 1 ch x 5 GB/s SYS/PIX; compute capability 8.9
B200 = T.MACHINES["dgx_b200"]      # 8 GPUs; ring/tree 16 ch x 45 GB/s NVL; NVLS 8 ch 80/90
A, P = T.ALGORITHMS, T.PROTOCOLS


def entries(machine, func, **env):
    """{(algorithm, protocol): (latency, algbw)} of the TUNING table, bandwidth > 0 only."""
    t = T.tune(machine, env.get("algo"), env.get("proto"))
    return {(a, p): (t.latency[func, a, p], t.bandwidth[func, a, p])
            for a in A for p in P if t.bandwidth[func, a, p] > 0}


def assert_table(got, expected):
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    for key, (lat, bw) in expected.items():
        assert got[key][0] == pytest.approx(lat, rel=1e-6), key
        assert got[key][1] == pytest.approx(bw, rel=1e-6), key


def test_dgx_h100_one_node_all_reduce():
    # Tree: bus 360 -> min(360 x .92, 12 x 38.7 perChMaxTreeBw Hopper) = 331.2; latency
    # base + 2 (ppn-1) NVLink hops. Ring: LL min(llMaxBw Hopper 1 node 141, bus / 2).
    # NVLS: min(40 x .85 (Hopper) x 7/8 x 2, bwInter 60) x 8 channels.
    assert_table(entries(H100, "AllReduce"), {
        ("Tree", "LL"): (6.8 + 2 * 7 * 0.6, min(331.2 / 3.8, 141) * 0.5),
        ("Tree", "LL128"): (14.0 + 2 * 7 * 1.25, min(331.2 * 7 / 9, 12 * 36.7) * 0.5),
        ("Tree", "Simple"): (8.4 + 2 * 7 * 4.0, 331.2 * 0.5),
        ("Ring", "LL"): (6.6 + 14 * 0.6, min(141, 360 * 0.5) * 8 / 14),
        ("Ring", "LL128"): (14.0 + 14 * 1.9, min(360 * 0.92, 12 * 36.7) * 8 / 14),
        ("Ring", "Simple"): (8.4 + 14 * 3.4, 360 * 8 / 14),
        ("NVLS", "Simple"): (25.0, min(40 * 0.85 * 7 / 8 * 2, 60) * 8 * 8 / 14),
    })
    # NVLS: ~476 GB/s busbw, ~272 algbw, as NCCL's maintainers quote for 8 H100s (nccl-tests#212).
    assert T.tune(H100).bandwidth["AllReduce", "NVLS", "Simple"] == pytest.approx(272.0)


def test_dgx_h100_one_node_other_collectives():
    # AllGather: nsteps 7; NVLS keeps its busBw (x (ppn-1)/ppn instead of x2), no algbw conversion.
    assert_table(entries(H100, "AllGather"), {
        ("Ring", "LL"): (6.6 + 7 * 0.6, 141 * 8 / 7),
        ("Ring", "LL128"): (14.0 + 7 * 1.9, 331.2 * 8 / 7),
        ("Ring", "Simple"): (8.4 + 7 * 3.4, 360 * 8 / 7),
        ("NVLS", "Simple"): (25.0, 40 * 0.85 * 7 / 8 * 7 / 8 * 8),
    })
    assert entries(H100, "ReduceScatter") == entries(H100, "AllGather")
    # Broadcast/Reduce: rings only; sameChannels=1 adds a single hop latency; nsteps = n.
    for func in ("Broadcast", "Reduce"):
        assert_table(entries(H100, func), {
            ("Ring", "LL"): (6.6 + 0.6, 141), ("Ring", "LL128"): (14.0 + 1.9, 331.2),
            ("Ring", "Simple"): (8.4 + 3.4, 360)})


def test_broadcast_latency_depends_on_same_channels():
    # sameChannels=0: n hops, and Simple counts the Tree's NVLink latency (4.0) per hop.
    m = replace(H100, ring=replace(H100.ring, same_channels=False))
    got = entries(m, "Broadcast")
    assert got["Ring", "LL"][0] == pytest.approx(6.6 + 8 * 0.6)
    assert got["Ring", "LL128"][0] == pytest.approx(14.0 + 8 * 1.9)
    assert got["Ring", "Simple"][0] == pytest.approx(8.4 + 8 * 4.0)


def test_four_ib_nodes_all_reduce():
    # nNodes > 2: bus = 8 x bwInter 45 = 360; llMaxBws row 0 (Intel), column 2: 20.4;
    # Hopper 4+ node caps: tree 36.0/channel, tree LL128 29.0/channel, NVLSTree 45.5/channel.
    # Ring latency: 62 steps, 6 across nodes; intra hops cost max(NVLink, Intel net overhead 1 us,
    # x3 for Simple). Tree: 2 (7 intra + log2(4) net hops). NVLSTree: 25 + 2 log2(4) x 20.9.
    assert_table(entries(IB, "AllReduce"), {
        ("Tree", "LL"): (6.8 + 2 * (7 * 0.6 + 2 * 5.0), min(288 / 3.8, 20.4) * 0.5),
        ("Tree", "LL128"): (14.0 + 2 * (7 * 1.25 + 2 * 8.5), min(288 * 120 / 128, 8 * 29.0) * 0.5),
        ("Tree", "Simple"): (8.4 + 2 * (7 * 4.0 + 2 * 14.0), min(360 * 0.92, 8 * 36.0) * 0.5),
        ("Ring", "LL"): (6.6 + 56 * max(0.6, 1.0) + 6 * 2.7, min(20.4, 180) * 32 / 62),
        ("Ring", "LL128"): (14.0 + 56 * max(1.9, 1.0) + 6 * 4.0, min(331.2, 8 * 36.7) * 32 / 62),
        ("Ring", "Simple"): (8.4 + 56 * max(3.4, 3.0) + 6 * 14.0, 360 * 32 / 62),
        ("NVLSTree", "Simple"): (25.0 + 2 * 2 * 20.9, min(40 * 0.85 * 7 / 8 * 2, 48, 45.5) * 8 * 32 / 62),
    })
    # NVLS is not offered across nodes without CollNet.
    assert "needs CollNet" in T.tune(IB).off["AllReduce", "NVLS", "Simple"]


def test_amd_two_nodes_row_and_net_overhead():
    # Two nodes read bwIntra; llMaxBws row 1 (AMD), column 1: 22.5; AMD net overhead 2 us (x3 Simple).
    m = replace(IB, ranks=16, nodes=2, cpu_vendor="amd")
    got = entries(m, "AllReduce")
    assert got["Ring", "LL"] == pytest.approx((6.6 + 28 * 2.0 + 2 * 2.7, 22.5 * 16 / 30))
    assert got["Ring", "Simple"] == pytest.approx((8.4 + 28 * 6.0 + 2 * 14.0, 360 * 16 / 30))
    assert got["Tree", "LL"] == pytest.approx((6.8 + 2 * (7 * 0.6 + 1 * 5.0), 22.5 * 0.5))
    assert got["Tree", "LL128"][1] == pytest.approx(min(331.2 * 120 / 128, 8 * 36.7) * 0.5)
    # NVLSTree on 2 nodes doubles bwInter (96) and is capped at 57.7 a channel (Hopper, 2 nodes).
    assert got["NVLSTree", "Simple"] == pytest.approx((25.0 + 2 * 20.9, 57.7 * 8 * 16 / 30))
    intel = entries(replace(m, cpu_vendor="intel"), "AllReduce")
    assert intel["Ring", "LL"][1] == pytest.approx(39.0 * 16 / 30)          # row 0, column 1
    assert intel["Ring", "LL"][0] == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)


def test_pcie_box_has_no_ll128_and_pci_latencies():
    # SYS paths: PCI hop latencies; LL128 needs typeIntra <= NVB; Ampere row for sm89; 256 threads
    # for Ring/Simple because 1 x 5 GB/s <= PCI_BW (12).
    assert_table(entries(PCIE, "AllReduce"), {
        ("Tree", "LL"): (6.8 + 2 * 7 * 1.0, min(5 * 0.92 / 3.8, 87.7) * 0.5),
        ("Tree", "Simple"): (8.4 + 2 * 7 * 4.0, min(5 * 0.92, 24.0) * 0.5),
        ("Ring", "LL"): (6.6 + 14 * 1.0, min(87.7, 2.5) * 8 / 14),
        ("Ring", "Simple"): (8.4 + 14 * 5.7, 5 * 8 / 14),
    })
    t = T.tune(PCIE)
    assert t.off["AllReduce", "Ring", "LL128"] == "LL128 is off by default on this path"
    assert t.max_threads["Ring", "Simple"] == 256 and t.max_threads["Tree", "Simple"] == 512
    assert T.predict("all_reduce", 8, PCIE).name == "Ring/LL"          # 20.6 us beats Tree/LL's 20.8


def test_ll128_default_depends_on_generation_and_path():
    ring = TopoGraph(4, 20.0, type_intra="NVL", type_inter="PXN", same_channels=False)
    ampere = Machine(16, 2, "ampere", ring=ring, tree=replace(ring, pattern="balanced_tree"))
    assert ("Ring", "LL128") not in entries(ampere, "AllReduce")       # before Hopper: up to PXB only
    hopper = replace(ampere, gpu="hopper")
    assert ("Ring", "LL128") in entries(hopper, "AllReduce")           # Hopper/Blackwell: up to PXN
    mixed = replace(ampere, gpu="volta", max_gpu="ampere",
                    ring=replace(ring, type_inter="PIX"), tree=replace(ring, type_inter="PIX"))
    assert ("Ring", "LL128") not in entries(mixed, "AllReduce")        # mixed generations before Hopper


def test_blackwell_caps():
    # llMaxBws Blackwell 1 node 282; Ring LL128 40/channel; Tree 70, Tree LL128 55.6/channel; NVLS
    # efficiency .74, then capped by bwInter 90.
    got = entries(B200, "AllReduce")
    assert got["Ring", "LL"][1] == pytest.approx(min(282, 720 * 0.5) * 8 / 14)
    assert got["Ring", "LL128"][1] == pytest.approx(min(720 * 0.92, 16 * 40.0) * 8 / 14)
    assert got["Tree", "Simple"][1] == pytest.approx(min(720 * 0.92, 16 * 70.0) * 0.5)
    assert got["Tree", "LL128"][1] == pytest.approx(min(662.4 * 7 / 9, 16 * 55.6) * 0.5)
    assert got["NVLS", "Simple"][1] == pytest.approx(min(80 * 0.74 * 7 / 8 * 2, 90) * 8 * 8 / 14)


def test_collnet_direct_chain_and_nvls_across_nodes():
    sharp = replace(IB, collnet=True, collnet_heads=8,
                    collnet_chain=TopoGraph(8, 45.0, type_inter="PXN", pattern="tree"),
                    collnet_direct=TopoGraph(8, 45.0, type_inter="PXN", pattern="collnet_direct"))
    got = entries(sharp, "AllReduce")
    # CollNetDirect: bwIntra (CollNet always), GPU/NIC factor 8/8 -> 1, x .85 on Hopper; latency
    # 2 (1 NVLink hop 3.7 + 7 x 0.4 arity) + net 31. CollNetChain: 2 x 7 x 2.8 + 30.
    assert got["CollNetDirect", "Simple"] == pytest.approx((2 * (3.7 + 7 * 0.4) + 31.0, 360 * 0.85 * 0.5))
    assert got["CollNetChain", "Simple"] == pytest.approx((2 * 7 * 2.8 + 30.0, 360 * 0.5))
    # With CollNet, NVLS runs across nodes: min(intra 59.5, inter 48) x 8; latency 25 + net 18.
    assert got["NVLS", "Simple"] == pytest.approx((25.0 + 18.0, 48 * 8 * 32 / 62))
    assert ("CollNetDirect", "LL") not in got                               # Simple only
    # AllGather across nodes needs the plugin's all-gather and a head per local GPU.
    assert ("NVLS", "Simple") not in entries(sharp, "AllGather")
    gather = replace(sharp, collnet_gather=True)
    ag = entries(gather, "AllGather")
    assert ag["NVLS", "Simple"][1] == pytest.approx(40 * 0.85 * 7 / 8 * 7 / 8 * 8)
    assert ag["CollNetDirect", "Simple"][1] == pytest.approx(8 * min(45, 45 * 0.9))
    assert ("NVLS", "Simple") not in entries(replace(gather, collnet_heads=4), "AllGather")
    assert T.choose("all_reduce", 1 << 30, sharp).name == "NVLS/Simple"
    assert T.choose("all_reduce", 1 << 30, IB).name == "NVLSTree/Simple"


def test_pat_one_gpu_per_node():
    g = TopoGraph(2, 24.0, type_intra="LOC", type_inter="PIX", pattern="tree")
    m = Machine(8, 8, "hopper", ring=replace(g, pattern="ring"), tree=g)
    ag = entries(m, "AllGather")
    # PAT: tree graph, bwInter (8 nodes) x 2 ch x .75, no algbw conversion; latency 8 + log2(8) x
    # 14/3.5 + 8 x 2.8, where ppn = 1 uses the Tree's network latency.
    assert ag["PAT", "Simple"] == pytest.approx((8.0 + 3 * 14.0 / 3.5 + 8 * 2.8, 48 * 0.75))
    # Ring/LL with ppn = 1 also takes the Tree's network LL latency (5.0, not 2.7).
    assert ag["Ring", "LL"] == pytest.approx((6.6 + 7 * 5.0, min(20.4, 24) * 8 / 7))
    # A tree with all NIC traffic through one GPU (pattern 3) loses 15%.
    assert entries(m, "AllReduce")["Tree", "Simple"][1] == pytest.approx(min(48 * 0.92, 2 * 36.0) * 0.85 * 0.5)
    assert ("PAT", "Simple") not in entries(H100, "AllGather")             # 8 GPUs on one node


def test_tree_correction_factor_table_and_range():
    lat, bw = 8.4 + 2 * 7 * 4.0, 331.2 * 0.5                             # H100 Tree/Simple all-reduce

    def tree_simple(nbytes):
        return next(o for o in T.options("all_reduce", nbytes, H100) if o.name == "Tree/Simple")

    assert tree_simple(63).algbw_gbs == pytest.approx(bw)                # 63 >> 6 = 0: no entry
    assert tree_simple(64).algbw_gbs == pytest.approx(bw * 0.9)          # entry 0
    assert tree_simple(1 << 20).time_us == pytest.approx(lat + (1 << 20) / (1000 * bw * 0.5))  # entry 14
    assert tree_simple(1 << 21).algbw_gbs == pytest.approx(bw * 0.6)     # entry 15 (NCCL 2.7 had .5)
    assert tree_simple((1 << 29) - 1).algbw_gbs == pytest.approx(bw * 0.9)   # entry 22, the last Tree reads
    assert tree_simple(1 << 29).algbw_gbs == pytest.approx(bw)           # entry 23: not for Tree
    ll128 = next(o for o in T.options("all_reduce", 1 << 22, H100) if o.name == "Tree/LL128")
    assert ll128.algbw_gbs == pytest.approx(257.6 * 0.5 * 0.8)           # LL128 entry 16


def test_nvls_tree_correction_only_on_blackwell_x86():
    nvls = TopoGraph(8, 80.0, 96.0, type_inter="PIX", same_channels=False, pattern="nvls")
    ring = TopoGraph(16, 45.0, type_inter="PXN", same_channels=False)
    m = Machine(16, 2, "blackwell", ring=ring, tree=replace(ring, pattern="balanced_tree"), nvls=nvls)
    base = min(80 * 0.74 * 7 / 8 * 2, 96 * 2, 96.0) * 8 * 16 / 30        # 2 nodes: bwInter x2, cap 96
    at = {o.name: o for o in T.options("all_reduce", 1 << 29, m)}
    assert at["NVLSTree/Simple"].algbw_gbs == pytest.approx(base * 0.9)  # entry 23 applies here
    arm = {o.name: o for o in T.options("all_reduce", 1 << 29, replace(m, cpu_arch="arm"))}
    assert arm["NVLSTree/Simple"].algbw_gbs == pytest.approx(base)


def test_ring_plateau_threshold():
    # Multi-node Ring/Simple all-reduce: latency x1.4 once bytes / (comm channels x ranks) >= 64.
    lat = 8.4 + 56 * 3.4 + 6 * 14.0
    assert IB.comm_channels == 16                                          # 8 rings, doubled
    edge = 64 * 16 * 32

    def ring_simple(nbytes, m=IB):
        return next(o for o in T.options("all_reduce", nbytes, m) if o.name == "Ring/Simple")

    assert ring_simple(edge - 1).latency_us == pytest.approx(lat)
    assert ring_simple(edge).latency_us == pytest.approx(lat * 1.4)
    volta = Machine(16, 2, "volta", ring=TopoGraph(4, 20.0, type_inter="PHB", same_channels=False),
                    tree=TopoGraph(4, 20.0, type_inter="PHB", pattern="balanced_tree"))
    v_lat = 8.4 + 28 * max(3.4, 3.0) + 2 * 14.0
    assert ring_simple(64 * 8 * 16, volta).latency_us == pytest.approx(v_lat * 1.9)   # before Ampere
    assert next(o for o in T.options("all_reduce", 1 << 20, H100) if o.name == "Ring/Simple").latency_us \
        == pytest.approx(8.4 + 14 * 3.4)                                   # one node: no plateau


def test_choice_time_and_tie_order():
    # Ring/LL: 15 + S / 80571; NVLS: 25 + S / 272000: NVLS from S = 10 / (1/80571 - 1/272000).
    assert T.choose("all_reduce", 1 << 20, H100).name == "Ring/LL"
    big = T.choose("all_reduce", 1 << 30, H100)
    assert big.name == "NVLS/Simple"
    assert big.time_us == pytest.approx(25.0 + (1 << 30) / (1000 * 272.0))
    (size, before, after), = T.crossovers("all_reduce", H100)
    assert (before, after) == ("Ring/LL", "NVLS/Simple")
    assert abs(size - 10 / (1 / (141e3 * 8 / 14) - 1 / 272e3)) <= 1
    # A single rank: NCCL prices Ring/Simple at 0 and ignores the rest.
    one = H100.with_ranks(1)
    assert T.choose("all_reduce", 1 << 20, one).time_us == 0.0


def test_nccl_algo_and_proto_strings():
    no_nvls = T.choose("all_reduce", 1 << 30, H100, algo_env="allreduce:^NVLS")
    assert no_nvls.name == "Ring/Simple"
    assert no_nvls.time_us == pytest.approx(8.4 + 14 * 3.4 + (1 << 30) / (1000 * 360 * 8 / 14))
    # The prefix-less first entry applies everywhere; later entries need a prefix.
    assert T.choose("all_gather", 1 << 30, H100, algo_env="Ring;allreduce:Tree").name == "Ring/Simple"
    assert T.choose("all_reduce", 8, H100, algo_env="Ring;allreduce:Tree").algorithm == "Tree"
    # Naming protocols resets LL128's "NCCL decides" default: ^LL turns LL128 on over PCIe.
    forced = entries(PCIE, "AllReduce", proto="^LL")
    assert forced["Ring", "LL128"][1] == pytest.approx(min(5 * 0.92, 1 * 20.0) * 8 / 14)
    assert ("Ring", "LL") not in forced
    with pytest.raises(ValueError, match="allow more"):
        T.choose("all_reduce", 8, PCIE, algo_env="NVLS")
    with pytest.raises(ValueError, match="needs a prefix"):
        T.tune(H100, "Ring;Tree")
    with pytest.raises(ValueError, match="unknown name"):
        T.tune(H100, None, "LL256")


def test_launch_channels_and_threads():
    # Ring/LL at 1 KiB: 24 channels x 512 threads x (8 B x 8 ranks) > 1024 -> 1 channel, then the
    # threads halve to 64 and are raised to the 3-warp minimum.
    assert T.launch("all_reduce", 1 << 10, H100) | {"time_us": 0} == \
        {"algorithm": "Ring", "protocol": "LL", "channels": 1, "threads": 96, "time_us": 0}
    assert T.launch("all_reduce", 1 << 18, H100)["channels"] == (1 << 18) // (512 * 64)
    assert T.launch("all_reduce", 1 << 30, H100)["channels"] == 16                  # NVLS CTAs on Hopper
    capped = replace(H100, max_ctas=4)
    assert capped.comm_channels == 4
    assert T.launch("all_gather", 1 << 30, capped)["channels"] == 4


def test_cost_table_and_tuning_log_layout():
    t = T.cost_table("all_reduce", 1 << 20, H100)
    assert len(t) == 21 and t["chosen"].sum() == 1
    assert t.loc[t["chosen"], "option"].item() == "Ring/LL"
    assert t["option"].tolist()[:3] == ["Tree/LL", "Tree/LL128", "Tree/Simple"]
    assert t.loc[t["option"] == "PAT/Simple", "available"].item() is False
    row = t.set_index("option").loc["Tree/Simple"]
    assert row["note"] == "tree correction x0.5" and row["algbw_gbs"] == pytest.approx(82.8)
    log = T.tuning_log(H100).splitlines()
    assert len(log) == 3 * 8
    # tuning.cc: "%13s |" then "%8.1f/%6.1f |" per protocol.
    assert log[7] == ("NCCL INFO     AllReduce |    15.2/  43.6 |    31.5/ 128.8 |    64.4/ 165.6 |"
                      "    15.0/  80.6 |    40.6/ 189.3 |    56.0/ 205.7 |     5.6/   0.0 |     5.6/   0.0 |"
                      "    44.0/   0.0 |")
    assert log[2] == "NCCL INFO  Max NThreads |" + "".join(f" {n:>14d} |" for n in (512, 640, 512) * 2 + (0, 0, 640))
    frame = T.tuning_table(H100)
    assert len(frame) == 5 * 7 * 3


def test_bad_inputs_name_the_fix():
    with pytest.raises(ValueError, match="covers"):
        T.cost_table("all_to_all", 8, H100)
    with pytest.raises(ValueError, match="whole number of bytes"):
        T.options("all_reduce", -1, H100)
    with pytest.raises(ValueError, match="nodes must divide ranks"):
        Machine(12, 5, "hopper", ring=H100.ring, tree=H100.tree)
    with pytest.raises(ValueError, match="collnet_chain"):
        replace(IB, collnet=True)
    with pytest.raises(ValueError, match="type_intra"):
        TopoGraph(4, 20.0, type_intra="NVLINK")
    with pytest.raises(ValueError, match="gpu"):
        replace(H100, gpu="pascal")


def test_the_tuner_looks_no_preset_up_and_keeps_its_short_names():
    assert "nvswitch8" not in T.MACHINES and "multinode" not in T.MACHINES     # presets name their machine
    frame = T.cost_sweep("all_reduce", H100, [8, 1 << 20, 1 << 30])
    assert frame.groupby("size")["chosen"].sum().tolist() == [1, 1, 1]
    assert T.predict("all_reduce", 8, H100).name == T.table("all_reduce", 8, H100)[3].name == "Ring/LL"


@pytest.mark.parametrize("name", ["dgx_h100", "dgx_a100", "pcie_4090", "dgx_h100_ib", "dgx_b200"])
def test_crossovers_are_where_the_choice_changes(name):
    machine = T.MACHINES[name]
    for op in T.FUNCTION_OF:
        points = T.crossovers(op, machine)
        assert [s for s, _, _ in points] == sorted(s for s, _, _ in points)
        for size, before, after in points:
            assert before != after
            assert T.predict(op, size - 1, machine).name == before
            assert T.predict(op, size, machine).name == after


def test_ring_pipeline_steps_chunks_slices():
    # init.cc buffer sizes: LL 8 lines x 512 threads x 8 steps x 16 B; LL128 120 x 640 x 8 x 8 B;
    # Simple NCCL_BUFFSIZE 4 MiB. A step is buffer / NCCL_STEPS (8); Simple ring chunks are 4 steps,
    # slices 2; LL carries half a step, LL128 15/16 of it (rounded to its 1920-byte grain).
    simple = T.ring_pipeline("all_reduce", 1 << 30, H100)
    assert (simple["step_bytes"], simple["chunk_bytes"], simple["slice_bytes"]) == (4 << 20 >> 3, 2 << 20, 1 << 20)
    assert simple["channels"] == 24 and simple["steps"] == 14
    assert simple["loops"] == -(-(1 << 30) // (24 * 8 * (2 << 20)))      # 3
    ll = T.ring_pipeline("all_reduce", 1 << 30, H100, "LL")
    assert ll["chunk_bytes"] == 8 * 512 * 8 * 16 // 8 // 2
    ll128 = T.ring_pipeline("all_reduce", 1 << 30, H100, "LL128")
    assert ll128["chunk_bytes"] == 120 * 640 * 8 * 8 // 8 // 16 * 15
    small = T.ring_pipeline("all_reduce", 1 << 20, H100, buffsize=1 << 20)
    assert small["step_bytes"] == (1 << 20) // 8 and small["bytes_per_step"] == -(-(1 << 20) // (8 * 24))
    assert T.ring_pipeline("broadcast", 1 << 30, H100)["chunk_bytes"] == (4 << 20) // 8   # 1 step a chunk
    with pytest.raises(ValueError, match="NCCL_BUFFSIZE"):
        T.ring_pipeline("all_reduce", 1 << 20, H100, buffsize=100)
