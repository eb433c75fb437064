"""Every collective is described once (labcore.collectives): the bench, the simulator, replay, the tuner and
the recorder read that description, and what each of them did with its own tables before still holds."""
import doctest
import subprocess
import sys

import numpy as np
import pytest

import labcore.collectives as spec
from labcore.sim.core import buffers as simc
from labcore.sim.core.bounds import CUT_RULES
from labcore.sim.core.schedules import ALGORITHMS, REGISTRY, playing


# a collective that carries data and that the simulator does not play (yet): what "no schedule" is said of
UNSIMULATED = next(c.name for c in spec.COLLECTIVES.values()
                   if not c.sim and not c.point_to_point and c.busbw != "0" and c.sources)


def test_docstring_examples_run():
    assert doctest.testmod(spec, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


@pytest.mark.live
def test_the_description_imports_neither_torch_nor_the_simulator():
    code = "import sys, labcore.collectives; assert not {'torch', 'labcore.sim'} & set(sys.modules), sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_simulator_plays_every_collective_with_a_default_algorithm_and_no_other():
    assert simc.SIMULATED == tuple(ALGORITHMS) == tuple(c.name for c in spec.COLLECTIVES.values() if c.sim)
    for name in simc.SIMULATED:
        c = spec.describe(name)
        assert c.sim in ALGORITHMS[name] and playing(name, "Ring") in (None, *ALGORITHMS[name])
        assert (c.sources, c.sinks) in CUT_RULES              # the bytes any algorithm must move
    assert {a.collective for a in REGISTRY.values()} == set(simc.SIMULATED)


def test_every_registered_algorithm_runs_with_its_closed_form_and_its_default():
    import labcore.sim as sim

    for (op, name), a in REGISTRY.items():
        assert a.build is ALGORITHMS[op][name] and callable(a.form)
        trace = sim.simulate(op, name, 4, 4096, **({"gpus_per_node": 2} if name == "hierarchical" else {}))
        trace.verify()
    for op in simc.SIMULATED:
        trace = sim.simulate(op, ranks=4, nbytes=4096)         # no algorithm named: the collective's own
        assert trace.schedule.algorithm == spec.describe(op).sim


def test_the_tuner_prices_what_nccl_names():
    from labcore.sim.nccl.tuner import FUNCTION_OF, FUNCTIONS

    assert {c.name: c.nccl for c in spec.COLLECTIVES.values() if c.nccl} == FUNCTION_OF
    assert list(FUNCTION_OF.values()) == list(FUNCTIONS)     # NCCL's order: its first of equal times wins


# nccl-tests 2.19.6 src/*.cu *GetCollByteCount / *GetBw, and doc/PERFORMANCE.md: what the bench printed before
# the description moved here, written out (factor at 4 ranks, split buffer, root, fewest ranks, program).
NCCL_TESTS = {
    "all_reduce": (1.5, "", False, 1, "all_reduce_perf"), "all_gather": (0.75, "recv", False, 1, "all_gather_perf"),
    "reduce_scatter": (0.75, "send", False, 1, "reduce_scatter_perf"), "broadcast": (1.0, "", True, 1, "broadcast_perf"),
    "reduce": (1.0, "", True, 1, "reduce_perf"), "all_to_all": (0.75, "both", False, 1, "alltoall_perf"),
    "gather": (0.75, "recv", True, 1, "gather_perf"), "scatter": (0.75, "send", True, 1, "scatter_perf"),
    "sendrecv": (1.0, "", False, 2, "sendrecv_perf"), "hypercube": (1.0, "recv", False, 2, "hypercube_perf"),
}


def test_the_bench_reads_names_layouts_factors_roots_and_least_ranks_from_the_description():
    from labcore.bench.ops import NAMES, OPS, nccl_tests_program, op_name

    assert set(OPS) == {c.name for c in spec.COLLECTIVES.values() if c.program} and [*OPS, "barrier"] == NAMES
    assert set(NCCL_TESTS) <= set(OPS)
    for name, (factor, split, rooted, least, program) in NCCL_TESTS.items():
        op = OPS[name]
        assert op.spec is spec.describe(name)
        assert (op.factor(4), op.split, op.rooted, op.min_ranks, nccl_tests_program(name)) == \
            (factor, split, rooted, least, program)
        assert op_name(program) == op_name(program.upper().replace("_", "-")) == name
        for n, item in ((4, 4), (3, 8), (8, 2)):
            assert op.layout(1000, n, item) == spec.describe(name).counts(1000, n, item)
    assert OPS["hypercube"].power_of_two and OPS["hypercube"].algbw_share(4) == 0.75
    assert [OPS[n].kind for n in ("all_reduce", "reduce_scatter", "reduce", "all_gather", "sendrecv")] == \
        ["reduce", "reduce", "reduce", "copy", "copy"]
    assert {n: OPS[n].inplace for n in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")} == \
        {"all_reduce": "same", "all_gather": "send_in_recv", "reduce_scatter": "recv_in_send", "all_to_all": "same"}
    for alias, name in (("allreduce", "all_reduce"), ("alltoall_mpi", "all_to_all"), ("send_recv", "sendrecv")):
        assert op_name(alias) == name
    with pytest.raises(ValueError, match="choose one of: all_reduce"):
        op_name("send")                                   # described, but not something the bench runs


def test_too_few_ranks_are_refused_from_the_description():
    from labcore.bench.checks import check_collective

    for name in ("sendrecv", "hypercube"):
        with pytest.raises(ValueError, match=f"{name} needs at least 2 ranks: use -g 2"):
            check_collective(name, 1, "sum", 0)


def test_the_recorder_names_rows_and_counts_bytes_from_the_description():
    from labcore.readers import recording

    assert {api: spec.from_torch(api) for api in ("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter",
                                                  "_reduce_scatter_base", "all_gather_single", "all_gather_into_tensor",
                                                  "_all_gather_base", "all_to_all_single")} == {
        "reduce_scatter_single": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
        "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter", "all_gather_single": "all_gather",
        "all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather", "all_to_all_single": "all_to_all"}
    # c10d's own names, as the dispatcher, the backends and the profiler write them
    assert [spec.from_torch(n) for n in ("allreduce_", "_allgather_base", "allgather_into_tensor_coalesced",
                                         "reduce_scatter_tensor_coalesced", "alltoall_base", "all_reduce_barrier",
                                         "recv_any_source_")] == ["all_reduce", "all_gather", "all_gather",
                                                                  "reduce_scatter", "all_to_all", "barrier", "recv"]
    assert spec.c10d_function("_allgather_base_") == "all_gather_single" and spec.from_torch("wait_tensor") is None
    want = {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "all_to_all": 0.75, "gather": 0.75,
            "scatter": 0.75, "barrier": 0.0, "broadcast": 1.0, "send": 1.0, "recv": 1.0, "all_reduce_coalesced": 1.0}
    assert {op: recording._busbw_factor(op, 4) for op in want} == want
    assert recording._busbw_factor("all_reduce", 1) == 0.0


def test_replay_says_why_it_cannot_play_an_op():
    from labcore.sim.apps.replay import _no_schedule

    assert _no_schedule("all_reduce") is None
    assert _no_schedule("send") == _no_schedule("recv") == "point-to-point: the simulator has no send/recv schedule"
    assert _no_schedule("barrier") == "a barrier carries no data; the simulator has no barrier"
    assert _no_schedule(UNSIMULATED) == f"the simulator has no {UNSIMULATED} schedule"
    assert _no_schedule("all_reduce_coalesced") == "the simulator has no all_reduce_coalesced schedule"


WRITTEN_OUT = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all")


@pytest.mark.parametrize("name", [n for n in simc.SIMULATED if n in WRITTEN_OUT])
def test_roles_give_the_buffer_states_written_out_by_hand(name):
    # what the simulator's chains of if/elif said before the roles: (sources, sinks) -> initial and target
    P, root = 4, 2
    C = P * P * 2 if name == "all_to_all" else P * 3
    own = np.arange(C) * P // C
    block = np.arange(C) // max(1, C // (P * P))
    src, dst = block // P, block % P
    holds = np.zeros((P, C, P), dtype=bool)
    want = np.zeros((P, C, P), dtype=bool)
    care = np.ones((P, C), dtype=bool)
    r = np.arange(P)
    if name in ("all_reduce", "reduce_scatter", "reduce"):
        holds[r, :, r] = True
    if name == "all_gather":
        holds[own, np.arange(C), own] = True
        want[:, np.arange(C), own] = True
    if name == "broadcast":
        holds[root, :, root] = True
        want[:, :, root] = True
    if name == "all_reduce":
        want[:] = True
    if name == "reduce_scatter":
        care = own[None, :] == r[:, None]
        want[care] = True
    if name == "reduce":
        care[:] = False
        care[root], want[root] = True, True
    if name == "all_to_all":
        holds[src, np.arange(C), src] = True
        care = dst[None, :] == r[:, None]
        want[dst, np.arange(C), src] = True
    assert (simc.initial(name, P, C, root) == holds).all()
    got_want, got_care = simc.target(name, P, C, root)
    assert (got_want == want).all() and (got_care == care).all()


def test_a_description_is_checked_when_it_is_made():
    with pytest.raises(ValueError, match="busbw must be one of"):
        spec.Collective("x", busbw="n")
    with pytest.raises(ValueError, match="needs its sources and sinks"):
        spec.Collective("x", sim="ring")
    from labcore.sim.core.registry import algorithm

    with pytest.raises(ValueError, match="describe it in labcore/collectives.py"):
        algorithm(UNSIMULATED, "binomial", form=None)
    with pytest.raises(ValueError, match="is registered already"):
        algorithm("all_reduce", "ring", form=None)(lambda ranks, nbytes: None)


@pytest.mark.parametrize("op", simc.SIMULATED)
def test_the_cli_plays_each_collective_with_its_own_default(op, capsys):
    from labcore.sim.cli import main

    assert main([op, "-n", "4", "--size", "4K"]) == 0
    assert f"algorithm {spec.describe(op).sim!r}" in capsys.readouterr().out
