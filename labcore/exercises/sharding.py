"""Sharded data parallelism and tensor parallelism (notebook 06): reference code and exercises.

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

Exercises: :data:`q_padding`, :data:`q_sharded_step`, :data:`q_zero3_layer`,
:data:`q_zero3_volume`, :data:`q_row_parallel`.

Example
-------
>>> padded_numel(10, 4)
12
"""
from __future__ import annotations

import math

from labcore.exercises.core import CustomExercise, Incorrect, NotAttempted, _is_blank
from labcore.exercises.data_parallel import (
    _LIVE, CHECK_STEPS, PER_RANK, _flat, _run_check, global_batch, local_batch, loss_fn, make_model, recorded_loop,
)

__all__ = ["padded_numel", "pad_flat", "shard_of", "gather_full", "reduce_scatter_mean", "unflatten",
           "flatten", "zero3_linear", "Zero3LinearFn", "adam_reference", "zero_train", "zero_redundancy_train",
           "fsdp_train", "CopyToParallel", "ReduceFromParallel", "tp_mlp", "tp_dtensor", "DEEPSPEED_STAGES",
           "q_padding", "q_sharded_step", "q_zero3_layer", "q_zero3_volume", "q_row_parallel"]

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


def _against_adam(params: list, world_size: int) -> None:
    """Raise :class:`Incorrect` unless every rank's flat parameters match unsharded Adam."""
    import torch

    want = adam_reference(world_size)
    summed = adam_reference(world_size, grad_scale=world_size)
    for rank, got in enumerate(params):
        if torch.allclose(got, want, rtol=1e-9, atol=1e-12):
            continue
        if torch.allclose(got, summed, rtol=1e-9, atol=1e-12):
            raise Incorrect(f"rank {rank}'s parameters are close to unsharded Adam's but not equal: its shards "
                            "stepped with the sum of the ranks' gradients, not their mean. (Adam divides by the "
                            "gradients' size, which hides a constant factor almost, but not quite, entirely.)")
        raise Incorrect(f"rank {rank}'s parameters after {CHECK_STEPS} steps differ from unsharded Adam on the "
                        f"whole batch by up to {float((got - want).abs().max()):.3g}.")


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


def _tp_shards(mlp, rank: int, n: int):
    """Column-parallel first layer (rows of W1, b1) and row-parallel second layer (columns of W2)."""
    w1, b1, w2 = mlp[0].weight.detach(), mlp[0].bias.detach(), mlp[2].weight.detach()
    rows = w1.shape[0] // n
    part = slice(rank * rows, (rank + 1) * rows)
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
    rows = mlp[0].weight.shape[0] // n
    part = slice(rank * rows, (rank + 1) * rows)
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


# -- exercises ------------------------------------------------------------------------------------
# (1) padding
def _check_padding(answer):
    import torch

    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_padding.check(my_shard).")
    for numel, n in ((12, 4), (10, 4), (7, 3), (5, 8)):
        flat = torch.arange(1.0, numel + 1)
        try:
            shards = [answer(flat.clone(), r, n) for r in range(n)]
        except NotImplementedError:
            raise NotAttempted()
        if any(_is_blank(s) for s in shards):
            raise NotAttempted()
        try:
            shards = [torch.as_tensor(s).reshape(-1) for s in shards]
        except Exception:
            raise Incorrect("return a tensor: this rank's shard.")
        sizes = [s.numel() for s in shards]
        if len(set(sizes)) > 1:
            raise Incorrect(f"for {numel} elements on {n} ranks your shards have sizes {sizes}: "
                            "reduce_scatter_single and all_gather_single need every rank's shard to be the same size.")
        joined = torch.cat(shards)
        if n > 1 and sizes[0] >= numel:
            raise Incorrect(f"for {numel} elements on {n} ranks each of your shards holds {sizes[0]} elements, "
                            "the whole tensor or more: a rank keeps only its 1/n share.")
        if joined.numel() < numel:
            raise Incorrect(f"for {numel} elements on {n} ranks your {n} shards hold {joined.numel()} elements "
                            "together: some elements belong to no rank.")
        if not torch.equal(joined[:numel], flat):
            raise Incorrect(f"for {numel} elements on {n} ranks, putting the shards back in rank order does not give "
                            "the tensor back: rank r's shard should be the r-th piece, in order.")
        if joined.numel() >= numel + n or bool(joined[numel:].abs().sum()):
            raise Incorrect(f"for {numel} elements on {n} ranks the padding is off: fill up with as few zeros as "
                            "make the pieces equal (padding takes part in the reduction).")
    return "Equal shards for every size, whether or not it divides by the world size."


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


q_padding = CustomExercise(
    "Equal shards",
    "Write my_shard(flat, rank, world_size): rank `rank`'s shard of a 1-D tensor, such that every rank's "
    "shard has the same number of elements (reduce_scatter_single and all_gather_single require it) and "
    "the shards in rank order give back the tensor. The element count need not divide by world_size.",
    checker=_check_padding,
    hints=["With 10 elements on 4 ranks, how many elements must each shard have so that nothing is left out?",
           "Round the length up to a multiple of world_size and append zeros (zeros change no sum) to reach it.",
           "k = ceil(numel / n); padded = torch.cat([flat, flat.new_zeros(k * n - numel)]); "
           "return padded[rank * k:(rank + 1) * k]."],
    solution="def my_shard(flat, rank, world_size):\n"
             "    k = -(-flat.numel() // world_size)          # ceil\n"
             "    padded = torch.cat([flat, flat.new_zeros(k * world_size - flat.numel())])\n"
             "    return padded[rank * k:(rank + 1) * k]\n"
             "# labcore.exercises.sharding.shard_of does the same.",
    correct_example=shard_of,
    wrong_examples=[_chunk_shard, _floor_shard, _pad_ones, _whole_padded],
    expects="a function",
)


# (2) a sharded optimizer step: reduce-scatter, not all-reduce
def _sharded_step_on_rank(step_fn):
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    model = make_model()
    params = list(model.parameters())
    shards = [torch.nn.Parameter(shard_of(p.detach(), rank, n)) for p in params]
    opt = _adam(shards)
    rec = _adam_steps("sharded step", model, _StepWith(opt, lambda: step_fn(params, shards, opt)))
    return _flat(model), rec.collectives().groupby("op")["bytes"].sum().to_dict()


def _check_sharded_step(answer, cluster=None, world_size: int = 4, timeout: float = 30.0):
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_sharded_step.check(zero_step, cluster=cl).")
    results = _run_check(cluster, world_size, _sharded_step_on_rank, answer, timeout=timeout)
    ops = results[0][1]
    if "all_reduce" in ops:
        raise Incorrect(f"the recorder counted all-reduces ({ops['all_reduce']} bytes over {CHECK_STEPS} steps) "
                        "inside the sharded step: each rank updates only its shard, so it never needs the whole "
                        "averaged gradient, and an all-reduce moves twice what that needs.")
    if "reduce_scatter" not in ops or "all_gather" not in ops:
        raise Incorrect(f"the recorder saw {sorted(ops) or 'no collectives'}: the shards' gradients must be "
                        "averaged over ranks, and every rank needs all the updated parameters for the next forward.")
    # what a sharded step moves: each (padded) gradient reduce-scattered once, each parameter gathered once
    psi_bytes = sum(padded_numel(p.numel(), world_size) * p.element_size() for p in make_model().parameters())
    for op, what in (("reduce_scatter", "the gradients are averaged"), ("all_gather", "the parameters are gathered")):
        most = max(int(r[1].get(op, 0)) for r in results)
        if most > CHECK_STEPS * psi_bytes:
            raise Incorrect(f"the recorder saw {op.replace('_', '-')}s moving {most} bytes over {CHECK_STEPS} steps, "
                            f"{most / (CHECK_STEPS * psi_bytes):.3g} times the model's {psi_bytes} (padded) bytes a "
                            f"step: in a sharded step {what} once per step, and anything more is traffic that "
                            "sharding was meant to save.")
    _against_adam([got for got, _ in results], world_size)
    return f"The recorder saw only reduce-scatters and all-gathers, and {world_size} ranks match unsharded Adam."


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


q_sharded_step = CustomExercise(
    "A sharded optimizer step",
    "After backward, every rank holds the full gradients p.grad of the model's params; shards[i] is "
    "this rank's shard (labcore's shard_of layout) of params[i], and opt is Adam over the shards only. "
    "Write zero_step(params, shards, opt): give every shard the mean over ranks of its part of the "
    "gradient, step opt, and put the updated full parameters back into params. Helpers: shard_of, "
    "reduce_scatter_mean, gather_full. Check: q_sharded_step.check(zero_step, cluster=cl).",
    checker=_check_sharded_step,
    hints=["Each rank needs only its shard of the averaged gradient: which collective delivers exactly that?",
           "reduce_scatter_mean(p.grad) returns this rank's shard of the mean gradient; set it as s.grad.",
           "After opt.step(), gather_full(s, p.shape) gives the updated full parameter: copy it into p."],
    solution="def zero_step(params, shards, opt):\n"
             "    for p, s in zip(params, shards):\n"
             "        s.grad = reduce_scatter_mean(p.grad)\n"
             "    opt.step()\n"
             "    with torch.no_grad():\n"
             "        for p, s in zip(params, shards):\n"
             "            p.copy_(gather_full(s, p.shape))",
    correct_example=_zero_step,
    wrong_examples=[_zero_step_allreduce, _zero_step_no_gather, _zero_step_summed, _zero_step_gather_gradients],
    expects="a function",
    **_LIVE,
)


# (3) ZeRO-3: gather again in backward
def _kept_between(model, x) -> list[tuple[int, int, int]]:
    """After one forward of ``model`` on ``x``: for each ZeRO-3 layer (in order) whose autograd node
    keeps more than its input and its shard, (layer, elements kept besides those, elements of its
    full weight W). Looks at what the node saved for backward and at the tensors (also in lists,
    tuples and dicts) put on its ctx."""
    import torch

    layers = [m for m in model if hasattr(m, "shard")]
    of_shard = {id(m.shard): k for k, m in enumerate(layers)}
    inputs = {}
    hooks = [m.register_forward_pre_hook(lambda m, args, k=k: inputs.__setitem__(k, args[0]))
             for k, m in enumerate(layers)]
    try:
        out = model(x)
    finally:
        for h in hooks:
            h.remove()

    def tensors(v, depth=0):
        if isinstance(v, torch.Tensor):
            yield v
        elif depth < 3 and isinstance(v, (list, tuple, set)):
            for item in v:
                yield from tensors(item, depth + 1)
        elif depth < 3 and isinstance(v, dict):
            for item in v.values():
                yield from tensors(item, depth + 1)

    def same_memory(t, u):
        return u is not None and t.numel() > 0 and t.untyped_storage().data_ptr() == u.untyped_storage().data_ptr()

    found, seen, todo = [], set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(f for f, _ in node.next_functions)
        layer = next((of_shard[id(f.variable)] for f, _ in node.next_functions
                      if hasattr(f, "variable") and id(f.variable) in of_shard), None)
        if layer is None or not hasattr(node, "saved_tensors"):
            continue
        shard, given = layers[layer].shard, inputs.get(layer)
        kept = {}
        for t in list(tensors(node.saved_tensors)) + list(tensors(list(vars(node).values()))):
            if same_memory(t, shard) or same_memory(t, given):
                continue
            kept[(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))] = t.numel()
        w_numel = math.prod(layers[layer].w_shape)
        if sum(kept.values()) >= w_numel:
            found.append((layer, sum(kept.values()), w_numel))
    del out
    return sorted(found)


def _zero3_on_rank(fn):
    import torch.distributed as dist

    from labcore.live.recorder import record

    model = _zero3_model(fn)
    x, y = local_batch(0, dist.get_rank(), dist.get_world_size())
    kept = _kept_between(model, x)
    # forward and backward recorded apart: does backward gather the weights again?
    with record("ZeRO-3 forward, backward") as rec:
        with rec.step():
            loss = loss_fn(model(x), y)
        with rec.step():
            loss.backward()
    apart = rec.recording().collectives()
    gathered_apart = [int(apart[(apart["step"] == k) & (apart["op"] == "all_gather")]["bytes"].sum()) for k in (0, 1)]
    frame = _adam_steps("ZeRO-3 layers", model, _adam(model.parameters())).collectives()
    full = _zero3_full(model)
    first = frame[frame["step"] == 0]
    gathers = first[first["op"] == "all_gather"]
    return dict(params=full, gathers=len(gathers), gathered=int(gathers["bytes"].sum()),
                reduce_scatters=int((first["op"] == "reduce_scatter").sum()),
                all_reduces=int((first["op"] == "all_reduce").sum()), kept=kept, gathered_apart=gathered_apart)


def _check_zero3(answer, cluster=None, world_size: int = 4, timeout: float = 30.0):
    import torch

    if not (isinstance(answer, type) and hasattr(answer, "forward") and hasattr(answer, "backward")):
        raise Incorrect("pass your class with forward and backward, e.g. "
                        "q_zero3_layer.check(MyZero3Linear, cluster=cl).")
    results = _run_check(cluster, world_size, _zero3_on_rank, answer, timeout=timeout)
    layers = sum(1 for m in make_model() if isinstance(m, torch.nn.Linear))
    psi_bytes = sum(padded_numel(p.numel(), world_size) * p.element_size() for p in make_model().parameters())
    r0 = results[0]
    calls, gathered = r0["gathers"], r0["gathered"]
    kept = next((r["kept"] for r in results if r["kept"]), [])
    if kept:
        layer, numel, w_numel = kept[0]
        raise Incorrect(f"backward used weights kept from forward: after forward, layer {layer + 1}'s autograd node "
                        f"keeps {numel} elements besides its input and its shard (saved for backward or put on "
                        f"ctx), as many as its full weight's {w_numel}. That is the full weight staying in memory "
                        "from the layer's forward to its backward, which is what stage 3 exists to avoid.")
    fwd, bwd = r0["gathered_apart"]
    if bwd < psi_bytes:
        raise Incorrect(f"the recorder saw backward all-gather {bwd} bytes, for a model of {psi_bytes} bytes in "
                        f"{layers} layers (forward gathered {fwd}): backward used weights kept from forward, or "
                        "none at all. Each layer's backward needs its full weight, and a rank keeps only its shard.")
    if gathered < 2 * psi_bytes:          # forward and backward each gather every layer once
        raise Incorrect(f"the recorder saw {calls} all-gathers moving {gathered} bytes in a step, for a model of "
                        f"{psi_bytes} bytes in {layers} layers: backward used weights kept from forward, so every "
                        "layer's full weights stayed in memory from its forward to its backward, which is what "
                        "stage 3 exists to avoid.")
    if r0["all_reduces"]:
        raise Incorrect(f"the recorder saw {r0['all_reduces']} all-reduce(s) in a step: each rank needs only its "
                        "shard of the mean gradient, and an all-reduce delivers every rank the whole of it, moving "
                        "twice what that needs.")
    if r0["reduce_scatters"] == 0:
        raise Incorrect("the recorder saw no reduce-scatter in a step: each rank's shard of the gradient must be "
                        "the mean over all ranks' gradients, not a piece of its own.")
    _against_adam([r["params"] for r in results], world_size)
    return (f"Two all-gathers per layer per step ({gathered} bytes = 2 x the model), and the shards match "
            "unsharded Adam.")


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


q_zero3_layer = CustomExercise(
    "A ZeRO-3 layer",
    "Write a class MyZero3Linear(torch.autograd.Function) with static forward(ctx, x, shard, w_shape) "
    "-> x @ W.T + b and backward(ctx, grad_y) -> (grad_x, grad_shard, None). The rank holds only its "
    "shard of the layer's flat weight-and-bias: gather_full(shard, (k,)) with k = math.prod(w_shape) + "
    "w_shape[0] gives the whole flat tensor, unflatten(flat, w_shape) gives (W, b), and "
    "reduce_scatter_mean(flatten(grad_W, grad_b)) this rank's shard of the mean gradient. Between forward "
    "and backward a rank must not keep the full weights. Check: q_zero3_layer.check(MyZero3Linear, cluster=cl).",
    checker=_check_zero3,
    hints=["What may forward save for backward? Only what a rank is allowed to keep: x and the shard.",
           "backward needs W for grad_x = grad_y @ W: gather it again from the shard.",
           "grad_W = grad_y.T @ x and grad_b = grad_y.sum(0); flatten them, then reduce_scatter_mean."],
    solution="class MyZero3Linear(torch.autograd.Function):\n"
             "    @staticmethod\n"
             "    def forward(ctx, x, shard, w_shape):\n"
             "        k = math.prod(w_shape) + w_shape[0]\n"
             "        w, b = unflatten(gather_full(shard, (k,)), w_shape)\n"
             "        ctx.save_for_backward(x, shard)\n"
             "        ctx.w_shape = w_shape\n"
             "        return x @ w.T + b\n\n"
             "    @staticmethod\n"
             "    def backward(ctx, grad_y):\n"
             "        x, shard = ctx.saved_tensors\n"
             "        k = math.prod(ctx.w_shape) + ctx.w_shape[0]\n"
             "        w, _ = unflatten(gather_full(shard, (k,)), ctx.w_shape)\n"
             "        return grad_y @ w, reduce_scatter_mean(flatten(grad_y.T @ x, grad_y.sum(0))), None",
    correct_example=Zero3LinearFn,
    wrong_examples=[_KeepsWeights, _LocalGradients, _SummedGradients, _GathersTwiceInForward, _KeepsWeightsOnCtx,
                    _AllReducedGradients],
    expects="a torch.autograd.Function class",
    **_LIVE,
)


# (4) how much does stage 3 move?
def _check_zero3_volume(answer):
    if isinstance(answer, (str, bytes, bool)):
        raise Incorrect(f"answer with a number (the volume in units of Ψ), not {type(answer).__name__} {answer!r}.")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        raise Incorrect(f"answer with a number (the volume in units of Ψ), not {type(answer).__name__} {answer!r}.")
    if not math.isfinite(value):
        raise Incorrect("answer with a finite number of Ψ.")
    if math.isclose(value, 3):
        return None
    messages = {2: "2Ψ is what stages 1 and 2 move (reduce-scatter the gradients, all-gather the parameters). "
                   "Stage 3 frees the parameters after each layer's forward: what does backward need first?",
                1: "that counts a single collective; a ZeRO-3 step needs the parameters in forward, again in "
                   "backward, and the gradients reduced.",
                4: "the gradients are reduce-scattered once, not all-reduced."}
    for v, message in messages.items():
        if math.isclose(value, v):
            raise Incorrect(message)
    raise Incorrect("that is not the volume of a ZeRO-3 step. List its collectives: what is gathered in forward, "
                    "in backward, and what happens to the gradients.")


q_zero3_volume = CustomExercise(
    "ZeRO-3's traffic",
    "Plain data parallelism moves 2Ψ per step (an all-reduce of the Ψ gradients). How much does ZeRO-3 "
    "move per step, in units of Ψ? (Count an all-gather or a reduce-scatter of Ψ elements as Ψ.)",
    checker=_check_zero3_volume,
    hints=["Stage 3 all-gathers each layer's parameters before its forward and frees them afterwards.",
           "Backward needs the parameters too; then the gradients are reduce-scattered."],
    solution="3: all-gather Ψ in forward + all-gather Ψ again in backward + reduce-scatter Ψ of gradients "
             "(Rajbhandari et al. 2020, section 7).",
    correct_example=3,
    wrong_examples=[2, 1, 4, 2.5, "3", True],
    expects="a number (of Ψ)",
)


# (5) row-parallel layer: all-reduce, not all-gather
def _check_row_parallel(answer, cluster=None, world_size: int = 4, timeout: float = 30.0):
    import torch

    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_row_parallel.check(my_row_parallel, cluster=cl).")
    results = _run_check(cluster, world_size, tp_mlp, answer, timeout=timeout)
    r0 = results[0]
    y, ref = r0["y"], r0["y_ref"]
    ops = set(r0["recording"].collectives()["op"])      # forward and backward together
    if tuple(y.shape) != tuple(ref.shape):
        gathered = "all_gather" in ops
        raise Incorrect(f"your output has shape {tuple(y.shape)}, the layer's is {tuple(ref.shape)}"
                        + (": the ranks' results were put side by side. Each rank's product covers only its "
                           "slice of the hidden units, so each is a partial sum of the whole output."
                           if gathered else "."))
    for rank, r in enumerate(results):
        if torch.allclose(r["y"], r["y_ref"], rtol=1e-9, atol=1e-12):
            continue
        if torch.allclose(r["y"] - (world_size - 1) * _bias(), r["y_ref"], rtol=1e-9, atol=1e-12):
            raise Incorrect(f"rank {rank}'s output is off by (world size - 1) times the bias: every rank added b2 "
                            "before the reduction, so it was summed too.")
        if torch.allclose(r["y"], r["partial"], rtol=1e-9, atol=1e-12):
            raise Incorrect(f"rank {rank}'s output is only its own partial product: the ranks' parts were never "
                            "combined.")
        raise Incorrect(f"rank {rank}'s output differs from the unsharded MLP's by up to "
                        f"{float((r['y'] - r['y_ref']).abs().max()):.3g}.")
    for rank, r in enumerate(results):
        ok = all(g is not None and torch.allclose(g, w, rtol=1e-9, atol=1e-12)
                 for g, w in zip(r["grads"], r["grads_ref"]))
        if not ok or r["grad_x"] is None or not torch.allclose(r["grad_x"], r["grad_x_ref"], rtol=1e-9, atol=1e-12):
            raise Incorrect(f"the output is right but rank {rank}'s gradients are not: backward through your layer "
                            "must pass the gradient of the output to every rank's partial product unchanged.")
    for rank, r in enumerate(results):
        got, want = r["grad_b2"], r["grad_b2_ref"]
        if got is not None and torch.allclose(got, want, rtol=1e-9, atol=1e-12):
            continue
        if got is None or not bool(got.abs().max() > 0):
            raise Incorrect(f"the output is right but rank {rank}'s bias b2 got no gradient "
                            f"({'None' if got is None else 'zeros'}): every rank holds the whole b2 and steps it, so "
                            "every rank's copy needs the layer's whole gradient of it, or the copies drift apart.")
        ratio = float((got * want).sum() / (want * want).sum())
        if torch.allclose(got, ratio * want, rtol=1e-9, atol=1e-12):
            raise Incorrect(f"the output is right but rank {rank}'s gradient of b2 is {ratio:.3g} times the "
                            "unsharded MLP's: how b2 enters your layer scales its gradient, though the output "
                            "comes out the same.")
        raise Incorrect(f"the output is right but rank {rank}'s gradient of b2 differs from the unsharded MLP's by "
                        f"up to {float((got - want).abs().max()):.3g}.")
    return "Outputs and gradients (b2's too) match the unsharded MLP on every rank."


def _bias():
    return make_model(dims=(16, 32, 8))[2].bias.detach()


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


q_row_parallel = CustomExercise(
    "The row-parallel layer",
    "In the Megatron MLP, rank r holds h_shard (its slice of the hidden units, from the column-parallel "
    "layer) and w2_shard (the matching columns of W2); b2 is the full bias. Write my_row_parallel(h_shard, "
    "w2_shard, b2) returning the layer's full output h @ W2.T + b2 on every rank, differentiable. "
    "labcore's ReduceFromParallel is Megatron's g (sharding._function(ReduceFromParallel).apply(t)). "
    "Check: q_row_parallel.check(my_row_parallel, cluster=cl).",
    checker=_check_row_parallel,
    hints=["h @ W2.T is a sum over hidden units; rank r can compute the part of that sum over its own slice.",
           "The parts add up to the output: which collective adds tensors across ranks?",
           "g = sharding._function(ReduceFromParallel): g.apply(h_shard @ w2_shard.T) + b2 (the bias once, after)."],
    solution="g = sharding._function(sharding.ReduceFromParallel)\n"
             "def my_row_parallel(h_shard, w2_shard, b2):\n"
             "    return g.apply(h_shard @ w2_shard.T) + b2",
    correct_example=row_parallel,
    wrong_examples=[_row_all_gather, _row_bias_everywhere, _row_no_reduce, _row_bias_split, _row_bias_rank0],
    expects="a function",
    **_LIVE,
)
