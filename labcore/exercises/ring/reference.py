"""The ring all-reduce, the code a learner reads (notebook 02).

:func:`ring_all_reduce` is the reference ring written with isend/irecv (the hand-made algorithm
beside ``dist.all_reduce``); :func:`ring_steps` the same ring as a schedule of steps, and
:func:`simulate_steps` runs a learner's schedule in the simulator so it can be animated.

Example
-------
>>> simulate_steps(ring_steps, 4).verify()
"""
from __future__ import annotations

from typing import Callable

from labcore.exercises.answers import as_items, as_number, as_text, safe_repr
from labcore.exercises.core import Incorrect, NotAttempted, _is_blank
from labcore.exercises.timing import learner_code

__all__ = ["ring_all_reduce", "ring_steps", "simulate_steps", "ring_convention"]


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

    Returns the :class:`labcore.sim.core.trace.Trace`, ready for ``verify()`` and
    ``labcore.viz.chunk_flow``.

    Example
    -------
    >>> simulate_steps(ring_steps, 4).verify()
    """
    import labcore.sim as sim

    steps = learner_code(steps_fn, ranks)
    if _is_blank(steps):
        raise NotAttempted()
    steps = [[_transfer(t, k) for t in _as_list(step, k)] for k, step in enumerate(_as_list(steps, None))]
    schedule = sim.Schedule.from_steps("all_reduce", ranks, nbytes, chunks=ranks, steps=steps,
                                       algorithm="yours", layout=sim.Layout("ring", tuple(range(ranks))))
    return sim.run(schedule, topology or sim.topologies.uniform(ranks))


def _as_list(x, step):
    items = as_items(x)
    if items is None:
        where = "" if step is None else f" (step {step} is {safe_repr(x)})"
        raise Incorrect(f"return a list of steps, each a list of (src, dst, chunk, op) tuples{where}.")
    return items


def _transfer(t, step: int):
    """(src, dst, chunk, op) -> a simulator Transfer of one chunk."""
    import labcore.sim as sim

    if type(t) is sim.Transfer:
        return t
    items = as_items(t) if issubclass(type(t), (tuple, list)) else None
    if items is not None and len(items) == 4:
        ints = [as_number(v) for v in items[:3]]
        op = as_text(items[3])
        if all(type(v) is int for v in ints) and op in ("reduce", "copy"):
            return sim.Transfer(*ints, op=op)
    raise Incorrect(f"step {step}: {safe_repr(t)} is not a transfer; write (src, dst, chunk, op) with three "
                    "ints and op 'reduce' or 'copy'.")


# -- (5) busbw from a measured time ---------------------------------------------------------
def _busbw(size, ranks, time_us):
    return size / time_us / 1e3 * 2 * (ranks - 1) / ranks
