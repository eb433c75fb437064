"""Bad input to the simulator, its CLI, NCCL's tuner model, calibrate and replay: one line naming
the fix before any work (the CLI exits 2), never a numpy or pandas internal error, never a hang."""
import numpy as np
import pandas as pd
import pytest

import labcore.sim as sim
from labcore.sim.cli import main as sim_main


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
