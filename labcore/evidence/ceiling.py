"""The link speed a busbw target is a fraction of: a datasheet number, or a copy measured here.

nccl-tests' busbw is meant to be compared with the hardware's link speed
(doc/PERFORMANCE.md): on an H100 node that is NVLink's 450 GB/s per direction (the
datasheet's 900 GB/s counts both), across nodes a NIC's 50 GB/s (400 Gb/s). Ranks on
one CPU machine have no link: gloo moves their bytes through loopback TCP, i.e. through
memory, more than once. The nearest thing to a link speed there is how fast one rank
copies a buffer while every other rank does the same: :func:`copy_bandwidth` measures
that, so a busbw target on a laptop is "a fraction of what memory copies", stated as
such.

Example
-------
>>> import labcore as lc
>>> with lc.Cluster(2) as cl:                                       # doctest: +SKIP
...     gbps, low, high = copy_bandwidth(cl)
"""
from __future__ import annotations

import time

import numpy as np


def copy_seconds(nbytes: int, repeats: int) -> list[float]:
    """On every rank at once: seconds of each of ``repeats`` copies of an ``nbytes`` buffer."""
    import torch
    import torch.distributed as dist

    from labcore.live.context import rank_info

    dev = rank_info().device
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)                       # first touch of the pages, untimed
    dist.barrier()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        out.append(time.perf_counter() - start)
    return out


def copy_bandwidth(cluster, nbytes: int = 64 << 20, repeats: int = 7) -> tuple[float, float, float]:
    """(GB/s, low, high): one rank's copy bandwidth while all ranks copy, median with its bootstrap interval.

    GB = 1e9 bytes, as busbw. Each repeat's value is the mean over ranks.
    """
    from labcore.evidence.stats import bootstrap_median

    from labcore import validate

    nbytes = validate.whole_number(nbytes, "nbytes (a number of bytes)", least=4)
    repeats = validate.whole_number(repeats, "repeats", least=1)
    seconds = np.asarray(cluster.call(copy_seconds, (nbytes, repeats)), dtype=float)
    per_repeat = (nbytes // 4 * 4) / seconds / 1e9
    return bootstrap_median(per_repeat.mean(axis=0))
