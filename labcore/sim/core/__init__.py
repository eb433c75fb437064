"""The simulator's core: the data model (:mod:`~labcore.sim.core.trace`), the engine that moves values and
times transfers (:mod:`~labcore.sim.core.engine`), the network model (:mod:`~labcore.sim.core.network`),
what each collective starts from and ends with (:mod:`~labcore.sim.core.buffers`), the register of
algorithms (:mod:`~labcore.sim.core.registry`) and their schedules (:mod:`~labcore.sim.core.schedules`:
one module of builders and closed forms each), the closed forms' evaluation (:mod:`~labcore.sim.core.cost`)
and the bounds no algorithm beats (:mod:`~labcore.sim.core.bounds`). It knows no machine and no NCCL.
"""
