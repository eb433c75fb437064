"""What NCCL ran in real jobs (the shipped profiler traces) beside what the lab's tuner predicts for
their machines: the agreement reached, pinned, and every disagreement named.

No NCCL log in tests/data names its algorithm and protocol per collective (the TUNING logs there
are cost tables, not picks), so the traces are the evidence."""
import pytest

from labcore.readers import TRACES_DIR, read_trace
from labcore.sim import nccl_choices, tuner_machine

COMPARED = ["a100_8ranks_rank3.json.gz", "a100_2ranks_rank0.json.gz"]


@pytest.fixture(scope="module")
def tables():
    return {name: nccl_choices(read_trace(TRACES_DIR / name)) for name in
            COMPARED + ["a100_16ranks_rank0.json.gz", "v100_2ranks_rank1.json.gz", "128ranks_rank*.json.gz"]}


def test_agreement_over_every_trace_with_a_tuner_machine(tables):
    both = [tables[name] for name in COMPARED]
    algorithm = [a for t in both for a in t["algorithm"]]
    protocol = [p for t in both for p in t["protocol"]]
    assert len(algorithm) == 20
    assert algorithm.count("agrees") == 20                        # Ring, every one
    assert protocol.count("agrees") == 18 and protocol.count("possible") == 2
    channels = sum((t["channels"] == t["tuner_channels"]).sum() for t in both)
    threads = sum((t["threads"] == t["tuner_threads"]).sum() for t in both)
    assert (channels, threads) == (8, 20)


def test_eight_a100s_run_what_the_tuner_picks_at_every_bucket_size(tables):
    t = tables["a100_8ranks_rank3.json.gz"]
    assert t.attrs["machine"].startswith("assumed an NVSwitch node (DGX/HGX A100), 8 GPUs a node")
    assert set(t["tuner_machine"]) == {"dgx_a100"}
    step = t[t["step"] == 0]
    assert step[["bytes", "ran_protocol", "tuner_protocol", "channels", "tuner_channels", "threads",
                 "tuner_threads"]].values.tolist() == [
        [181240752, "Simple", "Simple", 24, 24, 544, 544],
        [1068160, "LL", "LL", 24, 24, 512, 512],
        [17728292, "LL128", "LL128", 24, 24, 640, 640]]
    assert t[["algorithm", "protocol"]].drop_duplicates().values.tolist() == [["agrees", "agrees"]]


def test_every_disagreement_named(tables):
    t = tables["a100_2ranks_rank0.json.gz"]
    possible = t[t["protocol"] == "possible"]
    # 424 bytes on one channel of 96 threads: LL or Simple (3 warps, the least a block has); the tuner: LL
    assert possible[["step", "op", "bytes", "ran_protocol", "tuner_protocol"]].values.tolist() == [
        [0, "broadcast", 424, "LL or Simple", "LL"], [1, "broadcast", 424, "LL or Simple", "LL"]]
    # NCCL ran this 2-GPU communicator on 8 channels; the tuner keeps its 8-GPU machine's 24
    differ = t[t["channels"] != t["tuner_channels"]]
    assert differ[["step", "op", "bytes", "channels", "tuner_channels"]].values.tolist() == [
        [s, op, b, 8, 24] for s in (0, 1) for op, b in (("broadcast", 212480), ("all_reduce", 8196000),
                                                        ("all_reduce", 31502336), ("all_reduce", 26255360),
                                                        ("all_reduce", 26550272), ("all_reduce", 9724160))]
    assert (t["channels"] == t["tuner_channels"]).sum() == 2 and (t["threads"] == t["tuner_threads"]).all()


def test_traces_no_tuner_machine_fits_say_why(tables):
    why = {name: (t.attrs["machine"], set(t["algorithm"]), len(t)) for name, t in tables.items() if name not in COMPARED}
    assert why == {
        "a100_16ranks_rank0.json.gz": ("no machine of lc.sim.tuner fits: 2 nodes of NVIDIA A100-SXM4-80GB; its only "
                                       "multi-node machine is of H100s (dgx_h100_ib)", {"no machine"}, 12),
        "v100_2ranks_rank1.json.gz": ("no machine of lc.sim.tuner fits: Tesla V100-SXM2-16GB (compute capability "
                                      "7.0); it has none before Ampere", {"no machine"}, 6),
        "128ranks_rank*.json.gz": ("no machine of lc.sim.tuner fits: the trace does not name its GPUs (no "
                                   "deviceProperties)", {"no machine"}, 6),
    }


@pytest.mark.parametrize("machine,name,ranks,nodes", [
    (dict(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", gpus_seen=8, world_size=32, nodes=4),
     "dgx_h100_ib", 32, 4),
    (dict(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", gpus_seen=8, world_size=4, nodes=1), "dgx_h100", 4, 1),
    (dict(gpu="NVIDIA H200", compute_capability="9.0", gpus_seen=8, world_size=8, nodes=1), "dgx_h200", 8, 1),
    (dict(gpu="NVIDIA B200", compute_capability="10.0", gpus_seen=8, world_size=8, nodes=1), "dgx_b200", 8, 1),
    (dict(gpu="NVIDIA GeForce RTX 4090", compute_capability="8.9", gpus_seen=8, world_size=8, nodes=1),
     "pcie_4090", 8, 1),
])
def test_tuner_machine_maps_gpu_ranks_and_nodes(machine, name, ranks, nodes):
    got, m, note = tuner_machine(machine)
    assert (got, m.ranks, m.nodes) == (name, ranks, nodes) and note.startswith("assumed ")


@pytest.mark.parametrize("machine,reason", [
    (dict(gpu="NVIDIA A100-PCIE-40GB", compute_capability="8.0", gpus_seen=4, world_size=4, nodes=1), "a PCIe card"),
    (dict(gpu="NVIDIA A100-SXM4-80GB", compute_capability="8.0", gpus_seen=8, world_size=12, nodes=0),
     "12 ranks do not fill whole nodes of the 8 GPUs"),
    (dict(gpu="NVIDIA L40S", compute_capability="8.9", gpus_seen=8, world_size=8, nodes=1), "is none of its GPUs"),
])
def test_tuner_machine_says_when_none_fits(machine, reason):
    name, m, note = tuner_machine(machine)
    assert name is None and m is None and reason in note
