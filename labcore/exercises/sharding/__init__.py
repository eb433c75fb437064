"""Sharded data parallelism and tensor parallelism (notebook 06): reference code and exercises.

ZeRO (Rajbhandari et al. 2020) by hand with ``dist.reduce_scatter_single`` and
``dist.all_gather_single``, beside torch's ``ZeroRedundancyOptimizer`` and FSDP2's
``fully_shard``; Megatron-style tensor parallelism by hand and with DTensor. Split by audience:

- :mod:`.reference`: the code a learner reads (shards and padding, the ZeRO-3 layer, the stages'
  training loops, Megatron's f and g, the tensor-parallel MLP);
- :mod:`.questions`: the exercises: :data:`q_padding`, :data:`q_sharded_step`,
  :data:`q_zero3_layer`, :data:`q_zero3_volume`, :data:`q_row_parallel`;
- :mod:`.checks`: their checks (the live ones count the collectives with the recorder);
- :mod:`.mistakes`: deliberate wrong answers the tests feed to the checks (not re-exported here).

Example
-------
>>> padded_numel(10, 4)
12
"""
from labcore.exercises.data_parallel.reference import make_model as make_model
from labcore.exercises.sharding import checks as checks
from labcore.exercises.sharding import questions as questions
from labcore.exercises.sharding import reference as reference
from labcore.exercises.sharding.questions import q_padding, q_row_parallel, q_sharded_step, q_zero3_layer, q_zero3_volume
from labcore.exercises.sharding.reference import (
    _function as _function, _zero_step as _zero_step, row_parallel as row_parallel, DEEPSPEED_STAGES,
    CopyToParallel, ReduceFromParallel, Zero3LinearFn, adam_reference, flatten, fsdp_train, gather_full, pad_flat,
    padded_numel, reduce_scatter_mean, shard_of, tp_dtensor, tp_mlp, unflatten, zero3_linear, zero_redundancy_train, zero_train,
)

__all__ = ["padded_numel", "pad_flat", "shard_of", "gather_full", "reduce_scatter_mean", "unflatten",
           "flatten", "zero3_linear", "Zero3LinearFn", "adam_reference", "zero_train", "zero_redundancy_train",
           "fsdp_train", "CopyToParallel", "ReduceFromParallel", "tp_mlp", "tp_dtensor", "DEEPSPEED_STAGES",
           "q_padding", "q_sharded_step", "q_zero3_layer", "q_zero3_volume", "q_row_parallel"]
