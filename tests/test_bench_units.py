"""labcore.bench pieces that need no ranks: sizes, factors, data check, table layout, evidence gate, memory."""
from pathlib import Path

import pandas as pd
import pytest
import torch

import labcore as lc
from labcore.live.bench import memory
from labcore.live.bench.ops import OPS, canonical
from labcore.live.bench.table import format_number, format_table, header_lines, row_line
from labcore.live.bench.units import dtype_of, parse_size, size_steps
from labcore.live.bench.verify import count_wrong, expected_reduction, inputs

DATA = Path(__file__).parent / "data"


def test_sizes_read_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "64K", "128M", "1G", "2kb")] == [8, 65536, 128 << 20, 1 << 30, 2048]
    assert size_steps(8, 128, factor=4) == [8, 32, 128]
    assert size_steps(100, 400, step=100) == [100, 200, 300, 400]
    with pytest.raises(ValueError, match="cannot read size"):
        parse_size("lots")
    with pytest.raises(ValueError, match="factor > 1"):
        size_steps(8, 64, factor=1)


def test_type_names_follow_nccl_tests():
    assert dtype_of("float") == ("float", torch.float32)
    assert dtype_of("fp16") == ("half", torch.float16)
    assert dtype_of(torch.bfloat16) == ("bfloat16", torch.bfloat16)
    with pytest.raises(ValueError, match="unknown type"):
        dtype_of("float8")


@pytest.mark.parametrize("n", [2, 3, 8])
def test_busbw_factors_match_nccl_tests_performance_doc(n):
    # nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n; gather-like (n-1)/n; broadcast, reduce, sendrecv 1.
    f = lc.bench.BUSBW_FACTORS
    assert f["all_reduce"](n) == pytest.approx(2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        assert f[op](n) == pytest.approx((n - 1) / n)
    for op in ("broadcast", "reduce", "sendrecv"):
        assert f[op](n) == 1.0


def test_buffer_layouts_give_nccl_tests_size_and_count():
    assert OPS["all_reduce"].layout(1000, 4) == (1000, 1000, 1000)
    assert OPS["all_gather"].layout(1000, 3) == (333, 333, 999)
    assert OPS["reduce_scatter"].layout(1000, 3) == (333, 999, 333)
    assert OPS["all_to_all"].layout(1000, 3) == (333, 999, 999)
    assert canonical("alltoall_perf") == "all_to_all" and canonical("Barrier") == "barrier"
    with pytest.raises(ValueError, match="choose one of"):
        canonical("allscatter")


@pytest.mark.parametrize("redop", ["sum", "prod", "max", "min", "avg"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int32])
def test_verifiable_inputs_reduce_exactly(redop, dtype):
    if redop == "avg" and not dtype.is_floating_point:
        dtype = torch.int64
    n, k = 8, torch.arange(4096)
    parts = torch.stack([inputs(r, k, redop, n, torch.float64) for r in range(n)])
    exact = {"sum": parts.sum(0), "prod": parts.prod(0), "max": parts.max(0).values,
             "min": parts.min(0).values, "avg": parts.sum(0) / n}[redop]
    want = expected_reduction(range(n), k, redop, n, dtype)
    assert torch.equal(want.to(torch.float64), exact)  # the exact value is representable in dtype
    assert count_wrong(want.clone(), want, redop) == 0


def test_count_wrong_counts_every_bad_element():
    want = expected_reduction(range(4), torch.arange(1000), "sum", 4, torch.float32)
    got = want.clone()
    got[[3, 500, 999]] += 1
    assert count_wrong(got, want, "sum") == 3
    avg = expected_reduction(range(3), torch.arange(100), "avg", 3, torch.float32)
    assert count_wrong(avg * (1 + 1e-7), avg, "avg") == 0  # float avg: 2-ulp tolerance, as nccl-tests
    assert count_wrong(avg + 0.5, avg, "avg") == 100


def test_table_header_is_nccl_tests_header():
    sample = (DATA / "nccl_tests_all_reduce_perf.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(sample) if "out-of-place" in line) - 1
    assert header_lines() == sample[start:start + 4]


def test_table_rows_and_footer_align_with_nccl_tests():
    sample = (DATA / "nccl_tests_all_reduce_perf.txt").read_text().splitlines()
    theirs = next(line for line in sample if line.strip().startswith("1048576"))
    row = dict(size=1048576, count=262144, type="float", redop="sum", root=-1, time_us=19.8,
               algbw=52.96, busbw=52.96, wrong=0)
    ours = row_line(row, {**row, "time_us": 19.42, "algbw": 54.0, "busbw": 54.0})
    assert ours == theirs
    df = pd.DataFrame([dict(op="all_reduce", placement=p, note="", **row) for p in lc.bench.PLACEMENTS])
    text = format_table(df).splitlines()
    assert text[-3].startswith("# Out of bounds values : 0 OK")
    assert text[-2].startswith("# Avg bus bandwidth    : 52.96")
    assert format_number(123456.7, 7) == " 123457" and format_number(0.004, 6) == "  0.00"


def test_compare_marks_each_size_and_reads_back_saved_baselines(tmp_path):
    base = pd.DataFrame(dict(op="all_reduce", size=[1024, 2048, 4096], count=[256, 512, 1024],
                             type="float", redop="sum", root=-1, ranks=2, backend="gloo",
                             placement="in-place", time_us=[10.0, 20.0, 40.0], algbw=0.1,
                             busbw=[0.1, 0.1, 0.1], wrong=0, note=""))
    path = lc.bench.save_baseline(base, tmp_path / "base.json")
    loaded = lc.bench.load_baseline(path)
    now = loaded.assign(time_us=[9.0, 26.0, 40.0])
    result = lc.bench.compare(loaded, now, tolerance=0.2)
    assert result["status"].tolist() == ["pass", "regression", "pass"]
    assert lc.bench.regressed(result)
    assert not lc.bench.regressed(lc.bench.compare(loaded, now, tolerance=0.2, min_bytes=4096))
    extra = pd.concat([now, now.assign(size=8192)])
    assert lc.bench.compare(loaded, extra)["status"].iloc[-1] == "not in baseline"
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a labcore bench baseline"):
        lc.bench.load_baseline(tmp_path / "other.json")


def test_memory_plan_refuses_before_allocating_and_default_shrinks_to_fit():
    # 64 MiB of budget per rank: a 1 GiB all_reduce cannot fit, 4 MiB can.
    budget = 64 << 20
    with pytest.raises(MemoryError, match="Nothing was allocated"):
        lc.bench.plan_sizes("all_reduce", 4, 4, budget, max_bytes="1G")
    sizes = lc.bench.plan_sizes("all_reduce", 4, 4, budget)
    assert max(sizes) < 32 << 20
    assert all(memory.peak_bytes("all_reduce", s, 4, 4) <= budget for s in sizes)
    assert memory.per_rank_budget("cpu", 8 << 30, 4) == int((2 << 30) * 0.8)  # RAM is shared
    assert memory.per_rank_budget("cuda", 8 << 30, 4) == int((8 << 30) * 0.8)  # a GPU is not


def test_noisy_neighbours_stop_with_the_block():
    import psutil

    with lc.bench.noisy_neighbours(2, max_seconds=30) as pids:
        assert all(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert not any(psutil.pid_exists(p) for p in pids)
    with pytest.raises(ValueError, match="at least 1"):
        with lc.bench.noisy_neighbours(0):
            pass


@pytest.mark.parametrize("module", [
    "labcore.live.bench", "labcore.live.bench.units", "labcore.live.bench.ops", "labcore.live.bench.verify",
    "labcore.live.bench.memory", "labcore.live.bench.table", "labcore.live.bench.baseline",
    "labcore.live.bench.load", "labcore.live.nccl_log", "labcore.live.topology", "labcore.exercises.measuring"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0
