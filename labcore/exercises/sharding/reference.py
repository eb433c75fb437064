"""Sharded data parallelism and tensor parallelism, the code a learner reads (notebook 06).

ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020) keeps data parallelism but stops every rank from holding everything: stage 1
shards the optimizer state, stage 2 the gradients too, stage 3 the parameters too. Per step a
plain data-parallel all-reduce moves 2Ψ (Ψ = parameter count; an all-reduce is a reduce-scatter
plus an all-gather), stages 1 and 2 also 2Ψ (reduce-scatter the gradients, all-gather the
updated parameters), stage 3 3Ψ (all-gather the parameters in forward, again in backward,
reduce-scatter the gradients).

Here each stage is written by hand with ``dist.reduce_scatter_single`` and
``dist.all_gather_single`` (torch 2.13's names for ``reduce_scatter_tensor`` and
``all_gather_into_tensor``), one shard per parameter, and trained beside unsharded Adam
(:func:`zero_train`); torch's own :func:`zero_redundancy_train` (``ZeroRedundancyOptimizer``)
and :func:`fsdp_train` (FSDP2 ``fully_shard``) run the same model. Tensor parallelism
(Shoeybi et al., "Megatron-LM", 2019): a column-parallel then a row-parallel linear layer, with
the operators f (identity forward, all-reduce backward) and g (all-reduce forward, identity
backward): :func:`tp_mlp` by hand and :func:`tp_dtensor` with DTensor's ``parallelize_module``.

Example
-------
>>> padded_numel(10, 4)
12
"""
from __future__ import annotations

import functools
import math

from labcore.exercises.core import _is_blank
from labcore.exercises.data_parallel.reference import (
    CHECK_STEPS, PER_RANK, _flat, global_batch, loss_fn, make_model, recorded_loop,
)

__all__ = ["padded_numel", "pad_flat", "shard_of", "gather_full", "reduce_scatter_mean", "unflatten",
           "flatten", "zero3_linear", "Zero3LinearFn", "adam_reference", "zero_train", "zero_redundancy_train",
           "fsdp_train", "CopyToParallel", "ReduceFromParallel", "tp_mlp", "tp_dtensor", "DEEPSPEED_STAGES"]


LR = 0.01


# -- shards --------------------------------------------------------------------------------------
def padded_numel(numel: int, world_size: int) -> int:
    """``numel`` rounded up to a multiple of ``world_size``: every shard has the same size."""
    return -(-int(numel) // int(world_size)) * int(world_size)


def pad_flat(t, world_size: int):
    """``t`` flattened, with zeros appended up to :func:`padded_numel`."""
    import torch

    flat = t.reshape(-1)
    extra = padded_numel(flat.numel(), world_size) - flat.numel()
    return torch.cat([flat, flat.new_zeros(extra)]) if extra else flat


def shard_of(t, rank: int, world_size: int):
    """Rank ``rank``'s shard of ``t``: the ``rank``-th of ``world_size`` equal pieces of the padded flat tensor.

    Example
    -------
    >>> import torch
    >>> shard_of(torch.arange(10.), 3, 4).tolist()
    [9.0, 0.0, 0.0]
    """
    flat = pad_flat(t, world_size)
    k = flat.numel() // world_size
    return flat[rank * k:(rank + 1) * k].clone()


def gather_full(shard, shape):
    """All-gather every rank's shard and cut the padding: the full tensor of ``shape``."""
    import torch.distributed as dist

    n = dist.get_world_size()
    full = shard.new_empty(shard.numel() * n)
    dist.all_gather_single(full, shard.detach().contiguous())
    return full[:math.prod(shape)].view(shape)


def reduce_scatter_mean(full):
    """Reduce-scatter ``full`` (padded) over the ranks and divide: this rank's shard of the mean."""
    return _reduce_scatter(full, mean=True)


def _reduce_scatter(full, mean: bool):
    import torch.distributed as dist

    n = dist.get_world_size()
    flat = pad_flat(full.detach(), n).contiguous()
    out = flat.new_empty(flat.numel() // n)
    dist.reduce_scatter_single(out, flat)
    return out.div_(n) if mean else out


# -- ZeRO-3: a linear layer that holds only its shard --------------------------------------------
def unflatten(flat, w_shape):
    """(W, b) of a linear layer from its flat parameters (weight, then bias), as ZeRO-3 shards them."""
    k = math.prod(w_shape)
    return flat[:k].view(w_shape), flat[k:k + w_shape[0]]


def flatten(w, b):
    """A linear layer's weight and bias (or their gradients) as one flat tensor."""
    import torch

    return torch.cat([w.reshape(-1), b.reshape(-1)])


class Zero3LinearFn:
    """autograd Function of a ZeRO-3 linear layer: gather in forward, free, gather again in backward.

    The layer's weight and bias are one flat tensor, sharded (like FSDP's flat parameters).
    ``forward(ctx, x, shard, w_shape)`` gathers it, computes ``x @ W.T + b`` and keeps only ``x``
    and the shard; ``backward`` gathers again, returns the input gradient and reduce-scatters the
    flat weight-and-bias gradient into this rank's shard (the mean over ranks).
    """

    @staticmethod
    def forward(ctx, x, shard, w_shape):
        w, b = unflatten(gather_full(shard, (math.prod(w_shape) + w_shape[0],)), w_shape)
        ctx.save_for_backward(x, shard)
        ctx.w_shape = w_shape
        return x @ w.T + b

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        w, _ = unflatten(gather_full(shard, (math.prod(ctx.w_shape) + ctx.w_shape[0],)), ctx.w_shape)
        return grad_y @ w, reduce_scatter_mean(flatten(grad_y.T @ x, grad_y.sum(0))), None


def _function(cls):
    """A torch.autograd.Function with ``cls``'s static forward and backward."""
    import torch

    return type(cls.__name__, (torch.autograd.Function,), {"forward": staticmethod(cls.forward),
                                                           "backward": staticmethod(cls.backward)})


def zero3_linear(linear, fn=Zero3LinearFn):
    """A module holding only this rank's shard of ``linear``'s flat weight and bias; ``fn`` is the
    autograd Function that gathers it (default :class:`Zero3LinearFn`)."""
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    function = fn if isinstance(fn, type) and issubclass(fn, torch.autograd.Function) else _function(fn)

    class Zero3Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w_shape = tuple(linear.weight.shape)
            self.shard = torch.nn.Parameter(shard_of(flatten(linear.weight.detach(), linear.bias.detach()), rank, n))

        def forward(self, x):
            return function.apply(x, self.shard, self.w_shape)

        def full(self):
            """The gathered flat weight and bias."""
            return gather_full(self.shard.detach(), (math.prod(self.w_shape) + self.w_shape[0],))

    return Zero3Linear()


def _zero3_model(fn=Zero3LinearFn):
    import torch

    return torch.nn.Sequential(*[zero3_linear(m, fn) if isinstance(m, torch.nn.Linear) else m for m in make_model()])


def _zero3_full(model):
    import torch

    return torch.cat([layer.full() for layer in model if hasattr(layer, "shard")])


# -- training: unsharded Adam, ZeRO by hand, torch's ZeRO and FSDP2 --------------------------------
def _adam(params):
    import torch

    return torch.optim.Adam(params, lr=LR, foreach=False)


def _adam_steps(name: str, model, opt, steps: int = CHECK_STEPS, after_backward=lambda: None):
    """On every rank: recorded Adam steps of ``model`` (``after_backward()`` between backward and
    the optimizer step). Returns the Recording."""
    def one_step(x, y):
        opt.zero_grad(set_to_none=True)
        for p in model.parameters():
            p.grad = None
        loss_fn(model(x), y).backward()
        after_backward()
        opt.step()

    return recorded_loop(name, one_step, steps)


class _StepWith:
    """An optimizer whose step is ``step()`` (e.g. the optimizer's step, then gathering parameters)."""

    def __init__(self, opt, step):
        self.opt, self.step = opt, step

    def zero_grad(self, set_to_none: bool = True):
        self.opt.zero_grad(set_to_none=set_to_none)


@functools.lru_cache(maxsize=16)      # the checks compare many answers with the same training
def adam_reference(world_size: int, steps: int = CHECK_STEPS, grad_scale: float = 1.0):
    """Single-process Adam on the whole batch (the ranks' slices together): the flat parameters.

    ``grad_scale`` multiplies every gradient (``world_size``: what a rank that sums the ranks'
    gradients instead of averaging them steps with)."""
    model = make_model()
    opt = _adam(model.parameters())
    for step in range(steps):
        x, y = global_batch(step, world_size * PER_RANK)
        opt.zero_grad(set_to_none=True)
        (loss_fn(model(x), y) * grad_scale).backward()
        opt.step()
    return _flat(model)


def _nbytes(tensors) -> int:
    unique = {id(t): t for t in tensors if t is not None and t.dim() > 0}
    return int(sum(t.numel() * t.element_size() for t in unique.values()))


def _opt_bytes(opt) -> int:
    return _nbytes(v for state in opt.state.values() for v in state.values() if hasattr(v, "dim"))


def zero_train(stage: int, steps: int = CHECK_STEPS):
    """On every rank: ``steps`` Adam steps of ZeRO ``stage`` (0 = plain data parallelism).

    Returns a dict: ``params`` (the full flat parameters after training, gathered), ``memory``
    (bytes this rank holds: ``params`` between steps, ``grads`` at their peak in backward,
    ``optimizer`` Adam's two moments) and ``recording`` (one step per step).
    """
    import torch
    import torch.distributed as dist

    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO has stages 1, 2 and 3 (0 = no sharding), not {stage!r}")
    rank, n = dist.get_rank(), dist.get_world_size()
    peak = [0]

    def note(tensors):
        peak[0] = max(peak[0], _nbytes(tensors))

    if stage == 3:
        model = _zero3_model()
        params = shards = list(model.parameters())
    else:
        model = make_model()
        params = list(model.parameters())
        shards = params if stage == 0 else [torch.nn.Parameter(shard_of(p.detach(), rank, n)) for p in params]
    opt = _adam(shards)
    if stage == 2:
        def reduce_now(p, shard):
            shard.grad = reduce_scatter_mean(p.grad)
            note([q.grad for q in params] + [s.grad for s in shards])
            p.grad = None                      # the full gradient is gone as soon as its shard is reduced

        for p, s in zip(params, shards):
            p.register_post_accumulate_grad_hook(lambda p, s=s: reduce_now(p, s))
    def after_backward():
        if stage == 0:
            for p in params:
                dist.all_reduce(p.grad)
                p.grad /= n
        if stage == 1:
            note([p.grad for p in params])
            for p, s in zip(params, shards):
                s.grad = reduce_scatter_mean(p.grad)
                p.grad = None
        note([p.grad for p in params] + [s.grad for s in shards])

    def step_and_gather():
        opt.step()
        if stage in (1, 2):                # every rank needs all the updated parameters
            _regather(params, shards)

    rec = _adam_steps(f"ZeRO-{stage}" if stage else "data parallel", model, _StepWith(opt, step_and_gather), steps,
                      after_backward)
    final = _zero3_full(model) if stage == 3 else _flat(model)
    memory = {"params": _nbytes(p.data for p in (shards if stage == 3 else params)), "grads": peak[0],
              "optimizer": _opt_bytes(opt)}
    return {"params": final, "memory": memory, "recording": rec}


def zero_redundancy_train(steps: int = CHECK_STEPS):
    """DDP with torch's ``ZeroRedundancyOptimizer`` (Adam): each rank updates its share of the
    parameters and broadcasts them. Returns the flat parameters and the Recording."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model()
    ddp = DDP(model, bucket_cap_mb=1.0)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=_AdamNoForeach, lr=LR)
    rec = _adam_steps("ZeroRedundancyOptimizer", ddp, opt, steps)
    return _flat(model), rec


def _AdamNoForeach(params, **kwargs):
    import torch

    return torch.optim.Adam(params, foreach=False, **kwargs)


def fsdp_train(reshard_after_forward: bool = True, steps: int = CHECK_STEPS):
    """FSDP2: ``fully_shard`` on every linear layer and the root, Adam on the sharded parameters.
    Returns the full flat parameters after training and the Recording."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    rec = _adam_steps(f"FSDP2, reshard_after_forward={reshard_after_forward}", model, _adam(model.parameters()),
                      steps)
    return torch.cat([p.detach().full_tensor().reshape(-1) for p in model.parameters()]), rec


# -- tensor parallelism ---------------------------------------------------------------------------
class CopyToParallel:
    """Megatron's f: identity in forward; in backward, all-reduce the input gradient (every rank's
    slice of the next layer contributes to it)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel:
    """Megatron's g: in forward, all-reduce the partial outputs into the layer's output; identity
    in backward."""

    @staticmethod
    def forward(ctx, y):
        import torch.distributed as dist

        y = y.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad


def _hidden_part(hidden: int, rank: int, n: int) -> slice:
    """Rank ``rank``'s slice of ``hidden`` units split over ``n`` ranks (the first ``hidden % n`` one larger)."""
    k, extra = divmod(hidden, n)
    start = rank * k + min(rank, extra)
    return slice(start, start + k + (rank < extra))


def _tp_shards(mlp, rank: int, n: int):
    """Column-parallel first layer (rows of W1, b1) and row-parallel second layer (columns of W2)."""
    w1, b1, w2 = mlp[0].weight.detach(), mlp[0].bias.detach(), mlp[2].weight.detach()
    part = _hidden_part(w1.shape[0], rank, n)
    return [t.clone().requires_grad_() for t in (w1[part], b1[part], w2[:, part])]


def _tp_mlp_model(dims=(16, 32, 8), seed: int = 0):
    return make_model(seed=seed, dims=dims)


def row_parallel(h_shard, w2_shard, b2):
    """The reference row-parallel layer: partial product, all-reduced (g), bias added once."""
    return _function(ReduceFromParallel).apply(h_shard @ w2_shard.T) + b2


def tp_mlp(row=row_parallel, batch: int = 8, dims=(16, 32, 8)):
    """On every rank: the 2-layer MLP split Megatron-style, against the unsharded layer.

    ``row(h_shard, w2_shard, b2)`` is the row-parallel half (a learner's, or :func:`row_parallel`).
    Returns a dict: the output, the input gradient, this rank's weight-gradient shards and the
    gradient of its copy of the bias b2, the same from the unsharded MLP, and the Recording.
    """
    import torch
    import torch.distributed as dist

    from labcore.live.recorder import record

    rank, n = dist.get_rank(), dist.get_world_size()
    mlp = _tp_mlp_model(dims)
    w1, b1, w2 = _tp_shards(mlp, rank, n)
    b2 = mlp[2].bias.detach().clone().requires_grad_()
    x, _ = global_batch(0, batch, dims)
    x_tp, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    f = _function(CopyToParallel)
    with record("tensor parallel MLP") as rec:
        with rec.step():
            h = torch.tanh(f.apply(x_tp) @ w1.T + b1)           # column-parallel: a slice of the hidden units
            y = row(h, w2, b2)
            if _is_blank(y):
                raise NotImplementedError("the row-parallel layer is not written yet")
            if y.shape == (batch, dims[-1]):
                (y ** 2).sum().backward()
    ref = mlp(x_ref)
    (ref ** 2).sum().backward()
    part = _hidden_part(mlp[0].weight.shape[0], rank, n)
    want = [mlp[0].weight.grad[part], mlp[0].bias.grad[part], mlp[2].weight.grad[:, part]]
    with torch.no_grad():
        partial = torch.tanh(x @ w1.T + b1) @ w2.T + b2           # this rank's slice only, never combined
    return dict(y=y.detach(), grad_x=x_tp.grad, grads=[t.grad for t in (w1, b1, w2)], y_ref=ref.detach(),
                grad_x_ref=x_ref.grad, grads_ref=want, grad_b2=b2.grad, grad_b2_ref=mlp[2].bias.grad,
                partial=partial, recording=rec.recording())


def tp_dtensor(batch: int = 8, dims=(16, 32, 8), steps: int = 1):
    """The same MLP with DTensor: ``parallelize_module`` with ColwiseParallel on the first linear
    layer and RowwiseParallel on the second. Returns (output, unsharded output, Recording)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from labcore.live.recorder import record

    n = dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    ref = _tp_mlp_model(dims)
    model = parallelize_module(_tp_mlp_model(dims), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, _ = global_batch(0, batch, dims)
    with record("DTensor tensor parallel") as rec:
        for _ in range(steps):
            with rec.step():
                xin = x.clone().requires_grad_()
                y = model(xin)
                (y ** 2).sum().backward()
    want = ref(x)
    return y.detach(), want.detach(), rec.recording()


DEEPSPEED_STAGES = [
    {"ZeRO stage": 0, "sharded": "nothing (plain data parallelism)", "DeepSpeed": '"zero_optimization": {"stage": 0}',
     "PyTorch": "DistributedDataParallel", "volume per step": "2Ψ (all-reduce)"},
    {"ZeRO stage": 1, "sharded": "optimizer states", "DeepSpeed": '"zero_optimization": {"stage": 1}',
     "PyTorch": "ZeroRedundancyOptimizer (keeps DDP's all-reduce, then broadcasts: 3Ψ)",
     "volume per step": "2Ψ (reduce-scatter + all-gather)"},
    {"ZeRO stage": 2, "sharded": "+ gradients", "DeepSpeed": '"zero_optimization": {"stage": 2}',
     "PyTorch": "fully_shard(..., reshard_after_forward=False)", "volume per step": "2Ψ"},
    {"ZeRO stage": 3, "sharded": "+ parameters", "DeepSpeed": '"zero_optimization": {"stage": 3}',
     "PyTorch": "fully_shard(...) (reshard_after_forward=True, the default)",
     "volume per step": "3Ψ (all-gather twice, reduce-scatter once)"},
]
"""Which DeepSpeed ZeRO stage is which torch feature (stages and volumes: Rajbhandari et al.
2020; DeepSpeed's config key ``zero_optimization.stage``, deepspeed.readthedocs.io "ZeRO";
FSDP2's ``reshard_after_forward``: torch.distributed.fsdp.fully_shard docs). FSDP2 with
``reshard_after_forward=False`` also keeps the parameters gathered between forward and
backward, so it holds more than ZeRO-2 does."""


def _regather(params, shards) -> None:
    """Every rank's full parameters again, from the updated shards."""
    import torch

    with torch.no_grad():
        for p, s in zip(params, shards):
            p.copy_(gather_full(s, p.shape))


def _zero_step(params, shards, opt):
    for p, s in zip(params, shards):
        s.grad = reduce_scatter_mean(p.grad)
    opt.step()
    _regather(params, shards)
