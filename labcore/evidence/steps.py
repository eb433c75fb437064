"""Training-step times with torch's DDP, measured in a shape the evidence gate reads.

A collective's time is only half of what a team cares about; the other half is the
**step**: forward, backward with DDP's bucketed gradient all-reduces overlapping it
(Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
VLDB 2020), and the optimizer. :func:`ddp_steps` times whole steps of a real
``DistributedDataParallel`` model on the cluster's ranks, for several configurations
(a bucket size, communication on or off), **interleaved** (each repeat runs every
configuration once, so a drifting machine touches them alike).

Each configuration comes back as a DataFrame with the columns
:func:`labcore.bench.compare`, :func:`labcore.bench.summarize` and
:func:`labcore.viz.gate_plot` read (``op`` "ddp_step", ``size`` = gradient bytes,
``placement`` "step", ``median_us`` = the median step of a repeat, mean over ranks), so
a change of configuration goes through the same gate as a change of machine.
:func:`comm_share` turns "with" and "without communication" into the share of the step
that communication costs.

Example
-------
>>> import labcore as lc
>>> with lc.Cluster(2) as cl:                                                   # doctest: +SKIP
...     runs = ddp_steps(cl, {"25 MiB": dict(bucket_cap_mb=25), "compute only": dict(sync=False)})
>>> comm_share(runs["25 MiB"], runs["compute only"])                              # doctest: +SKIP
(0.48, 0.41, 0.55)
"""
from __future__ import annotations

import math
import time
from typing import Mapping

import numpy as np
import pandas as pd

from labcore import validate

MODEL = dict(depth=16, width=256, batch=64)


def _model_layers(depth: int, width: int):
    import torch

    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def gradient_bytes(depth: int = MODEL["depth"], width: int = MODEL["width"]) -> int:
    """Bytes of float32 gradients of the MLP that :func:`ddp_steps` trains (weights and biases)."""
    return depth * (width * width + width) * 4


def ddp_step_seconds(bucket_cap_mb: float = 25.0, steps: int = 8, warmup: int = 2, sync: bool = True,
                     depth: int = MODEL["depth"], width: int = MODEL["width"],
                     batch: int = MODEL["batch"]) -> list[float]:
    """On every rank: ``steps`` timed training steps of an MLP under DDP; each step's seconds.

    A step is zero_grad, forward, a mean-square loss, backward (DDP all-reduces the
    gradients in buckets of ``bucket_cap_mb`` MiB while backward runs) and an SGD step.
    ``sync=False`` runs backward under ``ddp.no_sync()``: the same compute, no communication.
    """
    import torch
    import torch.distributed as dist
    from contextlib import nullcontext
    from torch.nn.parallel import DistributedDataParallel as DDP

    from labcore.live.context import rank_info

    dev = rank_info().device
    torch.manual_seed(0)
    model = _model_layers(depth, width).to(dev)
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=dev)
    seconds = []
    dist.barrier()
    for step in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with nullcontext() if sync else ddp.no_sync():
            ddp(x).square().mean().backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if step >= warmup:
            seconds.append(time.perf_counter() - start)
    return seconds


def _check_config(label: str, cfg: dict) -> dict:
    unknown = set(cfg) - {"bucket_cap_mb", "sync"}
    if unknown:
        raise ValueError(f"configuration {label!r} has unknown settings {sorted(unknown)}; "
                         "use bucket_cap_mb (MiB) and sync (True/False)")
    cap = cfg.get("bucket_cap_mb", 25.0)
    cap = validate.positive_number(cap, f"bucket_cap_mb of {label!r}", must="a number of MiB above 0")
    sync = cfg.get("sync", True)
    if not isinstance(sync, bool):
        raise ValueError(f"sync of {label!r} must be True or False, not {sync!r}")
    return dict(bucket_cap_mb=float(cap), sync=sync)


def ddp_steps(cluster, configs: Mapping[str, dict], *, repeats: int = 5, steps: int = 8, warmup: int = 2,
              depth: int = MODEL["depth"], width: int = MODEL["width"], batch: int = MODEL["batch"],
              timeout: float | None = None) -> dict[str, pd.DataFrame]:
    """Time DDP training steps for each configuration, interleaved; one gate-ready frame each.

    Parameters
    ----------
    cluster : a :class:`labcore.Cluster` with at least 2 ranks.
    configs : ``{label: {"bucket_cap_mb": MiB, "sync": bool}}`` (defaults 25 MiB, True).
    repeats : rounds; each round runs every configuration once, in order.
    steps, warmup : timed and untimed steps per run (the same on every rank).
    depth, width, batch : the MLP (``depth`` layers of ``width`` x ``width``) and batch rows.
    timeout : seconds one run may take (cluster default).

    Returns
    -------
    ``{label: DataFrame}``, one row per repeat: ``op`` ("ddp_step"), ``size`` (gradient bytes),
    ``type``, ``redop``, ``root``, ``ranks``, ``backend``, ``placement`` ("step"), ``time_us``
    (mean step) and ``median_us`` (median step), both averaged over ranks, ``busbw`` (NaN: a
    step has no bus bandwidth), ``repeat``, ``config``, ``bucket_cap_mb``, ``sync``.
    """
    from labcore.bench.checks import check_counts

    if not isinstance(configs, Mapping) or not configs:
        raise ValueError("configs must be a non-empty dict {label: {'bucket_cap_mb': ..., 'sync': ...}}")
    checked = {str(label): _check_config(str(label), dict(cfg)) for label, cfg in configs.items()}
    warmup, steps, repeats = check_counts(warmup, steps, repeats)
    depth, width, batch = (validate.whole_number(value, name, least=1)
                           for name, value in (("depth", depth), ("width", width), ("batch", batch)))
    if cluster.world_size < 2:
        raise ValueError("a DDP step needs at least 2 ranks to communicate: use a cluster of 2 or more")
    rows = {label: [] for label in checked}
    for rep in range(repeats):
        for label, cfg in checked.items():
            per_rank = np.asarray(cluster.call(ddp_step_seconds, (), dict(cfg, steps=steps, warmup=warmup,
                                                                          depth=depth, width=width, batch=batch),
                                               timeout=timeout), dtype=float) * 1e6
            rows[label].append(dict(op="ddp_step", size=gradient_bytes(depth, width), type="float", redop="sum",
                                    root=-1, ranks=cluster.world_size, backend=cluster.backend,
                                    placement="step", time_us=float(per_rank.mean()),
                                    median_us=float(np.median(per_rank, axis=1).mean()), busbw=math.nan,
                                    repeat=rep, config=label, **cfg))
    out = {}
    for label, r in rows.items():
        df = pd.DataFrame(r)
        df.attrs["params"] = dict(checked[label], steps=steps, warmup=warmup, depth=depth, width=width,
                                  batch=batch, repeats=repeats)
        out[label] = df
    return out


def share_reading(share: tuple[float, float, float], repeats: int | None = None) -> str:
    """What a :func:`comm_share` result allows one to say, in a sentence to print beside it.

    The share is ``1 - t_without / t_with`` of two noisy medians, so its interval can reach below 0 (in some
    resamples the step without communication was the slower one): a share the noise can make negative is not
    measured yet. An interval that holds 0 says the repeats cannot tell communication from the machine's noise;
    one wider than half a step says it is measured only roughly.

    >>> print(share_reading((0.01, -0.69, 0.75), repeats=5))     # doctest: +ELLIPSIS
    not measured: the interval holds 0 ...
    >>> share_reading((0.4, 0.3, 0.5))
    'measured: between 30% and 50% of the step'
    """
    est, low, high = share
    n = f"{repeats} repeats" if repeats else "these repeats"
    if low <= 0 <= high:
        return (f"not measured: the interval holds 0 (and shares below 0, which only noise makes: in some of {n} the "
                "step without communication was the slower one): they cannot tell the communication from this "
                "machine's run-to-run noise; more repeats, or a quieter machine, would narrow it")
    if high - low > 0.5:
        return f"measured only roughly: somewhere between {low:.0%} and {high:.0%} of the step ({n})"
    return f"measured: between {low:.0%} and {high:.0%} of the step"


def comm_share(with_comm: pd.DataFrame, without: pd.DataFrame, level: float = 0.95) -> tuple[float, float, float]:
    """(share, low, high): the share of a step that communication adds, with a bootstrap interval.

    ``share = 1 - t_without / t_with`` from the median steps of two :func:`ddp_steps` frames
    (the same model, communication on and off). The interval resamples each frame's repeats.
    """
    from labcore.evidence.stats import _ratio_interval

    validate.finite_number(level, "level", above=0, below=1, must="between 0 and 1 (0.95 = 95%)")
    a = with_comm["median_us"].to_numpy(float)
    b = without["median_us"].to_numpy(float)
    if a.size == 0 or b.size == 0:
        raise ValueError("comm_share needs repeats of both runs (frames from ddp_steps)")
    lo, hi = _ratio_interval(a, b, level)     # interval of median(without) / median(with)
    return 1 - float(np.median(b) / np.median(a)), 1 - hi, 1 - lo
