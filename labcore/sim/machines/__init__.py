"""The machines the simulator runs on: the topology blocks (:mod:`~labcore.sim.machines.topologies`) and
the one catalog of named presets (:mod:`~labcore.sim.machines.presets`), which pairs each machine with the
NCCL machine that prices it.
"""
