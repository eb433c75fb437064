"""Faults on a live gloo cluster: exceptions, dead ranks, hangs, interrupts, a dead parent.

Each fault must surface in the parent within seconds, name the rank, and leave a
cluster that restarts itself on the next call.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

import labcore as lc
from labcore.live import CollectiveTimeout, RankDied, RankError

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _total():
    import torch
    import torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _alive(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


# A hang is reported when a call's timeout passes; the tests that make one give the call this much. Calls that
# must not hang get the cluster's generous timeout instead, so a busy machine starting ranks cannot fail them.
HANG_S = 3.0


@pytest.fixture(params=[2, 4], ids=lambda n: f"{n}ranks")
def cluster(request):
    with lc.Cluster(request.param, backend="gloo", timeout=120.0) as cl:
        cl.run(_total)  # the ranks have started and imported this module before a test times anything
        yield cl


def test_exception_on_one_rank_names_it_with_traceback(cluster):
    def boom():
        import torch
        import torch.distributed as dist
        if lc.rank_info().rank == 1:
            raise ValueError("shape mismatch on purpose")
        dist.all_reduce(torch.ones(1))  # the others wait here for rank 1 forever

    start = time.monotonic()
    with pytest.raises(RankError) as err:
        cluster.run(boom)
    assert time.monotonic() - start < cluster.timeout  # reported at once, not at the deadline
    assert err.value.rank == 1 and err.value.restarted
    assert "rank 1 raised ValueError: shape mismatch on purpose" in str(err.value)
    assert "in boom" in str(err.value)  # the remote traceback...
    assert __file__ in str(err.value)  # ...with the file and line where boom was written
    assert 'raise ValueError("shape mismatch on purpose")' in str(err.value)
    assert cluster.run(_total) == [float(cluster.world_size)] * cluster.world_size
    assert cluster.restarts == 1


def test_exception_after_collectives_keeps_the_group(cluster):
    def late():
        _total()
        if lc.rank_info().rank == 0:
            raise KeyError("only rank 0")

    pids = cluster.pids
    with pytest.raises(RankError) as err:
        cluster.run(late)
    assert not err.value.restarted and "still usable" in str(err.value)
    assert cluster.pids == pids


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_rank_that_dies_is_named(cluster, how):
    last = cluster.world_size - 1

    def die():
        import torch
        import torch.distributed as dist
        if lc.rank_info().rank == last:
            print("about to go", flush=True)
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(torch.ones(1))

    start = time.monotonic()
    with pytest.raises(RankDied) as err:
        cluster.run(die)
    assert time.monotonic() - start < cluster.timeout
    assert err.value.rank == last
    assert ("code 3" if how == "exit" else "SIGKILL") in str(err.value)
    assert "about to go" in str(err.value)
    assert cluster.run(_total) == [float(cluster.world_size)] * cluster.world_size


def test_mismatched_collectives_give_a_hang_report(cluster):
    def mismatch():
        import torch
        import torch.distributed as dist
        t = torch.ones(4)
        if lc.rank_info().rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=0)

    old = cluster.pids
    with pytest.raises(CollectiveTimeout) as err:
        cluster.call(mismatch, timeout=HANG_S)
    report = err.value.report
    assert report.finished == [] and sorted(report.stuck) == list(range(cluster.world_size))
    assert report.stuck[0].collective == "all_reduce"
    assert any(where.collective == "broadcast" for where in report.stuck.values())
    assert "different collectives" in str(err.value)
    assert f"called from mismatch ({__file__}" in str(report.stuck[0])  # the user's function and file
    assert _alive(old) == []
    assert cluster.run(_total) == [float(cluster.world_size)] * cluster.world_size


def test_recv_nobody_sends_says_who_finished(cluster):
    def lonely():
        import torch
        import torch.distributed as dist
        if lc.rank_info().rank == 1:
            dist.recv(torch.empty(1), src=0)

    with pytest.raises(CollectiveTimeout) as err:
        cluster.call(lonely, timeout=HANG_S)
    report = err.value.report
    assert sorted(report.stuck) == [1]
    assert report.stuck[1].collective == "recv"
    assert 0 in report.finished
    assert cluster.run(_total) == [float(cluster.world_size)] * cluster.world_size


@pytest.fixture
def sigint_raises():
    """SIGINT raising KeyboardInterrupt, as in a terminal or a kernel, even when pytest runs in the
    background (a shell then starts it with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_keyboard_interrupt_stops_the_workers(sigint_raises):
    with lc.Cluster(2, backend="gloo", timeout=30.0) as cl:
        pids = cl.pids
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            cl.run(lambda: __import__("time").sleep(20))
        timer.join()
        deadline = time.monotonic() + 5
        while _alive(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(pids) == []
        assert cl.run(lambda: 5) == [5, 5]


def test_killing_the_parent_takes_every_worker_with_it(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import time, psutil, labcore as lc
        if __name__ == "__main__":
            cl = lc.Cluster(4, backend="gloo")
            kids = [p.pid for p in psutil.Process().children(recursive=True)]
            print(" ".join(map(str, kids)), flush=True)
            cl.run(lambda: None)
            time.sleep(120)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        kids = [int(p) for p in line.split()]
        assert len(kids) >= 4, line  # four ranks (and the forkserver)
        time.sleep(0.5)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 5
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(kids) == []
    finally:
        parent.kill()
        parent.stdout.close()
