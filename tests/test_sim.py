"""Unit tests of labcore.sim: data model, error messages, contention, presets, docstring examples."""
import doctest
import importlib
import math
import pkgutil
import subprocess
import sys

import numpy as np
import pytest

import labcore.sim as sim
from labcore.sim import Schedule, ScheduleError, Transfer, cost

MODULES = ["labcore.sim", *(m.name for m in pkgutil.walk_packages(sim.__path__, "labcore.sim.")),
           "labcore.collectives"]


@pytest.mark.live
def test_import_does_not_pull_in_torch():
    code = "import sys\n" + "".join(f"import {m}\n" for m in MODULES) + "assert 'torch' not in sys.modules, 'torch'\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def _two_rank(steps, collective="all_reduce", chunks=1):
    return sim.run(Schedule.from_steps(collective, 2, 16, chunks, steps), sim.topologies.uniform(2))


def test_a_correct_hand_written_schedule_passes():
    trace = _two_rank([[Transfer(0, 1, 0, op="reduce")], [Transfer(1, 0, 0)]])
    trace.verify()
    assert trace.contributors(step=0, rank=1, chunk=0) == (0, 1)
    assert trace.contributors(step=-1, rank=1, chunk=0) == (1,)


def test_missing_step_names_rank_chunk_and_step():
    trace = _two_rank([[Transfer(0, 1, 0, op="reduce")]])
    with pytest.raises(ScheduleError, match=r"step 0\), rank 0, chunk 0 .* missing \[1\]"):
        trace.verify()


def test_double_counting_is_reported_where_it_happens():
    trace = _two_rank([[Transfer(0, 1, 0, op="reduce")], [Transfer(0, 1, 0, op="reduce")], [Transfer(1, 0, 0)]])
    with pytest.raises(ScheduleError, match=r"step 1, rank 1, chunk 0: would count .*\[0\] twice"):
        trace.verify()


def test_sending_a_chunk_nobody_has_is_reported():
    trace = _two_rank([[Transfer(1, 0, 0)]], collective="broadcast")
    with pytest.raises(ScheduleError, match=r"step 0, rank 1, chunk 0: sends chunk 0 to 0 but holds no data"):
        trace.verify()


def test_two_copies_into_one_chunk_in_one_step_are_ambiguous():
    s = Schedule.from_steps("all_reduce", 3, 30, 1, [[(0, 2, 0), (1, 2, 0)]])
    trace = sim.run(s, sim.topologies.uniform(3))
    with pytest.raises(ScheduleError, match="more than one transfer"):
        trace.verify()


def test_bad_transfers_are_rejected_with_the_fix():
    with pytest.raises(ScheduleError, match="not an agent"):
        Schedule.from_steps("all_reduce", 2, 16, 1, [[(0, 5, 0)]])
    with pytest.raises(ScheduleError, match="cannot send to itself"):
        Schedule.from_steps("all_reduce", 2, 16, 1, [[(1, 1, 0)]])
    with pytest.raises(ValueError, match="choose one of"):
        sim.simulate("all_reduce", algorithm="butterfly", ranks=4)
    with pytest.raises(ValueError, match="gpus_per_node"):
        sim.simulate("all_reduce", algorithm="hierarchical", ranks=6)
    with pytest.raises(ValueError, match="in-network"):
        sim.simulate("all_reduce", algorithm="in_network", ranks=4, topology=sim.topologies.ring(4))
    with pytest.raises(ValueError, match="values=True"):
        sim.simulate("all_reduce", ranks=4, values=False).verify()


def test_wrong_values_are_caught_even_when_the_bookkeeping_is_right():
    trace = sim.simulate("all_reduce", "ring", 4, 64, reduce_op="max")
    trace._values[-1, 2, 1, 0] += 1
    with pytest.raises(ScheduleError, match="rank 2, chunk 1 holds values"):
        trace.verify()


def test_state_history_follows_the_ring():
    trace = sim.simulate("reduce_scatter", "ring", 4, 4096)
    assert trace.holds_at(-1)[:, :, :].sum() == 16                   # each rank its own 4 chunks
    for step in range(3):            # chunk 3 travels 0 -> 1 -> 2 -> 3 gathering one contribution a step
        assert trace.contributors(step, rank=step + 1, chunk=3) == tuple(range(step + 2))
    final = trace.holds_at(2)
    assert all(final[r, r].all() for r in range(4))
    np.testing.assert_array_equal(trace.values_at(2)[np.arange(4), np.arange(4)],
                                  trace.inputs.sum(axis=0)[np.arange(4)])


def test_sharing_a_port_doubles_the_time():
    topo = sim.topologies.switch(3, alpha=0.0, bandwidth=1e9)
    s = Schedule.from_steps("broadcast", 3, 1e6, 1, [[(0, 1, 0), (0, 2, 0)]])
    shared = sim.run(s, topo, values=False)
    alone = sim.run(s, topo, values=False, contention=False)
    assert math.isclose(alone.time_s, 1e-3) and math.isclose(shared.time_s, 2e-3)
    assert shared.links.shape == (2, 2)
    assert shared.topology.link_label(int(shared.links[0, 0])).startswith("rank 0 -> switch")


def test_a_tree_on_a_ring_topology_pays_for_the_extra_hops():
    ring_topo, mesh = sim.topologies.ring(8, alpha=0, bandwidth=1e9), sim.topologies.uniform(8, alpha=0, bandwidth=1e9)
    ring_on_ring = sim.simulate("all_reduce", "ring", 8, 1 << 24, topology=ring_topo, values=False)
    assert math.isclose(ring_on_ring.time_s, cost.time("all_reduce", "ring", 8, 1 << 24, 0, 1e-9))
    tree_on_ring = sim.simulate("all_reduce", "tree", 8, 1 << 24, topology=ring_topo, values=False)
    tree_on_mesh = sim.simulate("all_reduce", "tree", 8, 1 << 24, topology=mesh, values=False)
    assert tree_on_ring.time_s > 1.5 * tree_on_mesh.time_s


def test_double_tree_uses_two_complementary_trees():
    from labcore.sim.core.schedules.tree import mirrored_parents, nccl_tree_parents

    for p in (4, 8, 16):
        t0, t1 = nccl_tree_parents(p), mirrored_parents(nccl_tree_parents(p))
        inner0 = {x for x in t0 if x >= 0}
        inner1 = {x for x in t1 if x >= 0}
        assert not inner0 & inner1, p                                  # no rank is inside both trees
    layout = sim.simulate("all_reduce", "double_tree", 8, 1024).schedule.layout
    assert layout.kind == "tree" and len(layout.parents) == 2


def test_h100_preset_reproduces_published_busbw_and_nccl_latency():
    topo = sim.topologies.nvswitch(8)
    ring = sim.simulate("all_reduce", "ring", 8, 8 << 30, topology=topo, values=False)
    nvls = sim.simulate("all_reduce", "nvls", 8, 8 << 30, topology=topo, values=False)
    assert abs(ring.busbw / 370 - 1) < 0.10                            # GTC24 S62129: ~370 GB/s
    assert abs(nvls.busbw / 480 - 1) < 0.10                            # with NVLS: ~480 GB/s
    assert (ring.protocol, nvls.protocol) == ("Simple", "NVLS")
    gpu_only = sim.topologies.nvswitch(8, issue_s=0)
    small = sim.simulate("all_reduce", "ring", 8, 8, topology=gpu_only)
    assert small.protocol == "LL"
    assert abs(small.time_s * 1e6 - (6.6 + 14 * 0.6)) < 0.1            # NCCL Ring/LL latency, 8 GPUs
    host_bound = sim.simulate("all_reduce", "ring", 8, 8, topology=topo)
    assert host_bound.time_s == pytest.approx(topo.issue_s)            # one process issuing for 8 GPUs


def test_other_presets():
    assert abs(sim.simulate("all_reduce", "ring", 8, 1 << 30, topology=sim.topologies.pcie(8),
                            values=False).busbw / 24 - 1) < 0.1       # GTC24: PCIe Gen4 24 GB/s
    multi = sim.topologies.multinode(2, 4, sharp=True)
    hier = sim.simulate("all_reduce", "hierarchical", 8, 1 << 20, topology=multi)
    hier.verify()
    assert hier.schedule.params["gpus_per_node"] == 4
    sim.simulate("all_reduce", "in_network", 8, 1 << 20, topology=multi).verify()
    with pytest.raises(ValueError, match="unknown topology"):
        sim.presets.topology("torus")


def test_summary_and_frame():
    one_port = sim.topologies.uniform(4, alpha=0, bandwidth=1e9, ports="single")
    trace = sim.simulate("all_gather", "ring", 4, 1 << 20, topology=one_port)
    s = trace.summary()
    assert math.isclose(s["busbw"], 1.0) and math.isclose(s["time_us"], s["bound_us"])   # the ring meets the bound
    frame = trace.schedule.to_frame()
    assert list(frame.columns) == ["step", "src", "dst", "chunk", "nbytes", "op", "channel", "span"]
    assert len(frame) == 12
    assert "step 2 [all-gather]" in str(trace.schedule)


def test_trace_frame_has_times_and_routes():
    trace = sim.simulate("broadcast", "binomial", 4, 1e6, topology=sim.topologies.switch(4, alpha=0, bandwidth=1e9))
    frame = trace.to_frame()
    assert len(frame) == 3 and frame["end_us"].max() == pytest.approx(trace.time_s * 1e6)
    assert frame["route"].iloc[0].startswith("rank 0 -> switch")


@pytest.mark.parametrize("kwargs,match", [
    ({"nbytes": -1}, "nbytes must be a finite number"),
    ({"nbytes": float("nan")}, "nbytes must be a finite number"),
    ({"nbytes": float("inf")}, "nbytes must be a finite number"),
    ({"nbytes": "1M"}, "nbytes must be a finite number"),
    ({"ranks": 0}, "ranks must be a whole number"),
    ({"ranks": 2.5}, "ranks must be a whole number"),
    ({"ranks": True}, "ranks must be a whole number"),
    ({"algorithm": "tree", "pipeline": 10 ** 9}, "pipeline must be a whole number from 1 to"),
    ({"algorithm": "tree", "pipeline": 0}, "pipeline must be a whole number"),
    ({"channels": 1000}, "channels must be a whole number from 1 to"),
    ({"elements": 0}, "elements must be a whole number"),
    ({"algorithm": "butterfly"}, "choose one of"),
    ({"ranks": 1024, "nbytes": 1 << 30}, r"would need ~\d+\.\d GiB .*values=False"),
    ({"ranks": 4096, "values": False}, "million transfers"),
    ({"protocol": "LL"}, "describes no protocols"),
])
def test_bad_input_is_refused_before_any_work_with_the_fix(kwargs, match):
    args = {"op": "all_reduce", "algorithm": "ring", "ranks": 8, "nbytes": 1 << 20} | kwargs
    with pytest.raises(ValueError, match=match):
        sim.simulate(**args)


def test_a_protocol_the_algorithm_cannot_use_is_named():
    with pytest.raises(ValueError, match="cannot run 'nvls'"):
        sim.simulate("all_reduce", "nvls", 8, 1 << 20, topology="nvswitch8", protocol="LL")
    with pytest.raises(ValueError, match="has 8 ranks but ranks=4"):
        sim.simulate("all_reduce", "ring", 4, 1 << 20, topology=sim.topologies.nvswitch(8))


@pytest.mark.live
@pytest.mark.parametrize("argv,message", [
    (["all_reduce", "--size", "nan"], "size 'nan' must be a finite, non-negative number"),
    (["all_reduce", "--size", "-5"], "size '-5' must be a finite, non-negative number"),
    (["all_reduce", "-n", "0"], "must be at least 1"),
    (["all_reduce", "--algo", "tree", "--pipeline", "1000000"], "pipeline must be a whole number"),
    (["all_reduce", "-n", "1024", "--size", "1G"], "--no-values"),
    (["all_reduce", "-b", "1M", "-e", "1K"], "larger than -e"),
    (["all_reduce", "--algo", "fast"], "no 'fast' algorithm"),
    (["all_reduce", "--topology", "uniform", "--protocol", "LL"], "describes no protocols"),
    (["broadcast", "--algo", "chain", "--root", "9"], "--root must be a rank"),
])
def test_cli_refuses_bad_input_in_one_line_with_exit_2(argv, message):
    done = subprocess.run([sys.executable, "-m", "labcore", "sim", *argv], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr


def test_lower_bound_for_point_to_point_algorithms():
    one_port = sim.topologies.uniform(8, alpha=0, bandwidth=1e9, ports="single")
    ring = sim.simulate("all_reduce", "ring", 8, 1 << 24, topology=one_port, values=False)
    assert math.isclose(ring.time_s, ring.lower_bound_s(in_network=False))   # Patarasuk-Yuan: the ring meets it
    assert ring.lower_bound_s() < ring.time_s                   # the mesh's switch could reduce in the network
