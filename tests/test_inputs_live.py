"""Bad input to the live side (EngineCluster, %%ranks, the recorder, the flight recorder): one line
naming the fix, before any process starts, and nothing left on disk."""
import glob
import os
import tempfile

import psutil
import pytest

pytestmark = pytest.mark.live


def _children():
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("kwargs,message", [
    (dict(engines=10000), "10000 ranks is more than this machine can hold"),
    (dict(engines=2, launcher="foo"), "launcher must name one of ipyparallel's engine launchers"),
    (dict(engines=2, launcher=5), "launcher must name one of ipyparallel's engine launchers"),
    (dict(engines=2, launcher="no.such.Launcher"), "ipyparallel refused these cluster options"),
    (dict(engines=2, env={"NCCL_DEBUG=INFO": "1"}), "cannot be one"),
    (dict(engines=2, env={"": "1"}), "cannot be one"),
    (dict(engines=2, env={"A": "x\0y"}), "holds a NUL character"),
    (dict(engines=2, output_limit=10 ** 13), "output_limit must be a number of bytes"),
])
def test_engine_cluster_refuses_before_starting_anything_and_leaves_no_folder(kwargs, message, monkeypatch):
    pytest.importorskip("ipyparallel")
    import labcore as lc

    monkeypatch.delenv("LABCORE_MAX_RANKS", raising=False)
    before = _children()
    with pytest.raises(ValueError, match=message):
        lc.EngineCluster(**kwargs)
    assert _children() <= before
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"labcore-{os.getuid()}", f"run-{os.getpid()}-*"))


class _Recorded:
    """A stand-in cluster for the magic's own logic: it records what it is asked, runs nothing."""

    world_size = 2

    def __init__(self, timeout=300.0):
        self.timeout = timeout
        self.calls = []

    def exec(self, code, timeout=None):
        self.calls.append(("exec", timeout))
        return [None, None]

    def pull(self, name, timeout=None):
        self.calls.append(("pull", timeout))
        if name == "missing":
            from labcore.live.errors import RankError

            raise RankError({0: ("NameError", f"name {name!r} is not defined", "")}, restarted=False)
        return [1, 2]


def test_ranks_on_a_cluster_keeps_its_timeout_unless_told_otherwise():
    from labcore.live import magic

    cl = _Recorded(timeout=300.0)
    ns = {"cl": cl}
    magic.ranks("--on cl --out x", "x = rank", ns)
    assert cl.timeout == 300.0 and cl.calls == [("exec", None), ("pull", None)]
    magic.ranks("--on cl --timeout 5", "x = rank", ns)
    assert cl.timeout == 300.0 and cl.calls[-1] == ("exec", 5.0)     # this cell only


@pytest.mark.parametrize("line,message", [
    ("--on cl --out 'not a name'", "--out needs a Python name to copy back, such as result, not 'not a name'"),
    ("--on cl --out x --out class", "--out needs a Python name to copy back, such as result, not 'class'"),
    ("--on cl --backend nccl", "--backend nccl cannot apply with --on cl"),
    ("--on cl --backend auto", "--backend auto cannot apply with --on cl"),
    ("3 --on cl", "that cluster has 2 ranks"),
])
def test_ranks_refuses_a_bad_line_before_the_cell_runs(line, message):
    from labcore.live import magic

    cl = _Recorded()
    ns = {"cl": cl}
    with pytest.raises(ValueError, match=message):
        magic.ranks(line, "print('the cell ran')", ns)
    assert cl.calls == [] and set(ns) == {"cl"}


def test_ranks_out_is_all_or_nothing():
    from labcore.live import RankError, magic

    cl = _Recorded()
    ns = {"cl": cl, "x": "before"}
    with pytest.raises(RankError, match="'missing' is not defined"):
        magic.ranks("--on cl --out x --out missing", "x = rank", ns)
    assert ns["x"] == "before" and "missing" not in ns          # nothing was set
    magic.ranks("--on cl --out x --out y --out x", "x = y = rank", ns)
    assert ns["x"] == ns["y"] == [1, 2]
    assert [c for c, _ in cl.calls].count("pull") == 2 + 2    # x once in the second cell, though named twice


@pytest.mark.parametrize("line,message", [
    ("2 --out 'not a name'", "--out needs a Python name"),
    ("2 --record class", "--record needs a Python name"),
    ("2 --record dist", "would hide the ranks' 'dist'"),
    ("2 --record rank", "would hide the ranks' 'rank'"),
    ("2 --record rec --out rec", "would both fill 'rec'"),
])
def test_ranks_record_refuses_names_that_break_the_cell(line, message):
    from labcore.live import magic

    with pytest.raises(ValueError, match=message):
        magic.parse_line(line)


class _FlightStandIn:
    """Answers flight.capture's checks; its call notes the dump folder and fails as a dead rank would."""

    env = {"TORCH_FR_BUFFER_SIZE": "1000"}
    timeout = 5.0
    world_size = 2

    def call(self, fn, args, timeout=None):
        from labcore.live.errors import ClusterError

        self.folder = args[3]
        assert os.path.isdir(self.folder)
        raise ClusterError("rank 1 died")


def test_flight_capture_checks_its_function_and_keeps_dumps_where_a_sweep_finds_them():
    from labcore.live import flight

    with pytest.raises(TypeError, match="needs the function to run on every rank"):
        flight.capture(_FlightStandIn(), 5)
    with pytest.raises(TypeError, match="runs on a cluster"):
        flight.capture(None, print)
    stand_in = _FlightStandIn()
    result = flight.capture(stand_in, print)
    assert str(result.error) == "rank 1 died" and result.missing == [0, 1]
    # in a run folder of this process (swept by the next cluster if the notebook is killed), gone now
    assert os.path.basename(stand_in.folder).startswith(f"run-{os.getpid()}-")
    assert not os.path.exists(stand_in.folder)


def test_env_and_output_limit_checks_name_the_entry():
    from labcore.live.settings import MAX_OUTPUT_LIMIT, check_env, check_output_limit

    assert check_env(None) == {} and check_env({"NCCL_ALGO": "Ring"}) == {"NCCL_ALGO": "Ring"}
    for env, error in ((["A=1"], TypeError), ({"A": 1}, TypeError), ({"A B": "1"}, ValueError)):
        with pytest.raises(error):
            check_env(env)
    assert check_output_limit(MAX_OUTPUT_LIMIT) == MAX_OUTPUT_LIMIT
    for limit in (1, MAX_OUTPUT_LIMIT + 1, 2.5, True):
        with pytest.raises(ValueError, match="output_limit must be a number of bytes"):
            check_output_limit(limit)


@pytest.mark.parametrize("content", [b"", b"garbage", b"\x80\x04]\x94."])   # empty, cut short, a list
def test_flight_analyze_names_a_dump_it_cannot_read(tmp_path, content):
    from labcore.readers import flight_dump

    (tmp_path / f"{flight_dump.PREFIX}0").write_bytes(content)
    with pytest.raises(ValueError, match=f"{flight_dump.PREFIX}0 is not a readable flight-recorder dump"):
        flight_dump.analyze(str(tmp_path), 2)


@pytest.mark.parametrize("n", [0, -1, "a", 1.5, True])
def test_has_gpus_asks_for_a_whole_number_of_gpus(n):
    import labcore as lc

    with pytest.raises(ValueError, match="has_gpus"):
        lc.live.has_gpus(n)


def test_ranks_on_something_that_is_not_a_cluster_is_named():
    import builtins

    from labcore.live import magic

    for value in (builtins, 5, None):     # builtins has an exec, but no ranks
        what = f"no cluster named 'thing' in the notebook \\(thing is a {type(value).__name__}\\)"
        with pytest.raises(ValueError, match=what):
            magic.ranks("--on thing", "print('ran')", {"thing": value})
