"""Data parallelism from scratch, the code a learner reads (notebook 05).

Every rank holds a full copy of a small model and trains on its own slice of each batch;
communication keeps the copies equal. The pieces, each a reference beside torch's own DDP:

- :func:`make_model`, :func:`global_batch`, :func:`local_batch`: one deterministic model and
  data, so that every check can compare against single-process training on the whole batch;
- :func:`replicas_differ`: how far the ranks' parameters are from rank 0's (the drift demo);
  :func:`start_model`, a model with buffers that each rank builds from its own seed, and
  :func:`broadcast_start`, which makes every rank hold rank 0's copy of it (DDP's first step);
- three ways to average gradients: :func:`allreduce_per_parameter`, :func:`allreduce_buckets`
  (flattened buckets) and :class:`OverlappedBuckets` (buckets launched from gradient hooks with
  ``async_op=True`` while backward goes on);
- :func:`train` runs a few SGD steps with any of them (or torch's DDP) and records them.

Example (on a rank)
-------------------
>>> params, rec = train(allreduce_per_parameter)      # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Callable

__all__ = ["DIMS", "DEEP", "DEEP_GRAD_BYTES", "make_model", "global_batch", "local_batch", "loss_fn", "replicas_differ",
           "start_model", "broadcast_start", "allreduce_per_parameter", "allreduce_buckets", "buckets_of", "OverlappedBuckets", "sgd_steps",
           "recorded_loop", "train", "ddp_train", "reference_params"]


DIMS = (16, 32, 32, 8)
DEEP = (64,) + (128,) * 8 + (10,)   # the deeper MLP the notebook times: 9 layers, 7 of them 128 x 128
# its gradient bytes in float32 (weights and biases): the G of notebook 05's bytes-per-step question
DEEP_GRAD_BYTES = 4 * sum(a * b + b for a, b in zip(DEEP[:-1], DEEP[1:]))
PER_RANK = 4          # samples per rank per step
LR = 0.1
CHECK_STEPS = 3


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


def start_model(seed: int, dims=DIMS):
    """An MLP with a BatchNorm layer (Linear, BatchNorm1d, Tanh, Linear; float64), drawn from ``seed``.

    BatchNorm's running statistics (``running_mean``, ``running_var``, ``num_batches_tracked``)
    are **buffers**: model state that is not a parameter, that no gradient updates and that
    the model in evaluation mode uses. They are filled from ``seed`` too, as if the model had seen ``seed + 1``
    batches, so that ranks built from different seeds differ in both.

    Example
    -------
    >>> [name for name, _ in start_model(0).named_buffers()]
    ['1.running_mean', '1.running_var', '1.num_batches_tracked']
    """
    import torch

    g = torch.Generator().manual_seed(10_000 + seed)
    first, norm, last = (torch.nn.Linear(dims[0], dims[1]), torch.nn.BatchNorm1d(dims[1]),
                         torch.nn.Linear(dims[1], dims[-1]))
    model = torch.nn.Sequential(first, norm, torch.nn.Tanh(), last).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / math.sqrt(p.shape[-1]))
        norm.running_mean.copy_(torch.randn(dims[1], generator=g, dtype=torch.float64) * 0.1)
        norm.running_var.copy_(1 + torch.rand(dims[1], generator=g, dtype=torch.float64))
        norm.num_batches_tracked.fill_(seed + 1)
    return model


def broadcast_start(model) -> None:
    """On every rank: overwrite this rank's parameters and buffers with rank 0's, in place (what
    DDP does when it is built, ``_sync_module_states``; it packs the tensors into buckets first)."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t, src=0)


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
    Returns the :class:`~labcore.readers.recording.Recording`."""
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
    the :class:`~labcore.readers.recording.Recording` of the steps, one per step).
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


@functools.lru_cache(maxsize=64)      # the checks compare many answers with the same few trainings
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


def _accumulate(ddp, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with (contextlib.nullcontext() if last else ddp.no_sync()):
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()
