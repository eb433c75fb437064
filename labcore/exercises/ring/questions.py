"""Notebook 02's exercises: prompts, hints and solutions, with the checks, the right answer and
the mistakes each is tested with.

- :data:`q_ring_bytes`: bytes each rank sends (the 2(n-1)/n factor);
- :data:`q_send_chunk`: which chunk a rank sends at a reduce-scatter step;
- :data:`q_ring_schedule`: the whole ring schedule, verified by the simulator;
- :data:`q_ring_live`: ring all-reduce with send/recv on the live cluster;
- :data:`q_busbw`: busbw from a measured time.
"""
from __future__ import annotations

from labcore.exercises.core import CustomExercise, FunctionExercise, close_number
from labcore.exercises.live import LiveExercise
from labcore.exercises.ring.mistakes import (
    _reduce_scatter_only, _ring_even_chunks, _ring_for_four_ranks, _ring_torch_chunk, _uses_all_reduce,
)
from labcore.exercises.ring.checks import _check_live, _check_schedule, _check_send_chunk
from labcore.exercises.ring.reference import _busbw, ring_all_reduce, ring_steps
from labcore.exercises.values import StatedValue

__all__ = ["q_ring_bytes", "q_send_chunk", "q_ring_schedule", "q_ring_live", "q_busbw"]


# -- (1) bytes per rank --------------------------------------------------------------------
q_ring_bytes = FunctionExercise(
    "Bytes per rank",
    "Write bytes_sent(nbytes, ranks): how many bytes each rank sends during a ring all-reduce "
    "of a buffer of nbytes bytes on `ranks` ranks (the buffer splits into `ranks` equal chunks).",
    reference=lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes,
    cases=[(1024, 2), (1024, 4), (3 * 2 ** 20, 8), (1e9, 16)],
    compare=close_number,
    hints=["Count steps: reduce-scatter takes ranks-1 steps, all-gather another ranks-1.",
           "In every step each rank sends one chunk of nbytes/ranks bytes.",
           "2 * (ranks - 1) steps x nbytes / ranks bytes."],
    solution="def bytes_sent(nbytes, ranks):\n"
             "    return 2 * (ranks - 1) / ranks * nbytes\n"
             "# 2(n-1) steps of one chunk (nbytes/n) each: nccl-tests' busbw factor 2(n-1)/n.",
    wrong_examples=[lambda nbytes, ranks: (ranks - 1) / ranks * nbytes,
                    lambda nbytes, ranks: 2 * (ranks - 1) * nbytes,
                    lambda nbytes, ranks: 2 * nbytes],
)


q_send_chunk = CustomExercise(
    "Which chunk does rank r send?",
    "Write send_chunk(rank, step, ranks): the chunk that `rank` sends to rank + 1 at reduce-scatter "
    "step `step` on `ranks` ranks. Steps count from 0, as in the animation's slider.",
    checker=_check_send_chunk,
    hints=["Step 0 of the 4-rank animation: rank 0 sends chunk 3, rank 1 sends chunk 0.",
           "Each step, a rank sends the chunk it just received and added to: one lower than last step.",
           "(rank - 1 - step) modulo ranks. Other numberings of the chunks, such as (rank - step) % ranks, "
           "are the same ring with the chunks renamed, and the check accepts them too."],
    solution="def send_chunk(rank, step, ranks):\n    return (rank - 1 - step) % ranks\n"
             "# rank r ends the reduce-scatter with chunk r complete; (rank - step) % ranks is the same ring\n"
             "# with the chunks renamed (rank r then ends with chunk r + 1).",
    correct_example=lambda rank, step, ranks: (rank - 1 - step) % ranks,
    wrong_examples=[lambda rank, step, ranks: (rank + step) % ranks,          # the chunk does not travel
                    lambda rank, step, ranks: rank - 1 - step,                # no modulo
                    lambda rank, step, ranks: step % ranks,                   # every rank the same chunk
                    lambda rank, step, ranks: (rank - 1 + step) % ranks],     # travels the other way
)


q_ring_schedule = CustomExercise(
    "Ring schedule for the simulator",
    "Write my_ring_steps(n) returning the ring all-reduce as a list of 2(n-1) steps; each step is a "
    "list of (src, dst, chunk, op) with op 'reduce' (the receiver adds the chunk) or 'copy' (the "
    "receiver replaces its chunk). Rank r sends only to rank (r + 1) % n; the buffer has n chunks.",
    checker=_check_schedule,
    hints=["Reduce-scatter steps s = 0..n-2: every rank r sends one chunk, with op 'reduce'.",
           "Use the animation: at reduce-scatter step s, rank r sends chunk (r - 1 - s) % n. After that, "
           "rank r holds chunk r complete.",
           "All-gather steps s = 0..n-2: rank r sends chunk (r - s) % n with op 'copy'."],
    solution="def my_ring_steps(n):\n"
             "    rs = [[(r, (r + 1) % n, (r - 1 - s) % n, 'reduce') for r in range(n)] for s in range(n - 1)]\n"
             "    ag = [[(r, (r + 1) % n, (r - s) % n, 'copy') for r in range(n)] for s in range(n - 1)]\n"
             "    return rs + ag",
    correct_example=ring_steps,
    wrong_examples=[
        lambda n: ring_steps(n)[: n - 1],                                                  # no all-gather
        lambda n: [[(r, (r + 1) % n, (r - s) % n, "reduce") for r in range(n)] for s in range(n - 1)]
        + ring_steps(n)[n - 1:],                                                           # off by one
        lambda n: ring_steps(n)[: n - 1] + [[(a, b, c, "reduce") for a, b, c, _ in step]
                                            for step in ring_steps(n)[n - 1:]],            # adds twice
        lambda n: [[(r, (r - 1) % n, c, op) for r, _, c, op in step] for step in ring_steps(n)],
    ],
)


q_ring_live = LiveExercise(
    "Ring all-reduce, live",
    "Write my_ring_all_reduce(tensor) that runs on every rank and sums `tensor` over all ranks "
    "using only dist.send/dist.recv or dist.isend/dist.irecv between ring neighbours (reduce-scatter, "
    "then all-gather), in place or returning the result. Check it with "
    "q_ring_live.check(my_ring_all_reduce, cluster=cl): every rank compares your result with "
    "dist.all_reduce on the same input (random float32 values, so sums are not whole numbers), every "
    "collective is switched off while your code runs, and the check records what each rank sends to whom; it runs on the cluster's ranks, then on 3 and 5 ranks "
    "with buffers that do not divide by the rank count. Your code may take 30 s on the ranks (the check's own "
    "set-up is not counted); a deadlock is reported then.",
    checker=_check_live,
    hints=["Split the flat tensor into world_size chunks: torch.tensor_split(tensor.view(-1), n).",
           "Post the send and the receive together (isend + irecv, then wait on both): if every rank "
           "does a blocking send first, every rank waits forever.",
           "Reduce-scatter step s: send chunk (rank-1-s) % n to rank+1; receive into a buffer from rank-1 "
           "and add it to chunk (rank-2-s) % n. All-gather step s: send chunk (rank-s) % n, receive "
           "straight into chunk (rank-1-s) % n."],
    solution="from labcore.exercises.ring import ring_all_reduce   # read it: inspect.getsource\n"
             "def my_ring_all_reduce(tensor):\n"
             "    return ring_all_reduce(tensor)",
    correct_example=ring_all_reduce,
    wrong_examples=[_reduce_scatter_only, _uses_all_reduce, _ring_for_four_ranks, _ring_even_chunks, _ring_torch_chunk],
)


q_busbw = StatedValue(
    "busbw from a measured time",
    "An all_reduce of {size} bytes on {ranks} ranks took {time_us:.1f} us. What is its busbw in "
    "GB/s, as nccl-tests reports it (GB = 1e9 bytes)?",
    expected=_busbw,
    given={"size": 64 << 20, "ranks": 8, "time_us": 1000.0},
    unit="GB/s",
    rtol=0.01,
    mistakes=[(lambda size, ranks, time_us: size / time_us / 1e3,
               "That is algbw (size / time). busbw multiplies it by all_reduce's factor 2(n-1)/n."),
              (lambda size, ranks, time_us: size / time_us / 1e3 * (ranks - 1) / ranks,
               "(n-1)/n is the factor of all_gather and reduce_scatter; all_reduce does both: 2(n-1)/n."),
              (lambda size, ranks, time_us: _busbw(size, ranks, time_us) * 1e9 / 2 ** 30,
               "GB here means 1e9 bytes (nccl-tests' unit), not 2**30."),
              (lambda size, ranks, time_us: size * 8 / time_us / 1e3 * 2 * (ranks - 1) / ranks,
               "That is in gigabits; busbw is in gigabytes per second.")],
    hints=["algbw = size / time; convert bytes per microsecond to GB/s (1 byte/us = 1e-3 GB/s).",
           "busbw = algbw x 2(n-1)/n for all_reduce."],
    solution="busbw = size / (time_us * 1e-6) / 1e9 * 2 * (ranks - 1) / ranks",
    correct_example=_busbw(64 << 20, 8, 1000.0),
    wrong_examples=[(64 << 20) / 1000.0 / 1e3, (64 << 20) / 1000.0 / 1e3 * 7 / 8,
                    _busbw(64 << 20, 8, 1000.0) * 1e9 / 2 ** 30, 1.0],
)
