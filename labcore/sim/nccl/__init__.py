"""NCCL's own model, ported: its algorithm and protocol choice (:mod:`~labcore.sim.nccl.tuner`) and the
mid-size mechanisms the simulator plays (:mod:`~labcore.sim.nccl.mechanisms`). It prices NCCL's machines
(:data:`labcore.sim.nccl.tuner.MACHINES`) and never looks a preset up: which machine prices a preset is
decided by the preset catalog (:mod:`labcore.sim.machines.presets`).
"""
