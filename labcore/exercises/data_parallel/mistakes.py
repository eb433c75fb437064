"""Deliberate wrong answers to notebook 05's exercises: the mistakes learners make, which the
tests feed to the checks to show that each is refused with its own message. None of them is an
answer; the answers are in :mod:`labcore.exercises.data_parallel.reference`."""
from __future__ import annotations

import contextlib

from labcore.exercises.data_parallel.reference import (
    _allreduce_bucket, _copy_back, allreduce_buckets, allreduce_per_parameter, buckets_of, loss_fn,
)


def _start_parameters_only(model):
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for p in model.parameters():                      # the BatchNorm buffers are left as they were
            dist.broadcast(p, src=0)


def _start_averaged(model):
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.all_reduce(t)                            # every rank equal, but equal to the mean
            if t.is_floating_point():
                t /= dist.get_world_size()


def _start_own_source(model):
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t, src=dist.get_rank())        # each rank names itself as the source


def _start_from_last(model):
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t, src=dist.get_world_size() - 1)


def _start_into_copies(model):
    import torch.distributed as dist

    for t in [*model.parameters(), *model.buffers()]:
        dist.broadcast(t.detach().clone(), src=0)         # the copy gets rank 0's values, the model does not


def _start_reseeded(model):
    import torch

    torch.manual_seed(0)                                   # the same seed everywhere: equal, but not rank 0's
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
            if hasattr(module, "reset_running_stats"):
                module.reset_running_stats()


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


def _bucket_per_parameter(model, bucket_bytes):
    allreduce_per_parameter(model)                       # no buckets at all: one all-reduce per parameter


def _launch_waits_walrus(bucket):
    import torch.distributed as dist

    return (work := dist.all_reduce(bucket, async_op=True)).wait() or work     # waits, then hands the handle back


def _launch_waits_on_future(bucket):
    import torch.distributed as dist

    return dist.all_reduce(bucket, async_op=True).get_future().wait()          # the future's value, after waiting


# -- answers that only work on the notebook's 4 ranks, or with another closing rule than the prompt's -----
def _divide_by_four(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 4                                       # the notebook's rank count, built in


def _one_flat_all_reduce(model):
    import torch.distributed as dist

    bucket = list(model.parameters())                      # right values, but one all-reduce for everything
    flat = _cat_grads(bucket)
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    _copy_back(flat, bucket)


def _buckets_divide_by_four(model, bucket_bytes):
    import torch.distributed as dist

    for bucket in buckets_of(model.parameters(), bucket_bytes):
        flat = _cat_grads(bucket)
        dist.all_reduce(flat)
        flat /= 4
        _copy_back(flat, bucket)


def _buckets_closed_past_cap(model, bucket_bytes):
    bucket, size = [], 0
    for p in reversed(list(model.parameters())):
        bucket.append(p)
        size += p.numel() * p.element_size()
        if size > bucket_bytes:                             # "> cap": a bucket exactly bucket_bytes stays open
            _allreduce_bucket(bucket)
            bucket, size = [], 0
    if bucket:
        _allreduce_bucket(bucket)


def _buckets_never_over_cap(model, bucket_bytes):
    bucket, size = [], 0
    for p in reversed(list(model.parameters())):
        nbytes = p.numel() * p.element_size()
        if bucket and size + nbytes > bucket_bytes:         # closed before the gradient that would not fit
            _allreduce_bucket(bucket)
            bucket, size = [], 0
        bucket.append(p)
        size += nbytes
    _allreduce_bucket(bucket)


def _finish_divide_by_four(handle, bucket):
    handle.wait()
    bucket /= 4


def _accumulate_halves(ddp, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        with (contextlib.nullcontext() if i == len(micro_batches) - 1 else ddp.no_sync()):
            (loss_fn(ddp(x), y) / 2).backward()             # the notebook's 2 micro-batches, built in
