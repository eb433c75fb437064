"""Live sweeps on gloo: every collective checked exactly, a corrupted result caught, the columns and numbers."""
import math

import pytest

import labcore as lc
from labcore.bench.ops import OPS

pytestmark = pytest.mark.live

SMALL = dict(min_bytes=8, max_bytes="64K", factor=32, warmup=1, iters=2, progress=False)


@pytest.fixture(scope="module")
def two(gloo_cluster):
    return gloo_cluster(2)


@pytest.fixture(scope="module")
def three(gloo_cluster):
    return gloo_cluster(3)


@pytest.mark.parametrize("op", lc.bench.OP_NAMES)
def test_every_collective_passes_the_exact_check(two, three, op):
    for cl, root in ((two, 1), (three, 2)):
        if op == "hypercube" and cl is three:
            continue  # power-of-two ranks only (refused up front, see below)
        df = lc.bench.sweep(cl, op, root=root, **SMALL)
        assert len(df) > 0
        if op == "barrier":
            assert df["wrong"].tolist() == [-1] and (df["time_us"] > 0).all()
            continue
        assert set(df["placement"]) == set(lc.bench.PLACEMENTS)
        # nccl-tests does not check in-place alltoall and sendrecv (one aliased buffer): N/A.
        unchecked = (df["placement"] == "in-place") & (not OPS[op].inplace_checked)
        assert (df.loc[~unchecked, "wrong"] == 0).all(), df[["size", "placement", "wrong"]]
        assert (df.loc[unchecked, "wrong"] == -1).all() and (df["wrong_ranks"] == 0).all()


def test_small_sizes_give_nccl_tests_size_zero_lines(two):
    df = lc.bench.sweep(two, "all_gather", min_bytes=8, max_bytes=128, factor=4, warmup=0, iters=1,
                        progress=False)
    assert df["size"].unique().tolist() == [0, 32, 128] and df["count"].unique().tolist() == [0, 4, 16]
    assert (df["wrong"] == 0).all()
    with pytest.raises(ValueError, match="at least 32 bytes"):
        lc.bench.sweep(two, "all_gather", min_bytes=8, max_bytes=16, progress=False)


@pytest.mark.parametrize("redop", ["sum", "prod", "max", "min", "avg"])
def test_every_reduction_is_exact(three, redop):
    for op in ("all_reduce", "reduce_scatter", "reduce"):
        for dtype in ("float", "bfloat16", "int32"):
            if redop == "avg" and dtype == "int32":
                continue  # gloo cannot average integers (tested below)
            df = lc.bench.sweep(three, op, redop=redop, dtype=dtype, **SMALL)
            assert (df["wrong"] == 0).all(), (op, dtype, df[["size", "placement", "wrong"]])


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce", "all_to_all", "scatter", "sendrecv"])
def test_a_corrupted_result_is_caught(two, op):
    df = lc.bench.sweep(two, op, corrupt=3, root=1, **{**SMALL, "min_bytes": 64})
    checked_ranks = 1 if op == "reduce" else 2
    df = df[df["wrong"] >= 0]  # in-place alltoall and sendrecv are not checked
    # Every size has at least 8 output elements here, so each checked rank reports exactly 3.
    assert (df["wrong"] == 3 * checked_ranks).all(), df[["size", "placement", "wrong"]]
    assert (df["wrong_ranks"] == checked_ranks).all()
    assert f"# Out of bounds values : {len(df) * checked_ranks} FAILED" in lc.bench.format_table(df)


def test_columns_and_numbers_follow_the_contract(three):
    df = lc.bench.sweep(three, "all_gather", dtype="half", **SMALL)
    assert list(df.columns[:13]) == ["op", "size", "count", "type", "redop", "root", "ranks", "backend",
                                     "placement", "time_us", "algbw", "busbw", "wrong"]
    row = df.iloc[-1]
    assert (row["type"], row["redop"], row["root"], row["ranks"], row["backend"]) == ("half", "none", -1, 3, "gloo")
    assert row["size"] == row["count"] * 3 * 2  # all_gather: size = count x ranks x element size
    assert row["algbw"] == pytest.approx(row["size"] / row["time_us"] / 1e3)
    assert row["busbw"] == pytest.approx(row["algbw"] * 2 / 3)
    assert df.attrs["params"]["ranks"] == 3 and len(df.attrs["log"]) == 3
    assert "nccl" not in df.attrs  # gloo logs nothing of NCCL's


def test_median_call_is_reported_beside_the_mean(two):
    df = lc.bench.sweep(two, "all_reduce", **{**SMALL, "iters": 5})
    assert (df["median_us"] > 0).all()
    # Same stamped loop: of 5 calls, 3 take at least the median, so the mean is >= 3/5 of it
    # on every rank, and so after averaging over ranks.
    assert (df["median_us"] <= df["time_us"] * 5 / 3 * (1 + 1e-9)).all()


def test_emulated_placements_are_labelled(two):
    df = lc.bench.sweep(two, "all_reduce", **SMALL)
    notes = dict(zip(df["placement"], df["note"]))
    assert notes["out-of-place"].startswith("emulated") and notes["in-place"] == ""
    assert "# note: all_reduce out-of-place: emulated" in lc.bench.format_table(df)
    df = lc.bench.sweep(two, "all_to_all", placements=("in-place",), **SMALL)
    assert df["note"].str.startswith("not checked").all() and (df["wrong"] == -1).all()


def test_bad_requests_fail_clearly_before_running(two):
    with pytest.raises(ValueError, match=r"root \(-r\) must be a rank between 0 and 1"):
        lc.bench.sweep(two, "broadcast", root=2, **SMALL)
    with pytest.raises(ValueError, match="unknown reduction"):
        lc.bench.sweep(two, "all_reduce", redop="mean", **SMALL)
    with pytest.raises(MemoryError, match="Nothing was allocated"):
        lc.bench.sweep(two, "all_reduce", max_bytes="1024G", progress=False)
    for kwargs, message in ((dict(iters=0), "iters"), (dict(repeats=0), "repeats"), (dict(slowdown=0), "slowdown"),
                            (dict(factor=float("nan")), "factor"), (dict(min_bytes="1T"), "cannot read size"),
                            (dict(redop="mulsum"), "premultiplied")):
        with pytest.raises(ValueError, match=message):
            lc.bench.sweep(two, "all_reduce", **{**SMALL, **kwargs})
    with pytest.raises(ValueError, match="power-of-two"):
        lc.bench.sweep(three_ranks_stub(), "hypercube", **SMALL)
    for ranks in (0, -2, 100000):
        with pytest.raises(ValueError, match="world_size"):
            lc.bench.sweep(ranks, "all_reduce", **SMALL)  # refused before any rank starts
    with pytest.raises(ValueError, match="gloo cannot average int32"):
        lc.bench.sweep(two, "all_reduce", redop="avg", dtype="int32", **SMALL)
    assert lc.bench.sweep(two, "all_reduce", **SMALL)["wrong"].eq(0).all()  # nothing had run


def three_ranks_stub():
    """Something with world_size 3 that fails if anything tries to run on it."""
    class Unstarted:
        world_size = 3

        def call(self, *a, **k):
            raise AssertionError("a rank was asked to run")
    return Unstarted()


def test_repeats_are_interleaved_and_a_slowdown_is_real_work(two):
    df = lc.bench.sweep(two, "all_reduce", repeats=3, slowdown=2, **SMALL)
    assert df["repeat"].tolist() == [0] * 6 + [1] * 6 + [2] * 6
    assert df["size"].tolist()[:6] == [8, 8, 256, 256, 8192, 8192] and (df["wrong"] == 0).all()
    assert df.attrs["params"]["repeats"] == 3 and df.attrs["params"]["slowdown"] == 2
    assert set(lc.evidence.summarize(df)["repeats"]) == {3}


def test_sweep_with_env_runs_on_a_fresh_cluster_and_check_off(two):
    df = lc.bench.sweep(two, "broadcast", env={"NCCL_DEBUG": "INFO"}, check=False, **SMALL)
    assert (df["wrong"] == -1).all() and df.attrs["params"]["env"] == {"NCCL_DEBUG": "INFO"}
    assert not two.closed and all(math.isfinite(t) for t in df["time_us"])
    assert "N/A" in lc.bench.format_table(df)


@pytest.mark.skipif(not lc.has_gpus(2), reason="needs 2 GPUs for NCCL; the gloo tests above cover the CPU path")
def test_nccl_sweep_checks_and_reports_what_nccl_chose():
    with lc.Cluster(2, backend="nccl") as cl:
        for op in OPS:
            df = lc.bench.sweep(cl, op, env={"NCCL_DEBUG": "INFO"}, **SMALL)
            assert (df["wrong"] == 0).all() and df["backend"].eq("nccl").all()
            assert df.attrs["nccl"].version
