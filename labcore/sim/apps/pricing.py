"""What a training step costs on a rented cluster, and how much of it is spent waiting for communication.

A rented GPU is paid by the hour whether it computes or waits, so communication the
step cannot hide costs money at the same rate as compute:

    cost of a step       = step seconds x GPUs x price per GPU-hour / 3600
    cost of the waiting  = exposed communication seconds x GPUs x price per GPU-hour / 3600

Prices change often and differ between providers, regions and commitments (on-demand,
spot, reserved). :data:`EXAMPLE_PRICES` holds a few published on-demand and spot prices,
each with where and when it was published: **examples to set your own, not quotes**.

Compute time is an input of the step model (:mod:`labcore.sim.apps.ddp_step`);
:func:`compute_seconds` estimates it from the model's size: training costs about 6 FLOPs
per parameter per token (2 forward, 4 backward; Kaplan et al., "Scaling Laws for Neural
Language Models", 2020, section 2.1), at a model FLOPs utilisation (MFU) you choose
(Chowdhery et al., "PaLM", 2022, report 46.2% for PaLM 540B), of the GPU's dense bf16 peak
(H100 SXM: 989 TFLOPS, NVIDIA H100 Tensor Core GPU datasheet).

Example
-------
>>> round(step_cost(0.25, gpus=32, usd_per_gpu_hour=8.0), 4)     # $ for one 250 ms step on 32 GPUs
0.0178
>>> round(compute_seconds(7e9, tokens_per_gpu=2048, mfu=0.4), 3)  # 7B parameters, 2048 tokens per GPU
0.217
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from labcore import validate

H100_BF16_DENSE_FLOPS = 989e12      # NVIDIA H100 SXM datasheet, bf16 Tensor Core, dense
FLOPS_PER_PARAM_TOKEN = 6           # Kaplan et al. 2020: C ~ 6 N per training token


@dataclass(frozen=True)
class GpuPrice:
    """A published price of one GPU-hour, with where it was published (an example, not a quote)."""

    name: str
    usd_per_gpu_hour: float
    source: str


EXAMPLE_PRICES = {
    # `dstack offer -b aws --instance-type p5en.48xlarge` output in dstackai/dstack pull request #4110
    # (2026-08-06): us-east-1, 8 x H200, $63.296 per instance-hour on demand, $27.1988 spot.
    "AWS p5en.48xlarge on demand (8 x H200), us-east-1": GpuPrice(
        "AWS p5en.48xlarge on demand (8 x H200), us-east-1", 63.296 / 8,
        "dstackai/dstack pull request #4110 (2026-08-06), `dstack offer` output: $63.296 per 8-GPU instance-hour"),
    "AWS p5en.48xlarge spot (8 x H200), us-east-1": GpuPrice(
        "AWS p5en.48xlarge spot (8 x H200), us-east-1", 27.1988 / 8,
        "dstackai/dstack pull request #4110 (2026-08-06), `dstack offer` output: $27.1988 per 8-GPU instance-hour"),
    # dstackai/dstack issue #2343 (2025-02-21): OCI BM.GPU.H100.8 offered at $80 per hour for 8 H100.
    "OCI BM.GPU.H100.8 (8 x H100), eu-frankfurt-1": GpuPrice(
        "OCI BM.GPU.H100.8 (8 x H100), eu-frankfurt-1", 80.0 / 8,
        "dstackai/dstack issue #2343 (2025-02-21), `dstack offer` output: $80 per 8-GPU instance-hour"),
}


def _positive(name: str, value, allow_zero: bool = False) -> float:
    if allow_zero:
        return validate.finite_number(value, name, at_least=0, must="a finite number >= 0")
    return validate.positive_number(value, name)


def step_cost(step_s: float, gpus: int, usd_per_gpu_hour: float) -> float:
    """Dollars for ``step_s`` seconds of ``gpus`` GPUs at ``usd_per_gpu_hour`` each."""
    validate.whole_number(gpus, "gpus", least=1)
    return _positive("step_s", step_s, allow_zero=True) * gpus * _positive("usd_per_gpu_hour", usd_per_gpu_hour) / 3600


def compute_seconds(params: float, tokens_per_gpu: float, mfu: float = 0.4,
                    peak_flops: float = H100_BF16_DENSE_FLOPS) -> float:
    """Forward + backward seconds of one step on one GPU: 6 x params x tokens / (peak x MFU).

    Parameters
    ----------
    params : the model's parameters.
    tokens_per_gpu : tokens each GPU processes per step (its micro-batches x sequence length).
    mfu : model FLOPs utilisation, the share of the peak the step achieves (an assumption: 0.3-0.5
        is typical of large training runs).
    peak_flops : the GPU's dense peak (H100 SXM bf16 by default).
    """
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu is a share of the peak, in (0, 1], not {mfu!r}")
    return (FLOPS_PER_PARAM_TOKEN * _positive("params", params) * _positive("tokens_per_gpu", tokens_per_gpu)
            / (_positive("peak_flops", peak_flops) * mfu))


def step_summary(step) -> dict:
    """One predicted step in one row (times in ms): a :class:`labcore.sim.apps.ddp_step.DDPStep`, or a
    :class:`labcore.sim.apps.replay.Replay` of a recorded step (the mean of its replayed steps)."""
    if hasattr(step, "summary"):
        return step.summary()
    if not hasattr(step, "steps") or not {"compute_us", "comm_us", "overlap_us"} <= set(step.steps.columns):
        raise ValueError(f"cannot price {type(step).__name__}: pass a DDPStep (predict_ddp_step) or a Replay "
                         "(lc.sim.replay)")
    mean = step.steps[["compute_us", "comm_us", "serial_us", "overlap_us"]].mean() / 1e3
    return dict(topology=step.label, gpus=step.world_size, nodes=None, nccl_algo="(tuner's choice)",
                timing="simulator (replay)", buckets=int(len(step.collectives) / max(1, len(step.steps))),
                compute_ms=mean["compute_us"], comm_ms=mean["comm_us"], step_ms=mean["overlap_us"],
                exposed_ms=mean["overlap_us"] - mean["compute_us"],
                comm_share=(mean["overlap_us"] - mean["compute_us"]) / mean["overlap_us"])


def price_steps(steps: Sequence, usd_per_gpu_hour: float, n_steps: int = 1000) -> pd.DataFrame:
    """Predicted steps priced, one row each: :class:`labcore.sim.apps.ddp_step.DDPStep` objects or
    replays of recorded steps (:func:`labcore.sim.replay`), mixed as you like.

    Columns: the step's :func:`step_summary`, then ``usd_per_step``, ``usd`` for ``n_steps``
    steps, and ``usd_waiting`` (the exposed communication's share of it) and ``usd_if_serial``
    (the same steps with no overlap: compute, then every collective).
    """
    validate.whole_number(n_steps, "n_steps", least=1)
    rows = []
    for s in steps:
        row = step_summary(s)
        gpus = int(row["gpus"])
        serial_ms = row["compute_ms"] + row["comm_ms"]
        per_step = step_cost(row["step_ms"] / 1e3, gpus, usd_per_gpu_hour)
        row.update(usd_per_step=per_step, usd=per_step * n_steps,
                   usd_waiting=step_cost(max(0.0, row["exposed_ms"]) / 1e3, gpus, usd_per_gpu_hour) * n_steps,
                   usd_if_serial=step_cost(serial_ms / 1e3, gpus, usd_per_gpu_hour) * n_steps)
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update(usd_per_gpu_hour=usd_per_gpu_hour, n_steps=n_steps)
    return out
