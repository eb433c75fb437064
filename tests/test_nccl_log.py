"""The NCCL INFO parser on real logs quoted in public issues (each file in tests/data names its source)."""
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from labcore.readers.nccl_log import parse
from labcore.sim import tuner

DATA = Path(__file__).parent / "data"


def load(name):
    return parse((DATA / name).read_text())


def test_every_log_file_is_cited_and_parses():
    files = sorted(DATA.glob("nccl_*.log"))
    assert len(files) >= 5
    for f in files:
        head = f.read_text().splitlines()[:3]
        assert head[1].startswith(("# source: NVIDIA/", "# source: pytorch/pytorch")), f.name
        assert "issue #" in head[1] and "https://github.com/" in head[1], f.name
        assert load(f.name).found, f.name


def test_dgx_h100_one_node():
    # NVIDIA/nccl#1259: 8 x H100 80GB HBM3, NCCL 2.20.5, sockets for bootstrap only.
    log = load("nccl_info_dgx_h100_1node.log")
    assert log.version == "2.20.5+cuda12.4"
    assert set(log.transports["transport"]) == {"P2P"}
    assert set(log.transports["detail"]) == {"P2P/direct pointer"}      # the label keeps its space
    assert log.transports["channel"].max() == 22                        # at least 23 channels
    assert log.nics[["name", "link"]].values.tolist() == [["eth0", "Socket"]]
    assert log.hosts == ["devcontainer-gpu0005"]
    assert log.transport(7, 6) == "P2P"
    with pytest.raises(ValueError, match="peer_table"):
        log.transport(0, 7)


def test_dgx_b200_channels_are_the_tuner_machines():
    # NVIDIA/nccl#1646: a DGX B200 under NCCL 2.25.1 prints 32 coll channels, the 16 rings doubled that the lab's
    # dgx_b200 machine derives from search.cc; and 32 NVLS CTAs, 2.25's NVLS_NCHANNELS_SM100 (src/transport/nvls.cc),
    # where 2.27 and later give one node 24, as the lab's port of 2.30 does.
    log = load("nccl_info_dgx_b200_1node.log")
    machine = tuner.MACHINES["dgx_b200"]
    assert log.channels == machine.comm_channels == 32
    assert (log.nvls_channels, machine.nvls_ctas) == (32, 24)
    assert dataclasses.replace(machine, nvls_channels=log.nvls_channels).nvls_ctas == 32


def test_h800_one_node_channels_and_env():
    # NVIDIA/nccl#892: "16 coll channels, 0 nvls channels" although NCCL_ALGO lists NVLS.
    log = load("nccl_info_h800_1node.log")
    assert log.channels == 16 and log.nvls_channels == 0 and log.collnet_channels is None
    assert log.env == {"NCCL_ALGO": "Tree,Ring,,CollnetDirect,CollnetChain,NVLS"}
    # NCCL reads that list as the lab does: the empty entry is skipped, every name is known.
    assert tuner.tune(tuner.MACHINES["dgx_h100"], log.env["NCCL_ALGO"]).bandwidth["AllReduce", "PAT", "Simple"] == 0


def test_pcie_box_graphs_feed_the_tuner():
    # NVIDIA/nccl-tests#307: 8 x RTX 4090; one ring and one tree at 5 GB/s through the CPUs.
    log = load("nccl_info_pcie_4090.log")
    assert log.graphs[["pattern", "channels", "bw_intra", "type_intra", "type_inter", "same_channels"]] \
        .values.tolist() == [["ring", 1, 5.0, "SYS", "PIX", True], ["balanced_tree", 1, 5.0, "SYS", "PIX", True]]
    graphs = tuner.graphs_from_log(log.graphs)
    assert graphs["ring"] == tuner.MACHINES["pcie_4090"].ring
    assert graphs["balanced_tree"] == tuner.MACHINES["pcie_4090"].tree


def test_shm_box_rings_through_host_memory():
    # NVIDIA/nccl-tests#228: every ring hop 7->6->...->0 is SHM; two IB NICs for the network.
    log = load("nccl_info_pcie_shm.log")
    peers = log.peer_table()
    assert set(peers["transport"]) == {"SHM"} and set(peers["detail"]) == {"SHM/direct/direct"}
    assert sorted(zip(peers["src"], peers["dst"])) == [(r, r - 1) for r in range(1, 8)]
    assert log.network == "IB" and log.env["NCCL_IB_HCA"] == "mlx5_2:1,mlx5_0:1"
    assert log.nics["link"].unique().tolist() == ["IB"]


def test_pcie_box_without_p2p_from_a_pytorch_issue():
    # pytorch/pytorch#72835: "Could not enable P2P", so hops go through host memory (older label).
    log = load("nccl_info_pcie_no_p2p.log")
    assert log.channels == 2
    assert set(log.transports["transport"]) == {"SHM"}
    assert set(log.transports["detail"]) == {"direct shared memory"}
    assert log.transport(0, 1) == log.transport(6, 5) == "SHM"


def test_two_nodes_infiniband():
    # NVIDIA/nccl#1357: 2 x 8 H100; rank r and r + 8 talk over the network, the rest over NVLink.
    log = load("nccl_info_2node_ib.log")
    assert log.nodes == 2 and log.hosts == ["qh100-gpu19", "qh100-gpu20"]
    net = log.transports[log.transports["transport"] == "NET"]
    assert (abs(net["src"] - net["dst"]) == 8).all()
    assert set(net["detail"]) == {"NET/IBext/1/GDRDMA", "NET/IBext/2/GDRDMA", "NET/IBext/3/GDRDMA"}
    assert set(net["direction"]) == {"send", "receive"}
    p2p = log.transports[log.transports["transport"] == "P2P"]
    assert ((p2p["src"] // 8) == (p2p["dst"] // 8)).all()
    # Rank 12's tree on channel 10: children 14 and 4 (4 is across the network), no parent.
    tree = log.trees[(log.trees["rank"] == 12) & (log.trees["channel"] == 10)]["tree"].item()
    assert tree == "14/4/-1->12->-1"
    assert log.env == {"NCCL_IB_QPS_PER_CONNECTION": "2", "NCCL_IB_GID_INDEX": "3"}


def test_two_nodes_h20_graph_and_channels():
    # NVIDIA/nccl#1189: 2 nodes x 2 H20; 4 ring channels from the search, 8 coll channels in use.
    log = load("nccl_info_2node_h20.log")
    assert log.channels == 8 and log.collnet_channels == 0 and log.nvls_channels == 0
    ring = log.graphs.iloc[0]
    assert (ring["pattern"], ring["channels"], ring["bw_intra"], ring["cross_nic"]) == ("ring", 4, 24.0, 1)
    assert log.ranks[["rank", "host"]].values.tolist() == [
        [0, "H20-GPU-05"], [1, "H20-GPU-05"], [2, "H20-GPU-06"], [3, "H20-GPU-06"]]
    assert log.transport(1, 0) == "P2P" and log.transport(1, 3) == "NET" and log.transport(0, 2) == "NET"
    # A connection logged by the sender and the receiver counts once per channel.
    assert log.peer_table().set_index(["src", "dst"]).loc[(1, 3), "channels"] == 4


def test_roce_nics():
    # NVIDIA/nccl-tests#185: two DGX H100 nodes over RoCE; NCCL's IB transport drives RoCE NICs.
    log = load("nccl_info_2node_roce.log")
    assert log.version == "2.19.3+cuda12.3" and log.network == "IB"
    assert log.nics.groupby("host")["name"].apply(list).to_dict() == {
        "dgxh100-3": ["mlx5_10", "mlx5_11"], "dgxh100-4": ["mlx5_10", "mlx5_11"]}
    assert set(log.nics["link"]) == {"RoCE"} and log.nics["port"].tolist() == [1, 1, 1, 1]


def test_nvls_lines():
    # NVIDIA/nccl#1814: 64 ranks with NVLS trees; NVIDIA/nccl-tests#319: the NVLS heads of 2 nodes.
    log = load("nccl_info_nvls_64ranks.log")
    assert (log.channels, log.nvls_channels, log.collnet_channels) == (16, 16, 0)
    assert set(log.transports["detail"]) == {"NET/IBext_v8/1", "NET/IBext_v8/2"}
    assert log.ranks["nranks"].dropna().unique().tolist() == [64]   # init lines; peer lines' ranks have none
    heads = load("nccl_info_nvls_heads_2node.log")
    assert heads.nodes == 2
    assert heads.nvls_heads == {c: [c, c + 8] for c in range(8)}          # one GPU of each node a channel


def test_rings_across_nodes():
    # NVIDIA/nccl#1453: rank 0's rings on 24 ranks; each crosses the node boundaries a few times.
    log = load("nccl_info_3node_rings.log")
    assert log.ring_channels == 16 and sorted(log.rings) == list(range(5, 14))
    for ring in log.rings.values():
        # The lines show the first 20 of the 24 ranks (NCCL shortens long ring lines).
        assert len(ring) == len(set(ring)) == 20 and ring[0] == 0 and max(ring) < 24
        assert {r // 8 for r in ring} == {0, 1, 2}                         # every ring visits all 3 nodes


def test_tuning_tables_both_layouts():
    old = load("nccl_tuning_old_layout.log")                              # NVIDIA/nccl#754
    assert len(old.tuning) == 2 * 9 and set(old.tuning["algorithm"]) == {"Tree", "Ring", "CollNet"}
    ring = old.tuning.set_index(["function", "algorithm", "protocol"]).loc[("Broadcast", "Ring", "Simple")]
    assert (ring["latency_us"], ring["algbw_gbs"]) == (18.0, 3.0)
    assert old.max_threads["Ring", "Simple"] == 256
    new = load("nccl_tuning_h800_ib.log")                                 # NVIDIA/nccl#1154
    assert new.env == {"NCCL_ALGO": "Tree"}
    # The lab's tuner prints the same "Max NThreads" row for a Hopper machine as this real one.
    lab = tuner.tune(tuner.MACHINES["dgx_h100"]).max_threads
    assert new.max_threads == {k: lab[k] for k in new.max_threads}
    # And the lab's own TUNING text reads back through the same parser.
    back = parse(tuner.tuning_log(tuner.MACHINES["dgx_h100"])).tuning
    assert len(back) == 5 * 7 * 3
    row = back.set_index(["function", "algorithm", "protocol"]).loc[("AllReduce", "NVLS", "Simple")]
    assert (row["latency_us"], row["algbw_gbs"]) == (25.0, 272.0)


def test_per_rank_texts_and_unrelated_output():
    text = (DATA / "nccl_info_2node_h20.log").read_text().splitlines()
    logs = ["hello from rank 0\n" + "\n".join(text[:30]), "\n".join(text[30:])]
    assert len(parse(logs).transports) == len(load("nccl_info_2node_h20.log").transports)
    empty = parse(["just a print", "Traceback: nothing to see", "# NCCL version 9.9 in a comment"])
    assert not empty.found and empty.peer_table().empty and empty.version is None
    assert dict(empty.summary().values)["NCCL version"] == "not logged"


def test_parsed_logs_ride_along_in_dataframe_attrs():
    a, b = pd.DataFrame({"x": [1]}), pd.DataFrame({"x": [2]})
    a.attrs["nccl"], b.attrs["nccl"] = load("nccl_info_2node_ib.log"), load("nccl_info_pcie_shm.log")
    assert len(pd.concat([a, b])) == 2  # pandas compares attrs here; that must not raise


# What each real log of tests/data yields (rank rows, rings, trees): before this parser read NCCL's
# init lines of every release, the ranks table was empty for all twelve of these; the rows each peer,
# ring and neighbour line adds for the rank that printed it (issue 30) are in the counts since.
YIELDS = {
    "nccl_info_comm_init_all_2gpu.log": dict(ranks=2, rings=0, trees=0),
    "nccl_info_comm_init_all_1gpu_v2_25.log": dict(ranks=1, rings=0, trees=0),
    "nccl_info_v2_5_trees_up_down.log": dict(ranks=1, rings=0, trees=4),
    "nccl_info_4node_ring_p2p_ipc.log": dict(ranks=23, rings=0, trees=0),
    "nccl_info_2node_h20_ring_tree_lines.log": dict(ranks=3, rings=0, trees=19),
    "nccl_info_8gpu_comm_nranks_nvls_comm.log": dict(ranks=6, rings=0, trees=32),
    "nccl_info_comm_split_2node.log": dict(ranks=1, rings=4, trees=4),
    "nccl_info_2node_roce_v2_10.log": dict(ranks=0, rings=1, trees=8),
    "nccl_info_v2_4_socket_64ranks.log": dict(ranks=12, rings=0, trees=4),
    "nccl_info_warn_ib_completion.log": dict(ranks=0, rings=0, trees=0),
    "nccl_info_warn_no_ibverbs_4gpu.log": dict(ranks=0, rings=0, trees=0),
    "nccl_info_rank_tag_no_host.log": dict(ranks=2, rings=0, trees=48),
    "nccl_info_2node_ib.log": dict(ranks=7, rings=0, trees=32),
    "nccl_info_nvls_heads_2node.log": dict(ranks=2, rings=0, trees=16),
}


@pytest.mark.parametrize("name", sorted(YIELDS))
def test_what_each_real_log_yields(name):
    log = load(name)
    assert dict(ranks=len(log.ranks), rings=len(log.rings), trees=len(log.trees)) == YIELDS[name]


def test_comm_init_all_lines_of_nccl_tests_g_n():
    # nccl-tests -g 2: one process, two communicators from ncclCommInitAll (NVIDIA/nccl#1706); the quote
    # cuts rank 0's line inside "- Init COMPLETE", which still names the rank.
    log = load("nccl_info_comm_init_all_2gpu.log")
    assert log.ranks[["rank", "nranks", "cuda_dev", "bus_id", "function"]].values.tolist() == [
        [0, 2, 0, "f000", "ncclCommInitAll"], [1, 2, 1, "34000", "ncclCommInitAll"]]
    assert set(log.ranks["comm_id"]) == {"0x76b3b6be637caf1c"} and log.collnet_channels == 4
    one = load("nccl_info_comm_init_all_1gpu_v2_25.log")                 # NCCL 2.25: "NCCL INFO NCCL version"
    assert one.version == "2.25.1+cuda12.4" and one.ranks["nranks"].tolist() == [1]


def test_nranks_nnodes_localranks_lines_give_rank_rows():
    log = load("nccl_info_8gpu_comm_nranks_nvls_comm.log")
    init = log.ranks.dropna(subset=["nranks"])                          # ranks 4 and 6 come from peer lines only
    assert init[["rank", "nranks", "cuda_dev", "nodes", "local_ranks", "local_rank"]].values.tolist() == [
        [r, 8, r, 1, 8, r] for r in (0, 1, 2, 5)]
    # NCCL 2.18-2.22's NVLS lines name each rank's head: here every GPU heads its own NVLS channel.
    assert log.nvls_ranks[["cuda_dev", "head_rank", "heads"]].values.tolist() == [[0, 0, 8], [1, 1, 8], [3, 3, 8]]
    # A rank's init line and its nRanks line are merged into one row (same process, same communicator).
    ib = load("nccl_info_2node_ib.log")
    assert ib.ranks.dropna(subset=["nranks"])[["rank", "host", "local_rank"]].values.tolist() == [
        [13, "qh100-gpu20", 5], [14, "qh100-gpu20", 6]]


def test_nccl_2_5_ring_lines_with_bus_ids_and_up_down_trees():
    log = load("nccl_info_v2_5_trees_up_down.log")                      # NVIDIA/nccl#302, NCCL 2.5.6
    assert log.transports[["src", "dst", "transport", "detail"]].values.tolist() == [
        [155, 157, "P2P", "P2P/IPC"], [155, 153, "P2P", "P2P/IPC"], [155, 154, "P2P", "P2P/IPC"]]
    three = log.trees.set_index("channel").loc[3]
    assert (three["rank"], three["tree"], three["down_tree"]) == (155, "153/146/162->155->154",
                                                                  "154->155->153/146/162")
    assert log.hosts == ["crow-ib-new-nccl-256-info-19"]               # the "[155] " tag is not the host
    old = load("nccl_info_4node_ring_p2p_ipc.log")                      # NVIDIA/nccl-tests#29
    assert len(old.transports) == 19 and set(old.transports["detail"]) == {"P2P/IPC"}
    assert old.ranks["nranks"].dropna().unique().tolist() == [32] and old.ranks["bus_id"].isna().all()
    assert old.hosts == ["server1", "server2", "server3", "server4"]


def test_nccl_2_4_trees_are_turned_round_and_socket_rings_read():
    log = load("nccl_info_v2_4_socket_64ranks.log")                     # "Trees [0] 22->23->-1/-1/-1"
    assert log.trees.set_index("rank")["tree"].to_dict() == {
        23: "-1/-1/-1->23->22", 27: "-1/-1/-1->27->26", 31: "-1/-1/-1->31->30", 35: "-1/-1/-1->35->34"}
    assert set(log.transports["detail"]) == {"NET/Socket/0"} and len(log.transports) == 10
    init = log.ranks.dropna(subset=["nranks"])                          # the init lines' ranks
    assert init[["rank", "nranks"]].values.tolist() == [[15, 64], [19, 64]]
    # "Ring 00 : 16 -> 32 [receive]" names the receiver, rank 32, on the host that logged it
    assert log.ranks.set_index("rank").loc[32, ["host", "pid", "cuda_dev"]].tolist() == ["ip-172-31-5-166", "45528", 0]


def test_ring_neighbour_and_tree_lines_of_the_graph_subsystem():
    log = load("nccl_info_2node_h20_ring_tree_lines.log")               # NVIDIA/nccl#1189
    n = log.ring_neighbours
    assert n[(n["rank"] == 1)][["channel", "prev", "next"]].values.tolist() == [[6, 0, 3], [7, 3, 0]]
    lines = log.trees[log.trees["rank"] == 3]                           # "Tree 5 : -1 -> 3 -> 2/1/-1"
    assert lines.set_index("channel")["tree"].to_dict() == {1: "2/-1/-1->3->1", 5: "2/1/-1->3->-1",
                                                            3: "2/-1/-1->3->1"}
    assert log.ranks.dropna(subset=["nodes"])[["rank", "nodes", "local_ranks", "local_rank"]].values.tolist() == [
        [3, 2, 2, 1]]
    # Every rank's neighbours close a ring: it is put together where no ring line printed it.
    text = ("h:1:2 [0] NCCL INFO Ring 00 : 2 -> 0 -> 1\nh:1:3 [1] NCCL INFO Ring 00 : 0 -> 1 -> 2\n"
            "h:1:4 [2] NCCL INFO Ring 00 : 1 -> 2 -> 0\n")
    assert parse(text).rings == {0: [0, 1, 2]} and parse(text.splitlines()[0]).rings == {}


def test_comm_split_lines():
    log = load("nccl_info_comm_split_2node.log")                        # NVIDIA/nccl#1605
    row = log.ranks.iloc[0]
    assert (row["function"], row["comm_id"], row["bus_id"], row["nodes"]) == (
        "ncclCommSplit", "0x5a16c3838ce6f1f8", "1a000", 2)
    assert len(log.ranks) == 1                          # "bootstrapSplit: comm ..." is not an init line
    assert log.rings == {c: [0, 1] for c in range(4)} and log.transport(1, 0) == "NET"


def test_rank_prefix_and_scalable_init_lines_of_nccl_2_29():
    # No public log of these was found; the lines below are built from NCCL 2.29's format strings
    # (src/init.cc, v2.29.2-1: "[Rank %d] %s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx
    # commId 0x%llx - Init START" and the "%s comm ... - Init COMPLETE" that follows).
    start = ("gpu7:4100:4200 [3] NCCL INFO [Rank 11] ncclCommInitRankScalable comm 0x5611 rank 11 nranks 16 "
             "cudaDev 3 nvmlDev 3 busId 4c000 commId 0xa1b2c3d4e5f60718 - Init START")
    done = ("gpu7:4100:4200 [3] NCCL INFO ncclCommInitRankScalable comm 0x5611 rank 11 nranks 16 cudaDev 3 "
            "nvmlDev 3 busId 4c000 commId 0xa1b2c3d4e5f60718 - Init COMPLETE")
    log = parse("\n".join([start, done]))
    assert log.ranks[["rank", "nranks", "cuda_dev", "bus_id", "host", "function", "comm_id"]].values.tolist() == [
        [11, 16, 3, "4c000", "gpu7", "ncclCommInitRankScalable", "0xa1b2c3d4e5f60718"]]


def test_warn_lines_name_their_host_gpu_and_source_line():
    log = load("nccl_info_warn_ib_completion.log")                      # NVIDIA/nccl#1405
    assert log.warning_lines[["host", "cuda_dev", "source"]].drop_duplicates().values.tolist() == [
        ["kp-ddp-worker-0", 4, "ib_plugin.c:1615"]]
    assert len(log.warnings) == 3 and log.warnings[0].startswith("NET/IB : Got completion from peer")
    four = load("nccl_info_warn_no_ibverbs_4gpu.log")                   # NVIDIA/nccl#857
    assert four.warning_lines[["host", "cuda_dev", "source", "text"]].values.tolist() == [
        ["ai", d, "misc/ibvwrap.cc:63", "Failed to open libibverbs.so[.1]"] for d in (0, 2, 1)]
    assert four.version == "2.10.3+cuda11.3"
    # Only a WARN line names this host: it is among the hosts.
    only = parse("[2025-07-21 19:05:29] node004:27907:27907 [1] transport/nvls.cc:254 NCCL WARN Cuda failure 401")
    assert only.hosts == ["node004"] and only.warning_lines["cuda_dev"].tolist() == [1]


def test_lines_with_only_the_gpu_tag_and_launcher_prefixes():
    log = load("nccl_info_rank_tag_no_host.log")                        # "[2] NCCL INFO Trees ..."
    assert log.hosts == [] and log.ranks[["rank", "cuda_dev"]].values.tolist() == [[1, 1], [3, 3]]
    assert log.trees.groupby("rank")["channel"].count().to_dict() == {2: 24, 3: 24}
    roce = load("nccl_info_2node_roce_v2_10.log")                       # NCCL 2.10's bare "NCCL version" line
    assert roce.version == "2.10.3+cuda11.0" and roce.rings[0][:4] == [0, 7, 6, 5]
    assert set(roce.nics["link"]) == {"RoCE"} and roce.hosts == ["nodea", "nodeb"]
    # mpirun's "[1,0]<stdout>:" and srun's " 0: " before NCCL's prefix are not part of the host name.
    for prefix in ("[1,0]<stdout>:", " 0: ", "rdma-worker-0: ", "2025-11-12 20:41:43,851 - INFO - "):
        got = parse(prefix + "5873af64cf59:10158:10560 [0] NCCL INFO Channel 00/02 :    0   1")
        assert got.hosts == ["5873af64cf59"] and got.rings == {0: [0, 1]}, prefix


def test_entries_run_together_on_one_line_are_each_read():
    # A terminal's wrapped output pasted as one line (as in deepseek-ai/DeepEP#106): every entry counts.
    one = ("VM-1:11979:12555 [1] NCCL INFO NVLS Head  4:  4 12" + " " * 90 +
           "VM-1:11978:12548 [0] NCCL INFO NVLS Head  1:  1  9" + " " * 90 +
           "VM-1:11980:12549 [2] NCCL INFO Trees [0] 3/-1/-1->2->1 [1] 3/10/-1->2->-1")
    log = parse(one)
    assert log.nvls_heads == {4: [4, 12], 1: [1, 9]} and log.trees["tree"].tolist() == ["3/-1/-1->2->1",
                                                                                          "3/10/-1->2->-1"]


def test_a_long_line_is_read_and_the_input_is_bounded(monkeypatch):
    # 200,000 characters on one line (the quadratic parser took over 30 s): the entries at its ends are read.
    line = ("h:1:2 [0] NCCL INFO Channel 00/02 :    0   1 " + "x" * 200_000 +
            " h:1:2 [0] NCCL INFO 2 coll channels, 0 nvls channels")
    log = parse(line)
    assert log.channels == 2 and log.hosts == ["h"]
    for junk in ("a" * 200_000, "NCCL INFO " * 20_000, "1" * 200_000 + " coll channels", "[0]" * 70_000):
        parse(junk)                                    # a result, not a hang (timed in benchmarks/bench_readers.py)
    from labcore import files
    monkeypatch.setattr("labcore.readers.nccl_log.MAX_TEXT_BYTES", 1 << 20)
    with pytest.raises(ValueError, match="more than the 1 MiB the lab reads"):
        parse("x" * ((1 << 20) + 1))
    with pytest.raises(ValueError, match="more than the 1 MiB the lab reads"):
        parse(["x" * (1 << 19), "y" * ((1 << 19) + 1)])
    assert files.MAX_TEXT_BYTES == 64 << 20


def test_recorded_reads_only_the_bundled_logs(tmp_path):
    from labcore.readers.nccl_log import recorded

    assert recorded("nccl_info_2node_h20.log").channels == 8
    for name in ("../../etc/hostname", "/etc/hostname", "..", "nccl_info_2node_h20.log/..", "sub\\x.log", ""):
        with pytest.raises(ValueError, match="a name, not a path") as caught:
            recorded(name)
        assert "nccl_info_2node_h20.log" in str(caught.value)          # the names it can read
    with pytest.raises(ValueError, match="no bundled NCCL log named 'nope.log': choose one of"):
        recorded("nope.log")


# -- Excerpts of real jobs' logs with only channel, ring or peer lines (issue 30) -------------------------
EXCERPTS = sorted(DATA.glob("excerpt_*.log"))


def test_every_excerpt_is_cited_and_its_header_is_not_read_as_log():
    assert len(EXCERPTS) >= 3
    for f in EXCERPTS:
        head = f.read_text().splitlines()
        assert head[0].startswith("%% Source: https://github.com/"), f.name
        assert "%% ---- quoted text below, unedited ----" in head, f.name
        assert load(f.name).found, f.name
    # a header that quotes NCCL's words is a header: no version, no warning from it
    assert parse("%% Source: a thread titled 'NCCL version 2.18.1 hangs' (NCCL WARN in it)").found is False


def test_peer_lines_give_the_ranks_of_one_process_driving_four_gpus_with_bus_ids():
    log = load("excerpt_one_process_4gpu_bus_ids.log")                 # NVIDIA/nccl#671
    assert log.ranks[["rank", "host", "pid", "cuda_dev", "bus_id"]].values.tolist() == [
        [0, "como", "60725", 0, "6000"], [1, "como", "60725", 1, "7000"], [2, "como", "60725", 2, "a000"],
        [3, "como", "60725", 3, "b000"]]
    assert log.rings == {4: [0, 1, 2, 3]}          # channel 4's sends close a ring no ring line printed


def test_init_timings_name_a_rank_whose_init_line_is_missing():
    log = load("excerpt_one_process_init_timings.log")                 # NVIDIA/nccl#1412
    assert log.ranks["rank"].tolist() == [0, 1, 2, 4, 5, 6] and set(log.ranks["pid"]) == {"2017630"}
    assert log.ranks.set_index("rank").loc[2, ["nranks", "cuda_dev"]].tolist() == [16, 2]


def test_rccl_on_ray_keeps_its_suffixes_out_of_the_transports():
    log = load("excerpt_rccl_ray_2node_comm_suffix.log")               # ROCm/ROCm#5656
    assert log.version == "2.26.6-HEAD:f224e2c"                          # "RCCL version : ..."
    assert set(log.transports["detail"]) == {"NET/Socket/0"}            # no "comm 0x.. nRanks 02 [repeated 2x ...]"
    assert log.peer_table()[["src", "dst", "channels"]].values.tolist() == [[0, 1, 1], [1, 0, 1]]
    assert log.ranks[["rank", "host", "pid", "bus_id"]].values.tolist() == [[1, "bootes", "233", "7000"]]
    assert log.env == {"NCCL_SOCKET_IFNAME": "enp165s0f1np1"} and len(log.warnings) == 1


def test_launcher_rank_tags_name_the_rank_of_undirected_lines_and_digits_are_no_host():
    # NVIDIA/nccl#302's "[155] host:pid:tid [3] NCCL INFO Ring 00 : 155[3d000] -> 157[b2000] via P2P/IPC"
    log = load("nccl_info_v2_5_trees_up_down.log")
    assert log.ranks[["rank", "host", "cuda_dev", "bus_id"]].values.tolist() == [
        [155, "crow-ib-new-nccl-256-info-19", 3, "3d000"]]
    glued = parse("[15]23:83:2526 [0] transport/net_socket.cc:219 NCCL WARN NET/Socket : socket progress error")
    assert glued.hosts == [] and glued.warnings == ["NET/Socket : socket progress error"]


def test_a_process_with_ranks_of_two_communicators_gets_a_communicator_column():
    # one process, one GPU: rank 0 of a 4-rank communicator (connections set up by thread 11) and rank 7 of
    # another (thread 12), the shape of vllm-project/vllm#27521's log
    text = ("h:50:10 [7] NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 4 total 18.80 (kernels 0.00)\n"
            "h:50:11 [7] NCCL INFO Channel 01/0 : 0[7] -> 1[7] [send] via NET/IB/11/GDRDMA\n"
            "h:50:11 [7] NCCL INFO Channel 00/0 : 2[7] -> 0[7] [receive] via NET/IB/11/GDRDMA\n"
            "h:50:12 [7] NCCL INFO Channel 03/0 : 7[7] -> 14[6] [send] via NET/IB/11/GDRDMA\n")
    log = parse(text)
    assert log.ranks[["rank", "comm"]].values.tolist() == [[0, "thread 11"], [7, "thread 12"]]
    assert log.ranks["nranks"].tolist()[0] == 4                       # the init timing joins rank 0's row
    assert log.peer_table()["comm"].tolist() == ["thread 11", "thread 11", "thread 12"]
    single = load("nccl_info_4node_ring_p2p_ipc.log")                  # one communicator: no column to fill
    assert single.ranks["comm"].isna().all() and "comm" not in single.peer_table()
