"""The presets against published all_reduce tables of real machines (tests/data/published_allreduce_*.txt).

Every table is quoted verbatim from its source, named in the file's header. The simulated time
is that of the fastest algorithm and protocol (``algorithm="best"``); the published time is the
in-place column (the out-of-place column of the first row of a run often holds warm-up outliers).

* nvswitch8 (8 GPUs, NVLink 4): within 20% of every row of every table, from 1 KiB to 8 GiB.
* multinode (DGX H100-like, 8 x 400 Gb/s per node): the flat ring within 10% of the published
  forced-Ring run from 256 MiB on (bandwidth-bound), and NCCL's own choice within 10% of the 4-node
  run at its largest sizes and up to 1 KiB (latency-bound: NCCL's Tree latencies), within 35% at
  every size between (the simulator is faster there: see the printout).
"""
import re
from pathlib import Path

import pytest

import labcore.sim as sim

DATA = Path(__file__).parent / "data"


def read_nccl_tests(path: Path) -> list[tuple[int, float]]:
    """(size, in-place time in us) of every row of an all_reduce_perf table."""
    rows = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if line.startswith("#") or len(fields) < 13 or not fields[0].isdigit():
            continue
        rows.append((int(fields[0]), float(fields[9])))
    return rows


def read_busbw_table(path: Path) -> list[tuple[int, float]]:
    """(size, time in us) from a table of size labels and all_reduce busbw on 8 GPUs: the i-th row
    is 1 KiB x 2**i (its label, in rounded decimal units, is checked), time = S x 2(n-1)/n / busbw."""
    rows = []
    for line in path.read_text().splitlines():
        m = re.match(r"\|\s*([0-9.]+)([KMG])\s*\|\s*([0-9.]+)\s*\|", line)
        if m:
            size = 1024 << len(rows)
            label = float(m.group(1)) * {"K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
            assert 0.9 < size / label < 1.2, line
            rows.append((size, size * 1.75 / float(m.group(3)) / 1e3))
    return rows


TABLES_8_GPUS = {
    "Azure ND H200 v5 (Azure/AI-benchmarking-guide)": read_busbw_table(DATA / "published_allreduce_azure_nd_h200_v5.txt"),
    "8 x H100 (nccl-tests#290)": read_nccl_tests(DATA / "published_allreduce_nccl_tests_290.txt"),
}


def errors(rows, ranks, topology, algorithm="best"):
    """(size, published us, simulated us, error) per row."""
    out = []
    for size, published in rows:
        trace = sim.simulate("all_reduce", algorithm, ranks, size, topology=topology, values=False)
        out.append((size, published, trace.time_s * 1e6, trace.time_s * 1e6 / published - 1))
    return out


@pytest.mark.parametrize("table", sorted(TABLES_8_GPUS))
def test_nvswitch8_stays_within_20_percent_of_every_published_row(table):
    rows = TABLES_8_GPUS[table]
    assert len(rows) >= 6
    result = errors(rows, 8, sim.topologies.nvswitch(8))
    print(f"\n{table}\n{'size':>12} {'published us':>13} {'simulated us':>13} {'error':>7}")
    for size, published, simulated, error in result:
        print(f"{size:>12} {published:>13.1f} {simulated:>13.1f} {error:>+7.1%}")
    worst = max(result, key=lambda r: abs(r[3]))
    assert abs(worst[3]) < 0.20, f"{table}: {worst[3]:+.1%} at {worst[0]} bytes"


def test_the_fit_is_not_trivial():
    """A preset without the host's issue time or the NVLS pipeline misses the same tables."""
    rows = TABLES_8_GPUS["Azure ND H200 v5 (Azure/AI-benchmarking-guide)"]
    gpu_only = errors(rows, 8, sim.topologies.nvswitch(8, issue_s=0))
    assert min(e for _, _, _, e in gpu_only) < -0.35            # 1.5x too fast at small sizes without it


def test_multinode_ring_matches_the_published_forced_ring_run():
    rows = read_nccl_tests(DATA / "published_allreduce_nccl_tests_309_2nodes_ring.txt")
    result = errors(rows, 16, sim.topologies.multinode(2, 8), algorithm="ring")
    big = [r for r in result if r[0] >= 256 << 20]
    assert len(big) == 6
    assert all(abs(e) < 0.10 for _, _, _, e in big), big
    assert result[-1][0] == 8 << 30 and 380 < 8 * 2**30 * 2 * 15 / 16 / (result[-1][2] * 1e3) < 400   # busbw


def test_multinode_best_matches_the_published_4_node_run_at_large_sizes():
    rows = read_nccl_tests(DATA / "published_allreduce_nccl_tests_309_4nodes.txt")
    result = errors(rows, 32, sim.topologies.multinode(4, 8))
    big = [r for r in result if r[0] >= 1 << 30]
    assert len(big) == 5 and all(abs(e) < 0.10 for _, _, _, e in big), big


def test_multinode_best_follows_the_published_4_node_run_at_every_size():
    rows = read_nccl_tests(DATA / "published_allreduce_nccl_tests_309_4nodes.txt")
    result = errors(rows, 32, sim.topologies.multinode(4, 8))
    print(f"\n{'size':>12} {'published us':>13} {'simulated us':>13} {'error':>7}")
    for size, published, simulated, error in result:
        print(f"{size:>12} {published:>13.1f} {simulated:>13.1f} {error:>+7.1%}")
    assert all(abs(e) < 0.10 for size, _, _, e in result if size <= 1024)
    assert all(abs(e) < 0.35 for _, _, _, e in result)
    # with the Ring's latencies for the tree (NCCL's trees pay more a network hop), 8 B came out 26% fast
    assert result[0][0] == 8 and 34 < result[0][2] < 36
