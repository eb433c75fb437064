"""EngineCluster on real ipyparallel engines started here (2 local engines, gloo over loopback).

Engines cost seconds to start on a small machine, so one pair serves every test of
the module and the fault tests come last (a hang or a dead engine restarts the engines).
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

ipp = pytest.importorskip("ipyparallel")

import labcore as lc
from labcore.live import magic
from test_cluster_daemons import _all_gone, _alive, _start_daemons

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    cluster = ipp.Cluster(n=2, engines="local", profile_dir=str(tmp_path_factory.mktemp("ipp")), delay=0.1,
                          log_level=30)
    cluster.start_cluster_sync()
    try:
        cl = lc.EngineCluster(cluster, timeout=30)
        try:
            yield cl
        finally:
            cl.close()
    finally:
        cluster.stop_cluster_sync()


def _total(base):
    import torch
    import torch.distributed as dist

    t = torch.tensor([base + lc.rank_info().rank])
    dist.all_reduce(t)
    print("sum", t.item())
    return t.item()


def test_run_returns_rank_ordered_results_over_gloo(engines):
    assert engines.world_size == 2 and engines.backend == "gloo"
    assert engines.run(_total, 10) == [21, 21]
    assert engines.last_output[1][0] == "sum 21\n"


def test_ranks_magic_runs_a_cell_on_the_engines(engines, capsys):
    ns = {"cl": engines}
    magic.ranks("--on cl --out x", "x = torch.tensor([rank + 1.0])\ndist.all_reduce(x)\nprint('x', x.item())\n",
                user_ns=ns)
    assert [t.item() for t in ns["x"]] == [3.0, 3.0]
    assert "[rank 1] x 3.0" in capsys.readouterr().out
    engines.push(n=4)
    assert engines.exec("n * 10 + rank") == ["40", "41"]


def test_bench_sweep_measures_on_the_engines(engines):
    df = lc.bench.sweep(engines, "all_reduce", min_bytes=64, max_bytes="4K", factor=8, warmup=1, iters=2,
                        progress=False)
    assert set(df["size"]) == {64, 512, 4096} and (df["wrong"] == 0).all()


def test_an_engine_raising_is_named_with_its_traceback(engines):
    def fails_on_rank_one():
        if lc.rank_info().rank == 1:
            raise ValueError("bad shard")
        return "fine"

    with pytest.raises(lc.RankError) as err:
        engines.run(fails_on_rank_one)
    assert err.value.rank == 1 and "bad shard" in str(err.value)
    assert "fails_on_rank_one" in err.value.errors[1][2]          # the remote traceback
    assert engines.run(_total, 0) == [1, 1]                        # the others finished: still usable


def test_a_hang_names_where_the_rank_is_stuck_then_engines_restart(engines):
    def only_rank_zero_receives():
        import torch
        import torch.distributed as dist

        if lc.rank_info().rank == 0:
            dist.recv(torch.zeros(1), src=1)
        return "done"

    old = engines.pids
    with pytest.raises(lc.CollectiveTimeout) as err:
        engines.call(only_rank_zero_receives, timeout=3)
    report = err.value.report
    assert report.finished == [1] and report.stuck[0].collective == "recv"
    assert "only_rank_zero_receives" in report.stuck[0].user_frame
    assert engines.run(_total, 0) == [1, 1]                        # fresh engines, fresh group
    assert engines.restarts == 1 and not set(old) & set(engines.pids)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in old)


def _dies_on_rank_one(how):
    import os
    import signal

    import torch
    import torch.distributed as dist

    if lc.rank_info().rank == 1:
        if how == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(9)
    t = torch.ones(1)
    dist.all_reduce(t)        # rank 0 fails here first ("Connection closed by peer"): rank 1 is named
    return t.item()


@pytest.mark.parametrize("how", ["SIGKILL", "os._exit"])
def test_an_engine_that_dies_in_a_call_is_named_and_the_next_call_gets_fresh_engines(engines, how):
    old, restarts = engines.pids, engines.restarts
    with pytest.raises(lc.RankDied) as err:
        engines.run(_dies_on_rank_one, how)
    assert err.value.rank == 1 and str(err.value).startswith("rank 1 died"), str(err.value)
    assert engines.run(_total, 0) == [1, 1]                        # no raw "No such engine"
    assert engines.restarts == restarts + 1 and not set(old) & set(engines.pids)


def _temp_and_cache():
    import tempfile

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return tempfile.gettempdir(), cache_dir()      # what torch.compile would write to


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_close_returns_when_engines_nannies_controller_and_daemons_are_gone(tmp_path, monkeypatch, capfd):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    cl = lc.EngineCluster(2, timeout=60)
    try:
        run_dir = cl._owned["run_dir"]
        temps = cl.run(_temp_and_cache)
        daemons = [p for s in cl.run(_start_daemons) for p in s["pids"]]
        engines_, nannies = cl.pids, list(cl._nannies)
        controller = cl._ipp.controller.process.pid
        assert len(nannies) == 2 and all(t.startswith(run_dir + os.sep) for t, _ in temps), (run_dir, temps)
        capfd.readouterr()
    finally:
        cl.close()
    shown = capfd.readouterr()
    assert not [p for p in [*engines_, *nannies, controller] if _alive(p)]    # gone when close() returns
    assert _all_gone(daemons), [p for p in daemons if _alive(p)]
    # no torchinductor_*, no folder (multiprocessing's own pymp-* goes at the process's exit)
    assert [e for e in os.listdir(tmp_path) if not e.startswith("pymp-")] == []
    assert shown.out == "" and shown.err == "", shown                         # no engine logs at close


@pytest.mark.parametrize("kwargs, match", [
    (dict(engines=0), "at least 1"), (dict(engines=2, timeout=0), "timeout"),
    (dict(engines=2, interface="nonexistent0"), "no network interface"),
    (dict(engines=2, backend="mpi"), "backend"),
])
def test_bad_settings_fail_before_any_engine_starts(kwargs, match):
    before = set(psutil.pids())
    with pytest.raises(ValueError, match=match):
        lc.EngineCluster(**kwargs)
    assert not [p for p in set(psutil.pids()) - before if "ipyparallel" in " ".join(_cmdline(p))]


def _cmdline(pid):
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def test_engines_and_controller_follow_a_killed_notebook(tmp_path):
    """A notebook killed outright: its engines and their controller go within seconds, and its folder."""
    script = textwrap.dedent("""
        import os, tempfile, labcore as lc
        if __name__ == "__main__":
            cl = lc.EngineCluster(1, timeout=30)
            print(cl.pids[0], cl._ipp.controller.process.pid, cl._owned["run_dir"], flush=True)
            cl.run(lambda: 1)
            import time; time.sleep(600)
    """)
    path = tmp_path / "notebook.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    engine = controller = None
    try:
        engine, controller, run_dir = proc.stdout.readline().split()
        assert os.path.isdir(run_dir)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        alive = lambda p: psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"  # noqa: E731
        while time.monotonic() < deadline and (alive(int(engine)) or alive(int(controller))):
            time.sleep(0.2)
        assert not alive(int(engine)) and not alive(int(controller))
        while time.monotonic() < deadline and os.path.exists(run_dir):
            time.sleep(0.2)
        assert not os.path.exists(run_dir)
    finally:
        proc.kill()
        proc.wait(10)
        for pid in (engine, controller):   # whatever the assertions found, leave nothing running
            if pid is not None:
                try:
                    os.killpg(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
