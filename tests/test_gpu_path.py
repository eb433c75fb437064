"""The GPU path, as far as a CPU can show it (issue 19): what the lab asks torch for when it
chooses NCCL, what reaches the notebook from C code on the ranks, what the notebook itself
touches, and what a call waits for before it replies.

The checks that need GPUs live in tests/test_cluster_gpu.py and skip here, saying why.
"""
import multiprocessing
import os

import pytest
import torch
from torch.distributed.distributed_c10d import Backend, BackendConfig

import labcore as lc
from labcore.live import hang, sysinfo


# -- 1. CPU tensors on an NCCL cluster -----------------------------------------------------------
def test_an_nccl_cluster_asks_for_gloo_beside_nccl():
    spec = sysinfo.group_backend("nccl")
    assert spec == "cpu:gloo,cuda:nccl"
    # torch's own parse of what the ranks pass to init_process_group: a backend for each device
    assert BackendConfig(Backend(spec)).get_device_backend_map() == {"cpu": "gloo", "cuda": "nccl"}
    # the bare name, what the ranks asked for before: no backend for CPU tensors at all
    assert "cpu" not in BackendConfig(Backend("nccl")).get_device_backend_map()


def test_a_gloo_cluster_asks_for_gloo_alone():
    assert sysinfo.group_backend("gloo") == "gloo"
    with pytest.raises(ValueError, match="'gloo' or 'nccl'"):
        sysinfo.group_backend("auto")


def _backend_and_sum():
    import torch.distributed as dist
    t = torch.ones(2)
    dist.all_reduce(t)
    return str(dist.get_backend()), lc.rank_info().backend, t.tolist()


@pytest.mark.live
def test_gloo_ranks_keep_a_plain_gloo_group(gloo_cluster):
    cl = gloo_cluster(2)
    assert cl.run(_backend_and_sum) == [("gloo", "gloo", [2.0, 2.0])] * 2


# -- 2. C output (NCCL's log) arrives whole, in the call that wrote it ------------------------------
_PRINTING_SCRIPT = '''
import json, sys
import labcore as lc

def c_lines(call, long_line=0, partial=""):
    import ctypes
    libc = ctypes.CDLL(None)
    rank = lc.rank_info().rank
    for k in range(3):   # what NCCL does: one printf per line, to C's stdout
        libc.printf(b"NCCL INFO call %d rank %d line %d\\n", call, rank, k)
    if long_line:        # longer than a pipe's atomic write and than stdio's buffer
        libc.printf(b"NCCL INFO call %d rank %d long %s\\n", call, rank, b"x" * long_line)
    if partial:
        libc.printf(partial.encode())
    print(f"python call {call} rank {rank}", flush=True)

def exits():
    import ctypes, os
    ctypes.CDLL(None).printf(b"NCCL WARN rank %d last words\\n", lc.rank_info().rank)
    if lc.rank_info().rank == 1:
        os._exit(3)

if __name__ == "__main__":
    seen = []
    with lc.Cluster(2, backend="gloo", show_output=False, timeout=120) as cl:
        cl.run(c_lines, 1)
        seen.append([out for out, _ in cl.last_output])
        cl.run(c_lines, 2, long_line=20000, partial="no newline at the end")
        seen.append([out for out, _ in cl.last_output])
        try:
            cl.run(exits)
        except lc.RankDied as died:
            seen.append(str(died))
    print(json.dumps(seen))
'''


def _printed(tmp_path, unbuffered: bool):
    import json
    import os
    import subprocess
    import sys
    script = tmp_path / "printing.py"
    script.write_text(_PRINTING_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
def test_c_output_arrives_whole_in_its_own_call(tmp_path, unbuffered):
    first, second, died = _printed(tmp_path, unbuffered)
    for rank in (0, 1):
        lines = [f"NCCL INFO call 1 rank {rank} line {k}" for k in range(3)] + [f"python call 1 rank {rank}"]
        assert first[rank].splitlines() == lines, first[rank][:500]
        got = second[rank].splitlines()
        assert [f"NCCL INFO call 2 rank {rank} line {k}" for k in range(3)] == got[:3]
        assert got[3] == f"NCCL INFO call 2 rank {rank} long " + "x" * 20000   # whole, not cut
        assert f"python call 2 rank {rank}" in got and got[-1].endswith("no newline at the end")
        assert "call 1" not in second[rank]
    # a rank that ends by os._exit: its last C line was already out
    assert "rank 1 exited with code 3" in died and "NCCL WARN rank 1 last words" in died


# -- 3. The notebook never initialises CUDA; its environment reaches later ranks --------------------
def test_counting_gpus_never_asks_the_cuda_runtime(monkeypatch):
    # As on a CUDA build of torch on a machine without NVML (no libnvidia-ml.so.1 here): the only
    # way left to count would be cudaGetDeviceCount, which initialises CUDA in the notebook.
    asked = []
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: asked.append(1) or 0, raising=False)
    assert sysinfo.gpu_count() == 0
    assert not asked, "cudaGetDeviceCount was called in the notebook process"


def _env(*names):
    import os
    return {name: os.environ.get(name) for name in names}


# Set while pytest collects, before any cluster of this process starts its forkserver (and not
# by a rank that imports this module to unpickle a function of it).
if multiprocessing.current_process().name == "MainProcess":
    os.environ.setdefault("LABCORE_TEST_SET_BEFORE_THE_FORKSERVER", "1")


@pytest.mark.live
def test_the_notebook_environment_now_reaches_new_ranks(monkeypatch):
    with lc.Cluster(2, backend="gloo", show_output=False) as first:   # the forkserver runs from here on
        first.run(_env, "PATH")
    monkeypatch.setenv("LABCORE_TEST_SET_AFTER", "later")
    monkeypatch.delenv("LABCORE_TEST_SET_BEFORE_THE_FORKSERVER")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")   # the lab's own per-rank value still wins
    with lc.Cluster(2, backend="gloo", show_output=False, env={"LABCORE_TEST_ENV": "given"}) as cl:
        got = cl.run(_env, "LABCORE_TEST_SET_AFTER", "LABCORE_TEST_SET_BEFORE_THE_FORKSERVER",
                     "OMP_NUM_THREADS", "LABCORE_TEST_ENV")
    assert got == [{"LABCORE_TEST_SET_AFTER": "later", "LABCORE_TEST_SET_BEFORE_THE_FORKSERVER": None,
                    "OMP_NUM_THREADS": "1", "LABCORE_TEST_ENV": "given"}] * 2


@pytest.mark.live
def test_has_gpus_and_a_cluster_leave_the_notebook_without_cuda():
    lc.has_gpus(1)
    with lc.Cluster(2, show_output=False) as cl:   # backend="auto" asks has_gpus too
        cl.run(_env, "PATH")
    assert not torch.cuda.is_initialized()


# -- 4. A call replies after its GPU work; NCCL's watchdog gets the call's timeout ------------------
def _spy_on_the_gpu_wait():
    from labcore.live import progress
    seen = []
    progress.finish_gpu_work = lambda device: seen.append(str(device))
    progress.seen_by_test = seen


def _seen_gpu_waits():
    from labcore.live import progress
    return list(progress.seen_by_test)


@pytest.mark.live
def test_every_call_waits_for_its_gpu_work_before_replying(gloo_cluster):
    cl = gloo_cluster(2, timeout=60)
    cl.run(_spy_on_the_gpu_wait)
    cl.run(_env, "PATH")
    assert cl.run(_seen_gpu_waits) == [["cpu", "cpu"]] * 2


def _group_timeouts():
    import types

    import torch.distributed as dist

    from labcore.live import worker
    from labcore.live.context import RankInfo
    world = dist.group.WORLD
    before = world._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    # the worker's own method on this rank's real group, told it runs NCCL: gloo serves the cuda
    # device type too, so its backend object takes the timeout as ProcessGroupNCCL's would
    as_nccl = types.SimpleNamespace(info=RankInfo(0, 1, 0, "nccl", torch.device("cuda", 0)), nccl_timeout_s=None)
    worker._Worker.arm_nccl_timeout(as_nccl, 17.0)
    armed = world._get_backend(torch.device("cuda")).options._timeout.total_seconds()
    world._get_backend(torch.device("cuda"))._set_default_timeout(__import__("datetime").timedelta(seconds=before))
    return before, armed, as_nccl.nccl_timeout_s


@pytest.mark.live
def test_the_nccl_watchdog_gets_the_calls_timeout_and_gloo_keeps_its_own(gloo_cluster):
    from labcore.live import settings
    cl = gloo_cluster(2, timeout=60)
    cl.call(_env, ("PATH",), timeout=9)   # a gloo call with its own timeout leaves gloo's group alone
    for before, armed, kept in cl.run(_group_timeouts):
        assert before == settings.GROUP_TIMEOUT_S and armed == 17.0 and kept == 17.0


def _gpu_snapshots(skipper: int):
    import torch.distributed as dist

    from labcore.live import progress
    if dist.get_rank() != skipper:
        dist.all_reduce(torch.ones(2), async_op=True)   # queued, never completes: rank `skipper` is absent
    return progress.gpu_snapshot()


@pytest.mark.live
def test_the_report_reads_which_collective_a_rank_has_not_finished():
    from labcore.live import flight, progress
    with lc.Cluster(3, backend="gloo", timeout=60, env=flight.ENV, show_output=False) as cl:
        snapshots = cl.run(_gpu_snapshots, 2)
    assert progress.describe_gpu(snapshots[2]) is None                 # nothing unfinished on rank 2
    op, what = progress.describe_gpu(snapshots[0])
    assert op == "all_reduce" and what.startswith("all_reduce #1 of group 0")
    dump = ('Current thread 0x1 (most recent call first):\n'
            '  File "/x/labcore/live/progress.py", line 9 in finish_gpu_work\n'
            '  File "/x/labcore/live/worker.py", line 5 in run_call\n'
            '  File "/x/labcore/live/worker.py", line 7 in serve\n')
    where = hang.summarize_stack(dump, progress.describe_gpu(snapshots[0]))
    assert where.collective == "all_reduce" and "waiting for its GPU, still in all_reduce #1" in str(where)
