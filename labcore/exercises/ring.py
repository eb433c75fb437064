"""Exercises for notebook 02, the ring all-reduce.

- :data:`q_ring_bytes`: bytes each rank sends (the 2(n-1)/n factor);
- :data:`q_send_chunk`: which chunk a rank sends at a reduce-scatter step;
- :data:`q_ring_schedule`: the whole ring schedule, verified by the simulator;
- :data:`q_ring_live`: ring all-reduce with send/recv on the live cluster:
  its result checked against ``dist.all_reduce``, its recorded traffic against
  a ring's (neighbours only, 2(n-1)/n x S bytes per rank, no collective);
- :data:`q_busbw`: busbw from a measured time.

:func:`ring_all_reduce` is the reference ring written with isend/irecv (the
hand-made algorithm beside ``dist.all_reduce``); :func:`simulate_steps` runs a
learner's schedule in the simulator so it can be animated.

Example
-------
>>> q_ring_bytes.check(lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes)
Bytes per rank: correct! (4 cases passed)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from labcore.exercises.core import CustomExercise, FunctionExercise, Incorrect, NotAttempted, ValueExercise
from labcore.exercises.core import _is_blank, close_number

__all__ = ["q_ring_bytes", "q_send_chunk", "q_ring_schedule", "q_ring_live", "q_busbw",
           "ring_all_reduce", "ring_steps", "simulate_steps", "ring_convention", "CollectiveSwitchedOff"]


# -- the reference ring, run on every rank -----------------------------------------------
def ring_all_reduce(tensor, stats: dict | None = None):
    """Sum ``tensor`` over all ranks in place with a ring of isend/irecv, and return it.

    Reduce-scatter then all-gather, the same schedule as the simulator's ring:
    at reduce-scatter step ``s`` rank ``r`` sends chunk ``(r - 1 - s) % n`` to
    rank ``r + 1`` and adds the chunk arriving from rank ``r - 1``; after
    ``n - 1`` steps rank ``r`` holds the finished chunk ``r``, and ``n - 1``
    all-gather steps pass the finished chunks round.

    Parameters
    ----------
    tensor : torch.Tensor
        Contiguous; any shape and length (chunks may differ by one element).
    stats : dict, optional
        If given, ``stats["bytes_sent"]`` is set to the bytes this rank sent.

    Example (on a rank)
    -------------------
    >>> import labcore as lc                                  # doctest: +SKIP
    >>> with lc.Cluster(4) as cl:                             # doctest: +SKIP
    ...     cl.run(lambda: ring_all_reduce(torch.ones(8)).tolist())
    """
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    chunks = list(torch.tensor_split(flat, n))
    right, left = (rank + 1) % n, (rank - 1) % n
    sent = 0

    def exchange(send_chunk, recv_into):
        nonlocal sent
        requests = [dist.isend(send_chunk, right), dist.irecv(recv_into, left)]
        for request in requests:
            request.wait()
        sent += send_chunk.numel() * send_chunk.element_size()

    for s in range(n - 1):                        # reduce-scatter
        mine, incoming = (rank - 1 - s) % n, (rank - 2 - s) % n
        buffer = torch.empty_like(chunks[incoming])
        exchange(chunks[mine], buffer)
        chunks[incoming] += buffer
    for s in range(n - 1):                        # all-gather: finished chunks go round
        exchange(chunks[(rank - s) % n], chunks[(rank - 1 - s) % n])
    if stats is not None:
        stats["bytes_sent"] = sent
    return tensor


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


# -- (2) which chunk moves --------------------------------------------------------------
def ring_convention(first, ranks: int) -> str:
    """Name a ring reduce-scatter's chunk numbering from ``first[r]``, the chunk rank r sends at step 0.

    Any numbering in which each rank passes on the chunk it has just received is the same
    ring with the chunks renamed; rank r ends the reduce-scatter holding chunk
    ``first[(r + 1) % ranks]`` complete. The animation and :func:`ring_all_reduce` use
    ``(rank - 1 - step) % ranks``, so that rank r ends with chunk r.

    Example
    -------
    >>> ring_convention([0, 1, 2, 3], 4)
    '(rank - step) % ranks, where rank r ends the reduce-scatter with chunk (r + 1) % ranks complete'
    """
    offsets = {(int(c) - r) % ranks for r, c in enumerate(first)}
    if len(offsets) != 1:
        return "in an order of your own, where each rank still passes on the chunk it has just received"
    c = offsets.pop()
    c = c - ranks if c > ranks // 2 else c             # the smallest offset: -1 rather than ranks - 1
    if c == -1:
        return "(rank - 1 - step) % ranks, as in the animation: rank r ends the reduce-scatter with chunk r complete"
    start = "rank - step" if c == 0 else f"rank {'+' if c > 0 else '-'} {abs(c)} - step"
    return (f"({start}) % ranks, where rank r ends the reduce-scatter with chunk (r {'+' if c + 1 > 0 else '-'} "
            f"{abs(c + 1)}) % ranks complete")


def _chunk_sent(answer, rank: int, step: int, ranks: int) -> int:
    case = f"rank={rank}, step={step}, ranks={ranks}"
    try:
        chunk = answer(rank, step, ranks)
    except NotImplementedError:
        raise NotAttempted()
    except Exception as err:
        raise Incorrect(f"For {case} your function raised {type(err).__name__}: {err}")
    if _is_blank(chunk):
        raise NotAttempted()
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer, float, np.floating)) or chunk != int(chunk):
        raise Incorrect(f"For {case} you return {chunk!r}; return the chunk's number, an int.")
    if not 0 <= chunk < ranks:
        raise Incorrect(f"For {case} you return {int(chunk)}, which is not a chunk: the {ranks} chunks are "
                        f"numbered 0 to {ranks - 1} (% ranks wraps a number round the ring).")
    return int(chunk)


def _check_send_chunk(answer) -> str:
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_send_chunk.check(send_chunk).")
    for n in (3, 4, 8):
        sends = np.array([[_chunk_sent(answer, r, s, n) for s in range(n - 1)] for r in range(n)])  # [rank, step]
        for s in range(n - 1):
            first_sender = {}
            for r in range(n):
                c = int(sends[r, s])
                if c in first_sender:
                    raise Incorrect(f"For rank={r}, step={s}, ranks={n} you return {c}, the chunk rank "
                                    f"{first_sender[c]} sends at that step too: in every step the {n} ranks "
                                    f"send {n} different chunks, each one hop further round the ring.")
                first_sender[c] = r
        for s in range(1, n - 1):
            for r in range(n):
                left = (r - 1) % n
                if sends[r, s] != sends[left, s - 1]:
                    raise Incorrect(f"For rank={r}, step={s}, ranks={n} you return {sends[r, s]}, but your "
                                    f"function has rank {left} send rank {r} chunk {sends[left, s - 1]} at step "
                                    f"{s - 1}: a rank adds its own part to the chunk it has just received and "
                                    "passes that chunk on.")
    first = [_chunk_sent(answer, r, 0, 4) for r in range(4)]
    return f"That is a ring, with the chunks numbered {ring_convention(first, 4)}."


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


# -- (3) the whole schedule, verified by the simulator -----------------------------------
def ring_steps(ranks: int) -> list[list[tuple[int, int, int, str]]]:
    """The ring all-reduce as a list of steps of ``(src, dst, chunk, op)`` transfers (the answer to
    :data:`q_ring_schedule`)."""
    rs = [[(r, (r + 1) % ranks, (r - 1 - s) % ranks, "reduce") for r in range(ranks)]
          for s in range(ranks - 1)]
    ag = [[(r, (r + 1) % ranks, (r - s) % ranks, "copy") for r in range(ranks)] for s in range(ranks - 1)]
    return rs + ag


def simulate_steps(steps_fn: Callable[[int], list], ranks: int, nbytes: float = 1 << 20, topology=None):
    """Run a learner's ``steps_fn(ranks)`` (steps of ``(src, dst, chunk, op)``) in the simulator.

    Returns the :class:`labcore.sim.trace.Trace`, ready for ``verify()`` and
    ``labcore.viz.chunk_flow``.

    Example
    -------
    >>> simulate_steps(ring_steps, 4).verify()
    """
    import labcore.sim as sim

    steps = steps_fn(ranks)
    if _is_blank(steps):
        raise NotAttempted()
    steps = [[_transfer(t, k) for t in _as_list(step, k)] for k, step in enumerate(_as_list(steps, None))]
    schedule = sim.Schedule.from_steps("all_reduce", ranks, nbytes, chunks=ranks, steps=steps,
                                       algorithm="yours", layout=sim.Layout("ring", tuple(range(ranks))))
    return sim.run(schedule, topology or sim.topologies.uniform(ranks))


def _as_list(x, step):
    try:
        return list(x)
    except TypeError:
        where = "" if step is None else f" (step {step} is {x!r})"
        raise Incorrect(f"return a list of steps, each a list of (src, dst, chunk, op) tuples{where}.")


def _transfer(t, step: int):
    """(src, dst, chunk, op) -> a simulator Transfer of one chunk."""
    import labcore.sim as sim

    if isinstance(t, sim.Transfer):
        return t
    if not (isinstance(t, (tuple, list)) and len(t) == 4 and t[3] in ("reduce", "copy")
            and all(isinstance(v, (int, np.integer)) for v in t[:3])):
        raise Incorrect(f"step {step}: {t!r} is not a transfer; write (src, dst, chunk, op) with three "
                        "ints and op 'reduce' or 'copy'.")
    src, dst, chunk, op = t
    return sim.Transfer(int(src), int(dst), int(chunk), op=op)


def _check_schedule(answer, ranks_to_try=(2, 3, 4, 5)) -> str:
    from labcore.sim import ScheduleError

    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_ring_schedule.check(my_ring_steps).")
    for n in ranks_to_try:
        try:
            trace = simulate_steps(answer, n)
        except ScheduleError as err:
            raise Incorrect(f"for n={n} the simulator rejects the schedule: {err}")
        s = trace.schedule
        off_ring = np.flatnonzero(s.dst != (s.src + 1) % n)
        if off_ring.size:
            i = off_ring[0]
            raise Incorrect(f"for n={n}, step {s.step[i]}: rank {s.src[i]} sends to rank {s.dst[i]}, "
                            f"but in the ring rank {s.src[i]} only sends to rank {(s.src[i] + 1) % n}.")
        try:
            trace.verify()
        except ScheduleError as err:
            raise Incorrect(f"for n={n}: {err}")
        if s.n_steps != 2 * (n - 1):
            raise Incorrect(f"for n={n} the result is right but takes {s.n_steps} steps; "
                            f"the ring needs exactly 2(n-1) = {2 * (n - 1)}.")
        per_rank = np.bincount(s.step * n + s.src, minlength=s.n_steps * n).reshape(s.n_steps, n)
        if (per_rank != 1).any():
            step, rank = (int(v) for v in np.argwhere(per_rank != 1)[0])
            raise Incorrect(f"for n={n}, step {step}: rank {rank} sends {per_rank[step, rank]} chunks; "
                            "in the ring every rank sends exactly one chunk per step.")
    # name the chunk numbering of its reduce-scatter (from the largest ring tried), as q_send_chunk does
    first = s.chunk[s.step == 0][np.argsort(s.src[s.step == 0])]
    numbering = ring_convention(first, n)
    return (f"Verified by the simulator for {', '.join(map(str, ranks_to_try))} ranks. Your reduce-scatter "
            f"numbers the chunks {numbering}.")


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


# -- (4) the live ring: its result against dist.all_reduce, its traffic against a ring's ----------
class CollectiveSwitchedOff(RuntimeError):
    """Raised on a rank when the code under the live ring check calls a collective."""


# c10d ops with no traffic of their own: the functional API's wrapper and wait
_NO_TRAFFIC = {"wait_tensor", "_wrap_tensor_autograd"}
# c10d's op names -> torch.distributed's
_COLLECTIVE_NAMES = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced", "allgather_": "all_gather",
    "_allgather_base_": "all_gather_single", "allgather_coalesced_": "all_gather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_single (coalesced)", "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter_single", "reduce_scatter_tensor_coalesced_":
    "reduce_scatter_single (coalesced)", "alltoall_": "all_to_all", "alltoall_base_": "all_to_all_single",
    "broadcast_": "broadcast", "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
    "barrier": "barrier", "monitored_barrier_": "monitored_barrier",
}


def _traffic_recorder():
    """A dispatch mode that records this rank's sends and receives and refuses every collective.

    torch.distributed's Python functions, ProcessGroup methods and the functional
    collectives all reach the backend through c10d's dispatcher ops (``c10d::send``,
    ``c10d::allreduce_``, ``_c10d_functional::all_reduce``, ...), and a
    ``TorchDispatchMode`` sees each op that code under it issues, whatever name the code
    called it by. Sends and receives go on to the real backend; a collective raises
    :class:`CollectiveSwitchedOff` before anything moves.
    """
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    class Traffic(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sent: list[tuple[int, int]] = []        # (peer's global rank, bytes), in call order
            self.received: list[tuple[int, int]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            namespace, name = func.namespace, func.name().split("::")[-1]
            if namespace in ("c10d", "_c10d_functional", "c10d_functional") and name not in _NO_TRAFFIC:
                if name in ("send", "recv_"):
                    tensors, group, peer = args[0], args[1], int(args[2])
                    try:                                  # a subgroup numbers its ranks from 0
                        peer = dist.get_global_rank(dist.ProcessGroup.unbox(group), peer)
                    except (AttributeError, RuntimeError, ValueError):
                        pass
                    nbytes = sum(t.numel() * t.element_size() for t in tensors)
                    (self.sent if name == "send" else self.received).append((peer, nbytes))
                elif name == "recv_any_source_":
                    raise CollectiveSwitchedOff("received from any source: name the sender (src=) so that the "
                                                "check can see who talks to whom.")
                else:
                    what = (f"the functional collective {name}" if "functional" in namespace else
                            f"the collective {_COLLECTIVE_NAMES.get(name, name)}")
                    called = _torch_function_called()
                    if called and called != name and called != _COLLECTIVE_NAMES.get(name):
                        what = f"{called}, which runs {what}"
                    raise CollectiveSwitchedOff(
                        f"called {what}. This check switches every collective off (by whatever name it is "
                        "called): build the all-reduce from dist.send/recv or isend/irecv between ring "
                        "neighbours.")
            return func(*args, **(kwargs or {}))

    return Traffic()


def _torch_function_called() -> str | None:
    """The name of the torch function that the code under check called to reach this op, read off
    the stack: the outermost public module-level function in the run of torch frames above the
    dispatch (decorators' wrappers and private helpers skipped)."""
    import os
    import sys

    import torch

    root = os.path.dirname(torch.__file__) + os.sep
    frame, called, seen_torch = sys._getframe(1), None, False
    while frame is not None:
        if frame.f_code.co_filename.startswith(root):
            seen_torch = True
            name = frame.f_code.co_name
            if not name.startswith("_") and callable(frame.f_globals.get(name)):   # a module's function
                called = name
        elif seen_torch:
            break
        frame = frame.f_back
    return called


def _ring_on_rank(fn, numel: int, seed: int):
    """Runs on every rank: the learner's fn on an integer-valued input, its traffic recorded."""
    import torch
    import torch.distributed as dist

    from labcore.live.context import device, rank_info

    rank = rank_info().rank
    g = torch.Generator().manual_seed(seed + rank)
    x = torch.randint(-50, 50, (numel,), generator=g).to(torch.float32).to(device())
    want = x.clone()
    dist.all_reduce(want)                  # the check's own reference, before the recorder starts
    mine = x.clone()
    traffic = _traffic_recorder()
    try:
        with traffic:
            out = fn(mine)
    except NotImplementedError:            # the starter code: every rank raises it
        return None
    got = mine if out is None else out
    if _is_blank(got):
        return None
    return {"got": torch.as_tensor(got).detach().reshape(-1).cpu(), "want": want.cpu(),
            "sent": traffic.sent, "received": traffic.received,
            "nbytes": x.numel() * x.element_size(), "element": x.element_size()}


def _check_live(answer, cluster=None, world_size: int = 4, elements_per_rank: int = 24,
                timeout: float = 30.0) -> str:
    import labcore as lc
    from labcore.live.errors import ClusterError, CollectiveTimeout, RankError

    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_ring_live.check(my_ring_all_reduce, cluster=cl).")
    n = world_size if cluster is None else cluster.world_size
    if n < 3:
        raise Incorrect(f"on {n} ranks a ring cannot be told from other ways to sum: check on 3 or more ranks "
                        "(a cluster with world_size >= 3, or none: the check then starts 4 ranks).")
    own = cluster is None
    cl = lc.Cluster(world_size, show_output=False) if own else cluster
    try:
        results = cl.call(_ring_on_rank, args=(answer, elements_per_rank, 7), timeout=timeout)
    except CollectiveTimeout as err:
        raise Incorrect(f"it did not finish within {timeout:g} s, so some rank waits for a message that "
                        "never comes (if every rank does a blocking send first, all of them wait: use "
                        f"isend/irecv). The hang report:\n{err}")
    except RankError as err:
        refused = [(r, msg) for r, (name, msg, _) in err.errors.items() if name == CollectiveSwitchedOff.__name__]
        if refused:
            raise Incorrect(f"rank {refused[0][0]} {refused[0][1]}")
        raise Incorrect(f"a rank raised while running it:\n{_last_lines(str(err))}")
    except ClusterError as err:
        raise Incorrect(f"a rank failed while running it:\n{_last_lines(str(err))}")
    finally:
        if own:
            cl.close()
    if any(r is None for r in results):
        raise NotAttempted()
    _check_neighbours(results)
    _check_values(results)
    _check_bytes(results)
    return (f"All {n} ranks match dist.all_reduce, each talked only to its ring neighbours and sent "
            f"2(n-1)/n x S = {2 * (n - 1) / n * results[0]['nbytes']:g} bytes.")


def _check_neighbours(results: list[dict]) -> None:
    n = len(results)
    for rank, res in enumerate(results):
        left, right = (rank - 1) % n, (rank + 1) % n
        for verb, prep, log in (("sent", "to", res["sent"]), ("received", "from", res["received"])):
            for peer, nbytes in log:
                if peer not in (left, right):
                    raise Incorrect(f"rank {rank} {verb} {nbytes} bytes {prep} rank {peer}, which is not one of "
                                    f"its ring neighbours (ranks {min(left, right)} and {max(left, right)}): "
                                    "in a ring every rank "
                                    "exchanges data only with the two ranks beside it, so no link carries "
                                    "more than its share.")


def _check_values(results: list[dict]) -> None:
    n = len(results)
    for rank, res in enumerate(results):
        got, want = res["got"], res["want"]
        if got.shape != want.shape:
            raise Incorrect(f"rank {rank} returned {got.numel()} elements; its input had {want.numel()}.")
        bad = np.flatnonzero((got != want).numpy())
        if bad.size:
            i = int(bad[0])
            bounds = [len(c) for c in np.array_split(np.arange(want.numel()), n)]
            chunk = int(np.searchsorted(np.cumsum(bounds), i, side="right"))
            raise Incorrect(f"rank {rank}, element {i} (chunk {chunk} of {n}) holds {got[i].item():g} but "
                            f"dist.all_reduce gives {want[i].item():g}; {bad.size} of {want.numel()} elements "
                            f"differ on that rank.")


def _check_bytes(results: list[dict]) -> None:
    n = len(results)
    size, element = results[0]["nbytes"], results[0]["element"]
    ring = 2 * (n - 1) / n * size
    # chunks of a length n does not divide differ by one element, in each of the 2(n-1) steps
    slack = 0 if (size // element) % n == 0 else 2 * (n - 1) * element
    for rank, res in enumerate(results):
        sent = sum(nbytes for _, nbytes in res["sent"])
        if sent == 0:
            raise Incorrect(f"rank {rank} holds the right sum but sent nothing with send/isend: the data must "
                            "travel with dist.send/recv or isend/irecv (code that goes around them is not a "
                            "ring the check can see).")
        if abs(sent - ring) > slack:
            more = ("more: whole buffers instead of one chunk per step, or extra steps?" if sent > ring else
                    "less: is a phase missing?")
            raise Incorrect(f"rank {rank} sent {sent} bytes of a {size}-byte buffer on {n} ranks; a ring "
                            f"all-reduce sends 2(n-1)/n x S = {ring:g} bytes per rank (one chunk of S/n in each "
                            f"of its 2(n-1) steps). Yours sends {more}")


def _last_lines(text: str, k: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-k:])


def _reduce_scatter_only(tensor):
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    for s in range(n - 1):
        mine, incoming = (rank - 1 - s) % n, (rank - 2 - s) % n
        buffer = torch.empty_like(chunks[incoming])
        reqs = [dist.isend(chunks[mine], (rank + 1) % n), dist.irecv(buffer, (rank - 1) % n)]
        for r in reqs:
            r.wait()
        chunks[incoming] += buffer
    return tensor


def _uses_all_reduce(tensor):
    import torch.distributed as dist

    dist.all_reduce(tensor)
    return tensor


q_ring_live = CustomExercise(
    "Ring all-reduce, live",
    "Write my_ring_all_reduce(tensor) that runs on every rank and sums `tensor` over all ranks "
    "using only dist.send/dist.recv or dist.isend/dist.irecv between ring neighbours (reduce-scatter, "
    "then all-gather), in place or returning the result. Check it with "
    "q_ring_live.check(my_ring_all_reduce, cluster=cl): every rank compares your result with "
    "dist.all_reduce on the same input, every collective is switched off while your code runs, and "
    "the check records what each rank sends to whom.",
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
    wrong_examples=[_reduce_scatter_only, _uses_all_reduce],
)


# -- (5) busbw from a measured time ---------------------------------------------------------
def _busbw(size, ranks, time_us):
    return size / time_us / 1e3 * 2 * (ranks - 1) / ranks


q_busbw = ValueExercise(
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
