"""The data check's expected outputs against the collectives' definitions, and notebook 04's exercises."""
import copy

import pandas as pd
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import labcore as lc
from labcore.exercises.measuring import nccl_tests_size, q_regressions, q_size
from labcore.live.bench.ops import OPS, Ctx
from labcore.live.bench.verify import inputs

REDUCE = {"sum": lambda xs: sum(xs), "prod": lambda xs: torch.stack(xs).prod(0),
          "max": lambda xs: torch.stack(xs).max(0).values, "min": lambda xs: torch.stack(xs).min(0).values,
          "avg": lambda xs: sum(xs) / len(xs)}


def by_definition(name, rank, n, root, redop, count):
    """What rank `rank` must hold after the collective, written from its definition."""
    kind = OPS[name].fill_redop(redop)
    _, send_n, _ = OPS[name].layout(count * n if OPS[name].chunked else count, n)
    send = [inputs(r, torch.arange(send_n), kind, n, torch.float64) for r in range(n)]

    def chunk(x, j):
        return x[j * count:(j + 1) * count]

    if name in ("all_reduce", "reduce"):
        return REDUCE[redop](send)
    if name == "reduce_scatter":
        return chunk(REDUCE[redop](send), rank)
    if name == "broadcast":
        return send[root]
    if name in ("all_gather", "gather"):
        return torch.cat([send[j] for j in range(n)])
    if name == "all_to_all":
        return torch.cat([chunk(send[j], rank) for j in range(n)])
    if name == "scatter":
        return chunk(send[root], rank)
    return send[(rank - 1) % n]  # sendrecv: from the left neighbour


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(OPS)), n=st.integers(2, 6), count=st.integers(1, 40),
       redop=st.sampled_from(sorted(REDUCE)), data=st.data())
def test_expected_outputs_follow_each_collectives_definition(name, n, count, redop, data):
    rank, root = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    ctx = Ctx(rank, n, root, redop if OPS[name].kind == "reduce" else "none", torch.float64, count)
    if not OPS[name].checked_on(ctx):
        return
    want = by_definition(name, rank, n, root, ctx.redop, count)
    got = OPS[name].expect(ctx, torch.arange(want.numel()))
    assert torch.equal(got, want)


def test_size_exercise_reference_is_the_harness_layout():
    for name, op in OPS.items():
        count, send_n, recv_n = op.layout(1000 * 4, 4)
        assert nccl_tests_size(name, count, 4, 2) == max(send_n, recv_n) * 2
    assert q_size.evaluate(nccl_tests_size).status == "correct"


def test_regression_exercise_reads_the_table_it_is_pointed_at():
    base = pd.DataFrame(dict(op="all_reduce", size=[1 << 20, 2 << 20], type="float", redop="sum", root=-1,
                             ranks=2, placement="in-place", time_us=[100.0, 200.0], busbw=1.0))
    gate = lc.bench.compare(base, base.assign(time_us=[300.0, 200.0]), tolerance=0.2)
    q = copy.copy(q_regressions).about(gate)  # leave the shared exercise on its example table
    assert q.evaluate([1 << 20]).status == "correct"
    assert q.evaluate([2 << 20]).status == "incorrect"
    assert q.evaluate("1M").status == "incorrect"
    assert q_regressions.evaluate(q_regressions.correct_example).status == "correct"
