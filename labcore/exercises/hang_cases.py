"""The patients of notebook 09's hang clinic: per-rank functions with a classic bug each.

Run one on every rank with ``cluster.run(case, ...)``. Each takes the rank(s) that
carry the bug as an argument, so an exercise can hide which one it is, and an
optional ``timeout_s``: given, the case runs on a fresh process group created
with that timeout (``dist.new_group(timeout=...)``, the same knob as
``init_process_group(timeout=...)``) after re-reading ``TORCH_DISTRIBUTED_DEBUG``,
so ``DETAIL``'s checks and gloo's own timeout apply to it; left out, the case
runs on the cluster's default group.

The bugs are real and the hangs are real: nothing here imitates a collective.
They live outside ``labcore.live`` so that the lab's hang report names these
functions as the place a rank is stuck, as it would name a learner's code.

Example
-------
>>> import labcore as lc
>>> from labcore.exercises import hang_cases
>>> with lc.Cluster(4, backend="gloo", timeout=3) as cl:       # doctest: +SKIP
...     cl.run(hang_cases.mismatched_ops, culprit=3)
Traceback (most recent call last):
CollectiveTimeout: No reply from 4 of 4 ranks after 3 s. ...
"""
from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

__all__ = ["CASES", "source", "group", "mismatched_ops", "mismatched_shapes", "skipped_collective",
           "wrong_order", "p2p_deadlock", "crashed_rank", "straggler"]


def source(case) -> str:
    """The code of a case, to read before running it (``print(source(mismatched_ops))``)."""
    import inspect

    return inspect.getsource(case)


def group(timeout_s: float | None = None):
    """The group a case runs on: the default one, or a fresh one with its own timeout.

    ``dist.set_debug_level_from_env()`` comes first because the lab's ranks are
    forked from a server that imported torch before the cluster's ``env`` was
    set: torch read ``TORCH_DISTRIBUTED_DEBUG`` then, and only groups created
    after re-reading it get DETAIL's collective checks.
    """
    if timeout_s is None:
        return None
    import torch.distributed as dist

    dist.set_debug_level_from_env()
    return dist.new_group(timeout=timedelta(seconds=timeout_s), group_desc="clinic")


def _rank():
    import torch.distributed as dist

    return dist.get_rank()


def _dev():
    from labcore.live.context import device

    return device()


def mismatched_ops(culprit: int = 3, timeout_s: float | None = None):
    """Every rank all-reduces a gradient, except ``culprit``, which broadcasts it."""
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    grad = torch.ones(4, device=_dev())
    if _rank() == culprit:
        dist.broadcast(grad, src=0, group=g)
    else:
        dist.all_reduce(grad, group=g)
    return grad.tolist()


def mismatched_shapes(culprit: int = 3, length: int = 2, timeout_s: float | None = None):
    """``culprit`` all-reduces ``length`` elements, the others 4 (say, a differently sized model)."""
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    x = torch.full((length if _rank() == culprit else 4,), float(_rank() + 1), device=_dev())
    dist.all_reduce(x, group=g)
    return x.tolist()


def skipped_collective(culprit: int = 2, timeout_s: float | None = None):
    """A data-dependent ``if``: a rank whose batch has no valid tokens skips the loss all-reduce."""
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    valid_tokens = 0 if _rank() == culprit else 8
    loss = torch.tensor([float(valid_tokens)], device=_dev())
    if valid_tokens > 0:  # the bug: the decision is made per rank, the collective needs them all
        dist.all_reduce(loss, group=g)
    return loss.item()


def wrong_order(culprits: tuple = (2, 3), timeout_s: float | None = None):
    """Two collectives per step; the ``culprits`` issue them in the opposite order."""
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    weights, grads = torch.ones(4, device=_dev()), torch.ones(4, device=_dev())
    if _rank() in culprits:
        dist.broadcast(weights, src=0, group=g)
        dist.all_reduce(grads, group=g)
    else:
        dist.all_reduce(grads, group=g)
        dist.broadcast(weights, src=0, group=g)
    return grads.tolist()


def p2p_deadlock(pair: tuple = (0, 1), timeout_s: float | None = None):
    """The two ranks of ``pair`` swap tensors, both sending first; the other ranks do nothing."""
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    me = _rank()
    mine, theirs = torch.full((4,), float(me), device=_dev()), torch.zeros(4, device=_dev())
    if me in pair:
        peer = pair[1] if me == pair[0] else pair[0]
        dist.send(mine, dst=peer, group=g)  # blocks until the peer posts its recv...
        dist.recv(theirs, src=peer, group=g)  # ...which it never does: it is sending too
    return theirs.tolist()


def crashed_rank(culprit: int = 3, after_s: float = 1.0, timeout_s: float | None = None):
    """``culprit`` is killed mid-step (as the out-of-memory killer would) while the others all-reduce."""
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    grad = torch.ones(4, device=_dev())
    if _rank() == culprit:
        time.sleep(after_s)  # the forward pass
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(grad, group=g)
    return grad.tolist()


def straggler(culprit: int = 3, delay_s: float = 2.0, timeout_s: float | None = None,
              barrier_s: float | None = None):
    """``culprit`` computes ``delay_s`` longer than the others before the all-reduce: slow, not stuck.

    With ``barrier_s``, every rank first passes ``dist.monitored_barrier`` (gloo
    only), which names the ranks that do not arrive within ``barrier_s``.
    """
    import torch
    import torch.distributed as dist

    g = group(timeout_s)
    grad = torch.ones(4, device=_dev())
    if _rank() == culprit:
        time.sleep(delay_s)  # a slow data loader, a throttled core, a noisy neighbour
    if barrier_s is not None:
        gloo = g if dist.get_backend(g) == "gloo" else dist.new_group(backend="gloo")
        dist.monitored_barrier(group=gloo, timeout=timedelta(seconds=barrier_s))
    dist.all_reduce(grad, group=g)
    return grad.tolist()


#: Each case with the cause an exercise expects for it (see labcore.exercises.hangs).
CASES = {
    "mismatched ops": mismatched_ops,
    "mismatched shapes": mismatched_shapes,
    "skipped collective": skipped_collective,
    "wrong order": wrong_order,
    "p2p deadlock": p2p_deadlock,
    "crashed": crashed_rank,
    "straggler": straggler,
}
