"""labcore.Cluster on gloo: results, output, arguments, rendezvous and clean-up."""
import glob
import os
import tempfile
import threading

import psutil
import pytest

import labcore as lc

pytestmark = pytest.mark.live


def _children() -> set[int]:
    """Live descendants of this process, the forkserver (it outlives clusters by design) excluded."""
    me = psutil.Process()
    kids = set()
    for proc in me.children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "forkserver" not in " ".join(proc.cmdline()):
                kids.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return kids


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_run_returns_results_in_rank_order(world_size):
    def total(base):
        import torch
        import torch.distributed as dist
        info = lc.rank_info()
        t = torch.tensor([float(base + info.rank)])
        dist.all_reduce(t)
        return info.rank, info.world_size, str(info.device), t.item()

    with lc.Cluster(world_size, backend="gloo") as cl:
        got = cl.run(total, 10)
    expected_sum = sum(10 + r for r in range(world_size))
    assert got == [(r, world_size, "cpu", expected_sum) for r in range(world_size)]


def test_state_persists_between_calls_and_closures_travel():
    scale = 3

    def remember():
        import builtins
        builtins._lab_counter = getattr(builtins, "_lab_counter", 0) + scale
        return builtins._lab_counter

    with lc.Cluster(2, backend="gloo") as cl:
        pids = cl.pids
        assert cl.run(remember) == [3, 3]
        assert cl.run(remember) == [6, 6]
        assert cl.pids == pids  # the same processes served both calls


def test_output_is_prefixed_and_in_rank_order(capsys):
    def talk():
        import sys
        import time
        rank = lc.rank_info().rank
        time.sleep(0.05 * (3 - rank))  # rank 3 speaks first
        print(f"hello {rank}")
        print(f"warn {rank}", file=sys.stderr)
        os.write(1, f"raw fd write {rank}\n".encode())  # C-level output is captured too

    with lc.Cluster(4, backend="gloo") as cl:
        cl.run(talk)
        assert cl.last_output[2] == ("hello 2\nraw fd write 2\n", "warn 2\n")
    out, err = capsys.readouterr()
    assert [line for line in out.splitlines() if "hello" in line] == [f"[rank {r}] hello {r}" for r in range(4)]
    assert [line for line in err.splitlines() if "warn" in line] == [f"[rank {r}] warn {r}" for r in range(4)]


def test_results_come_back_as_tensors():
    def make():
        import torch
        return {"t": torch.arange(3) * lc.rank_info().rank}

    with lc.Cluster(2, backend="gloo", show_output=False) as cl:
        got = cl.run(make)
    assert got[1]["t"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "2", True, None])
def test_bad_world_size_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        lc.Cluster(bad)


def test_bad_function_and_arguments_are_clear_errors():
    with lc.Cluster(2, backend="gloo") as cl:
        with pytest.raises(TypeError, match="needs a function"):
            cl.run(42)
        with pytest.raises(TypeError, match="cannot send .* to the ranks"):
            cl.run(lambda lock: None, threading.Lock())
        assert cl.run(lambda: 1) == [1, 1]  # the cluster is unharmed


def test_nccl_without_gpus_fails_before_starting_anything():
    if lc.has_gpus(2):
        pytest.skip("this machine has 2 GPUs: backend='nccl' is legitimately available")
    before = _children()
    with pytest.raises(ValueError, match="backend='nccl' needs one GPU per rank"):
        lc.Cluster(2, backend="nccl")
    assert _children() - before == set()


def test_bad_timeout_and_start_method():
    with pytest.raises(ValueError, match="timeout"):
        lc.Cluster(2, timeout=0)
    with pytest.raises(ValueError, match="fork"):
        lc.Cluster(2, start_method="fork")


def test_closed_cluster_reopens_with_fresh_ranks(capsys):
    cl = lc.Cluster(2, backend="gloo")
    old = cl.pids
    cl.close()
    cl.close()  # twice is fine
    assert cl.closed and "closed" in repr(cl)
    try:
        assert cl.run(lambda: 1) == [1, 1]  # e.g. an exercise checked after the notebook's last cell
        assert not set(cl.pids) & set(old)
        assert "starting 2 fresh ranks (the cluster had been closed)" in capsys.readouterr().out
    finally:
        cl.close()


def test_rendezvous_uses_loopback_only():
    def addresses():
        import torch
        import torch.distributed as dist
        dist.all_reduce(torch.ones(1))  # make sure gloo's pairs are connected
        conns = psutil.Process().net_connections(kind="inet")
        return sorted({c.laddr.ip for c in conns} | {c.raddr.ip for c in conns if c.raddr})

    with lc.Cluster(2, backend="gloo", show_output=False) as cl:
        per_rank = cl.run(addresses)
    seen = {ip for ips in per_rank for ip in ips}
    assert seen, "gloo opened no sockets?"
    assert all(ip.startswith("127.") or ip == "::1" for ip in seen), seen


def test_two_clusters_at_once_do_not_collide():
    def total():
        import torch
        import torch.distributed as dist
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        return t.item()

    with lc.Cluster(2, backend="gloo") as a, lc.Cluster(3, backend="gloo") as b:
        for _ in range(3):
            assert a.run(total) == [2.0, 2.0]
            assert b.run(total) == [3.0, 3.0, 3.0]


def test_fifty_clusters_leave_nothing_behind():
    tmp = tempfile.gettempdir()
    fds = len(os.listdir("/proc/self/fd"))
    mine = os.path.join(tmp, f"labcore-{os.getuid()}", f"run-{os.getpid()}-*")  # others may run clusters too
    dirs = set(glob.glob(mine))
    before = _children()
    for _ in range(50):
        with lc.Cluster(2, backend="gloo", show_output=False) as cl:
            assert cl.run(lambda: 7) == [7, 7]
    assert _children() - before == set()
    assert set(glob.glob(mine)) - dirs == set()
    assert len(os.listdir("/proc/self/fd")) <= fds + 2  # pipes are closed, not leaked
