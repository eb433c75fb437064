"""Simulate many (algorithm, ranks, size) points at once into a DataFrame, for plots and comparisons.

(``labcore.sim.sweep`` is the old name of :func:`simulate_sizes`, kept one release; ``labcore.bench.sweep``
measures on real ranks.)

Example
-------
>>> df = simulate_sizes("all_reduce", ["ring", "recursive_doubling"], ranks=8, sizes=[8, 1 << 20])
>>> df.columns.tolist()
['op', 'algorithm', 'ranks', 'size', 'topology', 'protocol', 'channels', 'time_us', 'algbw', 'busbw',
 'bound_us', 'steps']
>>> len(df)
4
"""
from __future__ import annotations

import numbers
from typing import Callable, Iterable

from labcore.sim.machines import presets
from labcore.sim.simulation import simulate

__all__ = ["simulate_sizes"]


def simulate_sizes(op: str, algorithms: Iterable[str] | str, ranks: Iterable[int] | int, sizes: Iterable[float] | float,
          topology: str | Callable = "uniform", contention: bool = True, **options):
    """Timing-only simulations of every algorithm x rank count x size, as a pandas DataFrame.

    Parameters
    ----------
    op : collective name.
    algorithms, ranks, sizes : one value or several each.
    topology : a preset name (:mod:`labcore.sim.machines.presets`) or a function ranks -> topology.
    contention : share links between the messages of a step.
    **options : passed to :func:`labcore.sim.simulate` (``protocol``) and every schedule (``pipeline``,
        ``gpus_per_node``, ``channels``, ``root``).

    Returns
    -------
    DataFrame with columns op, algorithm (as run: "best" names the one chosen), ranks, size, topology,
    protocol, channels, time_us, algbw, busbw (GB/s), bound_us (the lower bound for any algorithm),
    steps.
    """
    import pandas as pd

    algorithms = [algorithms] if isinstance(algorithms, str) else list(algorithms)
    ranks = [ranks] if isinstance(ranks, numbers.Integral) else list(ranks)
    sizes = [sizes] if isinstance(sizes, numbers.Real) else list(sizes)
    for name, values in (("algorithms", algorithms), ("ranks", ranks), ("sizes", sizes)):
        if not values:
            raise ValueError(f"{name} is empty: give at least one")
    if not (isinstance(topology, str) or callable(topology)):
        raise TypeError(f"topology is a preset name such as 'nvswitch8' or a function ranks -> topology, "
                        f"not {type(topology).__name__}")
    make = (lambda p: presets.topology(topology, p)) if isinstance(topology, str) else topology
    rows = []
    for p in ranks:
        topo = make(p)
        for algo in algorithms:
            for size in sizes:
                s = simulate(op, algo, p, size, topology=topo, values=False, contention=contention,
                             **options).summary()
                rows.append({"op": op, "algorithm": s["algorithm"], "ranks": p, "size": size,
                             "topology": s["topology"], "protocol": s["protocol"], "channels": s["channels"],
                             "time_us": s["time_us"], "algbw": s["algbw"], "busbw": s["busbw"],
                             "bound_us": s["bound_us"], "steps": s["steps"]})
    return pd.DataFrame(rows)
