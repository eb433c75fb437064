"""Evidence under load: percentile intervals, targets, the control chart, roll-out decisions, and the live
measurements behind notebook 10 (per-call latencies, DDP steps, training compute as load, copy bandwidth).

Nothing here asserts a time: live tests check shapes, bounds and that the measurements are real
(positive, one per call, the processes really computing); behaviour on this machine is pinned on the
repeats benchmarks/bench_gate.py recorded in tests/data.
"""
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

import labcore as lc
from labcore.evidence.ceiling import copy_bandwidth
from labcore.evidence.compute_load import training_neighbours
from labcore.evidence.drift import RUN_LENGTH, control_limits, control_table, drift_verdict, run_signals
from labcore.evidence.latency import call_latencies, calls_needed, latency_summary, quantile_interval
from labcore.evidence.rollout import compare_predictions, decide
from labcore.evidence.steps import comm_share, ddp_steps, gradient_bytes
from labcore.evidence.targets import INCONCLUSIVE, Target, busbw_fraction, check_targets, side_by_side, targets_table

pytestmark = pytest.mark.live

DATA = Path(__file__).parent / "data"


def _recorded(name):
    return pd.DataFrame(json.loads((DATA / f"bench_gate_recorded_{name}.json").read_text())["rows"])


# -- percentiles with distribution-free intervals ---------------------------------------------------------
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_quantile_interval_covers_the_true_quantile_at_its_level(q):
    rng = np.random.default_rng(1)
    true = -math.log(1 - q)                       # quantile of Exp(1): skewed like call times
    hits = 0
    trials = 400
    for _ in range(trials):
        _, low, high = quantile_interval(rng.exponential(size=400), q, level=0.95)
        hits += low <= true <= high
    assert hits / trials >= 0.93                  # 95% nominal, conservative by construction


def test_quantile_interval_is_unbounded_with_too_few_calls():
    for q in (0.5, 0.99, 0.999):
        n = calls_needed(q)
        assert quantile_interval(np.arange(1.0, n), q)[2] == math.inf
        assert math.isfinite(quantile_interval(np.arange(1.0, n + 1), q)[2])
    assert calls_needed(0.99) == 368 and calls_needed(0.5) == 6


def test_quantile_interval_refuses_bad_input():
    for bad in (dict(values=[], q=0.5), dict(values=[1.0, math.nan], q=0.5), dict(values=[1.0], q=1.0),
                dict(values=[1.0], q=0.5, level=0)):
        with pytest.raises(ValueError):
            quantile_interval(**bad)


def test_latency_summary_names_each_percentile():
    s = latency_summary(np.arange(1.0, 1001.0), label="idle")
    assert s["percentile"].tolist() == ["p50", "p99"] and (s["condition"] == "idle").all()
    assert (s["low"] <= s["estimate"]).all() and (s["estimate"] <= s["high"]).all()


# -- targets ----------------------------------------------------------------------------------------------
def test_targets_are_met_missed_or_inconclusive_from_the_interval():
    goals = [Target("latency", 100, "us"), Target("bandwidth", 0.5, higher_is_better=True), Target("cost", 1.0, "$"),
             Target("unmeasured", 1.0)]
    got = check_targets(goals, {"latency": (90, 80, 99), "bandwidth": (0.6, 0.4, 0.7), "cost": 1.5})
    assert got["status"].tolist() == ["met", INCONCLUSIVE, "missed", "not measured"]
    assert check_targets(goals[:1], {"latency": (120, 101, math.inf)})["status"].item() == "missed"
    assert check_targets(goals[:1], {"latency": (90, 80, math.inf)})["status"].item() == INCONCLUSIVE
    assert targets_table(goals)["rule"].tolist() == ["<= 100 us", ">= 0.5", "<= 1 $", "<= 1"]


def test_targets_refuse_bad_evidence_and_limits():
    with pytest.raises(ValueError, match="matches no target"):
        check_targets([Target("a", 1)], {"b": 1.0})
    with pytest.raises(ValueError, match="low <= estimate <= high"):
        check_targets([Target("a", 1)], {"a": (1.0, 2.0, 3.0)})
    with pytest.raises(ValueError, match="finite number"):
        Target("a", math.nan)


def test_side_by_side_and_busbw_fraction():
    goals = [Target("p99", 10_000, "us"), Target("share", 0.5)]
    table = side_by_side({"idle": check_targets(goals, {"p99": (4171.0, 3051.0, 5774.0)}),
                          "busy": check_targets(goals, {"p99": (12236.0, 11977.0, math.inf), "share": 0.4})})
    assert table.loc["p99", "idle"] == "4,171 (3,051..5,774): met"
    assert table.loc["p99", "busy"] == "12,236 (11,977..inf): missed"
    assert table.loc["share", "idle"] == "not measured" and table.loc["share", "busy"] == "0.4: met"
    summary = pd.DataFrame(dict(size=[1024], placement="in-place", median_us=[100.0], low_us=[80.0],
                                high_us=[125.0], busbw=[2.0]))
    est, low, high = busbw_fraction(summary, 1024, link_gbps=10.0)
    assert (est, low, high) == (pytest.approx(0.2), pytest.approx(0.16), pytest.approx(0.25))
    with pytest.raises(ValueError, match="sizes are"):
        busbw_fraction(summary, 2048, 10.0)


# -- the control chart ------------------------------------------------------------------------------------
def test_control_limits_from_the_moving_range():
    values = [100.0, 110.0, 100.0, 110.0]
    lim = control_limits(values)
    x = np.log(values)
    sigma = np.abs(np.diff(x)).mean() / 1.128
    assert lim.center == pytest.approx(math.exp(x.mean()))
    assert lim.upper == pytest.approx(math.exp(x.mean() + 3 * sigma))
    assert lim.lower == pytest.approx(math.exp(x.mean() - 3 * sigma))
    with pytest.raises(ValueError, match="at least 2"):
        control_limits([1.0])


def test_run_signals_rules():
    n = 12
    flat = [1.0] * n
    beyond = run_signals([1.0, 1.0, 5.0, 0.1] + [1.0] * 8, flat, [0.5] * n, [2.0] * n, start=2)
    assert beyond[:4] == ["", "", "beyond the upper limit", "beyond the lower limit"]
    above = [1.1] * RUN_LENGTH + [0.9]
    signals = run_signals(above, [1.0] * 9, [0.5] * 9, [2.0] * 9, start=0)
    assert signals[RUN_LENGTH - 2] == "" and signals[RUN_LENGTH - 1] == f"{RUN_LENGTH} in a row above the centre"
    assert signals[-1] == ""
    assert run_signals(above, [1.0] * 9, [0.5] * 9, [2.0] * 9, start=9) == [""] * 9   # baseline never flagged


def test_recorded_drift_is_charted_and_gated():
    rows = _recorded("4ranks_busy")
    reruns = rows[(rows["run"] == "baseline") | rows["run"].str.startswith("rerun")]
    table = control_table(reruns, size=32 << 10, baseline=8)
    assert len(table) == 21 and (table["phase"] == "baseline").sum() == 8
    watched = table[table["phase"] == "monitored"]
    assert watched["signal"].ne("").sum() >= 8            # the load rose from rerun08 on
    assert table.loc[table["run"] == "rerun08", "signal"].item() == "beyond the upper limit"
    assert set(watched.loc[watched["gate"] == "regression", "run"]) >= {"rerun12", "rerun19"}
    assert drift_verdict(table).startswith("drift: the chart signals from run 'rerun08'")


def test_a_quiet_recording_is_in_control():
    rows = _recorded("4ranks")
    reruns = rows[(rows["run"] == "baseline") | rows["run"].str.startswith("rerun")]
    table = control_table(reruns, size=32 << 10, baseline=8)
    assert (table["signal"] == "").all() and "regression" not in set(table["gate"])
    assert drift_verdict(table).startswith("in control")


def test_control_table_refuses_a_baseline_it_cannot_use():
    rows = _recorded("4ranks")
    runs = {r: g for r, g in rows.groupby("run") if r in ("baseline", "rerun00", "rerun01")}
    for bad in (1, 3, True):
        with pytest.raises(ValueError, match="baseline must be"):
            control_table(runs, 1024, baseline=bad)
    with pytest.raises(ValueError, match="its sizes are"):
        control_table(runs, 999, baseline=2)


# -- roll-out decisions -------------------------------------------------------------------------------------
def test_decisions_follow_the_gate():
    runs = {k: g for k, g in _recorded("2ranks").groupby("run")}
    slowed = decide(lc.evidence.compare(runs["rerun19"], runs["slowed2x"]), "2x")
    assert (slowed.verdict, slowed.action) == ("regression", "roll back") and "slower than" in slowed.reason
    unchanged = decide(lc.evidence.compare(runs["rerun18"], runs["rerun19"]))
    assert unchanged.action in ("roll out", "hold: measure more")
    assert decide(lc.evidence.compare(runs["rerun19"], runs["slowed2x"]), confirming=True).action.startswith("still slow")
    ok = compare_predictions({"a": 1.0, "b": 2.0}, {"a": 1.2, "b": 2.0}, tolerance=0.25)
    assert decide(ok, confirming=True).action == "roll-back confirmed"
    bad = compare_predictions({"a": 1.0, "b": 2.0}, {"a": 1.3, "b": 2.0}, tolerance=0.25)
    assert bad["status"].tolist() == ["regression", "pass"]
    assert decide(bad).row() == dict(change="the change", verdict="regression", action="roll back",
                                     reason="predicted slower than 1.25x the baseline for a")


def test_decisions_refuse_what_is_not_a_gate():
    with pytest.raises(ValueError, match="same cases"):
        compare_predictions({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match="positive"):
        compare_predictions({"a": 0.0}, {"a": 1.0})
    with pytest.raises(ValueError, match="gate's result"):
        decide(pd.DataFrame(dict(x=[1])))


# -- live: latencies, DDP steps, training compute, copy bandwidth ---------------------------------------------
@pytest.fixture(scope="module")
def two(gloo_cluster):
    return gloo_cluster(2)


def test_call_latencies_time_every_call(two):
    lat = call_latencies(two, "all_reduce", "64K", calls=50, warmup=2)
    assert len(lat) == 50 and lat["call"].tolist() == list(range(50))
    assert (lat["time_us"] > 0).all() and (lat["time_us"] >= lat["mean_us"] - 1e-9).all()
    assert lat["size"].iloc[0] == 65536 and lat["ranks"].iloc[0] == 2
    # another collective through the same harness (all_gather's size is the gathered buffer)
    gathered = call_latencies(two, "all_gather", "64K", calls=5)
    assert gathered["size"].iloc[0] == 65536 and len(gathered) == 5


def test_call_latencies_refuse_bad_input_before_any_call(two):
    for kwargs, match in ((dict(op="barrier"), "moves no data"), (dict(calls=0), "iters"),
                          (dict(placement="sideways"), "placement"), (dict(op="nonsense"), "unknown collective")):
        with pytest.raises(ValueError, match=match):
            call_latencies(two, **{"op": "all_reduce", "nbytes": 1024, **kwargs})


def test_ddp_steps_are_gate_ready_and_interleaved(two):
    model = dict(depth=4, width=32, batch=8)
    runs = ddp_steps(two, {"on": {}, "off": {"sync": False}, "small": {"bucket_cap_mb": 0.001}},
                     repeats=3, steps=3, warmup=1, **model)
    assert list(runs) == ["on", "off", "small"]
    for label, df in runs.items():
        assert df["repeat"].tolist() == [0, 1, 2] and (df["median_us"] > 0).all()
        assert (df["size"] == gradient_bytes(4, 32)).all() and (df["config"] == label).all()
    assert gradient_bytes(4, 32) == 4 * (32 * 32 + 32) * 4
    gate = lc.evidence.compare(runs["on"], runs["small"], tolerance=0.1)
    assert gate["status"].iloc[0] in ("regression", "pass", "inconclusive") and len(gate) == 1
    share, low, high = comm_share(runs["on"], runs["off"])
    assert low <= share <= high and share < 1


def test_ddp_steps_refuse_bad_configurations(two):
    for configs, match in (({}, "non-empty"), ({"x": {"bucket": 1}}, "unknown settings"),
                           ({"x": {"bucket_cap_mb": 0}}, "above 0"), ({"x": {"sync": "yes"}}, "True or False")):
        with pytest.raises(ValueError, match=match):
            ddp_steps(two, configs)
    with pytest.raises(ValueError, match="whole number"):
        ddp_steps(two, {"x": {}}, depth=0)


def test_training_neighbours_compute_while_the_block_runs():
    with training_neighbours(1, width=64, max_seconds=60) as pids:
        assert len(pids) == 1
        proc = psutil.Process(pids[0])
        assert proc.cpu_percent(interval=0.3) > 10          # it trains, it does not sleep
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(pids[0])


def test_training_neighbours_refuse_bad_input():
    for kwargs in (dict(n=0), dict(width=0), dict(max_seconds=math.inf), dict(ready_timeout=0)):
        with pytest.raises(ValueError):
            with training_neighbours(**kwargs):
                pass


def test_copy_bandwidth_is_measured(two):
    gbps, low, high = copy_bandwidth(two, nbytes=1 << 20, repeats=3)
    assert 0 < low <= gbps <= high
    with pytest.raises(ValueError):
        copy_bandwidth(two, nbytes=2)


def test_a_recorded_ddp_step_is_priced_from_its_replay(two):
    import torch

    from labcore.exercises import data_parallel as dp
    from labcore.sim.apps.pricing import price_steps, step_cost, step_summary

    rec = lc.readers.combine(two.run(dp.ddp_train, 16 << 10, steps=2, dims=dp.DEEP, dtype=torch.float32, per_rank=4))
    replayed = lc.sim.replay(rec, "nvswitch8", compute_scale=0.01)
    row = step_summary(replayed)
    steps = replayed.steps
    assert row["gpus"] == 8 and row["step_ms"] == pytest.approx(steps["overlap_us"].mean() / 1e3)
    assert row["buckets"] == len(replayed.collectives) // len(steps)
    costs = price_steps([replayed], usd_per_gpu_hour=4.0, n_steps=10)
    assert costs["usd"].item() == pytest.approx(step_cost(row["step_ms"] / 1e3, 8, 4.0) * 10)
    with pytest.raises(ValueError, match="cannot price"):
        step_summary(object())


@pytest.mark.parametrize("module", [
    "labcore.evidence.latency", "labcore.evidence.targets", "labcore.evidence.drift",
    "labcore.evidence.rollout", "labcore.sim.apps.ddp_step", "labcore.sim.apps.pricing", "labcore.viz.control",
    "labcore.viz.evidence", "labcore.exercises.evidence", "labcore.evidence.recorded", "labcore.evidence.steps", "labcore.viz.style", "labcore.viz.chunk_flow"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_the_recorded_slowed_run_shows_the_gate_lesson_a_busy_machine_may_not():
    """Notebook 04 falls back on this recording when its live 2x slowdown comes out inconclusive."""
    from labcore.evidence import recorded_run

    base = recorded_run("2ranks", "baseline", placements=("in-place",))
    slowed = recorded_run("2ranks", "slowed2x", placements=("in-place",))
    gate = lc.evidence.compare(base, slowed, tolerance=0.25)
    assert (gate["status"] == "regression").all() and gate["slowdown_low"].min() > 1.25
    with pytest.raises(ValueError, match="has no run 'slowed3x'"):
        recorded_run("2ranks", "slowed3x")


def test_a_gate_on_training_steps_names_the_step_not_its_gradient_bytes():
    rows = [dict(op="ddp_step", size=2113536, type="float", redop="sum", root=-1, ranks=2, placement="step",
                 repeat=r, busbw=float("nan"), time_us=1000.0, median_us=1000.0 + r) for r in range(7)]
    base = pd.DataFrame(rows)
    slow = base.assign(median_us=base["median_us"] * 2)
    said = lc.evidence.advice(lc.evidence.compare(base, slow, tolerance=0.10))
    assert said.startswith("regression: the DDP step") and "2113536" not in said
