"""The NCCL INFO parser on recorded logs: version, channels, rings, trees, transports per peer."""
from pathlib import Path

import pandas as pd

from labcore.live.nccl_log import parse

DATA = Path(__file__).parent / "data"


def test_single_node_nvlink_log():
    log = parse((DATA / "nccl_info_1node_4gpu.log").read_text())
    assert log.found and log.version == "2.21.5+cuda12.4"
    assert log.channels == 4 and log.network == "Socket"
    assert log.rings == {0: [0, 1, 2, 3], 1: [0, 3, 2, 1], 2: [0, 1, 2, 3], 3: [0, 3, 2, 1]}
    assert log.ranks["rank"].tolist() == [0, 1, 2, 3]
    assert log.ranks.set_index("rank").loc[2, "bus_id"] == "3a000"
    assert log.env == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    # Rank 1's tree on channel 1: no children, parent 2 ("-1/-1/-1->1->2").
    tree = log.trees[(log.trees["rank"] == 1) & (log.trees["channel"] == 1)]["tree"].item()
    assert tree == "-1/-1/-1->1->2"
    peers = log.peer_table()
    assert set(peers["transport"]) == {"P2P"}
    assert peers.set_index(["src", "dst"]).loc[(0, 1), "channels"] == 2


def test_two_node_log_separates_shm_and_net():
    log = parse((DATA / "nccl_info_2node_ib.log").read_text())
    assert log.version == "2.19.3+cuda12.3" and log.channels == 2 and log.network == "IB"
    kinds = log.transports.groupby(["src", "dst"])["transport"].first().to_dict()
    assert kinds == {(0, 1): "SHM", (1, 2): "NET", (2, 3): "SHM", (3, 0): "NET"}
    # A connection logged by the sender and by the receiver is counted once per channel.
    net = log.peer_table().query("src == 1 and dst == 2")
    assert net["channels"].sum() == 2
    assert set(log.transports["direction"]) == {"", "send", "receive"}
    assert dict(log.summary().values)["transports"] == "NET, SHM"


def test_per_rank_texts_and_unrelated_output():
    text = (DATA / "nccl_info_1node_4gpu.log").read_text().splitlines()
    logs = ["hello from rank 0\n" + "\n".join(text[:20]), "\n".join(text[20:])]
    log = parse(logs)
    assert log.version == "2.21.5+cuda12.4" and len(log.transports) == 8
    empty = parse(["just a print", "Traceback: nothing to see"])
    assert not empty.found and empty.peer_table().empty
    assert dict(empty.summary().values)["NCCL version"] == "not logged"


def test_parsed_logs_ride_along_in_dataframe_attrs():
    log = parse((DATA / "nccl_info_1node_4gpu.log").read_text())
    a, b = pd.DataFrame({"x": [1]}), pd.DataFrame({"x": [2]})
    a.attrs["nccl"], b.attrs["nccl"] = log, parse((DATA / "nccl_info_2node_ib.log").read_text())
    assert len(pd.concat([a, b])) == 2  # pandas compares attrs here; that must not raise
