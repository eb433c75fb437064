"""The live checks of notebook 05's exercises: each runs the learner's code on the ranks, records
its collectives and compares every rank's parameters with single-process training."""
from __future__ import annotations

import contextlib
import math

from labcore.exercises.answers import as_items, as_number, as_one_number, as_text, safe_repr, type_name
from labcore.exercises.core import Incorrect, NotAttempted, _is_blank
from labcore.exercises.data_parallel.reference import (
    CHECK_STEPS, DEEP_GRAD_BYTES, LR, PER_RANK, OverlappedBuckets, _accumulate, _finish_wait, _flat, _launch_async,
    _sgd, allreduce_buckets, allreduce_per_parameter, broadcast_start, buckets_of, loss_fn, make_model,
    recorded_loop, reference_params, start_model, train,
)
from labcore.exercises.live import LIMIT_S, on_every_size, warm_up


# -- checks --------------------------------------------------------------------------------------
def _run_check(cl, fn, answer, *args, reference, timeout: float = LIMIT_S):
    """Run ``fn(answer, *args)`` on every rank of ``cl``, after ``fn(reference, *args)`` has run there once
    (:func:`~labcore.exercises.live.warm_up`: the set-up is not timed); a hang or a rank's error is feedback."""
    from labcore.live.errors import ClusterError, CollectiveTimeout

    warm_up(cl, fn, reference, *args)
    try:
        return cl.call(fn, args=(answer, *args), timeout=timeout)
    except CollectiveTimeout as err:
        raise Incorrect(f"your code did not finish within {timeout:g} s on every rank (the check's own set-up is not "
                        "counted): an endless loop, or a rank waiting for a collective the others never issue? "
                        f"Where each rank was:\n{err}")
    except ClusterError as err:
        text = str(err)
        if "NotImplementedError" in text:
            raise NotAttempted()
        lines = [line for line in text.strip().splitlines() if line.strip()]
        raise Incorrect("a rank raised while running your code:\n" + "\n".join(lines[-4:]))


def _on_every_size(cluster, world_size: int, check_one) -> str:
    """``check_one(cl)`` at the learner's world size and at the others; the first size's remark, and the others'."""
    remarks = list(on_every_size(cluster, world_size, check_one))
    others = [str(n) for n, _ in remarks[1:]]
    return remarks[0][1] + (f" The same on {' and '.join(others)} ranks." if others else "")


def _compare(results: list, world_size: int, what: str = "your gradient averaging") -> str:
    """Compare every rank's parameters with single-process training; name the known mistakes."""
    import torch

    got = [r[0] for r in results]

    def same(a, b):
        return all(torch.allclose(x, y, rtol=1e-9, atol=1e-12) for x, y in zip(a, b))

    def like(variant="correct", lr=LR):
        return same(got, reference_params(world_size, lr=lr, variant=variant))

    if like():
        return f"After {CHECK_STEPS} steps all {world_size} ranks match single-process training on the whole batch."
    if like("sum"):
        raise Incorrect(f"every rank ends with the same parameters, but each update was {world_size} times too "
                        "large: all_reduce adds the ranks' gradients up, and the whole batch's gradient is their "
                        "mean.")
    if like("params_avg") or like("params_sum"):
        raise Incorrect("the parameters were combined across ranks, but each rank then stepped with the gradient "
                        "of its own slice of the batch, so the update is not the whole batch's. What has to "
                        "agree before the optimizer step is the gradient.")
    # the sum divided by another count than the ranks' (a fixed one, the ranks less one, or twice): plain SGD
    # then steps by a constant factor
    counts = ({k for k in range(2, 9)} | {world_size - 1, world_size ** 2}) - {0, 1, world_size}
    if any(like(lr=LR * world_size / k) for k in sorted(counts)):
        raise Incorrect("every rank ends with the same parameters, but each update had the wrong size: the sum "
                        "of the ranks' gradients was divided by something other than the number of ranks "
                        "whose gradients it adds up.")
    spread = max(float((g - got[0]).abs().max()) for g in got)
    if spread > 0:
        raise Incorrect(f"after {CHECK_STEPS} steps the ranks' parameters differ from each other (by up to "
                        f"{spread:.3g}): {what} leaves some gradients different on different ranks.")
    err = float((got[0] - reference_params(world_size)[0]).abs().max())
    raise Incorrect(f"the ranks agree with each other, but after {CHECK_STEPS} steps their parameters differ from "
                    f"single-process training on the whole batch by up to {err:.3g}.")


# (0) every rank starts from rank 0's model
class _SourcesDiffer(Exception):
    """Raised on every rank by a watched broadcast whose ranks named different sources."""

    def __init__(self, sources: list):
        super().__init__(f"sources {sources}")
        self.sources = sources


def _sent_recorder():
    """A dispatch mode that notes every collective code under it issues, by whatever name it was called
    (``dist.broadcast``, ``broadcast_object_list``, a ProcessGroup method: all reach c10d's dispatcher ops):
    ``(op, root, bytes, dtype)``, root -1 for an op without one. ``paused`` hides the check's own calls."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from labcore import collectives

    class Sent(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.log: list[tuple[str, int, int, str]] = []
            self.paused = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.name().split("::")[-1]
            if func.namespace in _C10D and not self.paused and name not in ("wait_tensor", "barrier"):
                tensors = [t for a in args[:1] for t in (a if isinstance(a, (list, tuple)) else [a])
                           if hasattr(t, "element_size")]
                root = int(args[2]) if name == "broadcast_" and len(args) > 2 else -1
                dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else ""
                self.log.append((collectives.c10d_function(name), root,
                                 sum(t.numel() * t.element_size() for t in tensors), dtype))
            return func(*args, **(kwargs or {}))

    return Sent()


# c10d's dispatcher namespaces
_C10D = ("c10d", "_c10d_functional", "c10d_functional")


@contextlib.contextmanager
def _same_source_broadcasts(sent):
    """While inside: before each ``dist.broadcast`` the ranks compare the source they name (an
    all-gather of it, hidden from ``sent``) and, where they differ, all raise :class:`_SourcesDiffer`
    instead of entering a broadcast that would never complete (each rank sends, none receives)."""
    import operator

    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    real, gather = c10d.broadcast, c10d.all_gather

    def broadcast(tensor, *args, **kwargs):
        src = kwargs.get("src", args[0] if args else None)
        group = kwargs.get("group", args[1] if len(args) > 1 else None)
        group_src = kwargs.get("group_src", args[3] if len(args) > 3 else None)
        try:
            named = [operator.index(src if src is not None else group_src), int(src is None)]
        except TypeError:
            return real(tensor, *args, **kwargs)          # no source, or not a rank: torch's own error
        mine = torch.tensor(named, dtype=torch.int64)
        everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        sent.paused = True
        try:
            gather(everyone, mine, group=group)
        finally:
            sent.paused = False
        if any(not torch.equal(e, everyone[0]) for e in everyone):
            raise _SourcesDiffer([int(e[0]) for e in everyone])
        return real(tensor, *args, **kwargs)

    saved = dist.broadcast, c10d.broadcast
    dist.broadcast = c10d.broadcast = broadcast
    try:
        yield
    finally:
        dist.broadcast, c10d.broadcast = saved


def _state(model) -> dict:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _start_and_sync(sync):
    """On every rank: build :func:`start_model` from a seed this rank draws now (so every rank starts
    from weights of its own that no other rank can rebuild, as when rank 0 alone has read the
    checkpoint), run ``sync(model)``, and return the state before and after (parameters and buffers by
    name) with the collectives it sent, or the sources the ranks named when they did not agree on one."""
    import os

    model = start_model(seed=int.from_bytes(os.urandom(4), "little"))
    start = _state(model)
    sent = _sent_recorder()
    try:
        with _same_source_broadcasts(sent), sent:
            sync(model)
    except _SourcesDiffer as differ:
        return {"sources": differ.sources}
    return {"start": start, "state": _state(model), "sent": sent.log}


def _check_start(answer, cluster=None, world_size: int = 4, timeout: float = LIMIT_S):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_start.check(sync_start, cluster=cl).")

    def check_one(cl):
        results = _run_check(cl, _start_and_sync, answer, reference=broadcast_start, timeout=timeout)
        return _start_on(results, cl.world_size)
    return _on_every_size(cluster, world_size, check_one)


def _start_on(results: list, world_size: int) -> str:
    """Compare every rank's state with rank 0's starting one and look at what was sent; name the known
    mistakes."""
    import torch

    sources = next((r["sources"] for r in results if "sources" in r), None)
    if sources is not None:
        named = ", ".join(f"rank {r} src={s}" for r, s in enumerate(sources))
        raise Incorrect(f"the ranks named different sources for the same broadcast ({named}). Every rank must "
                        "pass the same arguments to a collective: a rank that believes it is the source sends and "
                        "waits for no one, the others wait for a source that never sends to them, and the call "
                        "never completes (the check stopped it before it began).")
    got = [r["state"] for r in results]
    start = [r["start"] for r in results]
    model = start_model(0)
    params = [name for name, _ in model.named_parameters()]
    buffers = [name for name, _ in model.named_buffers()]

    def same(a, b, names):
        return all(torch.equal(a[k], b[k]) for k in names)

    if all(same(g, start[0], params + buffers) for g in got):
        return _start_sent(results, start[0], len(params), len(buffers), world_size)
    agree = all(same(g, got[0], params) for g in got)
    if agree and same(got[0], start[0], params):
        off = [k for k in buffers if not all(torch.equal(g[k], start[0][k]) for g in got)]
        raise Incorrect(f"every rank holds rank 0's parameters, but the buffers {', '.join(off)} still differ from "
                        "rank 0's. BatchNorm's running statistics are model state too: no gradient updates them and "
                        "model.eval() uses them, so replicas that differ there answer differently.")
    if agree:
        def combined(divide):
            return all(torch.allclose(got[0][k], sum(s[k] for s in start) / divide, rtol=1e-12, atol=1e-12)
                       for k in params)
        if combined(world_size) or combined(1):
            kind = "mean" if combined(world_size) else "sum"
            raise Incorrect(f"every rank holds the same parameters, but they are the {kind} of all ranks' starting "
                            "values, a model that no rank started from; rank 0's own values are lost.")
        other = next((r for r in range(1, world_size) if same(got[0], start[r], params)), None)
        if other is not None:
            raise Incorrect(f"every rank holds rank {other}'s starting parameters, not rank 0's.")
        raise Incorrect("every rank holds the same parameters, but not the ones rank 0 started with: they were "
                        "made anew or changed on every rank, rank 0 included. (The check starts each rank from "
                        "weights of its own that no seed rebuilds elsewhere, as when rank 0 alone has read a "
                        "checkpoint: its values have to be sent.)")
    kept = [r for r in range(1, world_size) if same(got[r], start[r], params)]
    if kept:
        raise Incorrect(f"{'rank' if len(kept) == 1 else 'ranks'} {', '.join(map(str, kept))} still "
                        f"{'holds' if len(kept) == 1 else 'hold'} the parameters {'it' if len(kept) == 1 else 'they'} "
                        "started with: your code did not write into the model's own tensors there (did it write "
                        "into a copy?).")
    spread = max(float((g[k].double() - got[0][k].double()).abs().max()) for g in got for k in params)
    raise Incorrect(f"after your code the ranks' parameters still differ from each other (by up to {spread:.3g}).")


def _start_sent(results: list, state: dict, n_params: int, n_buffers: int, world_size: int) -> str:
    """Every rank holds rank 0's state: refuse it unless broadcasts carried it, and carried its floating-point
    tensors once (integer broadcasts are counts and shapes: DDP sends some, as broadcast_object_list does)."""
    sent = results[0]["sent"]
    if not any(op == "broadcast" for op, _, _, _ in sent):
        others = sorted({op for op, _, _, _ in sent})
        raise Incorrect(f"every rank holds rank 0's values, but no broadcast carried them (the recorder saw "
                        f"{', '.join(others) or 'no collective'}). A broadcast sends rank 0's tensors once to each "
                        "other rank; an all-reduce of rank 0's values with zeros, or an all-gather of every rank's "
                        "model, moves the same values with more traffic and more to get wrong.")
    floats = sum(t.numel() * t.element_size() for t in state.values() if t.is_floating_point())
    sent_floats = sum(b for op, _, b, dtype in sent if op == "broadcast" and dtype.startswith(("float", "bfloat")))
    if sent_floats > floats:
        raise Incorrect(f"every rank holds rank 0's values, but the recorder saw broadcasts of {sent_floats} bytes of "
                        f"floating-point tensors for a model whose parameters and running statistics take {floats}: "
                        "some tensors were sent more than once.")
    count = sum(op == "broadcast" for op, _, _, _ in sent)
    moved = sum(b for op, _, b, _ in sent if op == "broadcast")
    return (f"All {world_size} ranks hold rank 0's {n_params} parameters and {n_buffers} buffers, bit for bit, "
            f"sent in {count} broadcast(s) from rank 0 ({moved} bytes).")


# (1) one all-reduce per parameter
def _check_average(answer, cluster=None, world_size: int = 4, timeout: float = LIMIT_S):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_average.check(average_gradients, cluster=cl).")

    def check_one(cl):
        results = _run_check(cl, train, answer, reference=allreduce_per_parameter, timeout=timeout)
        _one_per_parameter(results[0][1].collectives())
        return _compare(results, cl.world_size)
    return _on_every_size(cluster, world_size, check_one)


def _one_per_parameter(frame) -> None:
    """Refuse a step whose collectives are not one all-reduce per parameter (what the prompt asks)."""
    n_params = len(list(make_model().parameters()))
    for step in range(CHECK_STEPS):
        ops = frame[frame["step"] == step]["op"]
        others = sorted(set(ops) - {"all_reduce"})
        if others:
            raise Incorrect(f"the recorder saw {', '.join(others)} in a step: this version asks for one "
                            "dist.all_reduce per parameter's gradient.")
        calls = int((ops == "all_reduce").sum())
        if calls < n_params:
            raise Incorrect(f"the recorder counted {calls} all-reduce(s) in a step for the model's {n_params} "
                            "parameters: this version asks for one all-reduce per parameter's gradient (putting "
                            "several gradients into one all-reduce is the next exercise).")
        if calls > n_params:
            raise Incorrect(f"the recorder counted {calls} all-reduces in a step for the model's {n_params} "
                            "parameters: some gradients were all-reduced more than once.")


# (2) flattened buckets
# bucket_bytes of the check's second and third steps: each is the size of the first buckets of make_model()'s
# gradients exactly (64 + 2048 bytes, then + 256), so a bucket that closes only once it holds more than
# bucket_bytes, or one that stops short of it, comes out different from DDP's
EXACT_CAPS = (2112, 2368)


def _train_and_count(fn, caps):
    """On every rank: 3 steps with ``fn(model, caps[step])``; per step what the recorder saw: the bytes of
    each all-reduce, their dtypes, and the other collectives."""
    step = [0]

    def average(model):
        fn(model, caps[step[0] % len(caps)])
        step[0] += 1

    params, rec = train(average)
    frame = rec.collectives()
    seen = []
    for k in range(CHECK_STEPS):
        ops = frame[frame["step"] == k]
        reduces = ops[ops["op"] == "all_reduce"]
        seen.append(([int(b) for b in reduces["bytes"]], sorted(set(reduces["dtype"])),
                     sorted(set(ops["op"]) - {"all_reduce"})))
    return params, seen


# the flight recorder's names of the dtypes (what the recorder's "dtype" column holds)
_FR_DTYPES = {"float64": "double", "float32": "float", "float16": "half", "bfloat16": "bfloat16"}


def _bucket_bytes(params) -> list[int]:
    return [p.numel() * p.element_size() for p in params]


def _layouts(bucket_bytes: int, last_first: bool = True) -> list[list[int]]:
    """The bytes of each bucket, in order, of DDP's bucketing of :func:`make_model`'s gradients: a
    bucket is closed once it holds at least ``bucket_bytes`` (:func:`buckets_of`); with
    ``last_first=False`` the same rule walking the parameters first to last."""
    params = list(make_model().parameters())
    params = params if last_first else params[::-1]          # buckets_of walks them last to first
    return [[sum(_bucket_bytes(b)) for b in buckets_of(params, bucket_bytes)]]


def _rule_mistake(sent: list[int], cap: int) -> str | None:
    """What a bucketing with another closing rule than DDP's did, or None."""
    sizes = _bucket_bytes(reversed(list(make_model().parameters())))
    over, short, current = [], [], 0
    for b in sizes:                       # closed only once it holds more than cap
        current += b
        if current > cap:
            over.append(current)
            current = 0
    over += [current] if current else []
    for b in sizes:                       # closed before the next gradient would take it past cap
        if short and short[-1] + b <= cap:
            short[-1] += b
        else:
            short.append(b)
    if sent == over:
        return (f"with bucket_bytes = {cap} your buckets (the recorder saw all-reduces of {sent} bytes) closed only "
                f"once they held more than bucket_bytes: a bucket that holds exactly {cap} bytes is full.")
    if sent == short:
        return (f"with bucket_bytes = {cap} your buckets (the recorder saw all-reduces of {sent} bytes) never grew "
                "past bucket_bytes: a bucket was closed before a gradient that would not fit. DDP puts that gradient "
                "in and closes the bucket once it holds at least bucket_bytes, so a bucket may end larger.")
    return None


def _check_bucket_step(sent, dtypes, others, cap) -> None:
    """Refuse one step's all-reduces unless they are DDP's buckets for ``cap``, naming what differs."""
    grad_bytes = sum(_bucket_bytes(make_model().parameters()))
    per_step, n_calls = sum(sent), len(sent)
    if not sent and others:
        raise Incorrect(f"the recorder saw no all-reduce in a step, but {', '.join(others)}: whatever they add up to, "
                        "this exercise asks for one all-reduce per bucket, and those are what the recorder counts.")
    grad_dtype = str(next(make_model().parameters()).dtype).replace("torch.", "")
    cast = [d for d in dtypes if d != _FR_DTYPES.get(grad_dtype, grad_dtype)]
    if cast:
        raise Incorrect(f"the recorder saw buckets all-reduced as {', '.join(cast)} ({per_step} bytes in a step), but "
                        f"the gradients are {grad_dtype} ({grad_bytes} bytes): converting them shrinks the bytes sent "
                        "and rounds every gradient on the way.")
    if per_step < grad_bytes:
        raise Incorrect(f"the recorder saw {per_step} of the model's {grad_bytes} gradient bytes all-reduced in a "
                        "step: the gradients left over after the last full bucket were never averaged.")
    if per_step > grad_bytes:
        raise Incorrect(f"the recorder saw {per_step} bytes all-reduced in a step, more than the model's "
                        f"{grad_bytes} gradient bytes: some gradients travel twice.")
    layout = _layouts(cap)[0]
    if sent == layout:
        return
    n_params = len(list(make_model().parameters()))
    if n_calls >= n_params > len(layout):
        raise Incorrect(f"the recorder counted {n_calls} all-reduces in a step, one per parameter: flatten "
                        f"several gradients into each bucket (buckets of up to {cap} bytes here).")
    if sent == _layouts(cap, last_first=False)[0]:
        raise Incorrect(f"your buckets (the recorder saw all-reduces of {sent} bytes) were filled first layer "
                        "first. Backward produces the last layer's gradients first, so DDP fills its first "
                        "bucket from the end of model.parameters(): that bucket can leave while backward "
                        "is still computing the others.")
    rule = _rule_mistake(sent, cap)
    if rule:
        raise Incorrect(rule)
    if n_calls < len(layout):
        raise Incorrect(f"the recorder counted {n_calls} all-reduce(s) of {sent} bytes in a step: your buckets "
                        f"hold more than bucket_bytes = {cap} allows. Close a bucket once it is full.")
    raise Incorrect(f"the recorder saw all-reduces of {sent} bytes in a step with bucket_bytes = {cap}: that is not a "
                    "bucketing of the gradients last to first, each bucket closed once it holds bucket_bytes.")


def _check_buckets(answer, cluster=None, world_size: int = 4, bucket_bytes: int = 6000,
                   timeout: float = LIMIT_S):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_buckets.check(average_buckets, cluster=cl).")
    caps = (bucket_bytes, *EXACT_CAPS)

    def check_one(cl):
        results = _run_check(cl, _train_and_count, answer, caps, reference=allreduce_buckets, timeout=timeout)
        for (sent, dtypes, others), cap in zip(results[0][1], caps):
            _check_bucket_step(sent, dtypes, others, cap)
        return _compare(results, cl.world_size, "your bucketing")
    return _on_every_size(cluster, world_size, check_one)


# (3) launched from hooks, overlapping backward
class _Watched:
    """A collective's real handle, noting whether the learner waited on it (and whether that was
    inside launch, before backward could go on) and whether the learner's code changed its bucket in
    place before that (:func:`_in_place_watch` sets ``touched``)."""

    def __init__(self, work, bucket, inside=None, watch=None):
        self.work, self.waited, self.touched, self.waited_inside, self.settled = work, False, False, False, False
        self.bucket = bucket
        self._inside = inside if inside is not None else [False]
        if watch is not None:
            watch.handles.append(self)

    def _note_wait(self):
        self.waited = True
        self.waited_inside = self.waited_inside or self._inside[0]

    def wait(self, *args, **kwargs):
        self._note_wait()
        return self.work.wait(*args, **kwargs)

    def get_future(self, *args, **kwargs):
        return _WatchedFuture(self.work.get_future(*args, **kwargs), self)

    def __getattr__(self, name):
        return getattr(self.work, name)


class _WatchedFuture:
    """The Future of a watched handle: waiting on it (or on a future chained to it with ``then``)
    counts as waiting on the handle, and a ``then`` callback, which runs once the all-reduce is
    complete, may change the bucket (DDP's communication hooks divide there)."""

    def __init__(self, future, watched):
        self.future, self.watched = future, watched

    def wait(self, *args, **kwargs):
        self.watched._note_wait()
        return self.future.wait(*args, **kwargs)

    def value(self, *args, **kwargs):
        self.watched._note_wait()
        return self.future.value(*args, **kwargs)

    def then(self, callback, *args, **kwargs):
        watched = self.watched

        def after(future):
            watched.settled = True
            return callback(future)
        return _WatchedFuture(self.future.then(after, *args, **kwargs), watched)

    def __getattr__(self, name):
        return getattr(self.future, name)


def _written(func, args: tuple, kwargs: dict):
    """The tensors an op writes into (its schema's ``Tensor(a!)`` arguments, ``out=`` included)."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            yield from (value if isinstance(value, (list, tuple)) else [value])


def _in_place_watch():
    """A dispatch mode, entered around the learner's launch and finish, that marks a watched handle
    ``touched`` when the learner's code writes into its bucket's memory (``bucket /= n``, ``copy_``,
    ``out=``, through a view or ``.data``) before waiting on it. It sees only the learner's thread: a
    backend that finishes the reduction in its own (gloo divides for ``ReduceOp.AVG`` there) is not the
    learner changing the bucket."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class InPlace(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.handles: list[_Watched] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func._schema.is_mutable and func.namespace not in _C10D:
                memory = {t.untyped_storage().data_ptr() for t in _written(func, args, kwargs)
                          if isinstance(t, torch.Tensor) and t.numel()}
                for h in self.handles:
                    if not (h.waited or h.settled) and h.bucket.untyped_storage().data_ptr() in memory:
                        h.touched = True
            return func(*args, **kwargs)

    return InPlace()


@contextlib.contextmanager
def _watching_all_reduce(calls: list, inside: list, watch):
    """While inside: ``dist.all_reduce`` notes every call (blocking or not) in ``calls`` and hands
    out :class:`_Watched` handles, so that a wait inside launch is seen whatever launch returns
    (the order of events, not timing: gloo may finish a small all-reduce before anyone waits)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    real = c10d.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
        work = real(tensor, *args, **kwargs)
        if not async_op or work is None:
            calls.append("blocking")
            return work
        watched = _Watched(work, tensor, inside, watch)
        calls.append(watched)
        return watched

    saved = dist.all_reduce, c10d.all_reduce
    dist.all_reduce = c10d.all_reduce = all_reduce
    try:
        yield
    finally:
        dist.all_reduce, c10d.all_reduce = saved


def _train_overlapped(launch, finish, bucket_bytes: int):
    model = make_model()
    handles, issued = [], []        # per bucket launched: what launch returned, what it issued
    inside, finished_in_launch = [False], set()
    watch = _in_place_watch()

    def watched_launch(flat):
        calls = []
        inside[0] = True
        try:
            with _watching_all_reduce(calls, inside, watch), watch:
                work = launch(flat)
        finally:
            inside[0] = False
        issued.append(calls)
        if "blocking" in calls or any(c != "blocking" and c.waited_inside for c in calls):
            finished_in_launch.add(id(flat))        # the check refuses it; finish need not cope with it
        if work is None or _is_blank(work):
            handles.append(None)
            return None
        if not any(work is c for c in calls):
            work = _Watched(work, flat, inside, watch)
        handles.append(work)
        return work

    def checked_finish(handle, flat):
        if id(flat) in finished_in_launch:
            finished_in_launch.discard(id(flat))
        elif handle is not None:
            with watch:
                finish(handle, flat)

    hooked = OverlappedBuckets(model, bucket_bytes, watched_launch, checked_finish)

    def one_step(x, y):
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        hooked.finish()
        _sgd(model, LR)

    frame = recorded_loop("overlapped", one_step).collectives()
    hooked.remove()
    touched = sum(h is not None and (h.touched or any(c != "blocking" and c.touched for c in calls))
                  for h, calls in zip(handles, issued))
    return dict(params=_flat(model), no_handle=sum(h is None for h in handles),
                unwaited=sum(h is not None and not h.waited for h in handles),
                all_reduces=int((frame["op"] == "all_reduce").sum()), touched=touched,
                blocking=sum(1 for calls in issued if "blocking" in calls),
                waited_inside=sum(1 for calls in issued if any(c != "blocking" and c.waited_inside for c in calls)),
                launched=len(issued))


def _train_overlapped_pair(pair, bucket_bytes: int):
    return _train_overlapped(*pair, bucket_bytes)


def _check_overlap(answer, cluster=None, world_size: int = 4, bucket_bytes: int = 6000,
                   timeout: float = LIMIT_S):
    pair = as_items(answer) if issubclass(type(answer), (tuple, list)) else None
    if pair is None or len(pair) != 2:
        raise Incorrect("pass your two functions as a pair: q_overlap.check((launch, finish), cluster=cl).")
    launch, finish = pair
    if _is_blank(launch) or _is_blank(finish):
        raise NotAttempted()
    if not (callable(launch) and callable(finish)):
        raise Incorrect("both launch and finish must be functions.")
    return _on_every_size(cluster, world_size, lambda cl: _overlap_on(cl, launch, finish, bucket_bytes, timeout))


def _overlap_on(cl, launch, finish, bucket_bytes: int, timeout: float) -> str:
    results = _run_check(cl, _train_overlapped_pair, (launch, finish), bucket_bytes,
                         reference=(_launch_async, _finish_wait), timeout=timeout)
    worst = {key: max(r[key] for r in results) for key in ("no_handle", "unwaited", "touched", "blocking",
                                                             "waited_inside", "launched")}
    if worst["no_handle"]:
        raise Incorrect(f"launch returned no handle for {worst['no_handle']} bucket(s): a blocking all-reduce "
                        "finishes inside the hook, so backward stops for it and nothing overlaps. Start the "
                        "all-reduce and hand back what lets you finish it later.")
    if worst["blocking"]:
        raise Incorrect(f"launch ran a blocking all-reduce for {worst['blocking']} of the {worst['launched']} "
                        f"buckets it launched in {CHECK_STEPS} steps: it finishes inside the hook, so backward "
                        "stops for it and nothing overlaps, whatever launch then returns. Start the all-reduce and "
                        "hand back what lets you finish it later.")
    if worst["waited_inside"]:
        raise Incorrect(f"launch waited for its all-reduce before returning, for {worst['waited_inside']} of the "
                        f"{worst['launched']} buckets it launched in {CHECK_STEPS} steps: the hook then holds "
                        "backward until the bucket is reduced, so nothing overlaps. Waiting belongs after backward.")
    if worst["unwaited"]:
        raise Incorrect(f"{worst['unwaited']} bucket handle(s) were never waited on before the optimizer step: the "
                        "step may then read a bucket that is still being reduced (the result depends on timing).")
    if worst["touched"]:
        raise Incorrect(f"{worst['touched']} bucket(s) were changed in place before waiting on the handle: until "
                        "wait() returns the all-reduce may still be writing the bucket, so the result depends on "
                        "timing.")
    return _compare([(r["params"],) for r in results], cl.world_size, "your launch/finish pair")


# (4) gradient accumulation with torch's DDP
MICRO = 2        # micro-batches per step on the learner's cluster; 4 on the other sizes' (a count not built in)


def _train_accumulate(step_fn, micro: int = MICRO):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model()
    ddp = DDP(model, bucket_cap_mb=1.0)           # one bucket: the model is 15 KB
    # what the step does with the model: the batch size of every forward, and how many backward
    # passes reach the parameters (the first layer's weight accumulates once per backward)
    seen = {"sizes": [], "backwards": 0}
    hooks = [model.register_forward_hook(lambda m, args, out: seen["sizes"].append(int(args[0].shape[0]))),
             next(model.parameters()).register_post_accumulate_grad_hook(
                 lambda p: seen.__setitem__("backwards", seen["backwards"] + 1))]
    passes = []

    def one_step(x, y):
        model.zero_grad(set_to_none=True)
        seen["sizes"], seen["backwards"] = [], 0
        step_fn(ddp, list(zip(x.chunk(micro), y.chunk(micro))))
        passes.append((list(seen["sizes"]), seen["backwards"]))
        _sgd(model, LR)

    frame = recorded_loop("accumulate", one_step).collectives()
    for h in hooks:
        h.remove()
    reduces = frame[frame["op"] == "all_reduce"].groupby("step")["bytes"]
    calls = reduces.size().reindex(range(CHECK_STEPS), fill_value=0)
    sent = reduces.sum().reindex(range(CHECK_STEPS), fill_value=0)
    return _flat(model), calls.tolist(), micro, passes, [int(b) for b in sent]


def _check_accumulate(answer, cluster=None, world_size: int = 4, timeout: float = LIMIT_S):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_accumulate.check(accumulation_step, cluster=cl).")
    first = []

    def check_one(cl):
        micro = MICRO if not first else 2 * MICRO
        first.append(cl.world_size)
        results = _run_check(cl, _train_accumulate, answer, micro, reference=_accumulate, timeout=timeout)
        try:
            return _accumulate_on(results, cl.world_size)
        except Incorrect as wrong:
            if micro == MICRO or f"with {micro} micro-batches" in str(wrong):
                raise
            raise Incorrect(f"with {micro} micro-batches a step: {wrong}") from None
    return _on_every_size(cluster, world_size, check_one)


def _accumulate_on(results: list, world_size: int) -> str:
    calls, micro, passes, sent = results[0][1], results[0][2], results[0][3], results[0][4]
    size = PER_RANK // micro
    for sizes, backwards in passes:
        if not sizes:
            raise Incorrect("the model ran no forward pass in a step: run each micro-batch through ddp.")
        if max(sizes) > size:
            raise Incorrect(f"in a step the model ran {len(sizes)} forward pass(es) on {sizes} samples, but each "
                            f"micro-batch holds {size}: the micro-batches were put back together. Accumulation "
                            "exists so that no forward or backward ever holds more than one micro-batch (the whole "
                            "batch's activations need not fit in memory).")
        if backwards < len(sizes):
            raise Incorrect(f"in a step the model ran {len(sizes)} forward passes but only {backwards} backward "
                            "pass(es) reached its parameters: the graphs of several micro-batches (their "
                            "activations) were kept until one backward at the end, which is the memory "
                            "accumulation exists to save.")
    grad_bytes = sum(p.numel() * p.element_size() for p in make_model().parameters())
    if min(calls) == 0:
        raise Incorrect("the recorder saw a step with no all-reduce at all: the gradients were never "
                        "synchronised, so every rank stepped with its own.")
    # the model fits in one bucket, so a step that synchronises once makes one all-reduce: a second one is
    # already traffic the prompt's "as little as possible" rules out
    if max(calls) > 1 and max(sent) <= grad_bytes:
        raise Incorrect(f"the recorder counted {max(calls)} all-reduces in a step, together {max(sent)} bytes: the "
                        "gradients crossed once, but piece by piece. The model fits in one bucket, which DDP "
                        "would send as one all-reduce.")
    if max(calls) > 1:
        when = ("after every micro-batch" if max(calls) >= micro else
                f"after {max(calls)} of the {micro} micro-batches")
        raise Incorrect(f"the recorder counted {max(calls)} all-reduces in a step of {micro} micro-batches "
                        f"(the model fits in one bucket): the gradients were synchronised {when}, though only "
                        "their sum at the end is needed.")
    got = [r[0] for r in results]
    if max(calls) == 1 and any(float((g - got[0]).abs().max()) > 0 for g in got):
        raise Incorrect("the recorder saw one all-reduce a step, yet the ranks' parameters differ: it ran in a "
                        "backward before the last, so what the later micro-batches added stayed on each rank.")
    import torch

    for k in sorted({1, 2, 3, 4, 8} - {micro}):      # each loss scaled by a fixed 1/k, not 1/len(micro_batches)
        want = reference_params(world_size, lr=LR * micro / k)
        if all(torch.allclose(g, w, rtol=1e-9, atol=1e-12) for g, w in zip(got, want)):
            raise Incorrect(f"with {micro} micro-batches the gradients added up to {micro / k:g} times the whole "
                            "batch's: each micro-batch's loss was scaled by a number of its own, not by "
                            "1 / len(micro_batches).")
    return _compare([(r[0],) for r in results], world_size, "your accumulation step")


# (5) bytes per step
# answers in other units than bytes: (factor that turns bytes into them, the unit's name)
_BYTE_UNITS = [(1e-3, "kB"), (1e-6, "MB"), (1e-9, "GB"), (2 ** -10, "KiB"), (2 ** -20, "MiB"), (2 ** -30, "GiB"),
               (8, "bits")]


DDP_RANKS = 4      # the ranks notebook 05's DDP runs on


def _check_bytes_setup(grad_bytes, ranks) -> None:
    """The check knows the notebook's G and n; refuse other ones, blaming the arguments, not the answer."""
    def number(v):
        v = as_number(v)
        return v if v is not None and math.isfinite(v) else None

    g, n = number(grad_bytes), number(ranks)
    if g is None or g != DEEP_GRAD_BYTES:
        raise Incorrect(f"the check was given grad_bytes={safe_repr(grad_bytes)}, which is not the gradient bytes of this "
                        f"notebook's model: its float32 gradients take G = {DEEP_GRAD_BYTES} bytes (the grad_bytes "
                        "printed above). Pass that G unchanged (or leave grad_bytes out) and answer in bytes.")
    if n is None or n != DDP_RANKS:
        raise Incorrect(f"the check was given ranks={safe_repr(ranks)}, but this notebook's DDP runs on n = {DDP_RANKS} "
                        "ranks. Pass ranks=4 (or leave it out); the question is about those ranks.")


def _check_ddp_bytes(answer, grad_bytes: float = DEEP_GRAD_BYTES, ranks: int = DDP_RANKS):
    _check_bytes_setup(grad_bytes, ranks)
    grad_bytes, ranks = DEEP_GRAD_BYTES, DDP_RANKS
    value = as_one_number(answer)
    if value is None or as_text(answer) is not None:
        raise Incorrect(f"expected a number of bytes (no quotes), got {type_name(answer)} {safe_repr(answer)}.")
    value = float(value)
    if not math.isfinite(value):
        raise Incorrect("expected a finite number of bytes.")
    want = 2 * (ranks - 1) / ranks * grad_bytes
    if math.isclose(value, want, rel_tol=1e-3):
        return None
    known = [(grad_bytes, "that is the gradient buffer itself; in a ring every rank sends its share of it once "
                          "while reducing and once more while gathering."),
             (2 * grad_bytes, "close, but a rank never sends the chunk it keeps: of the n chunks, it sends n-1 in "
                              "each of the two phases."),
             (2 * ranks / (ranks - 1) * grad_bytes, "the fraction is upside down: of the n chunks a rank sends "
                                                    "n-1 in each phase, which is less than the whole buffer."),
             ((ranks - 1) / ranks * grad_bytes, "that counts one phase of the ring (reduce-scatter); the "
                                                "all-gather phase sends as much again."),
             (2 * (ranks - 1) * grad_bytes, "each step of the ring sends one chunk (1/n of the buffer), not the "
                                            "whole buffer.")]
    for v, message in known:
        if math.isclose(value, v, rel_tol=1e-3):
            raise Incorrect(message)
    for factor, unit in _BYTE_UNITS:
        if math.isclose(value, want * factor, rel_tol=1e-3):
            raise Incorrect(f"that looks like the right amount in {unit}; the question asks for bytes.")
    raise Incorrect("that is not within 0.1% of what each rank sends per step. Count the steps of a ring "
                    f"all-reduce on {ranks} ranks and the bytes each rank sends per step.")
