"""What the simulator is used for: replaying a recorded step (:mod:`~labcore.sim.apps.replay`), a DDP step's
communication (:mod:`~labcore.sim.apps.ddp_step`), an alpha-beta fit (:mod:`~labcore.sim.apps.calibration`),
scale-out analysis (:mod:`~labcore.sim.apps.scaleout`), pricing (:mod:`~labcore.sim.apps.pricing`), size
sweeps (:mod:`~labcore.sim.apps.sweeps`) and what NCCL ran against its tuner (:mod:`~labcore.sim.apps.choices`).
"""
