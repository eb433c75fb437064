"""The NCCL path: real GPUs only. On a CPU machine these skip and say why."""
import pytest

import labcore as lc

pytestmark = pytest.mark.gpu
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
