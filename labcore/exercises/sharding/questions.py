"""Notebook 06's exercises: prompts, hints and solutions, with the checks, the right answer and
the mistakes each is tested with: :data:`q_padding`, :data:`q_sharded_step`,
:data:`q_zero3_layer`, :data:`q_zero3_volume`, :data:`q_row_parallel`."""
from __future__ import annotations

from labcore.exercises.core import CustomExercise
from labcore.exercises.live import LiveExercise
from labcore.exercises.sharding.mistakes import (
    _AllReducedGradients, _GathersTwiceInForward, _KeepsWeights, _KeepsWeightsOnCtx, _LocalGradients,
    _NeverGathersInBackward, _SummedGradients, _Zero3DivideByFour, _Zero3NoPadding, _chunk_shard, _floor_shard,
    _pad_ones, _row_all_gather, _row_bias_detached, _row_bias_everywhere, _row_bias_rank0, _row_bias_split,
    _row_in_place_all_reduce, _row_no_reduce, _whole_padded, _zero_step_allreduce, _zero_step_divide_by_four,
    _zero_step_gather_gradients, _zero_step_no_gather, _zero_step_no_padding, _zero_step_summed,
)
from labcore.exercises.sharding.checks import (
    _check_padding, _check_row_parallel, _check_sharded_step, _check_zero3,
)
from labcore.exercises.sharding.reference import Zero3LinearFn, _zero_step, row_parallel, shard_of
from labcore.exercises.values import StatedValue

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


q_sharded_step = LiveExercise(
    "A sharded optimizer step",
    "After backward, every rank holds the full gradients p.grad of the model's params; shards[i] is "
    "this rank's shard (labcore's shard_of layout) of params[i], and opt is Adam over the shards only. "
    "Write zero_step(params, shards, opt): give every shard the mean over ranks of its part of the "
    "gradient, step opt, and put the updated full parameters back into params. Helpers: shard_of, "
    "reduce_scatter_mean, gather_full. Check: q_sharded_step.check(zero_step, cluster=cl) (on the cluster's "
    "ranks, then on 3 and 5, where the parameters' sizes do not divide by the rank count).",
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
    wrong_examples=[_zero_step_allreduce, _zero_step_no_gather, _zero_step_summed, _zero_step_gather_gradients,
                    _zero_step_divide_by_four, _zero_step_no_padding],
    expects="a function",
)


q_zero3_layer = LiveExercise(
    "A ZeRO-3 layer",
    "Write a class MyZero3Linear(torch.autograd.Function) with static forward(ctx, x, shard, w_shape) "
    "-> x @ W.T + b and backward(ctx, grad_y) -> (grad_x, grad_shard, None). The rank holds only its "
    "shard of the layer's flat weight-and-bias: gather_full(shard, (k,)) with k = math.prod(w_shape) + "
    "w_shape[0] gives the whole flat tensor, unflatten(flat, w_shape) gives (W, b), and "
    "reduce_scatter_mean(flatten(grad_W, grad_b)) this rank's shard of the mean gradient. Between forward "
    "and backward a rank must not keep the full weights. Check: q_zero3_layer.check(MyZero3Linear, cluster=cl) "
    "(on the cluster's ranks, then on 3 and 5, where the layers' sizes do not divide by the rank count).",
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
                    _AllReducedGradients, _NeverGathersInBackward, _Zero3DivideByFour, _Zero3NoPadding],
    expects="a torch.autograd.Function class",
)


def _zero3_gb(psi, item, ranks, collectives=3, share=True, unit=1e9):
    """GB one rank sends in a ZeRO-3 step: each all-gather or reduce-scatter of the psi parameters sends
    (n-1)/n of their bytes from every rank of a ring."""
    return collectives * ((ranks - 1) / ranks if share else 1) * psi * item / unit


q_zero3_volume = StatedValue(
    "ZeRO-3's traffic",
    "The table above gives each stage's volume in units of Ψ, for this notebook's small model on 4 ranks. Now a "
    "real job: a model of Ψ = {psi:.0e} parameters in bfloat16 ({item} bytes each), trained with ZeRO-3 on {ranks} "
    "ranks, every collective a ring. How many GB (1e9 bytes) does each rank send in one training step?",
    expected=_zero3_gb,
    given={"psi": 7e9, "item": 2, "ranks": 64},
    rtol=0.005, unit="GB",
    mistakes=[(lambda psi, item, ranks: 3.0,
               "3 is the volume in units of Ψ, as in the table: the question asks for the bytes one rank sends, "
               "in GB, for this model and these ranks."),
              (lambda psi, item, ranks: _zero3_gb(psi, item, ranks, collectives=2),
               "2Ψ is what stages 1 and 2 move (reduce-scatter the gradients, all-gather the parameters). Stage 3 "
               "frees the parameters after each layer's forward: what does backward need first?"),
              (lambda psi, item, ranks: _zero3_gb(psi, item, ranks, collectives=4),
               "the gradients are reduce-scattered once, not all-reduced."),
              (lambda psi, item, ranks: _zero3_gb(psi, item, ranks, collectives=1),
               "that counts a single collective; a ZeRO-3 step needs the parameters in forward, again in "
               "backward, and the gradients reduced."),
              (lambda psi, item, ranks: _zero3_gb(psi, item, ranks, share=False),
               "in a ring all-gather or reduce-scatter a rank never sends the piece it keeps itself: of the "
               "n pieces, it sends n - 1."),
              (lambda psi, item, ranks: _zero3_gb(psi, 1, ranks),
               "that counts parameters, not bytes: each bfloat16 parameter takes 2 bytes."),
              (lambda psi, item, ranks: _zero3_gb(psi, item, ranks, unit=2 ** 30),
               "that is in GiB (2**30 bytes); the question counts GB = 1e9 bytes.")],
    hints=["Stage 3 all-gathers each layer's parameters before its forward and frees them afterwards; backward "
           "needs them again; then the gradients are reduce-scattered.",
           "In a ring all-gather or reduce-scatter of B bytes on n ranks, each rank sends (n - 1)/n x B."],
    solution="3 collectives x (64 - 1)/64 x 7e9 x 2 bytes = 41.3 GB per rank per step: all-gather in forward, "
             "all-gather again in backward, reduce-scatter of the gradients (Rajbhandari et al. 2020, section 7: "
             "3Ψ), each sending (n-1)/n of the model's bytes from every rank.",
    correct_example=_zero3_gb(7e9, 2, 64),
    wrong_examples=[3, _zero3_gb(7e9, 2, 64, collectives=2), _zero3_gb(7e9, 2, 64, collectives=4),
                    _zero3_gb(7e9, 2, 64, share=False), _zero3_gb(7e9, 1, 64), "41.3", True, 2.5],
    form="a number of GB",
)


q_row_parallel = LiveExercise(
    "The row-parallel layer",
    "In the Megatron MLP, rank r holds h_shard (its slice of the hidden units, from the column-parallel "
    "layer) and w2_shard (the matching columns of W2); b2 is the full bias. Write my_row_parallel(h_shard, "
    "w2_shard, b2) returning the layer's full output h @ W2.T + b2 on every rank, differentiable. "
    "labcore's ReduceFromParallel is Megatron's g (sharding._function(ReduceFromParallel).apply(t)). "
    "Check: q_row_parallel.check(my_row_parallel, cluster=cl) (on the cluster's ranks, then on 3 and 5).",
    checker=_check_row_parallel,
    hints=["h @ W2.T is a sum over hidden units; rank r can compute the part of that sum over its own slice.",
           "The parts add up to the output: which collective adds tensors across ranks?",
           "g = sharding._function(ReduceFromParallel): g.apply(h_shard @ w2_shard.T) + b2 (the bias once, after)."],
    solution="g = sharding._function(sharding.ReduceFromParallel)\n"
             "def my_row_parallel(h_shard, w2_shard, b2):\n"
             "    return g.apply(h_shard @ w2_shard.T) + b2",
    correct_example=row_parallel,
    wrong_examples=[_row_all_gather, _row_bias_everywhere, _row_no_reduce, _row_bias_split, _row_bias_rank0,
                    _row_bias_detached, _row_in_place_all_reduce],
    expects="a function",
)
