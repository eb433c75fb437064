"""What the lab reads or simulates stays within a bound it states before it spends the memory: read_trace holds
at most 3.5 times a trace's text (and refuses what would need more), and a simulation that carries values
refuses a run whose whole peak would pass 1 GiB. Peaks are measured with tracemalloc."""
from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import pytest

from labcore.readers import read_trace
from labcore.sim import simulate
from labcore.sim.core import engine
from labcore.sim.core.schedules import build
from labcore.sim.simulation import MAX_VALUES_BYTES

pytestmark = [pytest.mark.live, pytest.mark.slow]

MiB = 1 << 20
HEAD = b'{"distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}, "traceEvents": ['

_MEASURE = """
import resource, sys
from labcore.readers import read_trace
read_trace.__module__                                    # every import done before the mark
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    read_trace(sys.argv[1])
    print("read")
except ValueError as err:
    print(err)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""


def _read_peak(path) -> tuple[str, int]:
    """(read_trace's one line, or "read"; the bytes its process's peak grew by while reading)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    said, grew = done.stdout.strip().splitlines()[-2:]
    return said, int(grew)


def _trace(path, event: bytes, size: int) -> int:
    count = size // (len(event) + 1)
    with open(path, "wb") as f:
        f.write(HEAD)
        for start in range(0, count, 100_000):
            f.write(b",".join([event] * min(100_000, count - start)) + (b"," if start + 100_000 < count else b""))
        f.write(b"]}")
    return path.stat().st_size


def _peak(fn, *args, **kwargs):
    tracemalloc.start()
    try:
        try:
            fn(*args, **kwargs)
            error = None
        except ValueError as err:
            error = str(err)
        return tracemalloc.get_traced_memory()[1], error
    finally:
        tracemalloc.stop()


def test_a_trace_of_empty_events_is_read_in_little_more_than_its_text(tmp_path):
    path = tmp_path / "empty.json"
    size = _trace(path, b"{}", 24 * MiB)
    said, grew = _read_peak(path)
    assert str(path) in said and "holds no GPU kernels" in said, said
    assert grew < 4 * size, (grew / MiB, size / MiB)


def test_a_trace_of_many_tiny_kernels_is_refused_or_read_within_its_bound(tmp_path):
    path = tmp_path / "kernels.json"
    event = json.dumps({"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}, separators=(",", ":")).encode()
    size = _trace(path, event, 24 * MiB)
    said, grew = _read_peak(path)
    assert grew < 4 * size, (grew / MiB, size / MiB, said)
    assert said == "read" or str(path) in said


def test_one_huge_event_is_refused_before_it_is_decoded(tmp_path):
    path = tmp_path / "huge.json"
    args = b"{" + b",".join(b'"a%d":0' % i for i in range(1_500_000)) + b"}"
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": ' + args + b"}"
    size = _trace(path, event, len(event) + 1)
    said, grew = _read_peak(path)
    assert "holds a record of" in said and str(path) in said, said
    assert grew < 4 * size, (grew / MiB, size / MiB)


def test_a_real_trace_reads_within_its_bound():
    from labcore.readers import TRACES_DIR

    peak, error = _peak(read_trace, TRACES_DIR / "a100_16ranks_rank0.json.gz")
    assert error is None and peak < 64 * MiB


def test_one_rank_has_no_bandwidth_to_report():
    trace = simulate("all_reduce", ranks=1, nbytes=1 << 20)
    with pytest.raises(ValueError, match="1 rank moves nothing.*2 or more ranks"):
        _ = trace.algbw
    with pytest.raises(ValueError, match="2 or more ranks"):
        _ = trace.busbw
    summary = trace.summary()
    assert summary["algbw"] is None and summary["busbw"] is None
    assert simulate("all_reduce", ranks=2, nbytes=1 << 20).busbw > 0


def test_the_values_estimate_bounds_a_runs_measured_peak():
    def run_and_verify(ranks, elements):
        simulate("all_reduce", "ring", ranks, 1 << 20, elements=elements).verify()

    for ranks, elements in ((96, 1), (48, 8)):
        need = engine.values_bytes(build("all_reduce", "ring", ranks, 1 << 20), elements)
        peak, error = _peak(run_and_verify, ranks, elements)
        assert error is None and peak < need, (ranks, peak / MiB, need / MiB)


def test_a_values_run_whose_peak_would_pass_the_limit_is_refused_before_it_starts():
    assert MAX_VALUES_BYTES == 1 << 30
    need = engine.values_bytes(build("all_reduce", "ring", 256, 1 << 20), 1)
    assert need > MAX_VALUES_BYTES                            # measured at 1.52 GiB: benchmarks/bench_memory.py
    peak, error = _peak(simulate, "all_reduce", "ring", 256, 1 << 20)
    assert error is not None and "over the 1 GiB" in error and peak < need / 4      # refused before the values
