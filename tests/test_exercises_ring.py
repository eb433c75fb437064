"""Notebook 02's ring exercises: the reference ring on live ranks, the live check's view of what
a learner's code really sends (six all-reduces that are not rings, each rejected for its own
reason), and the chunk-numbering conventions the schedule exercises share."""
import pytest

import labcore as lc
from labcore.live import magic
from labcore.exercises import ____
from labcore.exercises.core import Incorrect
from labcore.exercises.ring import (
    q_ring_live, q_ring_schedule, q_send_chunk, ring_all_reduce, ring_convention, ring_steps, simulate_steps,
)

pytestmark = pytest.mark.live


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
        # the live exercise on an existing cluster, with chunks of unequal length too
        assert q_ring_live.self_test(ring_all_reduce, cluster=cl).status == "correct"
        assert q_ring_live.self_test(ring_all_reduce, cluster=cl, elements_per_rank=10).status == "correct"


# -- all-reduces that are not rings: each computes the right sum ------------------------------------
def fake_c10d_all_reduce(tensor):
    from torch.distributed import distributed_c10d

    distributed_c10d.all_reduce(tensor)
    return tensor


def fake_broadcast_loop(tensor):
    import torch
    import torch.distributed as dist

    total = torch.zeros_like(tensor)
    for src in range(dist.get_world_size()):
        part = tensor.clone()
        dist.broadcast(part, src)
        total += part
    return total


def fake_all_gather_object(tensor):
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, tensor)
    return sum(everyone)


def fake_all_to_all_single(tensor):
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    out = torch.empty(n * tensor.numel(), dtype=tensor.dtype)
    dist.all_to_all_single(out, tensor.repeat(n))
    return out.view(n, -1).sum(0)


def fake_functional_all_reduce(tensor):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    return fc.wait_tensor(fc.all_reduce(tensor, "sum", dist.group.WORLD))


def fake_star_through_rank_0(tensor):
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        for other in range(1, n):
            part = torch.empty_like(tensor)
            dist.recv(part, other)
            tensor += part
        for other in range(1, n):
            dist.send(tensor, other)
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)
    return tensor


def fake_whole_buffer_ring(tensor):
    """Neighbours only, but the whole buffer goes round n - 1 times: (n-1) x S bytes per rank."""
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    total, passing = tensor.clone(), tensor.clone()
    for _ in range(n - 1):
        incoming = torch.empty_like(passing)
        for req in (dist.isend(passing, (rank + 1) % n), dist.irecv(incoming, (rank - 1) % n)):
            req.wait()
        total += incoming
        passing = incoming
    return total


FAKES = [
    (fake_c10d_all_reduce, "called the collective all_reduce"),
    (fake_broadcast_loop, "called the collective broadcast"),
    (fake_all_gather_object, "called all_gather_object, which runs the collective all_gather"),
    (fake_all_to_all_single, "called the collective all_to_all_single"),
    (fake_functional_all_reduce, "called the functional collective all_reduce"),
    (fake_star_through_rank_0, "rank 0 sent 96 bytes to rank 2, which is not one of its ring neighbours (ranks 1 and 3)"),
    (fake_whole_buffer_ring, "rank 0 sent 288 bytes of a 96-byte buffer on 4 ranks"),
]


@pytest.fixture(scope="module")
def four_ranks(gloo_cluster):
    return gloo_cluster(4, show_output=False)


@pytest.fixture(scope="module", autouse=True)
def other_sizes():
    yield                          # the live check also runs on the shared clusters of 3 and 5 ranks
    magic.close_all()


def test_six_fake_rings_are_rejected_each_for_its_own_reason(four_ranks):
    messages = set()
    for fake, expected in FAKES:
        result = q_ring_live.evaluate(fake, cluster=four_ranks)
        assert result.status == "incorrect" and expected in result.message, (fake.__name__, result.message)
        messages.add(result.message)
    assert len(messages) == len(FAKES)
    # and the real ring passes on the same (restarted) cluster, with what it was checked for named
    right = q_ring_live.self_test(ring_all_reduce, cluster=four_ranks)
    assert right.status == "correct" and "ring neighbours" in right.message and "144 bytes" in right.message, right


def test_a_plain_all_reduce_is_refused_by_name(four_ranks):
    import torch.distributed as dist

    def through_the_module(tensor):
        dist.all_reduce(tensor)

    def through_the_group(tensor):
        dist.group.WORLD.allreduce([tensor]).wait()

    for answer in (through_the_module, through_the_group):
        result = q_ring_live.evaluate(answer, cluster=four_ranks)
        assert "rank 0 called the collective all_reduce" in result.message, result.message


def test_starter_code_and_too_few_ranks(four_ranks):
    def starter(tensor):
        return ____

    assert q_ring_live.evaluate(starter, cluster=four_ranks).status == "not attempted"
    with lc.Cluster(2, backend="gloo", show_output=False) as two:
        result = q_ring_live.self_test(ring_all_reduce, cluster=two)
    assert result.status == "incorrect" and "3 or more ranks" in result.message


def _send_first(tensor):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    dist.send(tensor, (rank + 1) % n)
    dist.recv(tensor, (rank - 1) % n)


def test_a_deadlock_is_reported_not_hung():
    with lc.Cluster(3, backend="gloo", show_output=False, timeout=60) as cl:
        big = 1 << 22                              # large enough that a blocking send waits for its receiver
        result = q_ring_live.evaluate(_send_first, cluster=cl, elements_per_rank=big, timeout=5)
    assert result.status == "incorrect" and "did not finish within 5 s" in result.message


# -- which chunk moves: every numbering of a ring is accepted and named -----------------------------
def test_send_chunk_accepts_both_numberings_and_names_them():
    animation = q_send_chunk.evaluate(lambda rank, step, ranks: (rank - 1 - step) % ranks)
    assert animation.status == "correct" and "as in the animation" in animation.message
    shifted = q_send_chunk.evaluate(lambda rank, step, ranks: (rank - step) % ranks)
    assert shifted.status == "correct" and "(rank - step) % ranks" in shifted.message
    assert "chunk (r + 1) % ranks complete" in shifted.message


@pytest.mark.parametrize("answer,expected", [
    (lambda rank, step, ranks: rank - 1 - step, "For rank=0, step=0, ranks=3 you return -1, which is not a chunk"),
    (lambda rank, step, ranks: step, "For rank=1, step=0, ranks=3 you return 0, the chunk rank 0 sends"),
    (lambda rank, step, ranks: (rank + step) % ranks,
     "For rank=0, step=1, ranks=3 you return 1, but your function has rank 2 send rank 0 chunk 2 at step 0"),
    (lambda rank, step, ranks: "3", "return the chunk's number, an int"),
    (lambda rank, step, ranks: 1 / 0, "For rank=0, step=0, ranks=3 your function raised ZeroDivisionError"),
])
def test_send_chunk_feedback_names_the_arguments(answer, expected):
    result = q_send_chunk.evaluate(answer)
    assert result.status == "incorrect" and expected in result.message, result.message


def test_send_chunk_untouched():
    def send_chunk(rank, step, ranks):
        return ____

    assert q_send_chunk.evaluate(send_chunk).status == "not attempted"


def test_schedule_names_its_numbering_the_way_send_chunk_does():
    def shifted(n):   # the (rank - step) numbering: rank r finishes chunk r + 1, so the all-gather follows
        rs = [[(r, (r + 1) % n, (r - s) % n, "reduce") for r in range(n)] for s in range(n - 1)]
        ag = [[(r, (r + 1) % n, (r + 1 - s) % n, "copy") for r in range(n)] for s in range(n - 1)]
        return rs + ag

    for steps, name in ((ring_steps, "as in the animation"), (shifted, "(rank - step) % ranks")):
        result = q_ring_schedule.self_test(steps)
        assert result.status == "correct" and name in result.message, result.message
    assert ring_convention([3, 0, 1, 2], 4).startswith("(rank - 1 - step)")
    assert ring_convention([1, 2, 3, 0], 4).startswith("(rank + 1 - step)")
    assert "order of your own" in ring_convention([0, 2, 1, 3], 4)


@pytest.mark.parametrize("steps,expected", [
    (lambda n: 3, "list of steps"),
    (lambda n: [[(0, 1, 0)]], "not a transfer"),
    (lambda n: [[(0, 1, 0, "add")]], "not a transfer"),
    (lambda n: ring_steps(n) + [[(0, 1, 0, "copy")]], "for n=2 the result is right but takes"),
    (lambda n: [step + step for step in ring_steps(n)], "twice"),
])
def test_schedule_feedback_says_what_is_wrong(steps, expected):
    result = q_ring_schedule.self_test(steps)
    assert result.status == "incorrect" and expected in result.message, result.message


def test_simulate_steps_gives_a_trace_to_animate():
    trace = simulate_steps(ring_steps, 5)
    trace.verify()
    assert trace.schedule.layout.kind == "ring" and trace.schedule.n_steps == 8
    with pytest.raises(Incorrect):
        simulate_steps(lambda n: [[("a", 1, 0, "copy")]], 3)


def _cells_before(notebook: str, marker: str) -> list[str]:
    """The code cells of a notebook above the first one that holds ``marker``."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parent.parent / "notebooks" / notebook).read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return code[:next(i for i, c in enumerate(code) if marker in c)]


def test_no_table_above_the_busbw_question_shows_busbw():
    for cell in _cells_before("02_ring_allreduce.ipynb", "q_busbw.check"):
        last = cell.strip().splitlines()[-1].split("#")[0].strip()     # what a cell shows: its last expression
        assert not ("df4" in last and ("busbw" in last or "algbw" in last or last == "df4")), last
