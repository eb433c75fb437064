"""The NCCL path: real GPUs only. On a CPU machine these skip and say why."""
import pytest

import labcore as lc

pytestmark = [pytest.mark.gpu, pytest.mark.live]
_NEED = "needs {n} GPU(s) and a CUDA build of torch with NCCL; one GPU per rank is what NCCL requires"


def _gpu_total():
    import torch
    import torch.distributed as dist
    info = lc.rank_info()
    t = torch.full((1024,), float(info.rank + 1), device=info.device)
    dist.all_reduce(t)
    return info.backend, str(info.device), t  # a CUDA tensor: the worker moves it to the CPU


@pytest.mark.parametrize("world_size", [1, 2])
def test_nccl_all_reduce_on_gpus(world_size):
    if not lc.has_gpus(world_size):
        pytest.skip(f"needs {world_size} GPU(s) and a CUDA build of torch with NCCL; "
                    "one GPU per rank is what NCCL requires")
    with lc.Cluster(world_size) as cl:
        assert cl.backend == "nccl"
        got = cl.run(_gpu_total)
    expected = sum(range(1, world_size + 1))
    for rank, (backend, device, t) in enumerate(got):
        assert backend == "nccl" and device == f"cuda:{rank}"
        assert t.device.type == "cpu" and t.eq(expected).all()


def _cpu_and_gpu():
    import torch
    import torch.distributed as dist
    cpu = torch.ones(2)
    dist.all_reduce(cpu)                       # gloo, in the same group
    gpu = torch.ones(2, device=lc.rank_info().device)
    dist.all_reduce(gpu)                       # NCCL
    return str(dist.get_backend()), cpu, gpu


def test_cpu_tensors_run_on_an_nccl_cluster():
    if not lc.has_gpus(1):
        pytest.skip(_NEED.format(n=1))
    with lc.Cluster(1, backend="nccl") as cl:
        [(backend, cpu, gpu)] = cl.run(_cpu_and_gpu)
    assert backend == "cpu:gloo,cuda:nccl"
    assert cpu.tolist() == [1.0, 1.0] and gpu.device.type == "cpu" and gpu.tolist() == [1.0, 1.0]


def _rank_1_raises():
    import torch
    import torch.distributed as dist
    if lc.rank_info().rank == 1:
        raise ValueError("rank 1 gave up")
    dist.all_reduce(torch.ones(1))             # a CPU tensor, as notebook 00's fault cell has it


def test_a_fault_on_nccl_names_the_rank_that_raised():
    if not lc.has_gpus(2):
        pytest.skip(_NEED.format(n=2))
    with lc.Cluster(2, backend="nccl", timeout=30) as cl, pytest.raises(lc.RankError) as err:
        cl.run(_rank_1_raises)
    assert err.value.rank == 1 and sorted(err.value.errors) == [1]


def _watchdog_timeout():
    import torch
    import torch.distributed as dist
    return dist.group.WORLD._get_backend(torch.device("cuda")).options._timeout.total_seconds()


def test_the_nccl_watchdog_times_out_with_the_call():
    if not lc.has_gpus(1):
        pytest.skip(_NEED.format(n=1))
    with lc.Cluster(1, backend="nccl") as cl:
        assert cl.call(_watchdog_timeout, timeout=17) == [17.0]
        assert cl.call(_watchdog_timeout, timeout=23) == [23.0]


def _gpu_busy_then_all_reduce(seconds: float = 30.0):
    import torch
    import torch.distributed as dist
    torch.cuda._sleep(int(seconds * 2e9))      # a kernel that spins ~2e9 cycles a second on current GPUs
    dist.all_reduce(torch.ones(4, device=lc.rank_info().device))   # queued behind it: returns at once
    return "queued"


def test_a_call_replies_only_after_its_gpu_work_and_a_gpu_hang_is_reported_in_it():
    import torch
    if not lc.has_gpus(1):
        pytest.skip(_NEED.format(n=1))
    with lc.Cluster(1, backend="nccl", timeout=60, show_output=False) as cl:
        assert cl.call(_gpu_busy_then_all_reduce, kwargs={"seconds": 0.5}) == ["queued"]
        with pytest.raises(lc.CollectiveTimeout) as err:
            cl.call(_gpu_busy_then_all_reduce, timeout=4)
        where = err.value.report.stuck[0]
        assert where.gpu is not None and "all_reduce" in where.gpu, str(err.value.report)
        assert cl.run(_watchdog_timeout) == [60.0]   # fresh ranks, same cluster
    assert not torch.cuda.is_initialized()         # the notebook (this process) never touched CUDA


def _skip_on_gpu(culprit: int = 1):
    import torch
    import torch.distributed as dist
    t = torch.ones(4, device=lc.rank_info().device)
    if dist.get_rank() != culprit:
        dist.all_reduce(t)                     # NCCL queues it and returns: the worker waits for it
    return "returned"


def _hang_report_on_two_gpus(fn):
    """The hang report of ``fn(1)`` run on two NCCL ranks (rank 1 skips a collective) with a 10 s timeout."""
    if not lc.has_gpus(2):
        pytest.skip(_NEED.format(n=2))
    with lc.Cluster(2, backend="nccl", timeout=10, show_output=False) as cl, \
            pytest.raises(lc.CollectiveTimeout) as err:
        cl.run(fn, 1)
    return err.value.report


def test_a_skipped_collective_on_nccl_hangs_the_call_that_skipped_it():
    report = _hang_report_on_two_gpus(_skip_on_gpu)
    assert report.finished == [1] and report.headline.startswith("rank 1 never entered all_reduce"), str(report)


# -- issue 30: NCCL on a real GPU, round two ------------------------------------------------------------
def _recorders_after_collectives():
    import torch
    import torch.distributed as dist

    from labcore.live import fr_dumps
    dist.all_reduce(torch.ones(4, device=lc.rank_info().device))
    dist.all_reduce(torch.ones(4))
    torch.cuda.synchronize()
    return fr_dumps.available(), sorted({e["recorder"] for e in fr_dumps.read(stacks=False)["entries"]})


def test_both_flight_recorders_hold_their_backends_collectives():
    if not lc.has_gpus(1):
        pytest.skip(_NEED.format(n=1))
    with lc.Cluster(1, backend="nccl") as cl:
        [(available, holding)] = cl.run(_recorders_after_collectives)
    assert available == ["nccl", "cpu"] and holding == ["cpu", "nccl"]


def _recorded_on_gpu():
    import torch
    import torch.distributed as dist
    with lc.live.record("gpu") as rec:
        for _ in range(3):
            dist.all_reduce(torch.ones(1 << 16, device=lc.rank_info().device))
    return rec


def test_the_recorder_reads_nccls_flight_recorder_on_one_gpu():
    if not lc.has_gpus(1):
        pytest.skip(_NEED.format(n=1))
    with lc.Cluster(1, backend="nccl") as cl:
        rows = cl.run(_recorded_on_gpu)[0].collectives()
    assert len(rows) == 3 and rows["kernel"].str.startswith("nccl").all()


def _skip_then_item(culprit: int = 1):
    import torch
    import torch.distributed as dist
    t = torch.ones(4, device=lc.rank_info().device)
    if dist.get_rank() != culprit:
        dist.all_reduce(t)                     # returns at once
    return t.sum().item()                      # the line that waits for the GPU


def test_a_skipped_collective_is_reported_at_the_line_that_waits_for_it():
    report = _hang_report_on_two_gpus(_skip_then_item)
    assert report.headline.startswith("rank 1 never entered all_reduce"), str(report)
    assert report.stuck[0].user_frame and "_skip_then_item" in report.stuck[0].user_frame, str(report)


def test_a_one_gpu_sweep_keeps_nccls_start_up_log_and_runs_without_the_flight_recorder():
    if not lc.has_gpus(1):
        pytest.skip(_NEED.format(n=1))
    df = lc.bench.sweep(1, "all_reduce", min_bytes="1M", max_bytes="64M", factor=64, iters=50,
                        placements=("in-place",), check=False, progress=False, env={"NCCL_DEBUG": "INFO"})
    assert df.attrs["nccl"].version and set(df["backend"]) == {"nccl"}
    assert df.attrs["params"]["flight_recorder"] == 0


def _subgroup_times_out():
    import datetime

    import torch
    import torch.distributed as dist
    g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
    if dist.get_rank() == 0:
        work = dist.all_reduce(torch.ones(4, device=lc.rank_info().device), group=g, async_op=True)
        import time
        time.sleep(8)                          # the subgroup's watchdog sees its collective time out
        return work.is_completed()
    return "skipped"


def test_a_subgroup_that_timed_out_replaces_the_group_instead_of_killing_a_rank_later():
    if not lc.has_gpus(2):
        pytest.skip(_NEED.format(n=2))
    with lc.Cluster(2, backend="nccl", timeout=60, show_output=False) as cl:
        cl.run(_subgroup_times_out)
        assert cl.run(lambda: "fresh") == ["fresh", "fresh"] and cl.restarts == 1
