"""Notebook 06's exercises: prompts, hints and solutions, with the checks, the right answer and
the mistakes each is tested with: :data:`q_padding`, :data:`q_sharded_step`,
:data:`q_zero3_layer`, :data:`q_zero3_volume`, :data:`q_row_parallel`."""
from __future__ import annotations

from labcore.exercises.core import CustomExercise
from labcore.exercises.data_parallel.checks import _LIVE
from labcore.exercises.sharding.mistakes import (
    _AllReducedGradients, _GathersTwiceInForward, _KeepsWeights, _KeepsWeightsOnCtx, _LocalGradients, _NeverGathersInBackward,
    _SummedGradients, _chunk_shard, _floor_shard, _pad_ones, _row_all_gather, _row_bias_detached, _row_bias_everywhere,
    _row_bias_rank0, _row_bias_split, _row_no_reduce, _whole_padded, _zero_step_allreduce,
    _zero_step_gather_gradients, _zero_step_no_gather, _zero_step_summed,
)
from labcore.exercises.sharding.checks import (
    _check_padding, _check_row_parallel, _check_sharded_step, _check_zero3, _check_zero3_volume,
)
from labcore.exercises.sharding.reference import Zero3LinearFn, _zero_step, row_parallel, shard_of

__all__ = ["q_padding", "q_sharded_step", "q_zero3_layer", "q_zero3_volume", "q_row_parallel"]


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
                    _AllReducedGradients, _NeverGathersInBackward],
    expects="a torch.autograd.Function class",
    **_LIVE,
)


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
    wrong_examples=[_row_all_gather, _row_bias_detached, _row_bias_everywhere, _row_no_reduce, _row_bias_split, _row_bias_rank0,
                    _row_bias_detached],
    expects="a function",
    **_LIVE,
)
