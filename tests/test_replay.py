"""Replay of a recorded training step on simulated topologies (labcore.sim.replay), on recordings
built from known timelines, so that every number can be worked out by hand."""
import subprocess
import sys

import pandas as pd
import pytest

import labcore.sim as sim
from labcore.readers.recording import Recording
from labcore.sim.apps.replay import _Placed, nccl_algorithm, replay

pytestmark = pytest.mark.live


def recording(collectives, world_size=4, step=(0.0, 1.0), scopes=()):
    """A Recording whose ranks issued ``collectives``: (op, bytes, issued, start, end, overlapped[, group ranks])."""
    rows = []
    for rank in range(world_size):
        for seq, c in enumerate(collectives):
            op, nbytes, issued, start, end, overlapped = c[:6]
            ranks = tuple(c[6]) if len(c) > 6 else tuple(range(world_size))
            if rank not in ranks:
                continue
            group = "0" if len(ranks) == world_size else "sub" + "".join(map(str, ranks))
            rows.append(dict(rank=rank, step=0, op=op, bytes=nbytes, in_bytes=nbytes, out_bytes=nbytes, dtype="float",
                             group=group if op not in ("send", "recv") else "", group_ranks=ranks,
                             group_size=len(ranks), seq=seq if op not in ("send", "recv") else -1, issued_s=issued,
                             start_s=start, end_s=end, time_us=(end - start) * 1e6, overlapped=overlapped,
                             frame="", via="", backend_op=f"gloo:{op}"))
    frame = pd.DataFrame(rows)
    sc = pd.DataFrame([dict(rank=r, step=0, name=n, start_s=a, end_s=b)
                       for r in range(world_size) for n, a, b in scopes],
                      columns=["rank", "step", "name", "start_s", "end_s"])
    steps = pd.DataFrame([dict(rank=r, step=0, start_s=step[0], end_s=step[1]) for r in range(world_size)])
    return Recording("synthetic", world_size, "gloo", frame, sc, steps, tuple(range(world_size)))


def simulated(op, algorithm, ranks, nbytes, topology, protocol):
    return sim.simulate(op, algorithm, ranks, nbytes, topology=topology, values=False, protocol=protocol).time_s


DDP_LIKE = [("all_reduce", 1 << 20, 0.30, 0.31, 0.50, True), ("all_reduce", 4 << 20, 0.40, 0.50, 0.70, False)]


def test_each_collective_is_the_simulator_time_of_the_tuners_pick_and_totals_are_their_sum():
    rec = recording(DDP_LIKE)
    for name in ("nvswitch8", "multinode"):
        r = replay(rec, name)
        topo = sim.presets.topology(name, processes="per_gpu")          # replay's layout: torch's, one a GPU
        for _, c in r.collectives.iterrows():
            algo, label, _ = nccl_algorithm(c["op"], c["bytes"], r.world_size, topo.nodes, topo.nccl,
                                            topo.switch_agents > 0)
            assert (c["algorithm"], c["nccl"]) == (algo, label)
            want = simulated(c["op"], algo, r.world_size, c["bytes"], topo, c["protocol"])
            assert c["predicted_us"] == pytest.approx(want * 1e6, rel=1e-12)
        assert r.comm_s == pytest.approx(r.collectives["predicted_us"].sum() / 1e6, rel=1e-12)
        assert r.steps["serial_us"].iloc[0] == pytest.approx(r.steps["compute_us"].iloc[0] + r.steps["comm_us"].iloc[0])
        assert r.overlap_s <= r.serial_s + 1e-15


def test_named_algorithm_and_per_op_choice_override_the_tuner():
    rec = recording(DDP_LIKE + [("broadcast", 1 << 16, 0.8, 0.8, 0.85, False)])
    r = replay(rec, "nvswitch8", algorithm={"all_reduce": "rabenseifner"})
    by_op = dict(zip(r.collectives["op"], r.collectives["algorithm"]))
    assert by_op == {"all_reduce": "rabenseifner", "broadcast": "chain"}     # broadcast: NCCL's ring -> chain
    r = replay(rec, "uniform", algorithm="ring")
    assert set(r.collectives["nccl"]) == {"named", "default"}               # broadcast has no ring: default


def test_compute_and_the_step_model_on_a_known_timeline():
    # step 0..1 s: compute until 0.3, a blocking 0.2 s collective, compute 0.5..1.0
    rec = recording([("all_reduce", 1 << 20, 0.3, 0.3, 0.5, False)])
    r = replay(rec, "uniform")
    p = r.collectives["predicted_us"].iloc[0] / 1e6
    assert r.steps["compute_us"].iloc[0] == pytest.approx(0.8e6)
    assert r.steps["overlap_us"].iloc[0] == pytest.approx((0.8 + p) * 1e6)      # blocking: nothing hides it
    # the same collective overlapped with compute recorded while it ran: it hides behind that compute
    rec = recording([("all_reduce", 1 << 20, 0.3, 0.3, 0.5, True)], scopes=[("AddmmBackward0", 0.3, 0.5)])
    r = replay(rec, "uniform")
    assert r.steps["compute_us"].iloc[0] == pytest.approx(1.0e6)
    assert r.steps["overlap_us"].iloc[0] == pytest.approx(1.0e6)
    assert r.steps["hidden_us"].iloc[0] == pytest.approx(p * 1e6)
    # compute that resumed after waiting waits for the collective in the replay too
    rec = recording([("all_reduce", 1 << 31, 0.3, 0.3, 0.5, True)], scopes=[("AddmmBackward0", 0.3, 0.35)])
    r = replay(rec, "uniform")
    p = r.collectives["predicted_us"].iloc[0] / 1e6
    assert p > 0.2
    assert r.steps["overlap_us"].iloc[0] == pytest.approx((0.3 + p + 0.5) * 1e6)


def test_compute_scale_scales_only_the_compute():
    rec = recording([("all_reduce", 1 << 20, 0.3, 0.3, 0.5, False)])
    a, b = replay(rec, "nvswitch8"), replay(rec, "nvswitch8", compute_scale=0.01)
    assert b.steps["compute_us"].iloc[0] == pytest.approx(a.steps["compute_us"].iloc[0] * 0.01)
    assert b.comm_s == a.comm_s
    with pytest.raises(ValueError, match="compute_scale"):
        replay(rec, "nvswitch8", compute_scale=float("nan"))


def test_scaling_keeps_bytes_and_places_sub_groups():
    rec = recording([("all_reduce", 1 << 20, 0.1, 0.1, 0.2, False),
                     ("all_reduce", 1 << 16, 0.3, 0.3, 0.4, False, (0, 1))])
    r = replay(rec, "multinode")
    assert r.world_size == 32 and r.notes and "scaled from 4 to 32" in r.notes[0]
    assert r.collectives["ranks"].tolist() == [32, 2]
    assert r.collectives["bytes"].tolist() == [1 << 20, 1 << 16]
    inside = replay(rec, "multinode", placement=[0, 1, 2, 3])
    across = replay(rec, "multinode", placement=[0, 8, 16, 24])
    assert inside.collectives["nodes"].tolist() == [1, 1] and across.collectives["nodes"].tolist() == [4, 2]
    assert (across.collectives["predicted_us"] > inside.collectives["predicted_us"]).all()
    assert "on [0, 8, 16, 24]" in across.label


def test_placed_topology_routes_through_the_chosen_ranks():
    base = sim.presets.topology("multinode")
    placed = _Placed(base, [0, 8])
    assert placed.ranks == 2 and placed.nodes == 2
    assert placed.routes([0], [1]).tolist() == base.routes([0], [8]).tolist()


def test_ops_without_a_schedule_are_listed_not_dropped():
    rec = recording([("all_reduce", 1 << 20, 0.1, 0.1, 0.2, False), ("send", 4096, 0.3, 0.3, 0.31, False),
                     ("barrier", 0, 0.4, 0.4, 0.41, False), ("reduce", 1 << 20, 0.5, 0.5, 0.6, False)])
    r = replay(rec, "nvswitch8")
    status = dict(zip(r.collectives["op"], r.collectives["status"]))
    assert status["all_reduce"] == status["reduce"] == "simulated"     # reduce: NCCL's ring, a chain to the root
    for op in ("send", "barrier"):
        assert status[op].startswith("not simulated: "), status
    sends = int((rec.frame["op"] == "send").sum())          # point-to-point rows stay one per rank
    assert r.steps["not_simulated"].iloc[0] == 1 + sends
    assert r.steps["not_simulated_us"].iloc[0] > 0
    assert r.comm_s == pytest.approx(r.collectives.query("status == 'simulated'")["predicted_us"].sum() / 1e6)
    assert "not simulated" in repr(r)
    named = replay(rec, "nvswitch8", algorithm={"reduce": "binomial"})
    assert dict(zip(named.collectives["op"], named.collectives["status"]))["reduce"] == "simulated"


@pytest.mark.parametrize("kwargs, message", [
    (dict(topology=sim.topologies.nvswitch(2)), "has 2 ranks, fewer than the 4"),
    (dict(topology="nvswitch8", world_size=2), "comes from 4 ranks, so it cannot be replayed as 2"),
    (dict(topology="multinode", placement=[0, 1]), "comes from 4 ranks"),
    (dict(topology="multinode", placement=[0, 0, 1, 2]), "placement must list 4 different ranks"),
    (dict(topology="multinode", world_size=4, placement=[0, 1, 2, 3, 4]), "placement names 5 ranks"),
    (dict(topology=sim.topologies.nvswitch(8), world_size=16), "fewer than the 16 asked for"),
    (dict(topology="nosuch"), "unknown topology 'nosuch'"),
    (dict(topology="nvswitch8", algorithm="chain"), "no op in this recording has a 'chain' algorithm"),
    (dict(topology="nvswitch8", algorithm={"all_reduce": "chain"}), "no 'chain' algorithm for all_reduce"),
    (dict(topology="nvswitch8", algorithm={"gather": "ring"}), "no 'gather' collective"),
    (dict(topology="nvswitch8", steps=[5]), "not [5]"),
])
def test_bad_input_is_refused_with_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        replay(recording(DDP_LIKE), **kwargs)


def test_a_recording_mixing_clusters_or_not_a_recording_is_refused():
    rec = recording(DDP_LIKE)
    rec.frame.loc[0, "rank"] = 7
    with pytest.raises(ValueError, match="mixes recordings of different clusters"):
        replay(rec, "nvswitch8")
    with pytest.raises(TypeError, match="combine"):
        replay([recording(DDP_LIKE)], "nvswitch8")
    with pytest.raises(TypeError, match="takes a Recording"):
        replay(pd.DataFrame(), "nvswitch8")


def test_calibrated_topology_and_one_rank_groups():
    from labcore.sim.apps.calibration import Calibration, Fit

    cal = Calibration("all_reduce", "ring", {4: Fit(4, 5e-5, 1e-9, 10, 0.01)}, errors=None)
    r = replay(recording(DDP_LIKE), cal)
    assert r.topology == "calibrated (4 ranks)"
    want = sim.cost.time("all_reduce", "ring", 4, 1 << 20, alpha=5e-5, beta=1e-9)
    assert r.collectives["predicted_us"].iloc[0] == pytest.approx(want * 1e6, rel=1e-9)
    one = replay(recording([("all_reduce", 64, 0.1, 0.1, 0.2, False, (2,))]), "nvswitch8", world_size=4)
    assert one.collectives["predicted_us"].tolist() == [0.0]


def test_sim_still_imports_without_torch():
    code = "import sys, labcore.sim.apps.replay, labcore.viz.step_timeline; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_docstring_examples_run():
    import doctest

    import labcore.sim.apps.replay as module

    assert doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def test_stand_ins_for_nccls_pick_are_labelled():
    rec = recording([("all_reduce", 256 << 20, 0.1, 0.1, 0.5, False), ("all_gather", 1 << 20, 0.6, 0.6, 0.7, False)])
    r = replay(rec, "multinode")
    big, gather = r.collectives.iloc[0], r.collectives.iloc[1]
    # the multinode preset's NVSwitches reduce (NVLS) in every node: NVLSTree runs on them, labelled a stand-in
    assert big["nccl"].startswith("NVLSTree/") and "simulated as nvls" in big["nccl"] and big["algorithm"] == "nvls"
    assert gather["algorithm"] == "ring" and big["status"] == gather["status"] == "simulated"


def test_placed_rings_keep_the_base_order():
    base = sim.presets.topology("multinode")
    placed = _Placed(base, [8, 0, 16])
    orders = placed.ring_orders(2)
    assert sorted(orders[0].tolist()) == [0, 1, 2]
    first = [int(r) for r in base.ring_orders(2)[0] if int(r) in (0, 8, 16)]
    assert [[8, 0, 16][k] for k in orders[0]] == first


def _edited(change):
    """A valid recording, then ``change(frame, steps, scopes)`` applied to its tables."""
    rec = recording(DDP_LIKE + [("all_reduce", 1 << 16, 0.8, 0.8, 0.85, False, (0, 1))])
    change(rec.frame, rec.steps, rec.scopes)
    return rec


@pytest.mark.parametrize("change, message", [
    (lambda f, s, c: f.__setitem__("end_s", float("nan")),
     r"row 0 of the recording \(rank 0, step 0, all_reduce #0\): it has no end time: .*TORCH_NCCL_ENABLE_TIMING=1"),
    (lambda f, s, c: f.loc.__setitem__((3, "end_s"), 0.1),
     r"row 3 of the recording \(rank 1, step 0, all_reduce #0\): it ends before it is issued"),
    (lambda f, s, c: f.loc.__setitem__((2, "issued_s"), float("inf")), r"row 2 .*: it has no issue time"),
    (lambda f, s, c: f.__setitem__("group_size", 0), r"row 0 .*: its group_size is not a whole number of ranks of at"),
    (lambda f, s, c: f.loc.__setitem__((1, "bytes"), -8), r"row 1 .*: its bytes are not a number of bytes >= 0"),
    (lambda f, s, c: f.at.__setitem__((0, "group_ranks"), (0, 1, 2, 7)),
     r"row 0 .*: its group_ranks name rank 7, but the recording comes from 4 ranks \(0..3\)"),
    (lambda f, s, c: f.at.__setitem__((6, "group_ranks"), (0, 1, 3, 3)),
     r"row 6 of the recording \(rank 2, step 0, all_reduce #0\): rank 2 is not in its group \[0, 1, 3, 3\]"),
    (lambda f, s, c: f.at.__setitem__((0, "group_size"), 3), r"row 0 .*: group_size 3 but 4 group_ranks"),
    (lambda f, s, c: s.loc.__setitem__((1, "end_s"), -1.0), r"step 0 of rank 1 runs from 0.0 to -1.0 s"),
    (lambda f, s, c: s.loc.__setitem__((2, "start_s"), float("nan")), r"step 0 of rank 2 runs from nan"),
    (lambda f, s, c: f.loc.__setitem__((5, "step"), 3), r"row 5 .*: the recording's steps have no step 3 for rank 1"),
])
def test_impossible_rows_are_refused_naming_the_row_and_the_fix(change, message):
    rec = _edited(change)
    with pytest.raises(ValueError, match=message) as caught:
        replay(rec, "nvswitch8")
    assert "\n" not in str(caught.value)


def test_missing_tables_and_columns_are_one_line_not_a_key_error():
    rec = recording(DDP_LIKE)
    rec.frame = rec.frame.drop(columns=["seq", "issued_s"])
    with pytest.raises(ValueError, match=r"the recording's frame lacks the columns \['seq', 'issued_s'\]: replay takes"):
        replay(rec, "nvswitch8")
    rec = recording(DDP_LIKE)
    rec.steps = rec.steps.drop(columns=["end_s"])
    with pytest.raises(ValueError, match=r"steps lacks the columns \['end_s'\]"):
        replay(rec, "nvswitch8")
    rec = recording(DDP_LIKE)
    rec.world_size = 0
    with pytest.raises(ValueError, match="world_size must be a whole number of ranks >= 1, not 0"):
        replay(rec, "nvswitch8")
    rec = recording(DDP_LIKE)
    rec.scopes = pd.DataFrame([dict(rank=0, step=0, name="AddmmBackward0", start_s=0.2, end_s=float("nan"))])
    with pytest.raises(ValueError, match=r"compute scope 0 of the recording \(AddmmBackward0, rank 0\) has no start"):
        replay(rec, "nvswitch8")


def test_rows_outside_the_marked_steps_and_point_to_point_rows_are_accepted():
    rec = recording(DDP_LIKE + [("send", 4096, 0.6, 0.6, 0.61, False)])
    rec.frame.loc[rec.frame["seq"] == 1, "step"] = -1                # issued between marked steps: in no step
    r = replay(rec, "nvswitch8")
    assert set(r.collectives["step"]) == {-1, 0} and r.steps.index.tolist() == [0]


def test_an_all_to_all_replays_as_nccls_p2p_path_and_the_layout_is_an_argument():
    """NCCL's tuner prices no all_to_all: replay plays what NCCL runs instead, grouped send/recv on its p2p
    channels; the job's process layout (torch's one a GPU unless told) sets each call's host time."""
    rec = recording([("all_to_all", 1 << 10, 0.1, 0.1, 0.2, False)])
    r = replay(rec, "h100_sxm8")
    row = r.collectives.iloc[0]
    assert (row["algorithm"], row["status"]) == ("p2p", "simulated") and "p2p" in row["nccl"]
    g8 = replay(rec, "h100_sxm8", processes="per_node")
    assert g8.collectives["predicted_us"].iloc[0] == pytest.approx(30.0)       # one process launching 8 GPUs
    assert row["predicted_us"] < 15.0
