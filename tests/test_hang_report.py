"""The hang report's first line names the rank that diverged and how (issue 18), on a real 4-rank
gloo cluster for the five classic hangs, and the stack frames it quotes are the learner's own.

Each case hangs for real; the call's timeout ends it and the group is replaced.
"""
import time

import pytest

import labcore as lc
from labcore.exercises import hang_cases as hc
from labcore.live import hang

LIVE = [pytest.mark.live, pytest.mark.slow]


def live(test):
    for mark in LIVE:
        test = mark(test)
    return test
TIMEOUT = 3.0


@pytest.fixture(scope="module")
def cl():
    with lc.Cluster(4, backend="gloo", timeout=TIMEOUT, show_output=False) as cluster:
        yield cluster


def _ready():
    return True


def _report(cl, case, **kwargs):
    # a fresh group (the previous case replaced it) first imports this module on every rank,
    # outside the timed call: the hang under test is the case's, not a slow unpickling
    assert cl.call(_ready, timeout=300) == [True] * 4
    with pytest.raises(lc.CollectiveTimeout) as err:
        cl.run(case, **kwargs)
    report = err.value.report
    assert str(report).splitlines()[0] == report.headline[0].upper() + report.headline[1:] + "."
    return report


def all_gather_where_others_all_reduce(culprit: int = 1, deprecated: bool = False):
    import torch
    import torch.distributed as dist
    t = torch.ones(4)
    if dist.get_rank() == culprit:
        if deprecated:   # torch 2.13 wraps the old name in typing_extensions' @deprecated
            dist.all_gather_into_tensor(torch.zeros(4 * dist.get_world_size()), t)  # the learner's line
        else:
            dist.all_gather([torch.zeros(4) for _ in range(dist.get_world_size())], t)
    else:
        dist.all_reduce(t)


def sleeps_before_the_barrier(culprit: int = 3):
    import torch.distributed as dist
    if dist.get_rank() == culprit:
        time.sleep(60)   # past the call's timeout: the group is replaced before it wakes
    dist.barrier()


def both_receive_first(pair=(0, 1)):
    import torch
    import torch.distributed as dist
    me = dist.get_rank()
    if me in pair:
        peer = pair[1] if me == pair[0] else pair[0]
        got = torch.zeros(2)
        dist.recv(got, src=peer)
        dist.send(torch.ones(2), dst=peer)


def raises_while_others_all_reduce(culprit: int = 1):
    import torch
    import torch.distributed as dist
    if dist.get_rank() == culprit:
        raise ValueError(f"rank {culprit} gave up")
    dist.all_reduce(torch.ones(1))


@live
def test_a_skipped_all_reduce_names_the_rank_that_never_entered_it(cl):
    report = _report(cl, hc.skipped_collective, culprit=2)
    assert report.headline == "rank 2 never entered all_reduce; ranks 0, 1, 3 wait in it"
    assert report.calls == {2: 0, 0: 1, 1: 1, 3: 1}    # stuck ranks: their count when the call ran out


@live
def test_all_gather_against_all_reduce_names_the_odd_rank(cl):
    report = _report(cl, all_gather_where_others_all_reduce, culprit=1)
    assert report.headline == "rank 1 called all_gather where ranks 0, 2, 3 called all_reduce"


@live
def test_a_sleeping_rank_is_named_as_not_having_reached_the_barrier(cl):
    report = _report(cl, sleeps_before_the_barrier, culprit=3)
    assert report.headline == "rank 3 has not reached barrier: still running its own code; ranks 0, 1, 2 wait in it"


@live
def test_a_send_deadlock_names_both_senders(cl):
    report = _report(cl, hc.p2p_deadlock, pair=(0, 1))
    assert report.headline == ("ranks 0 and 1 both wait in send, and no rank waits in recv: a send waits for "
                               "its peer's recv")


@live
def test_a_recv_deadlock_names_both_receivers(cl):
    report = _report(cl, both_receive_first, pair=(1, 3))
    assert report.headline == "ranks 1 and 3 both wait in recv, and no rank is sending: each waits for a send"


@live
def test_a_rank_that_raises_is_named_first(cl):
    with pytest.raises(lc.RankError) as err:
        cl.run(raises_while_others_all_reduce, culprit=1)
    assert str(err.value).splitlines()[0] == "rank 1 raised ValueError: rank 1 gave up"


@live
def test_the_learners_line_shows_through_torchs_deprecation_wrapper(cl):
    report = _report(cl, all_gather_where_others_all_reduce, culprit=2, deprecated=True)
    where = report.stuck[2]
    assert where.collective == "all_gather_into_tensor"
    assert "typing_extensions" not in where.user_frame and __file__ in where.user_frame
    assert report.headline == "rank 2 called all_gather_into_tensor where ranks 0, 1, 3 called all_reduce"


# -- the same rules on ranks' states given directly (no processes) --------------------------------
def _at(op, line=1):
    return hang.StackSummary(op, f"step (train.py, line {line})", "a stack")


@pytest.mark.parametrize("finished, stuck, calls, first", [
    ([3], {0: "all_reduce", 1: "all_reduce", 2: "all_reduce"}, {3: 1},
     "rank 3 returned after 1 collective while ranks 0, 1, 2 wait in all_reduce: it did not match their call"),
    ([0, 2, 3], {1: "all_reduce"}, {0: 1, 2: 1, 3: 1},
     "rank 1 still waits in all_reduce, which ranks 0, 2, 3 left after 1 collective: its call did not match "
     "theirs (sizes, or order)"),
    ([2], {0: "all_reduce", 1: "all_reduce", 3: "all_reduce"}, {},
     "rank 2 returned while ranks 0, 1, 3 wait in all_reduce: it never entered it, or did not match their call"),
    ([], {0: "all_reduce", 1: "all_reduce", 2: "broadcast", 3: "broadcast"}, {},
     "the ranks called different collectives: ranks 0 and 1 in all_reduce and ranks 2 and 3 in broadcast"),
    ([2, 3], {0: "send", 1: "recv"}, {},
     "rank 0 waits in send and rank 1 in recv: sends and receives that do not pair up (peer, size or order)"),
    ([], {0: None, 1: None}, {}, "no rank is in a collective: ranks 0 and 1 are running their own code (a loop, a sleep?)"),
])
def test_headline_rules(finished, stuck, calls, first):
    assert hang.headline(finished, {r: _at(op) for r, op in stuck.items()}, calls=calls) == first


def test_ranks_still_importing_the_calls_module_are_told_apart_from_busy_code():
    importing = hang.StackSummary(None, "<module> (/home/me/steps.py, line 3)", "a stack")
    assert hang.headline([], {0: importing, 1: importing}) == (
        "ranks 0 and 1 are still importing the call's code (/home/me/steps.py, line 3): imports on the ranks "
        "count toward the call's timeout")


def test_the_report_can_leave_its_verdict_to_the_learner():
    s = _at("all_reduce")
    report = lc.live.HangReport(3.0, [2], {0: s, 1: s, 3: s}, calls={2: 0})
    full, bare = str(report).splitlines(), report.describe(verdict=False).splitlines()
    assert full[0] == "Rank 2 never entered all_reduce; ranks 0, 1, 3 wait in it." and full[1:] == bare
    assert "never entered" not in report.describe(verdict=False)
