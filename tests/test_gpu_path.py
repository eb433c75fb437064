"""The GPU path, as far as a CPU can show it (issue 19): what the lab asks torch for when it
chooses NCCL, what reaches the notebook from C code on the ranks, what the notebook itself
touches, and what a call waits for before it replies.

The checks that need GPUs live in tests/test_cluster_gpu.py and skip here, saying why.
"""
import pytest
import torch
from torch.distributed.distributed_c10d import Backend, BackendConfig

import labcore as lc
from labcore.live.sysinfo import group_backend


# -- 1. CPU tensors on an NCCL cluster -----------------------------------------------------------
def test_an_nccl_cluster_asks_for_gloo_beside_nccl():
    spec = group_backend("nccl")
    assert spec == "cpu:gloo,cuda:nccl"
    # torch's own parse of what the ranks pass to init_process_group: a backend for each device
    assert BackendConfig(Backend(spec)).get_device_backend_map() == {"cpu": "gloo", "cuda": "nccl"}
    # the bare name, what the ranks asked for before: no backend for CPU tensors at all
    assert "cpu" not in BackendConfig(Backend("nccl")).get_device_backend_map()


def test_a_gloo_cluster_asks_for_gloo_alone():
    assert group_backend("gloo") == "gloo"
    with pytest.raises(ValueError, match="'gloo' or 'nccl'"):
        group_backend("auto")


def _backend_and_sum():
    import torch.distributed as dist
    t = torch.ones(2)
    dist.all_reduce(t)
    return str(dist.get_backend()), lc.rank_info().backend, t.tolist()


@pytest.mark.live
def test_gloo_ranks_keep_a_plain_gloo_group(gloo_cluster):
    cl = gloo_cluster(2)
    assert cl.run(_backend_and_sum) == [("gloo", "gloo", [2.0, 2.0])] * 2
