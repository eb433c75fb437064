"""Property tests of the simulator: every algorithm, ranks 1..17, random sizes and machines.

Values are exact (checked against numpy for sum, max, min, prod), the time with
contention off equals the closed form of labcore.sim.core.cost for both port models
and any number of channels, busbw never exceeds what a rank's port allows, and
no algorithm beats the topology's lower bound on any preset.
"""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labcore.sim as sim
from labcore.sim import cost
from labcore.sim.core.buffers import busbw_factor
from labcore.sim.core.schedules import ALGORITHMS

CASES = [(c, a) for c, algs in ALGORITHMS.items() for a in algs]
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


def _options(draw, collective, algorithm, ranks):
    opts = {}
    divisors = [d for d in range(1, ranks + 1) if ranks % d == 0]
    if algorithm == "hierarchical":
        opts["gpus_per_node"] = draw(st.sampled_from(divisors))
    if algorithm in ("tree", "double_tree") and draw(st.booleans()):
        opts["gpus_per_node"] = draw(st.sampled_from(divisors))      # NCCL's trees over nodes, chains inside
    if algorithm == "in_network" and draw(st.booleans()):
        opts["gpus_per_node"] = draw(st.sampled_from(divisors))      # CollNet: reduce in the node, then the switch
    if algorithm in ("ring", "tree", "double_tree"):
        opts["channels"] = draw(st.integers(1, 3))
    if algorithm in ("tree", "double_tree", "chain", "in_network", "nvls", "hierarchical"):
        opts["pipeline"] = draw(st.integers(1, 6))
    if collective in ("broadcast", "reduce"):
        opts["root"] = draw(st.integers(0, ranks - 1))
    return opts


@pytest.mark.parametrize("collective,algorithm", CASES)
@SETTINGS
@given(data=st.data())
def test_values_are_exact(collective, algorithm, data):
    ranks = data.draw(st.integers(1, 17), label="ranks")
    opts = _options(data.draw, collective, algorithm, ranks)
    op = data.draw(st.sampled_from(["sum", "max", "min", "prod"]), label="reduce_op")
    trace = sim.simulate(collective, algorithm, ranks, nbytes=data.draw(st.integers(1, 1 << 30)), reduce_op=op,
                         elements=2, seed=data.draw(st.integers(0, 1000)), **opts)
    trace.verify()


@pytest.mark.parametrize("collective,algorithm", CASES)
@SETTINGS
@given(data=st.data())
def test_time_equals_closed_form_without_contention(collective, algorithm, data):
    ranks = data.draw(st.integers(1, 17), label="ranks")
    opts = _options(data.draw, collective, algorithm, ranks)
    nbytes = data.draw(st.integers(1, 1 << 34), label="nbytes")
    alpha = data.draw(st.floats(0, 1e-3), label="alpha")
    bandwidth = data.draw(st.floats(1e6, 1e12), label="bandwidth")
    gamma = data.draw(st.sampled_from([0.0, 1e-11, 1e-9]), label="gamma")
    ports = data.draw(st.sampled_from(["multi", "single"]), label="ports")
    topo = sim.topologies.uniform(ranks, alpha=alpha, bandwidth=bandwidth, gamma=gamma, ports=ports)
    trace = sim.simulate(collective, algorithm, ranks, nbytes, topology=topo, contention=False, values=False, **opts)
    expected = cost.time(collective, algorithm, ranks, nbytes, alpha, 1 / bandwidth, gamma, ports=ports, **opts)
    assert math.isclose(trace.time_s, expected, rel_tol=1e-9, abs_tol=1e-18)


@pytest.mark.parametrize("collective,algorithm", CASES)
@SETTINGS
@given(data=st.data())
def test_busbw_never_above_the_port_bound(collective, algorithm, data):
    ranks = data.draw(st.integers(2, 17), label="ranks")
    opts = _options(data.draw, collective, algorithm, ranks)
    bandwidth = data.draw(st.floats(1e6, 1e12), label="bandwidth")
    topo = sim.topologies.switch(ranks, alpha=data.draw(st.floats(0, 1e-4)), bandwidth=bandwidth)
    trace = sim.simulate(collective, algorithm, ranks, data.draw(st.integers(1, 1 << 34)), topology=topo,
                         values=False, **opts)
    # a reducing switch lets each rank send and receive the buffer once: algbw <= bandwidth
    bound = bandwidth * (busbw_factor(collective, ranks) if algorithm in ("in_network", "nvls") else 1.0)
    assert trace.busbw * 1e9 <= bound * (1 + 1e-9)
    assert trace.time_s >= trace.lower_bound_s() * (1 - 1e-9) or algorithm in ("in_network", "nvls")


@pytest.mark.parametrize("collective,algorithm", CASES)
def test_every_rank_count_from_1_to_17(collective, algorithm):
    for ranks in range(1, 18):
        opts = {"gpus_per_node": max(d for d in range(1, 5) if ranks % d == 0)} if algorithm == "hierarchical" else {}
        topo = sim.topologies.uniform(ranks, alpha=2e-6, bandwidth=3e9, gamma=1e-10)
        trace = sim.simulate(collective, algorithm, ranks, 1000 * ranks + 7, topology=topo, contention=False, **opts)
        trace.verify()
        expected = cost.time(collective, algorithm, ranks, 1000 * ranks + 7, 2e-6, 1 / 3e9, 1e-10, **opts)
        assert math.isclose(trace.time_s, expected, rel_tol=1e-9, abs_tol=1e-18), ranks


PRESETS = {
    "uniform": lambda: sim.topologies.uniform(8, alpha=2e-6, bandwidth=5e9),
    "uniform, single port": lambda: sim.topologies.uniform(8, alpha=2e-6, bandwidth=5e9, ports="single"),
    "switch": lambda: sim.topologies.switch(8),
    "ring": lambda: sim.topologies.ring(8),
    "nvswitch8": lambda: sim.topologies.nvswitch(8),
    "pcie8": lambda: sim.topologies.pcie(8),
    "multinode": lambda: sim.topologies.multinode(2, 4),
    "multinode, sharp": lambda: sim.topologies.multinode(2, 4, sharp=True),
    "multinode, one NIC a node": lambda: sim.topologies.multinode(2, 4, nics_per_node=1),
    "multinode, NVLS and sharp": lambda: sim.topologies.multinode(2, 4, sharp=True, nvls=True),
    "multinode, NVLS, two NICs a GPU": lambda: sim.topologies.multinode(2, 4, nics_per_node=8, nvls=True),
}


@pytest.mark.parametrize("collective,algorithm", CASES)
@pytest.mark.parametrize("preset", sorted(PRESETS))
@settings(max_examples=6, deadline=None, derandomize=True)
@given(nbytes=st.integers(0, 1 << 32))
def test_no_algorithm_beats_the_lower_bound_on_any_preset(collective, algorithm, preset, nbytes):
    topo = PRESETS[preset]()
    # on GPU servers NVLS needs the NVSwitches' engines and in_network the fabric's SHARP switch
    if algorithm == "nvls" and not getattr(topo, "has_engine", topo.switch_agents):
        return
    if algorithm == "in_network" and not getattr(topo, "sharp", topo.switch_agents):
        return
    opts = {"gpus_per_node": 4} if algorithm == "hierarchical" and topo.nodes == 1 else {}
    trace = sim.simulate(collective, algorithm, 8, nbytes, topology=topo, values=False, **opts)
    assert trace.time_s >= trace.lower_bound_s() * (1 - 1e-9), trace.summary()
