"""nccl-tests in Python: every collective's time, algbw, busbw and an exact data check.

This package is the port of nccl-tests' harness. The same numbers come from a
notebook cell (:func:`sweep` on a ``labcore.Cluster``) and from the command line
(``python -m labcore bench all_reduce -b 8 -e 128M -f 2 -g 4``), which also runs
under ``torchrun`` across nodes.

- :func:`sweep`: a size sweep of one collective -> DataFrame (nccl-tests' columns);
- :func:`format_table`: that DataFrame as nccl-tests prints it;
- :data:`OP_NAMES`: the collectives it runs;
- :func:`measure`: the per-rank half (one collective at one size), for torchrun scripts;
- :data:`BUSBW_FACTORS`: busbw / algbw for each collective on n ranks.

A real nccl-tests run's stdout is read into the same DataFrame by :func:`labcore.read_nccl_tests`
(:mod:`labcore.readers.nccl_tests`). What to make of repeated sweeps (the evidence gate, drift,
targets, rollouts, load experiments) is :mod:`labcore.evidence`, which builds on this package.

Example
-------
>>> import labcore as lc
>>> lc.bench.BUSBW_FACTORS["all_reduce"](4)
1.5
>>> with lc.Cluster(2, backend="gloo") as cl:                            # doctest: +SKIP
...     df = lc.bench.sweep(cl, "all_gather", max_bytes="1M", factor=4)
...     print(lc.bench.format_table(df))
"""
from labcore.bench.harness import measure
from labcore.bench.ops import NAMES as OP_NAMES
from labcore.bench.ops import OPS as _OPS
from labcore.bench.sweep import plan_sizes, sweep
from labcore.bench.table import format_table
from labcore.bench.units import parse_size
from labcore.readers.nccl_tests import COLUMNS, PLACEMENTS

BUSBW_FACTORS = {name: op.factor for name, op in _OPS.items()}

__all__ = ["sweep", "measure", "format_table", "plan_sizes", "parse_size", "OP_NAMES", "COLUMNS", "PLACEMENTS",
           "BUSBW_FACTORS"]


def __dir__() -> list[str]:
    return sorted(__all__)
