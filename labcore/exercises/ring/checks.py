"""The checks of notebook 02's exercises: chunk numbering, the schedule in the simulator, and the
live ring, whose result is compared with ``dist.all_reduce`` and whose traffic is recorded."""
from __future__ import annotations

import numpy as np

from labcore import collectives
from labcore.exercises.answers import safe_repr, safe_str, type_name, as_whole
from labcore.exercises.core import Incorrect, NotAttempted, _is_blank
from labcore.exercises.live import LIMIT_S, on_every_size, warm_up
from labcore.exercises.ring.reference import ring_all_reduce, ring_convention, simulate_steps
from labcore.exercises.timing import learner_code


def _chunk_sent(answer, rank: int, step: int, ranks: int) -> int:
    case = f"rank={rank}, step={step}, ranks={ranks}"
    try:
        answer_chunk = learner_code(answer, rank, step, ranks)
    except NotImplementedError:
        raise NotAttempted()
    except Exception as err:
        raise Incorrect(f"For {case} your function raised {type_name(err)}: {safe_str(err)}")
    if _is_blank(answer_chunk):
        raise NotAttempted()
    chunk = as_whole(answer_chunk)
    if chunk is None:
        raise Incorrect(f"For {case} you return {safe_repr(answer_chunk)}; return the chunk's number, an int.")
    if not 0 <= chunk < ranks:
        raise Incorrect(f"For {case} you return {chunk}, which is not a chunk: the {ranks} chunks are "
                        f"numbered 0 to {ranks - 1} (% ranks wraps a number round the ring).")
    return chunk


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


# -- (4) the live ring: its result against dist.all_reduce, its traffic against a ring's ----------
class CollectiveSwitchedOff(RuntimeError):
    """Raised on a rank when the code under the live ring check calls a collective."""


# c10d ops with no traffic of their own: the functional API's wrapper and wait
_NO_TRAFFIC = {"wait_tensor", "_wrap_tensor_autograd"}


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
            self.widest = 0                              # the widest element sent, in bytes

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
                    if name == "send":
                        self.widest = max([self.widest] + [t.element_size() for t in tensors])
                elif name == "recv_any_source_":
                    raise CollectiveSwitchedOff("received from any source: name the sender (src=) so that the "
                                                "check can see who talks to whom.")
                else:
                    what = (f"the functional collective {name}" if "functional" in namespace else
                            f"the collective {collectives.c10d_function(name)}")
                    called = _torch_function_called()
                    if called and called != name and called != collectives.c10d_function(name):
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
    """Runs on every rank: the learner's fn on a random float32 input, its traffic recorded. The values
    are fractional and of both signs, so a ring that sums in whole numbers (int32) or in half precision
    is found out; they carry no order a wrong answer could lean on."""
    import torch
    import torch.distributed as dist

    from labcore.live.context import device, rank_info

    rank = rank_info().rank
    g = torch.Generator().manual_seed(seed + rank)
    x = (torch.randn(numel, generator=g) * 20).to(device())
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
            "sent": traffic.sent, "received": traffic.received, "widest": traffic.widest,
            "nbytes": x.numel() * x.element_size(), "element": x.element_size()}


# buffer lengths on the other world sizes: none divides by its rank count (on 5 ranks torch.chunk would
# make 3 chunks of 2, not 5)
ODD_LENGTHS = {3: 25, 5: 6}


def _check_live(answer, cluster=None, world_size: int = 4, elements_per_rank: int = 24,
                timeout: float = LIMIT_S) -> str:
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_ring_live.check(my_ring_all_reduce, cluster=cl).")
    n = world_size if cluster is None else cluster.world_size
    if n < 3:
        raise Incorrect(f"on {n} ranks a ring cannot be told from other ways to sum: check on 3 or more ranks "
                        "(a cluster with world_size >= 3, or none: the check then uses 4 ranks).")
    done = []

    def check_one(cl):
        numel = ODD_LENGTHS.get(cl.world_size, 2 * cl.world_size + 1) if done else elements_per_rank
        done.append(cl.world_size)
        try:
            return _ring_on(cl, answer, numel, timeout)
        except Incorrect as wrong:
            if not done[1:]:
                raise
            raise Incorrect(f"with a buffer of {numel} elements: {wrong}") from None

    remarks = list(on_every_size(cluster, world_size, check_one))
    others = [f"{m} ranks ({ODD_LENGTHS.get(m, 2 * m + 1)} elements)" for m, _ in remarks[1:]]
    return remarks[0][1] + (f" The same on {' and on '.join(others)}." if others else "")


def _ring_on(cl, answer, numel: int, timeout: float) -> str:
    from labcore.live.errors import ClusterError, CollectiveTimeout, RankError

    n = cl.world_size
    warm_up(cl, _ring_on_rank, ring_all_reduce, numel, 7)
    try:
        results = cl.call(_ring_on_rank, args=(answer, numel, 7), timeout=timeout)
    except CollectiveTimeout as err:
        raise Incorrect(f"it did not finish within {timeout:g} s (the check's own set-up is not counted), so some "
                        "rank waits for a message that never comes (if every rank does a blocking send first, all "
                        f"of them wait: use isend/irecv), or your code never ends. The hang report:\n{err}")
    except RankError as err:
        refused = [(r, msg) for r, (name, msg, _) in err.errors.items() if name == CollectiveSwitchedOff.__name__]
        if refused:
            raise Incorrect(f"rank {refused[0][0]} {refused[0][1]}")
        raise Incorrect(f"a rank raised while running it:\n{_last_lines(str(err))}")
    except ClusterError as err:
        raise Incorrect(f"a rank failed while running it:\n{_last_lines(str(err))}")
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


# a float32 sum of n values taken in another order than dist.all_reduce's differs in its last bits only
VALUE_RTOL, VALUE_ATOL = 1e-5, 1e-4


def _check_values(results: list[dict]) -> None:
    n = len(results)
    for rank, res in enumerate(results):
        got, want = res["got"], res["want"]
        if got.shape != want.shape:
            raise Incorrect(f"rank {rank} returned {got.numel()} elements; its input had {want.numel()}.")
        if not got.dtype.is_floating_point:
            raise Incorrect(f"rank {rank} returned {str(got.dtype).replace('torch.', '')} values for a float32 input: "
                            "a sum kept in whole numbers drops every fraction on the way. Keep the tensor's dtype.")
        close = _isclose(got.double(), want.double(), VALUE_RTOL, VALUE_ATOL)
        bad = np.flatnonzero(~close)
        if bad.size:
            i = int(bad[0])
            bounds = [len(c) for c in np.array_split(np.arange(want.numel()), n)]
            chunk = int(np.searchsorted(np.cumsum(bounds), i, side="right"))
            raise Incorrect(f"rank {rank}, element {i} (chunk {chunk} of {n}) holds {got[i].item():.6g} but "
                            f"dist.all_reduce gives {want[i].item():.6g}; {bad.size} of {want.numel()} elements "
                            f"differ on that rank (beyond float32 rounding).")


def _isclose(a, b, rtol: float, atol: float) -> np.ndarray:
    """Element-wise ``|a - b| <= atol + rtol |b|``, as a numpy bool array."""
    return ((a - b).abs() <= atol + rtol * b.abs()).numpy()


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
            wider = res["widest"] > element
            more = (f"more: it sends {res['widest']}-byte elements for a buffer of {element}-byte ones (a wider type "
                    "than the buffer's), so every chunk takes more bytes than it holds." if wider else
                    "more: whole buffers instead of one chunk per step, or extra steps?" if sent > ring else
                    "less: is a phase missing?")
            raise Incorrect(f"rank {rank} sent {sent} bytes of a {size}-byte buffer on {n} ranks; a ring "
                            f"all-reduce sends 2(n-1)/n x S = {ring:g} bytes per rank (one chunk of S/n in each "
                            f"of its 2(n-1) steps). Yours sends {more}")


def _last_lines(text: str, k: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-k:])
