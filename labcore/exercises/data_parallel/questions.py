"""Notebook 05's exercises: prompts, hints and solutions, with the checks, the right answer and
the mistakes each is tested with.

- :data:`q_start`: before the first step, make every rank hold rank 0's parameters and buffers;
- :data:`q_average`: average gradients with one all-reduce per parameter;
- :data:`q_buckets`: the same with flattened buckets;
- :data:`q_overlap`: launch and finish buckets from gradient hooks;
- :data:`q_accumulate`: gradient accumulation with torch's DDP (communication counted by the
  recorder);
- :data:`q_ddp_bytes`: the bytes each rank sends in one DDP step.
"""
from __future__ import annotations

from labcore.exercises.core import CustomExercise
from labcore.exercises.live import LiveExercise
from labcore.exercises.data_parallel.mistakes import (
    _accumulate_by_hand, _accumulate_concatenated, _accumulate_every, _accumulate_halves, _accumulate_never,
    _accumulate_one_backward, _accumulate_sync_first, _accumulate_unscaled, _bucket_float32, _bucket_no_divide,
    _bucket_per_parameter, _bucket_reduce_scatter_all_gather, _buckets_closed_past_cap, _buckets_divide_by_four,
    _buckets_first_to_last, _buckets_never_over_cap, _divide_by_four, _divide_by_n_minus_1, _drop_last_bucket,
    _finish_divide_by_four, _finish_divide_first, _finish_no_divide, _finish_no_wait, _launch_blocking,
    _launch_blocking_handle, _launch_waits, _launch_waits_on_future, _launch_waits_walrus, _no_divide,
    _one_bucket, _one_flat_all_reduce, _params_not_grads, _start_averaged, _start_from_last, _start_into_copies,
    _start_own_source, _start_parameters_only, _start_reseeded,
)
from labcore.exercises.data_parallel.checks import (
    _check_accumulate, _check_average, _check_buckets, _check_ddp_bytes, _check_overlap, _check_start,
)
from labcore.exercises.data_parallel.reference import (
    DEEP_GRAD_BYTES, _accumulate, _finish_wait, _launch_async, allreduce_buckets, allreduce_per_parameter,
    broadcast_start,
)

__all__ = ["q_start", "q_average", "q_buckets", "q_overlap", "q_accumulate", "q_ddp_bytes"]


q_start = LiveExercise(
    "Start every replica from rank 0's model",
    "Every rank builds the model (dp.start_model: an MLP with a BatchNorm layer) from weights of its own; "
    "real training starts from a checkpoint that only rank 0 has read. Write sync_start(model): it runs on "
    "every rank before the first training step and must leave every rank's model holding exactly rank 0's "
    "values, its parameters and its buffers (BatchNorm's running statistics), in the model's own tensors. "
    "Check it with q_start.check(sync_start, cluster=cl): every rank starts from random weights no other rank "
    "can rebuild, the check records what your code sends, and it runs on the cluster's ranks, then on 3 and 5.",
    checker=_check_start,
    hints=["One rank's tensors must reach every other rank unchanged: which collective of notebook 01 does "
           "exactly that?",
           "model.parameters() are not all of the model's state: model.buffers() holds the rest. Write into "
           "each tensor in place, under torch.no_grad().",
           "For every t in [*model.parameters(), *model.buffers()]: dist.broadcast(t, src=0), the same src on "
           "every rank."],
    solution="def sync_start(model):\n"
             "    with torch.no_grad():\n"
             "        for t in [*model.parameters(), *model.buffers()]:\n"
             "            dist.broadcast(t, src=0)\n"
             "# labcore.exercises.data_parallel.broadcast_start is the same; DDP does it when it is built\n"
             "# (_sync_module_states, packing the tensors into buckets first).",
    correct_example=broadcast_start,
    wrong_examples=[_start_parameters_only, _start_averaged, _start_own_source, _start_from_last,
                    _start_into_copies, _start_reseeded],
    expects="a function of the model",
)


q_average = LiveExercise(
    "Average the gradients",
    "Write average_gradients(model): it runs on every rank after loss.backward() and before the "
    "optimizer step, and must leave every parameter's .grad equal to the mean of that gradient over "
    "all ranks (use one dist.all_reduce per parameter). Check it with "
    "q_average.check(average_gradients, cluster=cl): it runs on the cluster's ranks, then on 3 and 5 ranks.",
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
    wrong_examples=[_no_divide, _params_not_grads, _divide_by_n_minus_1, _divide_by_four, _one_flat_all_reduce],
    expects="a function of the model",
)


q_buckets = LiveExercise(
    "Gradients in buckets",
    "Write average_buckets(model, bucket_bytes): flatten the gradients into buckets (walk the "
    "parameters last to first, as their gradients become ready in backward, and close a bucket as soon as "
    "it holds at least bucket_bytes bytes, as DDP does), all-reduce each bucket once, and copy the averaged values "
    "back into each p.grad. Check it with q_buckets.check(average_buckets, cluster=cl): the recorder counts your "
    "all-reduces, with a different bucket_bytes in each of the 3 steps, on the cluster's ranks and on 3 and 5.",
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
                    _bucket_per_parameter, _bucket_float32,
                    _bucket_reduce_scatter_all_gather, _buckets_divide_by_four, _buckets_closed_past_cap,
                    _buckets_never_over_cap],
    expects="a function",
)


q_overlap = LiveExercise(
    "Overlap communication with backward",
    "OverlappedBuckets calls launch(bucket) from a gradient hook as soon as a bucket's gradients are "
    "ready (backward is still running), and finish(handle, bucket) for every bucket after backward. "
    "Write launch (start the all-reduce of the flat bucket without waiting, return its handle) and "
    "finish (complete it and turn the sum into the mean). Check: q_overlap.check((launch, finish), cluster=cl) "
    "(on the cluster's ranks, then on 3 and 5).",
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
                    (_launch_waits_walrus, _finish_wait), (_launch_waits_on_future, _finish_wait),
                    (_launch_async, _finish_no_divide), (_launch_async, _finish_divide_first),
                    (_launch_async, _finish_divide_by_four)],
    expects="a pair of functions (launch, finish)",
)


q_accumulate = LiveExercise(
    "Gradient accumulation",
    "Write accumulation_step(ddp, micro_batches): run forward and backward on each (x, y) of "
    "micro_batches through the DDP model so that the gradients add up to those of the whole local "
    "batch (scale each loss by 1 / len(micro_batches)), communicating as little as possible. The "
    "caller then takes one optimizer step. Check: q_accumulate.check(accumulation_step, cluster=cl) (2 "
    "micro-batches a step on the cluster's ranks, then 4 on 3 and 5 ranks).",
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
                    _accumulate_concatenated, _accumulate_one_backward, _accumulate_by_hand, _accumulate_halves],
    expects="a function",
)


q_ddp_bytes = CustomExercise(
    "Bytes per DDP step",
    "A DDP step all-reduces every gradient once. The model's gradients take G bytes. With a ring "
    "all-reduce on n ranks, how many bytes does each rank send per step? Answer for the model of "
    "this notebook (G and n are printed beside the question; they are also the defaults): "
    "q_ddp_bytes.check(answer, grad_bytes=G, ranks=n), with a number of bytes (within 0.1% counts as right).",
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
