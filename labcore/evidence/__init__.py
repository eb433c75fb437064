"""Evidence under load: statistics and experiments that say whether a change helped.

A sweep from :mod:`labcore.bench` is one measurement; this package turns repeated
measurements into decisions a team can defend:

- the gate: :func:`summarize` (medians with bootstrap intervals), :func:`compare`
  (a one-sided permutation test per size with a stated false-alarm rate), :func:`verdict`,
  :func:`regressed`, :func:`advice`, :func:`smallest_pvalue`, and baselines (:func:`save_baseline`, :func:`load_baseline`);
- targets written before measuring: :class:`Target`, :func:`targets_table`,
  :func:`check_targets`, :func:`side_by_side`, :func:`busbw_fraction`, :func:`copy_bandwidth`;
- drift over many runs: :func:`control_table`, :func:`drift_verdict`, :func:`control_limits`;
- rollouts behind the gate: :func:`decide`, :func:`compare_predictions`;
- tail latency: :func:`call_latencies`, :func:`latency_summary`, :func:`calls_needed`,
  :func:`quantile_interval`;
- load on purpose: :func:`noisy_neighbours` (another job's busy loops),
  :func:`training_neighbours` (a training step's own compute), :func:`ddp_steps`, :func:`comm_share`,
  :func:`share_reading`;
- the gate's runs recorded on the lab's machine: :func:`recorded_run`, :func:`recorded_runs`.

Example
-------
>>> import labcore as lc
>>> lc.evidence.calls_needed(0.99)       # calls before a p99 has a 95% interval at all
368
"""
from labcore.bench.baseline import load_baseline, save_baseline
from labcore.evidence.ceiling import copy_bandwidth
from labcore.evidence.compute_load import training_neighbours
from labcore.evidence.drift import RUN_LENGTH, control_limits, control_table, drift_verdict, run_signals
from labcore.evidence.latency import call_latencies, calls_needed, latency_summary, quantile_interval
from labcore.evidence.load import noisy_neighbours
from labcore.evidence.recorded import recorded_run, recorded_runs
from labcore.evidence.rollout import Decision, compare_predictions, decide
from labcore.evidence.stats import (advice, bootstrap_median, compare, regressed, repeats_to_settle, smallest_pvalue,
                                    summarize, verdict)
from labcore.evidence.steps import comm_share, ddp_steps, gradient_bytes, share_reading
from labcore.evidence.targets import INCONCLUSIVE, Target, busbw_fraction, check_targets, side_by_side, targets_table

__all__ = [
    "summarize", "compare", "verdict", "regressed", "advice", "repeats_to_settle", "bootstrap_median", "smallest_pvalue",
    "save_baseline",
    "load_baseline", "Target", "targets_table", "check_targets", "side_by_side", "busbw_fraction",
    "copy_bandwidth", "INCONCLUSIVE", "control_table", "drift_verdict", "control_limits", "run_signals",
    "RUN_LENGTH", "decide", "Decision", "compare_predictions", "call_latencies", "latency_summary",
    "calls_needed", "quantile_interval", "noisy_neighbours", "training_neighbours", "ddp_steps",
    "comm_share", "gradient_bytes", "share_reading", "recorded_run", "recorded_runs",
]


def __dir__() -> list[str]:
    return sorted(__all__)
