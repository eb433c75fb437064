"""Deliberate wrong answers to notebook 06's exercises: the mistakes learners make, which the
tests feed to the checks to show that each is refused with its own message. None of them is an
answer; the answers are in :mod:`labcore.exercises.sharding.reference`."""
from __future__ import annotations

import math

from labcore.exercises.sharding.reference import (
    ReduceFromParallel, Zero3LinearFn, _function, _reduce_scatter, _regather, flatten, gather_full, pad_flat,
    padded_numel, reduce_scatter_mean, row_parallel, shard_of, unflatten,
)


def _chunk_shard(flat, rank, n):
    return flat.reshape(-1).chunk(n)[rank] if rank < len(flat.reshape(-1).chunk(n)) else flat.new_zeros(0)


def _floor_shard(flat, rank, n):
    k = flat.numel() // n
    return flat[rank * k:(rank + 1) * k]


def _whole_padded(flat, rank, n):
    return pad_flat(flat, n)


def _pad_ones(flat, rank, n):
    import torch

    total = padded_numel(flat.numel(), n)
    flat = torch.cat([flat, flat.new_ones(total - flat.numel())])
    k = total // n
    return flat[rank * k:(rank + 1) * k]


def _zero_step_allreduce(params, shards, opt):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        g = p.grad.clone()
        dist.all_reduce(g)
        s.grad = shard_of(g / n, rank, n)
    opt.step()
    _regather(params, shards)


def _zero_step_summed(params, shards, opt):
    for p, s in zip(params, shards):
        s.grad = _reduce_scatter(p.grad, mean=False)          # the sum over ranks, not the mean
    opt.step()
    _regather(params, shards)


def _zero_step_gather_gradients(params, shards, opt):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    for p, s in zip(params, shards):
        g = pad_flat(p.grad, n).contiguous()
        every = g.new_empty(g.numel() * n)
        dist.all_gather_single(every, g)                   # every rank's whole gradient: n times the traffic
        mean = every.view(n, -1).mean(0)
        s.grad = mean[rank * s.numel():(rank + 1) * s.numel()].clone()
        reduce_scatter_mean(p.grad)                        # a leftover, its result unused
    opt.step()
    _regather(params, shards)


def _zero_step_no_gather(params, shards, opt):
    for p, s in zip(params, shards):
        s.grad = reduce_scatter_mean(p.grad)
    opt.step()


class _KeepsWeights:
    """ZeRO-3 layer that forgets to gather again in backward: it keeps the full weight from forward."""

    @staticmethod
    def forward(ctx, x, shard, w_shape):
        w, b = unflatten(gather_full(shard, (math.prod(w_shape) + w_shape[0],)), w_shape)
        ctx.save_for_backward(x, w)
        return x @ w.T + b

    @staticmethod
    def backward(ctx, grad_y):
        x, w = ctx.saved_tensors
        return grad_y @ w, reduce_scatter_mean(flatten(grad_y.T @ x, grad_y.sum(0))), None


class _GathersTwiceInForward(_KeepsWeights):
    """ZeRO-3 layer whose forward gathers twice (so the count adds up) and keeps the full weight."""

    @staticmethod
    def forward(ctx, x, shard, w_shape):
        k = math.prod(w_shape) + w_shape[0]
        w, _ = unflatten(gather_full(shard, (k,)), w_shape)
        _, b = unflatten(gather_full(shard, (k,)), w_shape)
        ctx.save_for_backward(x, w)
        return x @ w.T + b


class _KeepsWeightsOnCtx:
    """ZeRO-3 layer that gathers again in backward but uses the full weight it put on ctx in forward."""

    @staticmethod
    def forward(ctx, x, shard, w_shape):
        w, b = unflatten(gather_full(shard, (math.prod(w_shape) + w_shape[0],)), w_shape)
        ctx.save_for_backward(x, shard)
        ctx.w_shape, ctx.w = w_shape, w
        return x @ w.T + b

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        gather_full(shard, (math.prod(ctx.w_shape) + ctx.w_shape[0],))
        return grad_y @ ctx.w, reduce_scatter_mean(flatten(grad_y.T @ x, grad_y.sum(0))), None


def _backward_with(ctx, grad_y, shard_grad):
    """Zero3LinearFn's backward with another way of making this rank's gradient shard."""
    x, shard = ctx.saved_tensors
    w, _ = unflatten(gather_full(shard, (math.prod(ctx.w_shape) + ctx.w_shape[0],)), ctx.w_shape)
    return grad_y @ w, shard_grad(flatten(grad_y.T @ x, grad_y.sum(0))), None


class _SummedGradients:
    """ZeRO-3 layer whose gradient shard is the sum over ranks, not the mean."""

    forward = staticmethod(Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        return _backward_with(ctx, grad_y, lambda g: _reduce_scatter(g, mean=False))


class _LocalGradients:
    """ZeRO-3 layer that cuts its own gradient into shards instead of reduce-scattering it."""

    forward = staticmethod(Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        import torch.distributed as dist

        return _backward_with(ctx, grad_y, lambda g: shard_of(g, dist.get_rank(), dist.get_world_size()))


class _AllReducedGradients:
    """ZeRO-3 layer that all-reduces the whole gradient, then keeps its own shard of the mean."""

    forward = staticmethod(Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        import torch.distributed as dist

        def mean_then_shard(g):
            g = g.clone()
            dist.all_reduce(g)
            return shard_of(g / dist.get_world_size(), dist.get_rank(), dist.get_world_size())

        return _backward_with(ctx, grad_y, mean_then_shard)


def _row_all_gather(h_shard, w2_shard, b2):
    import torch
    import torch.distributed as dist

    part = h_shard @ w2_shard.T
    parts = [torch.empty_like(part) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, part.detach())
    return torch.cat(parts, dim=-1) + b2.repeat(dist.get_world_size())


def _row_bias_everywhere(h_shard, w2_shard, b2):
    return _function(ReduceFromParallel).apply(h_shard @ w2_shard.T + b2)


def _row_no_reduce(h_shard, w2_shard, b2):
    return h_shard @ w2_shard.T + b2


def _row_bias_split(h_shard, w2_shard, b2):
    import torch.distributed as dist

    # an n-th of the bias on every rank: the sum is right, b2's gradient is an n-th of the layer's
    return _function(ReduceFromParallel).apply(h_shard @ w2_shard.T + b2 / dist.get_world_size())


def _row_bias_rank0(h_shard, w2_shard, b2):
    import torch
    import torch.distributed as dist

    # the bias only on rank 0: the sum is right, the other ranks' copies of b2 get no gradient
    bias = b2 if dist.get_rank() == 0 else torch.zeros_like(b2)
    return _function(ReduceFromParallel).apply(h_shard @ w2_shard.T + bias)


class _NeverGathersInBackward:
    """ZeRO-3 layer that gathers twice in forward, keeps nothing but x and the shard, and uses zeros as
    W in backward."""

    @staticmethod
    def forward(ctx, x, shard, w_shape):
        k = math.prod(w_shape) + w_shape[0]
        gather_full(shard, (k,))
        w, b = unflatten(gather_full(shard, (k,)), w_shape)
        ctx.save_for_backward(x, shard)
        ctx.w_shape = w_shape
        return x @ w.T + b

    @staticmethod
    def backward(ctx, grad_y):
        import torch

        x, shard = ctx.saved_tensors
        w = torch.zeros(ctx.w_shape, dtype=x.dtype)
        return grad_y @ w, reduce_scatter_mean(flatten(grad_y.T @ x, grad_y.sum(0))), None


def _row_bias_detached(h_shard, w2_shard, b2):
    return row_parallel(h_shard, w2_shard, b2.detach())      # b2 outside the graph: no rank's copy gets a gradient


# -- answers that only work on the notebook's 4 ranks, or when the sizes divide by the rank count ---------
def _zero_step_divide_by_four(params, shards, opt):
    for p, s in zip(params, shards):
        s.grad = _reduce_scatter(p.grad, mean=False) / 4          # the notebook's rank count, built in
    opt.step()
    _regather(params, shards)


def _zero_step_no_padding(params, shards, opt):
    import torch.distributed as dist

    n = dist.get_world_size()
    for p, s in zip(params, shards):
        flat = p.grad.reshape(-1).contiguous()
        mine = flat.new_empty(flat.numel() // n)              # right only when the size divides by n
        dist.reduce_scatter_single(mine, flat)
        s.grad = mine / n
    opt.step()
    _regather(params, shards)


class _Zero3DivideByFour:
    """ZeRO-3 layer whose gradient shard is the sum over ranks divided by 4, the notebook's rank count."""

    forward = staticmethod(Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        return _backward_with(ctx, grad_y, lambda g: _reduce_scatter(g, mean=False) / 4)


class _Zero3NoPadding:
    """ZeRO-3 layer that reduce-scatters its flat gradient unpadded: right only when it divides by the ranks."""

    forward = staticmethod(Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        import torch.distributed as dist

        def unpadded(g):
            n = dist.get_world_size()
            flat = g.detach().contiguous()
            out = flat.new_empty(flat.numel() // n)
            dist.reduce_scatter_single(out, flat)
            return out / n

        return _backward_with(ctx, grad_y, unpadded)


def _row_in_place_all_reduce(h_shard, w2_shard, b2):
    import torch.distributed as dist

    part = h_shard @ w2_shard.T
    dist.all_reduce(part)                      # in place, outside autograd: backward never hears of it
    return part + b2
