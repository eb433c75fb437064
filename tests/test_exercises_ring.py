"""The reference ring on live ranks, and the schedule checker's feedback."""
import pytest

import labcore as lc
from labcore.exercises.core import Incorrect
from labcore.exercises.ring import q_ring_live, q_ring_schedule, ring_all_reduce, ring_steps, simulate_steps


def _ring_on_rank(numel):
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    x = torch.arange(numel, dtype=torch.float64) * (rank + 1)
    want = x.clone()
    dist.all_reduce(want)
    stats = {}
    got = ring_all_reduce(x, stats)
    return bool(torch.equal(got, want)), stats["bytes_sent"]


def test_reference_ring_matches_all_reduce_and_sends_2_n_minus_1_over_n():
    with lc.Cluster(3, backend="gloo", show_output=False, timeout=60) as cl:
        for numel in (9, 10):                      # equal chunks, then chunks of 4, 3, 3
            results = cl.run(_ring_on_rank, numel)
            assert all(ok for ok, _ in results)
            sent = [b for _, b in results]
            if numel == 9:
                assert sent == [2 * (3 - 1) / 3 * 9 * 8] * 3
            assert sum(sent) == 2 * (3 - 1) * numel * 8    # every chunk crosses 2(n-1) links
        # the live exercise on an existing cluster: right answer, and a deadlock reported in time
        assert q_ring_live.evaluate(ring_all_reduce, cluster=cl, world_size=3).status == "correct"


def _send_first(tensor):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    dist.send(tensor, (rank + 1) % n)
    dist.recv(tensor, (rank - 1) % n)


def test_a_deadlock_is_reported_not_hung():
    with lc.Cluster(2, backend="gloo", show_output=False, timeout=60) as cl:
        big = 1 << 22                              # large enough that a blocking send waits for its receiver
        result = q_ring_live.evaluate(_send_first, cluster=cl, elements_per_rank=big, timeout=5)
    assert result.status == "incorrect" and "did not finish within 5 s" in result.message


@pytest.mark.parametrize("steps,expected", [
    (lambda n: 3, "list of steps"),
    (lambda n: [[(0, 1, 0)]], "not a transfer"),
    (lambda n: [[(0, 1, 0, "add")]], "not a transfer"),
    (lambda n: ring_steps(n) + [[(0, 1, 0, "copy")]], "takes"),
    (lambda n: [step + step for step in ring_steps(n)], "twice"),
])
def test_schedule_feedback_says_what_is_wrong(steps, expected):
    result = q_ring_schedule.evaluate(steps)
    assert result.status == "incorrect" and expected in result.message, result.message


def test_simulate_steps_gives_a_trace_to_animate():
    trace = simulate_steps(ring_steps, 5)
    trace.verify()
    assert trace.schedule.layout.kind == "ring" and trace.schedule.n_steps == 8
    with pytest.raises(Incorrect):
        simulate_steps(lambda n: [[("a", 1, 0, "copy")]], 3)
