"""The NCCL INFO parser on real logs quoted in public issues (each file in tests/data names its source)."""
from pathlib import Path

import pandas as pd
import pytest

from labcore.live.nccl_log import parse
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
    assert log.ranks["nranks"].unique().tolist() == [64]
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
