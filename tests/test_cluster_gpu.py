"""The NCCL path: real GPUs only. On a CPU machine these skip and say why."""
import pytest

import labcore as lc


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
