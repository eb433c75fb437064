"""Notebook 10's exercises: each right answer passes, each mistake gets its own feedback, none gives the
answer away, and the recorded numbers they quote are the ones in tests/data."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labcore as lc
from labcore.exercises.evidence import (INTERVAL_ROWS, LOAD_ROWS, LOAD_TARGETS, OUTLIER_REPEATS_US,
                                        communication_cost, fewest_repeats, q_gib, q_interval, q_outlier, q_repeats,
                                        q_under_load)
from labcore.evidence.stats import smallest_pvalue

DATA = Path(__file__).parent / "data"


def _runs(name):
    rows = pd.DataFrame(json.loads((DATA / f"bench_gate_recorded_{name}.json").read_text())["rows"])
    return {k: g for k, g in rows.groupby("run")}


def _wrong(q, answer):
    result = q.evaluate(answer)
    assert result.status == "incorrect", (answer, result.message)
    return result.message


# -- a gate on a single run ---------------------------------------------------------------------------
def test_fewest_repeats_is_the_first_that_reaches_the_bonferroni_level():
    assert fewest_repeats(12, 0.01) == 10
    assert smallest_pvalue(10, 10) <= 0.01 / 12 < smallest_pvalue(9, 9)
    assert fewest_repeats(6, 0.05) == 6 and fewest_repeats(1, 0.05) == 3


def test_repeats_right_answer_and_each_mistake():
    assert q_repeats.evaluate(10).status == "correct"
    assert q_repeats.evaluate(10.0).status == "correct"
    single = _wrong(q_repeats, 1)
    assert "single run" in single and "never flag" in single
    bonferroni = _wrong(q_repeats, 6)                   # enough for one test at 0.01, not for 12
    assert "Bonferroni" in bonferroni and "alpha / 12" in bonferroni
    assert "not the fewest" in _wrong(q_repeats, 11)
    too_few = _wrong(q_repeats, 4)                      # cannot even reach 0.01
    assert "smallest p-value" in too_few and "above" in too_few
    assert "whole number" in _wrong(q_repeats, 2.5) and "whole number" in _wrong(q_repeats, "10")
    for answer in (1, 4, 6, 9, 11, 20):
        assert "10" not in _wrong(q_repeats, answer).replace("0.01", "")


# -- a mean dragged by one outlier ---------------------------------------------------------------------
def test_outlier_repeats_are_the_recorded_ones():
    rec = _runs("2ranks")["rerun07"]
    rec = rec[(rec["size"] == 1024) & (rec["placement"] == "out-of-place")].sort_values("repeat")
    assert np.allclose(rec["median_us"], OUTLIER_REPEATS_US, atol=0.05)


def test_outlier_right_answer_and_each_mistake():
    times = np.array(OUTLIER_REPEATS_US)
    assert q_outlier.evaluate(float(np.median(times))).status == "correct"
    assert "the mean" in _wrong(q_outlier, float(times.mean()))
    assert "slowest repeat" in _wrong(q_outlier, float(times.max()))
    assert "luckiest" in _wrong(q_outlier, float(times.min()))
    assert "by hand" in _wrong(q_outlier, float(np.sort(times)[:-1].mean()))
    # the other hand-trimmed summaries lie within 1% of the median too
    assert "by hand" in _wrong(q_outlier, float(np.sort(times)[:-2].mean()))
    assert "by hand" in _wrong(q_outlier, float(np.median(np.sort(times)[:-1])))
    assert q_outlier.evaluate(190).status == "correct"           # the median, rounded
    for answer in (times.mean(), times.max(), times.min(), np.sort(times)[:-1].mean(), 250.0):
        message = _wrong(q_outlier, float(answer))
        assert "190" not in message and "median" not in message, message


# -- GB vs GiB in a cost sum -----------------------------------------------------------------------------
def test_communication_cost_by_hand():
    # 1 GiB over 2 ranks at 1 GB/s busbw: 2^30 bytes x 1 / 1e9 = 1.0737 s; 2 GPUs, $3600 per GPU-hour, 1 step
    assert communication_cost(1.0, 2, 1.0, 3600.0, 1) == pytest.approx(2 * 2 ** 30 / 1e9)


def test_gib_right_answer_and_each_mistake():
    g = dict(q_gib.given)
    right = communication_cost(**g)
    assert q_gib.evaluate(right).status == "correct"
    n = g["ranks"]
    f = 2 * (n - 1) / n
    mistakes = {"10^9 bytes": right * 1e9 / 2 ** 30, "algbw first": right / f, "wrong way round": right / f ** 2,
                "one GPU": right / n, "per hour": right * 3600, "one step": right / g["steps"],
                "2(n-1)/n": right * 2 / f}
    for phrase, answer in mistakes.items():
        message = _wrong(q_gib, answer)
        assert phrase in message, (phrase, message)
        assert f"{right:.2f}" not in message and f"{right:.1f}" not in message


def test_gib_follows_the_price_the_notebook_sets():
    q = q_gib.given_values(usd_per_gpu_hour=2.0)
    try:
        want = communication_cost(**q.given)
        assert q.evaluate(want).status == "correct"
        assert q.evaluate(communication_cost(**dict(q.given, usd_per_gpu_hour=63.296 / 8))).status == "incorrect"
    finally:
        q.given_values(usd_per_gpu_hour=63.296 / 8)


# -- an inconclusive interval read as "no regression" ----------------------------------------------------
@pytest.mark.parametrize("row", INTERVAL_ROWS, ids=lambda r: r["row"])
def test_interval_rows_are_the_recorded_gates(row):
    sources = {"A": ("4ranks_busy", "baseline", "rerun19"), "B": ("4ranks", "rerun00", "rerun01"),
               "C": ("4ranks", "rerun09", "rerun10"), "D": ("4ranks_busy", "baseline", "rerun19")}
    name, a, b = sources[row["row"]]
    runs = _runs(name)
    gate = lc.evidence.compare(runs[a], runs[b], tolerance=0.25, alpha=0.05)
    got = gate[(gate["size"] == row["size"]) & (gate["placement"] == row["placement"])].iloc[0]
    assert got["status"] == row["status"]
    assert got["slowdown"] == pytest.approx(row["slowdown"], abs=1e-4)
    assert (got["slowdown_low"], got["slowdown_high"]) == (pytest.approx(row["low"], abs=1e-4),
                                                           pytest.approx(row["high"], abs=1e-4))


def test_interval_right_answer_and_each_mistake():
    right = ["regression", "pass", "inconclusive", "inconclusive"]
    assert q_interval.evaluate(right).status == "correct"
    assert q_interval.evaluate(["Regression", "within tolerance", "inconclusive", "inconclusive"]).status == "correct"
    # C read as "no regression" because its median is below 1.25
    c_pass = _wrong(q_interval, ["regression", "pass", "pass", "inconclusive"])
    assert "row C" in c_pass and "'not flagged' is not 'pass'" in c_pass
    # D read as a regression because its median is far above 1.25
    d_reg = _wrong(q_interval, ["regression", "pass", "inconclusive", "regression"])
    assert "row D" in d_reg and "a large median alone does not make one" in d_reg
    b_inc = _wrong(q_interval, ["regression", "inconclusive", "inconclusive", "inconclusive"])
    assert "row B" in b_inc and "does settle this row" in b_inc and "below" not in b_inc
    a_pass = _wrong(q_interval, ["pass", "pass", "inconclusive", "inconclusive"])
    assert "row A" in a_pass and "needs the row's whole interval" in a_pass
    # where a row's interval lies is the row's answer: no message says it
    for wrong in q_interval.wrong_examples + [["pass", "pass", "inconclusive", "inconclusive"]]:
        message = _wrong(q_interval, wrong)
        assert "lies above" not in message and "lies below" not in message and "runs from" not in message
    assert "4 rows" in _wrong(q_interval, right[:3])
    assert "not one of the gate's answers" in _wrong(q_interval, ["regression", "fine", "inconclusive", "x"])
    assert "list of 4 words" in _wrong(q_interval, "inconclusive")
    for wrong in (["regression", "pass", "pass", "inconclusive"], ["regression", "pass", "inconclusive", "regression"]):
        message = _wrong(q_interval, wrong)
        for other in "ABCD":                           # feedback is about one row, not a list of answers
            assert message.count(f"row {other}") <= 1


def test_untouched_starters_are_not_attempted():
    from labcore.exercises import ____

    for q in (q_repeats, q_outlier, q_gib):
        assert q.evaluate(____).status == "not attempted"
    assert q_interval.evaluate([____] * 4).status == "not attempted"


# -- targets under real load ----------------------------------------------------------------------------------
def test_the_load_rows_are_the_recorded_runs_summaries():
    runs = _runs("4ranks_busy")
    for row in LOAD_ROWS:
        run = runs["baseline" if row["condition"] == "quiet" else "neighbours"].drop(columns="run")
        got = lc.evidence.summarize(run).set_index(["size", "placement"]).loc[(row["size"], "in-place")]
        for key in ("median_us", "low_us", "high_us"):
            assert got[key] == pytest.approx(row[key], abs=0.6), (row, key)


def test_under_load_is_answered_from_the_run_beside_the_job_and_its_intervals():
    want = {"1KiB_5ms": "missed", "32KiB_7ms": "missed", "32KiB_10ms": "inconclusive"}
    assert q_under_load.correct_example == want and set(want) == set(LOAD_TARGETS)
    assert q_under_load.evaluate(want).status == "correct"
    assert "quiet machine's answers" in _wrong(q_under_load, {"1KiB_5ms": "inconclusive", "32KiB_7ms": "met",
                                                              "32KiB_10ms": "met"})
    assert "compared each median" in _wrong(q_under_load, {k: "missed" for k in want})

