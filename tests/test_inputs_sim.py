"""Bad input to the simulator, its CLI, NCCL's tuner model, calibrate and replay: one line naming
the fix before any work (the CLI exits 2), never a numpy or pandas internal error, never a hang."""
import numpy as np
import pandas as pd
import pytest

import labcore.sim as sim
from labcore.sim.cli import main as sim_main

pytestmark = pytest.mark.live


def _status(argv):
    try:
        return sim_main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("args,message", [
    (["--show-steps", "-1"], "--show-steps: must be 0 or more"),
    (["-b", "0", "-e", "64"], "-b/--minbytes must be at least 1"),
    (["-e", "0"], "-b 8 is larger than -e 0"),
    (["--protocol", "foo", "--topology", "nvswitch8"], "unknown protocol 'foo'"),
])
def test_sim_cli_refuses_with_one_line_and_exit_2(args, message, capfd):
    assert _status(["all_reduce", *args]) == 2
    out, err = capfd.readouterr()
    assert message in err and err.count("\n") == 1 and out == ""


def test_sim_cli_reads_protocol_names_in_any_case(capfd):
    assert _status(["all_reduce", "--protocol", "ll", "--topology", "nvswitch8", "--size", "1K"]) == 0
    assert "protocol LL" in capfd.readouterr().out


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(topology=5), TypeError, "topology must be a preset name"),
    (dict(reduce_op="xx", values=False), ValueError, "unknown reduce_op 'xx'"),
    (dict(values="no"), ValueError, "values must be True or False"),
    (dict(contention="no"), ValueError, "contention must be True or False"),
    (dict(seed="a"), ValueError, "seed must be a whole number >= 0"),
    (dict(seed=-1), ValueError, "seed must be a whole number >= 0"),
    (dict(op="broadcast", algorithm="chain", root=1.5), ValueError, "root must be a whole rank number"),
    (dict(op="broadcast", algorithm="chain", root="0"), ValueError, "root must be a whole rank number"),
])
def test_simulate_checks_its_arguments_first(kwargs, error, message):
    kwargs = {"op": "all_reduce", "algorithm": "ring", "ranks": 8, "nbytes": 1024, **kwargs}
    with pytest.raises(error, match=message):
        sim.simulate(**kwargs)


def test_simulate_takes_numpy_integers_for_ranks():
    assert sim.simulate("all_reduce", "ring", np.int64(4), 1024).schedule.ranks == 4


def test_the_tuner_refuses_what_it_cannot_price():
    from labcore.sim import tuner

    m = tuner.MACHINES["dgx_h100"]
    assert tuner.predict("all_reduce", np.int64(1024), m).name == tuner.predict("all_reduce", 1024, m).name
    for nbytes in (float("nan"), float("inf"), -1, 1.5, "1M"):
        with pytest.raises(ValueError, match="nbytes must be a whole number of bytes"):
            tuner.cost_table("all_reduce", nbytes, m)
    for bad in ("dgx_h100", None):
        with pytest.raises(TypeError, match=r"machine must be a tuner Machine, e.g. MACHINES\['dgx_h100'\]"):
            tuner.predict("all_reduce", 1024, bad)
        with pytest.raises(TypeError, match="machine must be a tuner Machine"):
            tuner.tuning_log(bad)
    with pytest.raises(TypeError, match="NCCL_PROTO is a string"):
        tuner.predict("all_reduce", 1024, m, proto_env=5)
    with pytest.raises(ValueError, match="channels must be a whole number from 1 to 64"):
        tuner.ring_pipeline("all_reduce", 1 << 20, m, channels=0)
    with pytest.raises(TypeError, match="sizes must be a list of byte counts"):
        tuner.cost_sweep("all_reduce", m, "abc")
    with pytest.raises(TypeError, match="graphs DataFrame"):
        tuner.graphs_from_log("Pattern 4, crossNic 0, nChannels 12")


@pytest.mark.parametrize("low,high", [(0, 8), (1 << 20, 8), (8, 8)])
def test_crossovers_refuses_a_range_it_cannot_walk_instead_of_looping(low, high):
    from labcore.sim import tuner

    with pytest.raises(ValueError, match="crossovers searches from min_bytes up to a larger max_bytes"):
        tuner.crossovers("all_reduce", tuner.MACHINES["dgx_h100"], low, high)


@pytest.mark.parametrize("change,error,message", [
    (dict(gpu=9), ValueError, "90 for 9.0"),
    (dict(gpu=1000), ValueError, "compute capability"),
    (dict(channels=0), ValueError, "channels must be a whole number from 1 to 64"),
    (dict(channels=-3), ValueError, "channels must be a whole number from 1 to 64"),
    (dict(min_ctas=8, max_ctas=2), ValueError, "1 <= min_ctas <= max_ctas"),
    (dict(ring=None), TypeError, "ring must be a Graph"),
    (dict(ranks=np.int64(16), nodes=np.int64(2)), None, ""),
])
def test_a_machine_is_checked_when_it_is_made(change, error, message):
    from dataclasses import replace

    from labcore.sim import tuner

    if error is None:
        assert replace(tuner.MACHINES["dgx_h100"], **change).ranks == 16
        return
    with pytest.raises(error, match=message):
        replace(tuner.MACHINES["dgx_h100"], **change)
    with pytest.raises(ValueError, match="bw_intra must be a finite number"):
        tuner.TopoGraph(4, float("nan"))


def _measured():
    from labcore.sim.apps.calibration import synthetic_sweep

    return synthetic_sweep(ranks=(2,), noise=0.0)


@pytest.mark.parametrize("change,error,message", [
    (lambda d: d.iloc[:0], ValueError, "the DataFrame has no rows"),
    (lambda d: pd.concat([d.iloc[:1]] * 3), ValueError, "two different sizes"),     # one size, three rows
    (lambda d: d.assign(time_us=np.where(d.index == 3, np.inf, d.time_us)), ValueError, "infinite time"),
    (lambda d: d.assign(time_us="fast"), ValueError, "column 'time_us' holds 'fast', not a number"),
    (lambda d: d.assign(size=-d["size"]), ValueError, "sizes must be finite byte counts >= 0"),
    (lambda d: d.assign(ranks=1), ValueError, "move no data"),
    (lambda d: d.assign(ranks=0), ValueError, "move no data"),
    (lambda d: d.assign(ranks=-1), ValueError, "unknown rank count"),
    (lambda d: d.assign(ranks=2.5), ValueError, "ranks must be whole numbers"),
    (lambda d: d.values.tolist(), TypeError, "calibrate takes a DataFrame"),
])
def test_calibrate_refuses_data_it_cannot_fit_honestly(change, error, message):
    with pytest.raises(error, match=message):
        sim.calibrate(change(_measured()))


def test_calibrate_and_its_fit_check_their_other_arguments():
    with pytest.raises(TypeError, match="closed form takes channels, gpus_per_node"):
        sim.calibrate(_measured(), pipline=4)
    cal = sim.calibrate(_measured())
    assert cal.params(np.int64(2)) is cal.params(2)
    with pytest.raises(TypeError, match="ranks is a whole number"):
        cal.params("2")
    for size in (-5, np.nan):
        with pytest.raises(ValueError, match="sizes must be finite byte counts"):
            cal.predict(size, 2)


def _no_collectives(world_size=2):
    """A Recording as the recorder returns it from a loop that issued no collective."""
    from labcore.readers import recording

    frame = pd.DataFrame(columns=recording.COLUMNS + ["issued_ns", "start_ns", "end_ns"])
    scopes = pd.DataFrame(columns=["rank", "step", "name", "start_s", "end_s", "start_ns", "end_ns"])
    steps = pd.DataFrame([dict(rank=r, step=0, start_s=0.0, end_s=0.5, start_ns=0, end_ns=500_000_000)
                          for r in range(world_size)])
    return recording.Recording("quiet", world_size, "gloo", frame, scopes, steps, tuple(range(world_size)))


def test_a_recording_without_collectives_replays_as_compute_only():
    r = sim.replay(_no_collectives(), "nvswitch8")
    assert r.collectives.empty and r.comm_s == 0
    assert r.serial_s == pytest.approx(0.5) and r.overlap_s == pytest.approx(0.5)


@pytest.mark.parametrize("kwargs,message", [
    (dict(world_size=np.int64(4)), None),
    (dict(world_size=20000), "world_size must be a whole number of ranks from 1 to 16384"),
    (dict(placement=3), "placement is a list of topology ranks"),
    (dict(placement="01"), "placement is a list of topology ranks"),
    (dict(placement=[0, 1.7]), "placement is a list of topology ranks"),
    (dict(steps=[]), "steps names recorded steps by number"),
    (dict(steps=0.5), "steps names recorded steps by number"),
    (dict(steps="a"), "steps names recorded steps by number"),
    (dict(compute_scale=np.float32(0.5)), None),
    (dict(compute_scale=True), "compute_scale must be a finite number >= 0"),
])
def test_replay_checks_its_arguments_before_simulating(kwargs, message):
    if message is None:
        assert sim.replay(_no_collectives(), "nvswitch8", **kwargs).steps["compute_us"].iloc[0] > 0
        return
    with pytest.raises(ValueError, match=message):
        sim.replay(_no_collectives(), "nvswitch8", **kwargs)


@pytest.mark.parametrize("make,error,message", [
    (lambda t: t.uniform(2.5), ValueError, "ranks must be a whole number of at least 1, not 2.5"),
    (lambda t: t.uniform(4, gpus_per_node=0), ValueError, "gpus_per_node must be a whole number of at least 1"),
    (lambda t: t.switch(0), ValueError, "ranks must be a whole number of at least 1"),
    (lambda t: t.ring(0), ValueError, "ranks must be a whole number of at least 1"),
    (lambda t: t.switch(4, bandwidth=0), ValueError, "a link's bandwidth must be a positive, finite number"),
    (lambda t: t.ring(4, alpha=float("nan")), ValueError, "a link's latency must be a finite number"),
    (lambda t: t.nvswitch(8, efficiency=-1), ValueError, "efficiency is the achievable fraction"),
    (lambda t: t.nvswitch(8, efficiency=2), ValueError, "at most 1"),
    (lambda t: t.multinode(2, 8, nic_efficiency=0), ValueError, "nic_efficiency is the achievable fraction"),
    (lambda t: t.pcie(8, gpus_per_switch=0), ValueError, "gpus_per_switch must be a whole number"),
    (lambda t: t.multinode(2.0, 8), ValueError, "nodes and gpus_per_node must be whole numbers"),
    (lambda t: t.calibrated(None), TypeError, "calibrated takes a Calibration"),
])
def test_a_topology_that_cannot_carry_data_in_finite_time_is_refused(make, error, message):
    with pytest.raises(error, match=message):
        make(sim.topologies)


def test_simulate_sizes_takes_numpy_numbers_and_refuses_empty_axes():
    assert len(sim.simulate_sizes("all_reduce", "ring", np.int64(4), np.float64(1024))) == 1
    with pytest.raises(ValueError, match="sizes is empty"):
        sim.simulate_sizes("all_reduce", "ring", 4, [])
    with pytest.raises(TypeError, match="topology is a preset name"):
        sim.simulate_sizes("all_reduce", "ring", 4, 1024, topology=5)


def test_sim_cli_into_a_closed_pipe_ends_quietly():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "labcore", "sim", "all_reduce", "-n", "4", "-b", "8", "-e", "1G"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                    # the reader is gone before the first line (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_sim_cli_auto_sweep_picks_per_size_and_size_with_a_sweep_is_refused(capfd):
    assert _status(["all_reduce", "--algo", "auto", "-n", "8", "-b", "8", "-e", "1G", "-f", "1024",
                    "--topology", "nvswitch8"]) == 0
    rows = [line.split() for line in capfd.readouterr().out.splitlines() if line[:1] == " "][1:]
    assert [r[-1] for r in rows] == ["ring", "ring", "nvls"]      # NCCL's pick changes with the size
    assert _status(["all_reduce", "--size", "1M", "-e", "1G"]) == 2
    assert "give --size (one size) or -b/-e (a sweep), not both" in capfd.readouterr().err
