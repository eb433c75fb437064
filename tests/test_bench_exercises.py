"""The data check's expected outputs against the collectives' definitions, and notebook 04's exercises."""
import copy

import numpy as np
import pandas as pd
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import labcore as lc
from labcore.exercises.measuring import nccl_tests_size, q_algbw, q_regressions, q_size
from labcore.bench.ops import OPS, Ctx
from labcore.bench.verify import inputs

REDUCE = {"sum": lambda xs: sum(xs), "prod": lambda xs: torch.stack(xs).prod(0),
          "max": lambda xs: torch.stack(xs).max(0).values, "min": lambda xs: torch.stack(xs).min(0).values,
          "avg": lambda xs: sum(xs) / len(xs)}


def by_definition(name, rank, n, root, redop, count):
    """What rank `rank` must hold after the collective, written from its definition."""
    kind = OPS[name].fill_redop(redop)
    send_n = count * n if OPS[name].split in ("send", "both") else count
    send = [inputs(r, torch.arange(send_n), kind, n, torch.float64) for r in range(n)]

    def chunk(x, j):
        return x[j * count:(j + 1) * count]

    if name in ("all_reduce", "reduce"):
        return REDUCE[redop](send)
    if name == "reduce_scatter":
        return chunk(REDUCE[redop](send), rank)
    if name == "broadcast":
        return send[root]
    if name in ("all_gather", "gather", "hypercube"):
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
        lay = op.layout(4000 * 2, 4, 2)
        assert nccl_tests_size(name, lay.count, 4, 2) == max(lay.send, lay.recv) * 2
    assert q_size.self_test(nccl_tests_size).status == "correct"


def _message(q, answer):
    result = q.evaluate(answer)
    assert result.status == "incorrect", answer
    return result.message


def test_size_exercise_names_the_mistake_and_the_arguments_not_the_answer():
    chunk_only = _message(q_size, lambda op, count, nranks, itemsize: count * itemsize)
    assert "op='all_gather', count=256, nranks=4, itemsize=4" in chunk_only
    assert "one rank's share" in chunk_only and "4096" not in chunk_only
    grows = _message(q_size, lambda op, count, nranks, itemsize: count * nranks * itemsize)
    assert "op='all_reduce'" in grows and "grows with the rank count" in grows
    # The mirror-image mistake: only all_gather's output counted as holding every share.
    only_gather = _message(q_size, lambda op, count, nranks, itemsize:
                           count * (nranks if op == "all_gather" else 1) * itemsize)
    assert "op='reduce_scatter'" in only_gather and "the input to be reduced" in only_gather
    assert "in bytes" in _message(q_size, lambda op, count, nranks, itemsize:
                                  count * (nranks if op in ("all_gather", "reduce_scatter", "all_to_all") else 1))
    assert "return a number of bytes" in _message(q_size, lambda *a: "big")
    # a numpy number is a number: a wrong one gets the mistake's message
    assert "one rank's share" in _message(q_size, lambda op, count, nranks, itemsize: np.int64(count * itemsize))
    assert "raised ZeroDivisionError" in _message(q_size, lambda *a: 1 / 0)


def test_algbw_exercise_says_which_way_without_a_ratio():
    right = 370 / 1.75
    for answer, words in ((370.0, "busbw itself"), (370 * 1.75, "wrong way round"), (500.0, "cannot exceed busbw"),
                          (100.0, "too small"), (300.0, "factor for this n again"), (float("nan"), "Your answer is nan"),
                          (float("inf"), "Your answer is inf"), (-5.0, "cannot be a bandwidth"),
                          ("fast", "answer with a number"), ("200", "not the text"),
                          (right * 1e9 / 2 ** 30, "GiB/s")):
        message = _message(q_algbw, answer)
        assert words in message and "x the right value" not in message and f"{right:.0f}" not in message
        assert "busbw / (2(n-1)/n)" not in message and "divided by 2(n-1)/n" not in message
    assert q_algbw.evaluate(right).status == "correct"


def test_regression_exercise_reads_the_table_it_is_pointed_at():
    def run(times, sizes=(1 << 20, 2 << 20)):
        return pd.concat([pd.DataFrame(dict(op="all_reduce", size=s, type="float", redop="sum", root=-1,
                                            ranks=2, placement="in-place", repeat=range(7),
                                            median_us=[t * (1 + 0.01 * i) for i in range(7)], busbw=1.0))
                          for s, t in zip(sizes, times)])
    gate = lc.evidence.compare(run([100.0, 200.0]), run([300.0, 200.0]), tolerance=0.25)
    assert gate["status"].tolist() == ["regression", "pass"]
    q = copy.copy(q_regressions).about(gate)  # leave the shared exercise on its example table
    assert q.evaluate([1 << 20]).status == "correct"
    assert "marked pass" in _message(q, [2 << 20]) and "missing" in _message(q, [2 << 20])
    not_there = _message(q, [1, 2])
    assert "not a size in this table" in not_there and "passed" not in not_there
    assert "whole numbers of bytes" in _message(q, "1M")
    assert "whole numbers of bytes" in _message(q, [str(1 << 20)])          # text is not a size
    assert "whole numbers of bytes" in _message(q, [(1 << 20) + 0.9])       # nor a size that is not whole
    assert q.evaluate([np.int64(1 << 20)]).status == "correct"
    example = q_regressions.result
    assert "marked inconclusive" in _message(q_regressions, [4 << 20, 16 << 20, 64 << 20])
    assert q_regressions.evaluate(sorted(example.loc[example.status == "regression", "size"])).status == "correct"
