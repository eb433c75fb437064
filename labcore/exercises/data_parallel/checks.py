"""The live checks of notebook 05's exercises: each runs the learner's code on the ranks, records
its collectives and compares every rank's parameters with single-process training."""
from __future__ import annotations

import contextlib
import math

from labcore.exercises.core import Incorrect, NotAttempted, _is_blank
from labcore.exercises.data_parallel.reference import (
    CHECK_STEPS, DEEP_GRAD_BYTES, LR, PER_RANK, OverlappedBuckets, _flat, _sgd, buckets_of, loss_fn, make_model,
    recorded_loop, reference_params, train,
)


# live checks: the cluster call's own timeout bounds them (and reports where a rank hung)
_LIVE = {"time_limit": None}


# -- checks --------------------------------------------------------------------------------------
def _cluster(cluster, world_size: int):
    if cluster is not None:
        return cluster
    from labcore.live.magic import get_cluster

    return get_cluster(world_size)


def _run_check(cluster, world_size: int, fn, *args, timeout: float = 30.0):
    """Run ``fn(*args)`` on every rank; turn a hang or a rank's error into feedback."""
    from labcore.live.errors import ClusterError, CollectiveTimeout

    cl = _cluster(cluster, world_size)
    try:
        return cl.call(fn, args=args, timeout=timeout)
    except CollectiveTimeout as err:
        raise Incorrect(f"the ranks did not finish within {timeout:g} s: some rank waits for a collective the "
                        f"others never issue. Where each rank was stuck:\n{err}")
    except ClusterError as err:
        text = str(err)
        if "NotImplementedError" in text:
            raise NotAttempted()
        lines = [line for line in text.strip().splitlines() if line.strip()]
        raise Incorrect("a rank raised while running your code:\n" + "\n".join(lines[-4:]))


def _compare(results: list, world_size: int, what: str = "your gradient averaging") -> str:
    """Compare every rank's parameters with single-process training; name the known mistakes."""
    import torch

    got = [r[0] for r in results]
    variants = {v: reference_params(world_size, variant=v) for v in ("correct", "sum", "params_avg", "params_sum")}
    # the mean taken over another count than the ranks': plain SGD then steps by a constant factor
    scaled = [reference_params(world_size, lr=LR * c) for c in (world_size / (world_size - 1), 1 / world_size)]

    def same(a, b):
        return all(torch.allclose(x, y, rtol=1e-9, atol=1e-12) for x, y in zip(a, b))

    if same(got, variants["correct"]):
        return f"After {CHECK_STEPS} steps all {world_size} ranks match single-process training on the whole batch."
    if same(got, variants["sum"]):
        raise Incorrect(f"every rank ends with the same parameters, but each update was {world_size} times too "
                        "large: all_reduce adds the ranks' gradients up, and the whole batch's gradient is their "
                        "mean.")
    if same(got, variants["params_avg"]) or same(got, variants["params_sum"]):
        raise Incorrect("the parameters were combined across ranks, but each rank then stepped with the gradient "
                        "of its own slice of the batch, so the update is not the whole batch's. What has to "
                        "agree before the optimizer step is the gradient.")
    if any(same(got, v) for v in scaled):
        raise Incorrect("every rank ends with the same parameters, but each update had the wrong size: the sum "
                        "of the ranks' gradients was divided by something other than the number of ranks "
                        "whose gradients it adds up.")
    spread = max(float((g - got[0]).abs().max()) for g in got)
    if spread > 0:
        raise Incorrect(f"after {CHECK_STEPS} steps the ranks' parameters differ from each other (by up to "
                        f"{spread:.3g}): {what} leaves some gradients different on different ranks.")
    err = float((got[0] - variants["correct"][0]).abs().max())
    raise Incorrect(f"the ranks agree with each other, but after {CHECK_STEPS} steps their parameters differ from "
                    f"single-process training on the whole batch by up to {err:.3g}.")


# (1) one all-reduce per parameter
def _check_average(answer, cluster=None, world_size: int = 4, timeout: float = 30.0):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_average.check(average_gradients, cluster=cl).")
    return _compare(_run_check(cluster, world_size, train, answer, timeout=timeout), world_size)


# (2) flattened buckets
def _train_and_count(fn, bucket_bytes: int):
    params, rec = train(lambda m: fn(m, bucket_bytes))
    frame = rec.collectives()
    first = frame[frame["step"] == 0]
    reduces = first[first["op"] == "all_reduce"]
    return (params, [int(b) for b in reduces["bytes"]], sorted(set(reduces["dtype"])),
            sorted(set(first["op"]) - {"all_reduce"}))


# the flight recorder's names of the dtypes (what the recorder's "dtype" column holds)
_FR_DTYPES = {"float64": "double", "float32": "float", "float16": "half", "bfloat16": "bfloat16"}


def _layouts(bucket_bytes: int, last_first: bool = True) -> list[list[int]]:
    """The bytes of each bucket, in order, that a bucketing of :func:`make_model`'s gradients
    gives when it closes a bucket once it holds at least ``bucket_bytes`` (DDP's rule,
    :func:`buckets_of`) or before the next gradient would pass ``bucket_bytes``."""
    params = list(make_model().parameters())
    params = params if last_first else params[::-1]          # buckets_of walks them last to first
    at_least = [sum(p.numel() * p.element_size() for p in b) for b in buckets_of(params, bucket_bytes)]
    at_most = []
    for b in (p.numel() * p.element_size() for p in reversed(params)):
        if at_most and at_most[-1] + b <= bucket_bytes:
            at_most[-1] += b
        else:
            at_most.append(b)
    return [at_least, at_most]


def _check_buckets(answer, cluster=None, world_size: int = 4, bucket_bytes: int = 6000,
                   timeout: float = 30.0):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_buckets.check(average_buckets, cluster=cl).")
    results = _run_check(cluster, world_size, _train_and_count, answer, bucket_bytes, timeout=timeout)
    sent, dtypes, others = results[0][1], results[0][2], results[0][3]
    grad_bytes = sum(p.numel() * p.element_size() for p in make_model().parameters())
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
    n_params = len(list(make_model().parameters()))
    if n_calls >= n_params:
        raise Incorrect(f"the recorder counted {n_calls} all-reduces in a step, one per parameter: flatten "
                        f"several gradients into each bucket (buckets of up to {bucket_bytes} bytes here).")
    if sent not in _layouts(bucket_bytes):
        if sent in _layouts(bucket_bytes, last_first=False):
            raise Incorrect(f"your buckets (the recorder saw all-reduces of {sent} bytes) were filled first layer "
                            "first. Backward produces the last layer's gradients first, so DDP fills its first "
                            "bucket from the end of model.parameters(): that bucket can leave while backward "
                            "is still computing the others.")
        if n_calls < min(len(layout) for layout in _layouts(bucket_bytes)):
            raise Incorrect(f"the recorder counted {n_calls} all-reduce(s) of {sent} bytes in a step: your buckets "
                            f"hold more than bucket_bytes = {bucket_bytes} allows. Close a bucket once it is full.")
        raise Incorrect(f"the recorder saw all-reduces of {sent} bytes in a step: that is not a bucketing of the "
                        "gradients last to first, each bucket closed once it holds bucket_bytes.")
    return _compare(results, world_size, "your bucketing")


# (3) launched from hooks, overlapping backward
class _Watched:
    """A collective's real handle, noting whether the learner waited on it (and whether that was
    inside launch, before backward could go on) and whether the bucket was changed in place
    before that (an all-reduce leaves the tensor's version counter alone; ``bucket /= n`` bumps it)."""

    def __init__(self, work, bucket, inside=None):
        self.work, self.waited, self.touched, self.waited_inside = work, False, False, False
        self._bucket, self._version = bucket, getattr(bucket, "_version", None)
        self._inside = inside if inside is not None else [False]

    def _note_wait(self):
        if not self.waited and self._version is not None:
            self.touched = self._bucket._version != self._version
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
    """The Future of a watched handle: waiting on it counts as waiting on the handle."""

    def __init__(self, future, watched):
        self.future, self.watched = future, watched

    def wait(self, *args, **kwargs):
        self.watched._note_wait()
        return self.future.wait(*args, **kwargs)

    def value(self, *args, **kwargs):
        self.watched._note_wait()
        return self.future.value(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.future, name)


@contextlib.contextmanager
def _watching_all_reduce(calls: list, inside: list):
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
        watched = _Watched(work, tensor, inside)
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

    def watched_launch(flat):
        calls = []
        inside[0] = True
        try:
            with _watching_all_reduce(calls, inside):
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
            work = _Watched(work, flat, inside)
        handles.append(work)
        return work

    def checked_finish(handle, flat):
        if id(flat) in finished_in_launch:
            finished_in_launch.discard(id(flat))
        elif handle is not None:
            finish(handle, flat)

    hooked = OverlappedBuckets(model, bucket_bytes, watched_launch, checked_finish)

    def one_step(x, y):
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        hooked.finish()
        _sgd(model, LR)

    frame = recorded_loop("overlapped", one_step).collectives()
    hooked.remove()
    return dict(params=_flat(model), no_handle=sum(h is None for h in handles),
                unwaited=sum(h is not None and not h.waited for h in handles),
                all_reduces=int((frame["op"] == "all_reduce").sum()),
                touched=sum(h is not None and h.touched for h in handles),
                blocking=sum(1 for calls in issued if "blocking" in calls),
                waited_inside=sum(1 for calls in issued if any(c != "blocking" and c.waited_inside for c in calls)),
                launched=len(issued))


def _check_overlap(answer, cluster=None, world_size: int = 4, bucket_bytes: int = 6000,
                   timeout: float = 30.0):
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Incorrect("pass your two functions as a pair: q_overlap.check((launch, finish), cluster=cl).")
    launch, finish = answer
    if _is_blank(launch) or _is_blank(finish):
        raise NotAttempted()
    if not (callable(launch) and callable(finish)):
        raise Incorrect("both launch and finish must be functions.")
    results = _run_check(cluster, world_size, _train_overlapped, launch, finish, bucket_bytes, timeout=timeout)
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
    return _compare([(r["params"],) for r in results], world_size, "your launch/finish pair")


# (4) gradient accumulation with torch's DDP
MICRO = 2        # micro-batches per step in the check


def _train_accumulate(step_fn):
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
        step_fn(ddp, list(zip(x.chunk(MICRO), y.chunk(MICRO))))
        passes.append((list(seen["sizes"]), seen["backwards"]))
        _sgd(model, LR)

    frame = recorded_loop("accumulate", one_step).collectives()
    for h in hooks:
        h.remove()
    reduces = frame[frame["op"] == "all_reduce"].groupby("step")["bytes"]
    calls = reduces.size().reindex(range(CHECK_STEPS), fill_value=0)
    sent = reduces.sum().reindex(range(CHECK_STEPS), fill_value=0)
    return _flat(model), calls.tolist(), MICRO, passes, [int(b) for b in sent]


def _check_accumulate(answer, cluster=None, world_size: int = 4, timeout: float = 30.0):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_accumulate.check(accumulation_step, cluster=cl).")
    results = _run_check(cluster, world_size, _train_accumulate, answer, timeout=timeout)
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
    if max(calls) >= micro and micro > 1 and max(sent) <= grad_bytes:
        raise Incorrect(f"the recorder counted {max(calls)} all-reduces in a step, together {max(sent)} bytes: the "
                        "gradients crossed once, but piece by piece. The model fits in one bucket, which DDP "
                        "would send as one all-reduce.")
    if max(calls) >= micro and micro > 1:
        raise Incorrect(f"the recorder counted {max(calls)} all-reduces in a step of {micro} micro-batches "
                        "(the model fits in one bucket): the gradients were synchronised after every "
                        "micro-batch, though only their sum at the end is needed.")
    got = [r[0] for r in results]
    if max(calls) == 1 and any(float((g - got[0]).abs().max()) > 0 for g in got):
        raise Incorrect("the recorder saw one all-reduce a step, yet the ranks' parameters differ: it ran in a "
                        "backward before the last, so what the later micro-batches added stayed on each rank.")
    return _compare([(r[0],) for r in results], world_size, "your accumulation step")


# (5) bytes per step
# answers in other units than bytes: (factor that turns bytes into them, the unit's name)
_BYTE_UNITS = [(1e-3, "kB"), (1e-6, "MB"), (1e-9, "GB"), (2 ** -10, "KiB"), (2 ** -20, "MiB"), (2 ** -30, "GiB"),
               (8, "bits")]


DDP_RANKS = 4      # the ranks notebook 05's DDP runs on


def _check_bytes_setup(grad_bytes, ranks) -> None:
    """The check knows the notebook's G and n; refuse other ones, blaming the arguments, not the answer."""
    def number(v):
        if isinstance(v, (str, bytes, bool)):
            return None
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None
        return v if math.isfinite(v) else None

    g, n = number(grad_bytes), number(ranks)
    if g is None or g != DEEP_GRAD_BYTES:
        raise Incorrect(f"the check was given grad_bytes={grad_bytes!r}, which is not the gradient bytes of this "
                        f"notebook's model: its float32 gradients take G = {DEEP_GRAD_BYTES} bytes (the grad_bytes "
                        "printed above). Pass that G unchanged (or leave grad_bytes out) and answer in bytes.")
    if n is None or n != DDP_RANKS:
        raise Incorrect(f"the check was given ranks={ranks!r}, but this notebook's DDP runs on n = {DDP_RANKS} "
                        "ranks. Pass ranks=4 (or leave it out); the question is about those ranks.")


def _check_ddp_bytes(answer, grad_bytes: float = DEEP_GRAD_BYTES, ranks: int = DDP_RANKS):
    _check_bytes_setup(grad_bytes, ranks)
    grad_bytes, ranks = DEEP_GRAD_BYTES, DDP_RANKS
    if isinstance(answer, (str, bytes, bool)):
        raise Incorrect(f"expected a number of bytes, got {type(answer).__name__} {answer!r}.")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        raise Incorrect(f"expected a number of bytes, got {type(answer).__name__} {answer!r}.")
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
    raise Incorrect("that is not what each rank sends per step. Count the steps of a ring all-reduce on "
                    f"{ranks} ranks and the bytes each rank sends per step.")
