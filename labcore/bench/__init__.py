"""nccl-tests in Python: every collective's time, algbw, busbw and an exact data check.

This package is the port of nccl-tests' harness. The same numbers come from a
notebook cell (:func:`sweep` on a ``labcore.Cluster``) and from the command line
(``python -m labcore bench all_reduce -b 8 -e 128M -f 2 -g 4``), which also runs
under ``torchrun`` across nodes.

- :func:`sweep`: a size sweep of one collective -> DataFrame (nccl-tests' columns);
- :func:`format_table`: that DataFrame as nccl-tests prints it;
- :func:`read_nccl_tests`: a real nccl-tests run's stdout -> the same DataFrame;
- :func:`measure`: the per-rank half (one collective at one size), for torchrun scripts;
- :data:`BUSBW_FACTORS`: busbw / algbw for each collective on n ranks.

What to make of repeated sweeps (the evidence gate, drift, targets, rollouts, load
experiments) is :mod:`labcore.evidence`.

Example
-------
>>> import labcore as lc
>>> lc.bench.BUSBW_FACTORS["all_reduce"](4)
1.5
>>> with lc.Cluster(2, backend="gloo") as cl:                            # doctest: +SKIP
...     df = lc.bench.sweep(cl, "all_gather", max_bytes="1M", factor=4)
...     print(lc.bench.format_table(df))
"""
import warnings

from labcore.bench.harness import PLACEMENTS, measure
from labcore.bench.ops import NAMES as COLLECTIVES
from labcore.bench.ops import OPS as _OPS
from labcore.bench.reader import read_nccl_tests
from labcore.bench.sweep import COLUMNS, plan_sizes, sweep
from labcore.bench.table import format_table
from labcore.bench.units import parse_size

BUSBW_FACTORS = {name: op.factor for name, op in _OPS.items()}

__all__ = [
    "sweep", "measure", "format_table", "read_nccl_tests", "plan_sizes", "parse_size", "COLLECTIVES",
    "COLUMNS", "PLACEMENTS", "BUSBW_FACTORS",
]

# The gate's names lived here before labcore.evidence; kept one release for old notebooks.
_MOVED = {"summarize", "compare", "verdict", "regressed", "save_baseline", "load_baseline", "noisy_neighbours"}


def __getattr__(name: str):
    if name in _MOVED:
        import labcore.evidence

        warnings.warn(f"lc.bench.{name} is now lc.evidence.{name}", DeprecationWarning, stacklevel=2)
        return getattr(labcore.evidence, name)
    raise AttributeError(f"module 'labcore.bench' has no attribute {name!r}")
