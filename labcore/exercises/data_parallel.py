"""Data parallelism from scratch (notebook 05): reference code, and exercises that answer back.

Every rank holds a full copy of a small model and trains on its own slice of each batch;
communication keeps the copies equal. The pieces, each a reference beside torch's own DDP:

- :func:`make_model`, :func:`global_batch`, :func:`local_batch`: one deterministic model and
  data, so that every check can compare against single-process training on the whole batch;
- :func:`replicas_differ`: how far the ranks' parameters are from rank 0's (the drift demo);
- three ways to average gradients: :func:`allreduce_per_parameter`, :func:`allreduce_buckets`
  (flattened buckets) and :class:`OverlappedBuckets` (buckets launched from gradient hooks with
  ``async_op=True`` while backward goes on);
- :func:`train` runs a few SGD steps with any of them (or torch's DDP) and records them.

Exercises (each check runs your code on a live cluster, 3 steps, and compares every rank's
parameters with single-process training on the concatenated batch):

- :data:`q_average`: average gradients with one all-reduce per parameter;
- :data:`q_buckets`: the same with flattened buckets;
- :data:`q_overlap`: launch and finish buckets from gradient hooks;
- :data:`q_accumulate`: gradient accumulation with torch's DDP (communication counted by the
  recorder);
- :data:`q_ddp_bytes`: the bytes each rank sends in one DDP step.

Example (on a rank)
-------------------
>>> params, rec = train(allreduce_per_parameter)      # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable

from labcore.exercises.core import CustomExercise, Incorrect, NotAttempted, _is_blank

__all__ = ["DIMS", "DEEP", "DEEP_GRAD_BYTES", "make_model", "global_batch", "local_batch", "loss_fn", "replicas_differ",
           "allreduce_per_parameter", "allreduce_buckets", "buckets_of", "OverlappedBuckets", "sgd_steps",
           "recorded_loop", "train",
           "ddp_train", "reference_params",
           "q_average", "q_buckets", "q_overlap", "q_accumulate", "q_ddp_bytes"]

DIMS = (16, 32, 32, 8)
DEEP = (64,) + (128,) * 8 + (10,)   # the deeper MLP the notebook times: 9 layers, 7 of them 128 x 128
# its gradient bytes in float32 (weights and biases): the G of notebook 05's bytes-per-step question
DEEP_GRAD_BYTES = 4 * sum(a * b + b for a, b in zip(DEEP[:-1], DEEP[1:]))
PER_RANK = 4          # samples per rank per step
LR = 0.1
CHECK_STEPS = 3
# live checks: the cluster call's own timeout bounds them (and reports where a rank hung)
_LIVE = {"time_limit": None}


# -- model and data, the same on every rank --------------------------------------------------
def make_model(seed: int = 0, dims=DIMS, dtype=None):
    """An MLP (Linear/Tanh) with weights drawn from ``seed``; float64 unless told otherwise.

    Every rank that calls it with the same seed holds the same weights.

    Example
    -------
    >>> sum(p.numel() for p in make_model().parameters())
    1864
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        lin = torch.nn.Linear(a, b, dtype=dtype or torch.float64)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=g, dtype=lin.weight.dtype) / math.sqrt(a))
            lin.bias.copy_(torch.randn(b, generator=g, dtype=lin.bias.dtype) * 0.1)
        layers.append(lin)
        if i < len(dims) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def global_batch(step: int, size: int, dims=DIMS, dtype=None):
    """The whole batch of training step ``step``: ``size`` samples (x, y), the same everywhere."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    dtype = dtype or torch.float64
    return (torch.randn(size, dims[0], generator=g, dtype=dtype),
            torch.randn(size, dims[-1], generator=g, dtype=dtype))


def local_batch(step: int, rank: int, world_size: int, per_rank: int = PER_RANK, dims=DIMS, dtype=None):
    """Rank ``rank``'s slice of :func:`global_batch` (rows ``rank*per_rank`` onwards)."""
    x, y = global_batch(step, world_size * per_rank, dims, dtype)
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    return x[rows], y[rows]


def loss_fn(out, y):
    """Mean squared error: the mean over a rank's slice; averaging it over ranks gives the whole batch's."""
    return ((out - y) ** 2).mean()


def _flat(model):
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def replicas_differ(model) -> float:
    """On every rank: the largest difference between this rank's parameters and rank 0's."""
    import torch.distributed as dist

    mine = _flat(model)
    theirs = mine.clone()
    dist.broadcast(theirs, 0)
    return float((mine - theirs).abs().max())


def sgd_steps(model, steps: int = CHECK_STEPS, average: Callable | None = None, lr: float = LR,
              first_step: int = 0) -> None:
    """On every rank: ``steps`` SGD steps of ``model`` on this rank's slices of the batches,
    calling ``average(model)`` between backward and the update (None: no communication)."""
    import torch
    import torch.distributed as dist

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    dims = (linears[0].in_features, linears[-1].out_features)
    rank, n = dist.get_rank(), dist.get_world_size()
    for step in range(first_step, first_step + steps):
        x, y = local_batch(step, rank, n, dims=dims, dtype=linears[0].weight.dtype)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        if average is not None:
            average(model)
        _sgd(model, lr)


# -- three ways to average gradients ----------------------------------------------------------
def allreduce_per_parameter(model) -> None:
    """One blocking all-reduce per parameter's gradient, then divide by the number of ranks."""
    import torch.distributed as dist

    n = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= n


def buckets_of(params, bucket_bytes: int) -> list[list]:
    """Group parameters into buckets the way DDP's reducer does: walk them last to first (the
    last layers' gradients are ready first in backward) and close a bucket once it holds at least
    ``bucket_bytes`` (torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size).

    Example
    -------
    >>> [len(b) for b in buckets_of(make_model().parameters(), 6000)]
    [4, 2]
    """
    buckets, current, size = [], [], 0
    for p in reversed(list(params)):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= bucket_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)          # the last, partly filled bucket counts too
    return buckets


def allreduce_buckets(model, bucket_bytes: int = 1024) -> None:
    """Flatten the gradients into buckets, one all-reduce per bucket, copy the averages back."""
    for bucket in buckets_of(model.parameters(), bucket_bytes):
        _allreduce_bucket(bucket)


def _allreduce_bucket(bucket, mean: bool = True) -> None:
    """All-reduce one bucket's gradients as one flat tensor; put the mean (or the sum) back."""
    import torch
    import torch.distributed as dist

    flat = torch.cat([p.grad.reshape(-1) for p in bucket])
    dist.all_reduce(flat)
    if mean:
        flat /= dist.get_world_size()
    _copy_back(flat, bucket)


def _copy_back(flat, bucket) -> None:
    """Each parameter's part of the flat bucket back into its ``.grad``."""
    offset = 0
    for p in bucket:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()


def _launch_async(bucket):
    import torch.distributed as dist

    return dist.all_reduce(bucket, async_op=True)


def _finish_wait(handle, bucket):
    import torch.distributed as dist

    handle.wait()
    bucket /= dist.get_world_size()


class OverlappedBuckets:
    """Buckets all-reduced from gradient hooks while backward is still running (DDP's idea).

    A hook on each parameter (``register_post_accumulate_grad_hook``) notes its gradient is
    ready; when a bucket is complete its gradients are flattened and ``launch(flat)`` starts the
    all-reduce, which returns a handle (``dist.all_reduce(flat, async_op=True)``). After
    backward, :meth:`finish` calls ``finish(handle, flat)`` for each bucket (wait, then divide by
    the number of ranks) and copies the averages back into ``p.grad``.

    Parameters
    ----------
    model : torch.nn.Module
    bucket_bytes : bucket size limit (see :func:`buckets_of`).
    launch, finish : the two halves; defaults are the reference ones.

    Example (on a rank)
    -------------------
    >>> ddp = OverlappedBuckets(model, bucket_bytes=2048)      # doctest: +SKIP
    >>> loss.backward(); ddp.finish(); opt.step()               # doctest: +SKIP
    """

    def __init__(self, model, bucket_bytes: int = 1024, launch: Callable = _launch_async,
                 finish: Callable = _finish_wait):
        self.buckets = buckets_of(model.parameters(), bucket_bytes)
        self.launch, self._finish = launch, finish
        self._bucket_of = {id(p): k for k, bucket in enumerate(self.buckets) for p in bucket}
        self._ready: list[int] = [0] * len(self.buckets)
        self._pending: dict[int, tuple] = {}
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in model.parameters()]

    def _grad_ready(self, p) -> None:
        import torch

        k = self._bucket_of[id(p)]
        self._ready[k] += 1
        if self._ready[k] == len(self.buckets[k]):
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[k]])
            self._pending[k] = (self.launch(flat), flat)

    def finish(self) -> None:
        """Complete every bucket (in launch order) and put the averaged gradients back."""
        for k in list(self._pending):
            handle, flat = self._pending.pop(k)
            self._finish(handle, flat)
            _copy_back(flat, self.buckets[k])
        self._ready = [0] * len(self.buckets)

    def remove(self) -> None:
        """Take the hooks off the model."""
        for h in self._hooks:
            h.remove()


# -- training loops ----------------------------------------------------------------------------
def _sgd(model, lr: float) -> None:
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def recorded_loop(name: str, step_fn: Callable, steps: int = CHECK_STEPS, first: int = 0, **batch):
    """On every rank: ``step_fn(x, y)`` on this rank's slice (:func:`local_batch`, options
    ``batch``) of training steps ``first .. first + steps - 1``, each one a recorded step.
    Returns the :class:`~labcore.live.recorder.Recording`."""
    import torch.distributed as dist

    from labcore.live.recorder import record

    rank, n = dist.get_rank(), dist.get_world_size()
    with record(name) as rec:
        for step in range(first, first + steps):
            with rec.step():
                step_fn(*local_batch(step, rank, n, **batch))
    return rec.recording()


def train(average: Callable | str, steps: int = CHECK_STEPS, lr: float = LR, bucket_bytes: int = 1024,
          record_name: str = "train", dims=DIMS, dtype=None, per_rank: int = PER_RANK):
    """On every rank: ``steps`` SGD steps where ``average(model)`` makes the gradients agree.

    ``average`` is a function of the model (e.g. :func:`allreduce_per_parameter`), or one of the
    strings ``"per_parameter"``, ``"buckets"``, ``"overlapped"``, ``"ddp"`` (torch's DDP with
    ``bucket_cap_mb = bucket_bytes / 2**20``). Returns (this rank's final parameters, flat, and
    the :class:`~labcore.live.recorder.Recording` of the steps, one per step).
    """
    model = make_model(dims=dims, dtype=dtype)
    hooked = module = None
    if average == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        module = DDP(model, bucket_cap_mb=bucket_bytes / 2 ** 20)
    elif average == "overlapped":
        hooked = OverlappedBuckets(model, bucket_bytes)
    named = {"per_parameter": allreduce_per_parameter, "buckets": lambda m: allreduce_buckets(m, bucket_bytes)}
    fn = named.get(average, average) if isinstance(average, str) else average

    def one_step(x, y):
        model.zero_grad(set_to_none=True)
        loss_fn((module or model)(x), y).backward()
        if hooked is not None:
            hooked.finish()
        elif module is None:
            fn(model)
        _sgd(model, lr)

    rec = recorded_loop(record_name, one_step, steps, per_rank=per_rank, dims=dims, dtype=dtype)
    if hooked is not None:
        hooked.remove()
    return _flat(model), rec


def ddp_train(bucket_bytes: int, steps: int = 4, warmup: int = 2, dims=DIMS, dtype=None,
              per_rank: int = PER_RANK):
    """Torch's DDP for ``warmup`` unrecorded steps (its buckets are rebuilt after the first), then
    ``steps`` recorded ones. Returns the Recording."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model(dims=dims, dtype=dtype)
    ddp = DDP(model, bucket_cap_mb=bucket_bytes / 2 ** 20)
    batch = dict(per_rank=per_rank, dims=dims, dtype=dtype)

    def one_step(x, y):
        model.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        _sgd(model, LR)

    for step in range(warmup):
        one_step(*local_batch(step, dist.get_rank(), dist.get_world_size(), **batch))
    return recorded_loop(f"DDP, {bucket_bytes} B buckets", one_step, steps, first=warmup, **batch)


def reference_params(world_size: int, steps: int = CHECK_STEPS, lr: float = LR, dims=DIMS,
                     per_rank: int = PER_RANK, variant: str = "correct") -> list:
    """Single-process training of ``world_size`` replicas, for every rank: the right answer, or a
    known mistake (``variant``: "correct", "sum" = not dividing by the world size, "params_avg"
    and "params_sum" = all-reducing the parameters instead of the gradients)."""
    import torch

    models = [make_model(dims=dims) for _ in range(world_size)]
    for step in range(steps):
        x, y = global_batch(step, world_size * per_rank, dims)
        for r, m in enumerate(models):
            m.zero_grad(set_to_none=True)
            loss_fn(m(x[r * per_rank:(r + 1) * per_rank]), y[r * per_rank:(r + 1) * per_rank]).backward()
        with torch.no_grad():
            for ps in zip(*(m.parameters() for m in models)):
                if variant in ("correct", "sum"):
                    g = sum(p.grad for p in ps) / (world_size if variant == "correct" else 1)
                    for p in ps:
                        p.grad.copy_(g)
                else:
                    v = sum(p for p in ps) / (world_size if variant == "params_avg" else 1)
                    for p in ps:
                        p.copy_(v)
        for m in models:
            _sgd(m, lr)
    return [_flat(m) for m in models]


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


def _no_divide(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)


def _divide_by_n_minus_1(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size() - 1


def _params_not_grads(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


q_average = CustomExercise(
    "Average the gradients",
    "Write average_gradients(model): it runs on every rank after loss.backward() and before the "
    "optimizer step, and must leave every parameter's .grad equal to the mean of that gradient over "
    "all ranks (use one dist.all_reduce per parameter). Check it with "
    "q_average.check(average_gradients, cluster=cl).",
    checker=_check_average,
    hints=["Loop over model.parameters(); each p.grad is a tensor you can all-reduce in place.",
           "dist.all_reduce sums by default. The loss of the whole batch is the mean of the ranks' losses.",
           "After dist.all_reduce(p.grad), divide p.grad by dist.get_world_size()."],
    solution="def average_gradients(model):\n"
             "    n = dist.get_world_size()\n"
             "    for p in model.parameters():\n"
             "        dist.all_reduce(p.grad)\n"
             "        p.grad /= n\n"
             "# labcore.exercises.data_parallel.allreduce_per_parameter is the same.",
    correct_example=allreduce_per_parameter,
    wrong_examples=[_no_divide, _params_not_grads, _divide_by_n_minus_1],
    expects="a function of the model",
    **_LIVE,
)


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


def _drop_last_bucket(model, bucket_bytes):
    for bucket in buckets_of(model.parameters(), bucket_bytes)[:-1]:      # the partly filled one is left out
        _allreduce_bucket(bucket)


def _buckets_first_to_last(model, bucket_bytes):
    for bucket in buckets_of(reversed(list(model.parameters())), bucket_bytes):   # first layer first
        _allreduce_bucket(bucket)


def _one_bucket(model, bucket_bytes):
    allreduce_buckets(model, bucket_bytes=1 << 62)         # everything in one bucket, bucket_bytes ignored


def _bucket_no_divide(model, bucket_bytes):
    for bucket in buckets_of(model.parameters(), bucket_bytes):
        _allreduce_bucket(bucket, mean=False)


def _bucket_float32(model, bucket_bytes):
    import torch.distributed as dist

    for bucket in buckets_of(model.parameters(), bucket_bytes):
        flat = _cat_grads(bucket).float()               # float32 on the wire: half the bytes, rounded
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        _copy_back(flat, bucket)


def _cat_grads(bucket):
    import torch

    return torch.cat([p.grad.reshape(-1) for p in bucket])


def _bucket_reduce_scatter_all_gather(model, bucket_bytes):
    import torch.distributed as dist

    n = dist.get_world_size()
    for bucket in buckets_of(model.parameters(), bucket_bytes):
        flat = _cat_grads(bucket)
        padded = flat.new_zeros(-(-flat.numel() // n) * n)
        padded[:flat.numel()] = flat
        mine = padded.new_empty(padded.numel() // n)
        dist.reduce_scatter_single(mine, padded)
        mine /= n
        dist.all_gather_single(padded, mine)
        _copy_back(padded[:flat.numel()], bucket)


q_buckets = CustomExercise(
    "Gradients in buckets",
    "Write average_buckets(model, bucket_bytes): flatten the gradients into buckets (walk the "
    "parameters last to first, as their gradients become ready in backward, and close a bucket once it "
    "holds bucket_bytes bytes), all-reduce each bucket once, and copy the averaged values back into each p.grad. "
    "Check it with q_buckets.check(average_buckets, cluster=cl); the recorder counts your all-reduces.",
    checker=_check_buckets,
    hints=["torch.cat([p.grad.reshape(-1) for p in bucket]) flattens a bucket; "
           "flat[offset:offset + p.numel()].view_as(p.grad) is one parameter's part of it.",
           "Walk reversed(list(model.parameters())); add each gradient's p.numel() * p.element_size() bytes "
           "to the bucket you are filling and close it once it holds at least bucket_bytes "
           "(dp.buckets_of does exactly that).",
           "When the loop over parameters ends, the bucket you were filling still needs its all-reduce."],
    solution="from labcore.exercises.data_parallel import buckets_of\n"
             "def average_buckets(model, bucket_bytes):\n"
             "    n = dist.get_world_size()\n"
             "    for bucket in buckets_of(model.parameters(), bucket_bytes):\n"
             "        flat = torch.cat([p.grad.reshape(-1) for p in bucket])\n"
             "        dist.all_reduce(flat)\n"
             "        flat /= n\n"
             "        offset = 0\n"
             "        for p in bucket:\n"
             "            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))\n"
             "            offset += p.numel()",
    correct_example=allreduce_buckets,
    wrong_examples=[_drop_last_bucket, _bucket_no_divide, _one_bucket, _buckets_first_to_last,
                    lambda model, bucket_bytes: allreduce_per_parameter(model), _bucket_float32,
                    _bucket_reduce_scatter_all_gather],
    expects="a function",
    **_LIVE,
)


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


def _finish_no_wait(handle, bucket):
    import torch.distributed as dist

    bucket /= dist.get_world_size()


def _finish_divide_first(handle, bucket):
    import torch.distributed as dist

    bucket /= dist.get_world_size()
    handle.wait()


def _launch_blocking(bucket):
    import torch.distributed as dist

    dist.all_reduce(bucket)


def _finish_no_divide(handle, bucket):
    handle.wait()


def _launch_waits(bucket):
    import torch.distributed as dist

    work = dist.all_reduce(bucket, async_op=True)
    work.wait()                      # backward cannot go on until the bucket is reduced
    return work


class _Done:
    """Something with a wait() that waits for nothing."""

    def wait(self):
        return True


def _launch_blocking_handle(bucket):
    import torch.distributed as dist

    dist.all_reduce(bucket)          # blocking, then a handle that looks asynchronous
    return _Done()


q_overlap = CustomExercise(
    "Overlap communication with backward",
    "OverlappedBuckets calls launch(bucket) from a gradient hook as soon as a bucket's gradients are "
    "ready (backward is still running), and finish(handle, bucket) for every bucket after backward. "
    "Write launch (start the all-reduce of the flat bucket without waiting, return its handle) and "
    "finish (complete it and turn the sum into the mean). Check: q_overlap.check((launch, finish), cluster=cl).",
    checker=_check_overlap,
    hints=["dist.all_reduce(bucket, async_op=True) returns a handle (a Work) at once.",
           "The handle's wait() returns when the all-reduce is done; only then is the bucket's sum ready.",
           "finish: handle.wait(), then bucket /= dist.get_world_size() (in place: the caller copies "
           "bucket back into the gradients)."],
    solution="def launch(bucket):\n"
             "    return dist.all_reduce(bucket, async_op=True)\n\n"
             "def finish(handle, bucket):\n"
             "    handle.wait()\n"
             "    bucket /= dist.get_world_size()",
    correct_example=(_launch_async, _finish_wait),
    wrong_examples=[(_launch_async, _finish_no_wait), (_launch_blocking, _finish_wait),
                    (_launch_waits, _finish_wait), (_launch_blocking_handle, _finish_wait),
                    (_launch_async, _finish_no_divide), (_launch_async, _finish_divide_first)],
    expects="a pair of functions (launch, finish)",
    **_LIVE,
)


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


def _accumulate(ddp, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with (contextlib.nullcontext() if last else ddp.no_sync()):
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()


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


def _accumulate_sync_first(ddp, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        with (contextlib.nullcontext() if i == 0 else ddp.no_sync()):
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()


def _accumulate_every(ddp, micro_batches):
    for x, y in micro_batches:
        (loss_fn(ddp(x), y) / len(micro_batches)).backward()


def _accumulate_never(ddp, micro_batches):
    with ddp.no_sync():
        for x, y in micro_batches:
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()


def _accumulate_unscaled(ddp, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        with (contextlib.nullcontext() if i == len(micro_batches) - 1 else ddp.no_sync()):
            loss_fn(ddp(x), y).backward()


def _accumulate_concatenated(ddp, micro_batches):
    import torch

    x = torch.cat([x for x, _ in micro_batches])          # one forward and backward on the whole local batch
    y = torch.cat([y for _, y in micro_batches])
    loss_fn(ddp(x), y).backward()


def _accumulate_one_backward(ddp, micro_batches):
    loss = sum(loss_fn(ddp(x), y) for x, y in micro_batches) / len(micro_batches)
    loss.backward()                                         # every micro-batch's graph kept until here


def _accumulate_by_hand(ddp, micro_batches):
    import torch.distributed as dist

    with ddp.no_sync():
        for x, y in micro_batches:
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()
    for p in ddp.parameters():                              # then one all-reduce per parameter
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


q_accumulate = CustomExercise(
    "Gradient accumulation",
    "Write accumulation_step(ddp, micro_batches): run forward and backward on each (x, y) of "
    "micro_batches through the DDP model so that the gradients add up to those of the whole local "
    "batch (scale each loss by 1 / len(micro_batches)), communicating as little as possible. The "
    "caller then takes one optimizer step. Check: q_accumulate.check(accumulation_step, cluster=cl).",
    checker=_check_accumulate,
    hints=["DDP all-reduces the gradients during every backward, unless told not to.",
           "ddp.no_sync() is a context manager: backward inside it only accumulates locally.",
           "Use no_sync() for every micro-batch except the last; the last backward all-reduces the sum."],
    solution="def accumulation_step(ddp, micro_batches):\n"
             "    for i, (x, y) in enumerate(micro_batches):\n"
             "        last = i == len(micro_batches) - 1\n"
             "        with (contextlib.nullcontext() if last else ddp.no_sync()):\n"
             "            (loss_fn(ddp(x), y) / len(micro_batches)).backward()",
    correct_example=_accumulate,
    wrong_examples=[_accumulate_every, _accumulate_never, _accumulate_unscaled, _accumulate_sync_first,
                    _accumulate_concatenated, _accumulate_one_backward, _accumulate_by_hand],
    expects="a function",
    **_LIVE,
)


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


q_ddp_bytes = CustomExercise(
    "Bytes per DDP step",
    "A DDP step all-reduces every gradient once. The model's gradients take G bytes. With a ring "
    "all-reduce on n ranks, how many bytes does each rank send per step? Answer for the model of "
    "this notebook (G and n are printed beside the question; they are also the defaults): "
    "q_ddp_bytes.check(answer, grad_bytes=G, ranks=n).",
    checker=_check_ddp_bytes,
    hints=["A ring all-reduce is a reduce-scatter followed by an all-gather.",
           "Each phase takes n-1 steps; in each step a rank sends one chunk of G/n bytes."],
    solution="2 * (n - 1) / n * G   # nccl-tests' all_reduce busbw factor 2(n-1)/n",
    correct_example=2 * 3 / 4 * DEEP_GRAD_BYTES,
    wrong_examples=[DEEP_GRAD_BYTES, 2 * DEEP_GRAD_BYTES, 3 / 4 * DEEP_GRAD_BYTES, 2 * 3 * DEEP_GRAD_BYTES,
                    2 * 4 / 3 * DEEP_GRAD_BYTES, 2 * 3 / 4 * DEEP_GRAD_BYTES / 1e9, str(2 * 3 * DEEP_GRAD_BYTES // 4),
                    12345.0],
    expects="a number of bytes",
)
