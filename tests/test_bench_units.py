"""labcore.bench pieces that need no ranks: sizes, factors, data check, table layout, evidence gate, memory."""
from pathlib import Path

import pandas as pd
import pytest
import torch

import labcore as lc
from labcore.bench import memory
from labcore.bench.ops import OPS, op_name
from labcore.bench.table import format_number, format_table, header_lines, result_lines, row_line
from labcore.bench.units import DTYPES, dtype_of, parse_size, size_steps
from labcore.bench.verify import count_wrong, expected_reduction, inputs

pytestmark = pytest.mark.live

DATA = Path(__file__).parent / "data"


def test_sizes_read_like_nccl_tests_parsesize():
    # nccl-tests' parsesize: a number, then K, M or G (either case); the rest is ignored; truncated.
    cases = {"8": 8, "64K": 65536, "128M": 128 << 20, "1G": 1 << 30, "2kb": 2048, "0.3K": 307,
             "1e3": 1000, "8 K": 8192, "1.5m": 1572864, "0": 0}
    assert {text: parse_size(text) for text in cases} == cases
    for bad in ("lots", "1T", "8x", "", "-5", "nan", "inf"):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)


def test_size_steps_follow_nccl_tests_loop():
    assert size_steps(8, 128, factor=4) == [8, 32, 128]
    assert size_steps(8, 100, factor=1.5) == [8, 12, 18, 27, 40, 60, 90]  # truncated each step
    assert size_steps(100, 400, step=100) == [100, 200, 300, 400]
    assert size_steps(0, 2048, step=1024) == [0, 1024, 2048]
    with pytest.raises(ValueError, match="factor"):
        size_steps(8, 64, factor=1)
    with pytest.raises(ValueError, match="repeats the size 8"):
        size_steps(8, 64, factor=1.05)
    with pytest.raises(ValueError, match="cannot start at 0"):
        size_steps(0, 64, factor=2)
    with pytest.raises(ValueError, match="swap them"):
        size_steps(64, 8, factor=2)


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
    for op in ("broadcast", "reduce", "sendrecv", "hypercube"):
        assert f[op](n) == 1.0


# nccl-tests 2.19.6 (a0b82b2) *GetCollByteCount, transcribed: which buffer holds n shares.
SPLIT = {"all_gather": "recv", "gather": "recv", "hypercube": "recv", "reduce_scatter": "send",
         "scatter": "send", "all_to_all": "both"}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(OPS))
def test_byte_counts_match_nccl_tests_for_every_op_and_dtype(name, dtype):
    item = DTYPES[dtype].itemsize
    for n in (2, 3, 4, 8):
        for nbytes in (0, 1, 7, 8, 15, 16, 63, 64, 100, 127, 128, 1000, 4096, 1 << 20, (1 << 20) + 3):
            elements = nbytes // item
            if name in SPLIT:
                base = (elements // n) & ~(16 // item - 1)
                send, recv = {"recv": (base, base * n), "send": (base * n, base),
                              "both": (base * n, base * n)}[SPLIT[name]]
                count = base
            else:
                count = send = recv = elements
            lay = OPS[name].layout(nbytes, n, item)
            assert (lay.count, lay.send, lay.recv) == (count, send, recv), (name, dtype, n, nbytes)
            assert OPS[name].printed_size(nbytes, n, item) == max(send, recv) * item


def test_byte_counts_worked_examples():
    # By hand from the formula: 4 ranks of float at 100 B: 25 elements, 6 each, down to 4 (16 B).
    assert OPS["all_gather"].layout(100, 4, 4) == (4, 4, 16)
    assert OPS["reduce_scatter"].layout(100, 4, 1) == (16, 64, 16)   # int8: 25 each, down to 16
    assert OPS["all_to_all"].layout(100, 3, 8) == (4, 12, 12)         # double: 4 each (pairs of 8 B)
    assert OPS["scatter"].layout(1000, 8, 2) == (56, 448, 56)         # half: 62 each, down to 56
    assert OPS["all_gather"].layout(32, 4, 4).count == 0              # a size-0 line
    assert OPS["all_reduce"].layout(7, 4, 4) == (1, 1, 1) and OPS["all_reduce"].layout(3, 4, 4).count == 0
    assert OPS["all_gather"].smallest_size(4, 4) == 64 and OPS["all_reduce"].smallest_size(4, 8) == 8
    assert op_name("alltoall_perf") == "all_to_all" and op_name("Barrier") == "barrier"
    assert op_name("all_reduce_perf_mpi") == "all_reduce"
    with pytest.raises(ValueError, match="choose one of"):
        op_name("allscatter")


def test_hypercube_counts_the_chunks_it_receives():
    # nccl-tests HyperCubeGetBw: algbw = count x typesize x (n-1) / time, busbw = algbw.
    size = OPS["hypercube"].printed_size(1 << 20, 4, 4)
    algbw, busbw = OPS["hypercube"].bandwidths(size, 1e-3, 4)
    assert algbw == pytest.approx((1 << 20) * 3 / 4 / 1e-3 / 1e9) and busbw == algbw
    algbw, busbw = OPS["all_gather"].bandwidths(size, 1e-3, 4)
    assert algbw == pytest.approx(size / 1e-3 / 1e9) and busbw == pytest.approx(algbw * 3 / 4)


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


def _quoted(name):
    """The lines of a real nccl-tests output kept in tests/data, without the citation header."""
    return [line for line in (DATA / name).read_text().splitlines() if not line.startswith("%%")]


NEW_FORMAT = "nccl_tests_dgx-spark-playbooks-103_gb10_2node_v2_20.txt"  # nccl-tests 2.20.0


def test_table_header_is_nccl_tests_header():
    sample = _quoted(NEW_FORMAT)
    start = next(i for i, line in enumerate(sample) if "out-of-place" in line) - 1
    assert [line.rstrip() for line in header_lines()] == sample[start:start + 4]


def test_table_lines_reproduce_a_real_nccl_tests_output_line_by_line():
    df = lc.read_nccl_tests(DATA / NEW_FORMAT)
    theirs = [line for line in _quoted(NEW_FORMAT) if line[:1] == " " and len(line.split()) == 13]
    assert len(theirs) == 4
    assert result_lines(df) == theirs


def test_number_format_is_getfloatstr_after_the_alignment_fix():
    # Cases where the old digit-counting getFloatStr printed one character too many.
    assert format_number(999.996, 6) == "1000.0"
    assert format_number(99999.996, 7) == " 100000"
    assert format_number(12.3456, 6) == " 12.35" and format_number(0.004, 6) == "  0.00"
    assert format_number(123456.7, 7) == " 123457" and format_number(36943.4, 7) == "36943.4"  # 2024 printed "  36943"
    assert format_number(12345678.0, 7) == "1.2e+07" and format_number(1234567.0, 6) == " 1e+06"
    assert all(len(format_number(v, w)) == w for v in (0, 0.5, 9.999, 1e3, 1e5, 1e9, 3e15) for w in (6, 7))


def test_row_line_widths_wrong_as_6g_and_na():
    row = dict(size=1048576, count=262144, type="float", redop="sum", root=-1, time_us=19.8,
               algbw=52.96, busbw=92.68, wrong=0)
    line = row_line(row, {**row, "wrong": -1})
    assert line == ("     1048576        262144     float     sum      -1    19.80   52.96   92.68"
                    "       0    19.80   52.96   92.68    N/A")
    assert row_line(row, {**row, "wrong": 1234567}).endswith("  1.23457e+06")
    assert row_line(None, row) == line[:52] + " " * 32 + line[52:85]  # no out-of-place: 32 blanks
    assert row_line(row, None) == line[:85]


def test_footer_counts_failed_checks_and_averages_every_line():
    rows = [dict(op="reduce_scatter", size=s, count=c, type="float", redop="sum", root=-1, ranks=8,
                 placement=p, time_us=10.0, algbw=bw, busbw=bw, wrong=w, wrong_ranks=k, note="",
                 repeat=0)
            for s, c, bw in ((0, 0, 0.0), (128, 4, 2.0))
            for p, w, k in (("out-of-place", 0, 0), ("in-place", 5, 3))]
    table = format_table(pd.DataFrame(rows))
    text = table.splitlines()
    assert text[-5:] == ["# Out of bounds values : 6 FAILED",  # 3 ranks failed at each of 2 lines
                         "# Avg bus bandwidth    : 1 ",         # (0 + 0 + 2 + 2) / 4: size 0 counts
                         "#", "# Collective test concluded: reduce_scatter_perf", "#"]
    assert table.endswith("#\n")  # and the empty line nccl-tests ends with
    assert text[4].split()[:2] == ["0", "0"] and text[4].endswith("       5")


def test_memory_plan_refuses_before_allocating_and_default_shrinks_to_fit():
    # 64 MiB of budget per rank: a 1 GiB all_reduce cannot fit, 4 MiB can.
    budget = 64 << 20
    with pytest.raises(MemoryError, match="Nothing was allocated"):
        lc.bench.plan_sizes("all_reduce", 4, 4, budget, max_bytes="1G")
    with pytest.raises(ValueError, match="at least 64 bytes"):
        lc.bench.plan_sizes("all_gather", 4, 4, budget, min_bytes=8, max_bytes=32)
    assert lc.bench.plan_sizes("all_gather", 4, 4, budget, min_bytes=8, max_bytes=64)[0] == 8
    sizes = lc.bench.plan_sizes("all_reduce", 4, 4, budget)
    assert max(sizes) < 32 << 20
    assert all(memory.peak_bytes("all_reduce", s, 4, 4) <= budget for s in sizes)
    assert memory.per_rank_budget("cpu", 8 << 30, 4) == int((2 << 30) * 0.8)  # RAM is shared
    assert memory.per_rank_budget("cuda", 8 << 30, 4) == int((8 << 30) * 0.8)  # a GPU is not


def test_noisy_neighbours_stop_with_the_block():
    import psutil

    with lc.evidence.noisy_neighbours(2, max_seconds=30) as pids:
        assert all(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert not any(psutil.pid_exists(p) for p in pids)
    with pytest.raises(ValueError, match="at least 1"):
        with lc.evidence.noisy_neighbours(0):
            pass


@pytest.mark.parametrize("module", [
    "labcore.bench", "labcore.evidence", "labcore.bench.units", "labcore.bench.ops", "labcore.bench.verify",
    "labcore.bench.memory", "labcore.bench.table", "labcore.bench.baseline",
    "labcore.evidence.load", "labcore.bench.checks", "labcore.evidence.stats",
    "labcore.readers.nccl_tests", "labcore.readers.nccl_log", "labcore.readers.smi_topo", "labcore.exercises.measuring"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0
