"""The simulator against NCCL's tuner, and alpha-beta calibration (the tuner itself: test_tuner.py)."""
import math

import numpy as np
import pytest

import labcore.sim as sim
from labcore.sim import tuner
from labcore.sim.apps.calibration import synthetic_sweep

H100 = tuner.MACHINES["dgx_h100"]


def test_simulated_small_message_matches_tuner_latency():
    small = sim.simulate("all_reduce", "ring", 8, 8, topology=sim.topologies.nvswitch(8, issue_s=0))
    assert abs(small.time_s * 1e6 - tuner.predict("all_reduce", 8, H100).time_us) < 0.1


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_calibration_recovers_known_parameters_from_noisy_data(ranks):
    df = synthetic_sweep(ranks=(ranks,), alpha=40e-6, beta=1 / 2e9, noise=0.03, seed=ranks)
    cal = sim.calibrate(df)
    fit = cal.params(ranks)
    assert abs(fit.alpha / 40e-6 - 1) < 0.1 and abs(fit.bandwidth / 2e9 - 1) < 0.05
    assert cal.median_error(ranks, 4 << 10, 64 << 20) < 0.05
    assert set(cal.errors.columns) >= {"ranks", "size", "measured_us", "predicted_us", "error"}
    topo = cal.topology(ranks)
    t = sim.simulate("all_reduce", "ring", ranks, 1 << 20, topology=topo, values=False, contention=False)
    assert math.isclose(t.time_s, float(cal.predict(1 << 20, ranks)), rel_tol=1e-9)


def test_relative_fit_beats_plain_least_squares_on_small_sizes():
    df = synthetic_sweep(ranks=(2, 4), noise=0.05, seed=3)
    rel, plain = sim.calibrate(df), sim.calibrate(df, relative=False)
    for r in (2, 4):
        assert rel.median_error(r) < plain.median_error(r)


def test_calibration_accepts_a_full_bench_frame_and_says_what_is_wrong():
    df = synthetic_sweep(ranks=(2,), noise=0.0)
    both = df.assign(placement="in-place")
    full = __import__("pandas").concat([df, both, df.assign(op="all_gather")], ignore_index=True)
    full["busbw"] = 1.0
    cal = sim.calibrate(full, op="all_reduce")
    assert cal.params(2).points == len(df)
    with pytest.raises(ValueError, match="choose one with op="):
        sim.calibrate(full)
    with pytest.raises(ValueError, match="lacks columns"):
        sim.calibrate(df.drop(columns="time_us"))
    with pytest.raises(ValueError, match="no fit for 8 ranks"):
        cal.params(8)
    assert np.isfinite(cal.summary()["median_error"]).all()


def test_cli_prints_steps_time_bandwidth_and_bound(capsys):
    from labcore.sim.cli import main

    assert main(["all_reduce", "--algo", "ring", "-n", "8", "--size", "64M", "--topology", "nvswitch8"]) == 0
    out = capsys.readouterr().out
    for text in ("step 0 [reduce-scatter]", "time ", "algbw", "busbw", "lower bound", "verified"):
        assert text in out
    assert main(["all_reduce", "--algo", "auto", "-n", "8", "--size", "1G", "--topology", "nvswitch8",
                 "--no-values"]) == 0
    assert "NCCL's tuner picks NVLS/Simple" in capsys.readouterr().out
    assert main(["reduce", "--algo", "binomial", "-n", "5", "-b", "8", "-e", "1K", "-f", "4"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 + 4


@pytest.mark.live
def test_cli_runs_as_a_module():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "labcore", "sim", "all_to_all", "--algo", "pairwise", "-n", "4",
                           "--size", "4K"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "busbw" in done.stdout


def test_robust_fit_shrugs_off_disturbed_sizes():
    df = synthetic_sweep(ranks=(4,), alpha=40e-6, beta=1e-9, noise=0.01, seed=5)
    df.loc[df.index[::4], "time_us"] *= 6                                 # every fourth size disturbed
    robust, plain = sim.calibrate(df, robust=True), sim.calibrate(df)
    assert abs(robust.params(4).bandwidth / 1e9 - 1) < 0.05
    assert robust.median_error(4) < 0.05 < plain.median_error(4)
