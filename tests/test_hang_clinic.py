"""Notebook 09's hang cases, live on 4 gloo ranks: each tool names the culprit, within the timeout,
and leaves no process and no dump behind.

The bound on elapsed time is the call's timeout plus a generous margin: it fails only
if a wait ignores its timeout, not when the machine is slow.
"""
import glob
import os
import tempfile
from collections import Counter

import psutil
import pytest

import labcore as lc
from labcore.exercises import hang_cases as hc
from labcore.live import CollectiveTimeout, RankDied, RankError, flight

pytestmark = [pytest.mark.live, pytest.mark.slow]

TIMEOUT = 3.0
MARGIN_S = 20.0


def _alive(pids):
    def running(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return [pid for pid in pids if running(pid)]


def _fr_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "flight-recorder-*")))


@pytest.fixture(scope="module")
def cl():
    with lc.Cluster(4, backend="gloo", timeout=TIMEOUT, env=flight.ENV, show_output=False) as cluster:
        yield cluster
    kids = [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            and not any(k in " ".join(p.cmdline()) for k in ("forkserver", "resource_tracker",
                                                             "labcore.exercises.checker"))]   # the session's own
    assert not kids, f"processes left behind: {kids}"


def _record(cl, case, **kwargs):
    """Run a case with the flight recorder; check the bound, the old ranks' exit and the temp dir."""
    before_dirs, pids = _fr_dirs(), cl.pids
    fa = flight.capture(cl, case, **kwargs)
    assert fa.elapsed_s < TIMEOUT + MARGIN_S
    assert _fr_dirs() <= before_dirs, "flight-recorder dumps left on disk"
    if fa.error is not None:
        assert not _alive(pids), "ranks of the failed group are still alive"
    return fa


def _where(report):
    """rank -> the collective a stuck rank is in (None: not in one), or 'finished'."""
    where = {r: "finished" for r in report.finished}
    where.update({r: s.collective for r, s in report.stuck.items()})
    return where


def _odd_one_out(where):
    counts = Counter(where.values())
    return sorted(r for r, w in where.items() if counts[w] == 1 and len(counts) > 1)


def test_mismatched_ops(cl):
    fa = _record(cl, hc.mismatched_ops, culprit=3)
    assert isinstance(fa.error, CollectiveTimeout)
    where = _where(fa.error.report)
    assert where == {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: "broadcast"}
    assert _odd_one_out(where) == [3]
    assert fa.culprits == [3]
    assert "COLLECTIVE_TYPE_MISMATCH" in fa.text and "Culprit rank 3" in fa.text
    assert fa.error.report.headline == "rank 3 called broadcast where ranks 0, 1, 2 called all_reduce"


def test_mismatched_ops_on_rank0_majority_reading(cl):
    # fr_trace blames every rank unlike its reference (rank 0); the majority reading names rank 0
    fa = _record(cl, hc.mismatched_ops, culprit=0)
    assert fa.torch_culprits == [1, 2, 3] and fa.culprits == [0]


def test_mismatched_shapes_one_rank_returns_while_the_others_wait(cl):
    fa = _record(cl, hc.mismatched_shapes, culprit=3, length=2)
    report = fa.error.report
    assert report.finished == [3] and sorted(report.stuck) == [0, 1, 2]
    assert fa.culprits == [3] and "SIZE_OR_SYNTAX_MISMATCH" in fa.text
    assert fa.last_entered[3]["input_sizes"] == [[2]] and fa.last_entered[3]["completed"]
    assert not fa.last_entered[0]["completed"]
    # the rank that returned entered the all_reduce: the report must not say it skipped it
    assert report.headline == ("rank 3 returned after 1 collective while ranks 0, 1, 2 wait in all_reduce: "
                               "it did not match their call")


def test_mismatched_shapes_longer_tensor_the_culprit_alone_waits(cl):
    fa = _record(cl, hc.mismatched_shapes, culprit=1, length=8)
    report = fa.error.report
    assert sorted(report.stuck) == [1] and report.finished == [0, 2, 3]
    assert fa.culprits == [1]
    assert all(fa.last_entered[r]["completed"] for r in report.finished)
    assert report.headline.startswith("rank 1 still waits in all_reduce, which ranks 0, 2, 3 left")


def test_skipped_collective(cl):
    fa = _record(cl, hc.skipped_collective, culprit=2)
    report = fa.error.report
    assert report.finished == [2] and sorted(report.stuck) == [0, 1, 3]
    assert fa.first_mismatch.missing_ranks == {2} and fa.culprits == [2]
    assert "Not all ranks joining collective" in fa.text
    assert report.headline == "rank 2 never entered all_reduce; ranks 0, 1, 3 wait in it"


def test_wrong_order(cl):
    fa = _record(cl, hc.wrong_order, culprits=(2, 3))
    where = _where(fa.error.report)
    assert {r for r, w in where.items() if w == "broadcast"} == {2, 3}
    assert fa.culprits == [2, 3]
    assert fa.error.report.headline == ("the ranks called different collectives: ranks 0 and 1 in all_reduce "
                                        "and ranks 2 and 3 in broadcast")


def test_p2p_deadlock_seen_by_the_hang_report_not_by_gloo_flight_recorder(cl):
    fa = _record(cl, hc.p2p_deadlock, pair=(0, 1))
    where = _where(fa.error.report)
    assert where == {0: "send", 1: "send", 2: "finished", 3: "finished"}
    assert fa.error.report.headline.startswith("ranks 0 and 1 both wait in send, and no rank waits in recv")
    # torch 2.13's gloo records no send/recv: fr_trace has nothing to match
    assert fa.first_mismatch is None and not fa.collectives
    assert all(rank not in fa.last_entered for rank in range(4))


def test_crashed_rank_named_at_once(cl):
    fa = _record(cl, hc.crashed_rank, culprit=3, after_s=1.0)
    assert isinstance(fa.error, RankDied) and fa.error.rank == 3
    assert fa.culprits == [3]


def test_straggler_times_out_then_completes(cl):
    fa = _record(cl, hc.straggler, culprit=3, delay_s=TIMEOUT + 1, timeout=TIMEOUT)
    where = _where(fa.error.report)
    assert where[3] is None and all(where[r] == "all_reduce" for r in (0, 1, 2))
    assert fa.culprits == [3]  # the snapshot blames the slow rank: that is the trap
    assert fa.error.report.headline == ("rank 3 has not reached all_reduce: still running its own code; "
                                        "ranks 0, 1, 2 wait in it")
    fa = _record(cl, hc.straggler, culprit=3, delay_s=1.0, timeout=TIMEOUT + 10)
    assert fa.error is None and fa.first_mismatch is None
    assert all(e["completed"] for e in fa.last_entered.values())


def test_monitored_barrier_names_the_late_rank(cl):
    with pytest.raises(RankError) as err:
        cl.call(hc.straggler, kwargs=dict(culprit=2, delay_s=2.0, barrier_s=0.5))
    assert "Rank 2 failed to pass monitoredBarrier in 500 ms" in err.value.errors[0][1]


def test_flight_record_checks_its_input_before_running():
    with lc.Cluster(2, backend="gloo", timeout=5, show_output=False) as plain:
        pids = plain.pids
        with pytest.raises(ValueError, match="TORCH_FR_BUFFER_SIZE"):
            flight.capture(plain, hc.straggler)
        assert plain.pids == pids  # nothing ran, nothing restarted


@pytest.mark.parametrize("kwargs, match", [
    (dict(dump_after_s=0), "dump_after_s"), (dict(dump_after_s=float("nan")), "dump_after_s"),
    (dict(dump_after_s=5.0), "shorter than"), (dict(timeout=float("inf")), "timeout"),
])
def test_flight_record_rejects_bad_times(cl, kwargs, match):
    with pytest.raises(ValueError, match=match):
        flight.capture(cl, hc.straggler, **kwargs)


def test_analyze_checks_its_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        flight.analyze("/nonexistent/flight-recorder", 4)
    with pytest.raises(ValueError, match="world_size"):
        flight.analyze(str(tmp_path), 0)
    empty = flight.analyze(str(tmp_path), 2)
    assert empty.missing == [0, 1] and empty.culprits == [0, 1] and "no rank left a dump" in empty.text


@pytest.fixture(scope="module")
def detail():
    env = dict(flight.ENV, TORCH_DISTRIBUTED_DEBUG="DETAIL")
    with lc.Cluster(4, backend="gloo", timeout=TIMEOUT + 5, env=env, show_output=False) as cluster:
        yield cluster


@pytest.mark.parametrize("case, kwargs, expected", [
    (hc.mismatched_ops, dict(culprit=3), "but Rank 3 is running collective"),
    (hc.mismatched_shapes, dict(culprit=1, length=8), "but Rank 1 is running collective"),
    (hc.wrong_order, dict(culprits=(2, 3)), "but Rank 2 is running collective"),
    (hc.skipped_collective, dict(culprit=2), "Ranks 2 failed to pass monitoredBarrier"),
])
def test_distributed_debug_detail_names_the_culprit(detail, case, expected, kwargs):
    with pytest.raises(RankError) as err:
        detail.call(case, kwargs=dict(kwargs, timeout_s=2.0))
    assert expected in err.value.errors[0][1]
    assert "Detected mismatch" in err.value.errors[0][1] or "monitoredBarrier" in expected


def test_much_longer_tensor_aborts_an_innocent_neighbour(cl):
    # gloo's ring receives more bytes than it expects on another rank and aborts that process
    fa = _record(cl, hc.mismatched_shapes, culprit=2, length=1000)
    assert isinstance(fa.error, RankDied) and fa.error.rank != 2
    assert "Received data size doesn't match expected size" in str(fa.error)


def test_case_source_is_readable():
    assert "dist.broadcast(grad" in hc.source(hc.mismatched_ops)
