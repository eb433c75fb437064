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


def _ring_steps(tensor, chunks, rank: int, n: int):
    """The ring's 2(n-1) steps over ``chunks`` (the reference ring's schedule, as a learner writes it)."""
    import torch
    import torch.distributed as dist

    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        incoming = torch.empty_like(chunks[(rank - 2 - s) % n])
        for req in (dist.isend(chunks[(rank - 1 - s) % n], right), dist.irecv(incoming, left)):
            req.wait()
        chunks[(rank - 2 - s) % n] += incoming
    for s in range(n - 1):
        for req in (dist.isend(chunks[(rank - s) % n], right), dist.irecv(chunks[(rank - 1 - s) % n], left)):
            req.wait()
    return tensor


def _ring_for_four_ranks(tensor):
    import torch
    import torch.distributed as dist

    n = 4                                                   # the notebook's rank count, built in
    rank = dist.get_rank()
    return _ring_steps(tensor, list(torch.tensor_split(tensor.view(-1), n)), rank % n, n)


def _ring_even_chunks(tensor):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    size = tensor.numel() // n                              # the remainder belongs to no chunk
    flat = tensor.view(-1)
    return _ring_steps(tensor, [flat[i * size:(i + 1) * size] for i in range(n)], rank, n)


def _ring_torch_chunk(tensor):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    return _ring_steps(tensor, list(tensor.view(-1).chunk(n)), rank, n)   # chunk() may make fewer than n
