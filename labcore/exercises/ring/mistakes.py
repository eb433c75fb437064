"""Deliberate wrong answers to notebook 02's live ring: rings that are not, which the tests feed to
the check. None of them is an answer; the answer is :func:`labcore.exercises.ring.ring_all_reduce`."""
from __future__ import annotations


def _reduce_scatter_only(tensor):
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    for s in range(n - 1):
        mine, incoming = (rank - 1 - s) % n, (rank - 2 - s) % n
        buffer = torch.empty_like(chunks[incoming])
        reqs = [dist.isend(chunks[mine], (rank + 1) % n), dist.irecv(buffer, (rank - 1) % n)]
        for r in reqs:
            r.wait()
        chunks[incoming] += buffer
    return tensor


def _uses_all_reduce(tensor):
    import torch.distributed as dist

    dist.all_reduce(tensor)
    return tensor
