"""Data parallelism from scratch (notebook 05): reference code, and exercises that answer back.

Every rank holds a full copy of a small model and trains on its own slice of each batch;
communication keeps the copies equal. The package is split by audience:

- :mod:`.reference`: the code a learner reads: :func:`make_model`, :func:`global_batch`,
  :func:`local_batch` (one deterministic model and data, so that every check can compare against
  single-process training on the whole batch), :func:`replicas_differ` (the drift demo),
  :func:`start_model` and :func:`broadcast_start` (every rank starts from rank 0's model), three
  ways to average gradients (:func:`allreduce_per_parameter`, :func:`allreduce_buckets`,
  :class:`OverlappedBuckets`) and :func:`train`, which runs a few SGD steps with any of them (or
  torch's DDP) and records them;
- :mod:`.questions`: the exercises (prompts, hints, solutions): :data:`q_start`, :data:`q_average`,
  :data:`q_buckets`, :data:`q_overlap`, :data:`q_accumulate`, :data:`q_ddp_bytes`;
- :mod:`.checks`: the live checks (each runs your code on a live cluster, 3 steps, and compares
  every rank's parameters with single-process training on the concatenated batch);
- :mod:`.mistakes`: deliberate wrong answers the tests feed to the checks (not re-exported here).

Example (on a rank)
-------------------
>>> params, rec = train(allreduce_per_parameter)      # doctest: +SKIP
"""
from labcore.exercises.data_parallel import checks as checks
from labcore.exercises.data_parallel import questions as questions
from labcore.exercises.data_parallel import reference as reference
from labcore.exercises.data_parallel.checks import _layouts as _layouts
from labcore.exercises.data_parallel.questions import (
    q_accumulate, q_average, q_buckets, q_ddp_bytes, q_overlap, q_start,
)
from labcore.exercises.data_parallel.reference import (
    CHECK_STEPS as CHECK_STEPS, LR as LR, PER_RANK as PER_RANK, _accumulate as _accumulate,
    _finish_wait as _finish_wait, _launch_async as _launch_async, DEEP, DEEP_GRAD_BYTES, DIMS, OverlappedBuckets,
    allreduce_buckets, allreduce_per_parameter, broadcast_start, buckets_of, ddp_train, global_batch, local_batch,
    loss_fn, make_model, recorded_loop, reference_params, replicas_differ, sgd_steps, start_model, train,
)

__all__ = ["DIMS", "DEEP", "DEEP_GRAD_BYTES", "make_model", "global_batch", "local_batch", "loss_fn", "replicas_differ",
           "start_model", "broadcast_start",
           "allreduce_per_parameter", "allreduce_buckets", "buckets_of", "OverlappedBuckets", "sgd_steps",
           "recorded_loop", "train",
           "ddp_train", "reference_params",
           "q_start", "q_average", "q_buckets", "q_overlap", "q_accumulate", "q_ddp_bytes"]
