"""nccl-tests in Python: every collective's time, algbw, busbw and an exact data check.

``import labcore as lc; lc.bench`` is this package. The same numbers come from a
notebook cell (:func:`sweep` on a ``labcore.Cluster``) and from the command line
(``python -m labcore bench all_reduce -b 8 -e 128M -f 2 -g 4``), which also runs
under ``torchrun`` across nodes.

- :func:`sweep`: a size sweep of one collective -> DataFrame (nccl-tests' columns);
- :func:`format_table`: that DataFrame as nccl-tests prints it;
- :func:`read_nccl_tests`: a real nccl-tests run's stdout -> the same DataFrame;
- :func:`summarize`: medians of repeated sweeps with bootstrap confidence intervals;
- :func:`save_baseline`, :func:`load_baseline`, :func:`compare`, :func:`verdict`,
  :func:`regressed`: the evidence gate (a permutation test with a stated false-alarm
  rate) that flags a size slower than its baseline, or says "inconclusive, measure more";
- :func:`noisy_neighbours`: busy processes, to produce a slowdown on purpose;
- :data:`BUSBW_FACTORS`: busbw / algbw for each collective on n ranks.

Example
-------
>>> import labcore as lc
>>> lc.bench.BUSBW_FACTORS["all_reduce"](4)
1.5
>>> with lc.Cluster(2, backend="gloo") as cl:                            # doctest: +SKIP
...     df = lc.bench.sweep(cl, "all_gather", max_bytes="1M", factor=4)
...     print(lc.bench.format_table(df))
"""
from labcore.live.bench.baseline import load_baseline, save_baseline
from labcore.live.bench.harness import PLACEMENTS, measure
from labcore.live.bench.load import noisy_neighbours
from labcore.live.bench.ops import NAMES as COLLECTIVES
from labcore.live.bench.ops import OPS as _OPS
from labcore.live.bench.sweep import COLUMNS, plan_sizes, sweep
from labcore.live.bench.reader import read_nccl_tests
from labcore.live.bench.stats import compare, regressed, summarize, verdict
from labcore.live.bench.table import format_table
from labcore.live.bench.units import parse_size

BUSBW_FACTORS = {name: op.factor for name, op in _OPS.items()}

__all__ = [
    "sweep", "measure", "format_table", "read_nccl_tests", "summarize", "save_baseline",
    "load_baseline", "compare", "verdict", "regressed", "noisy_neighbours", "plan_sizes",
    "parse_size", "COLLECTIVES", "COLUMNS", "PLACEMENTS", "BUSBW_FACTORS",
]
