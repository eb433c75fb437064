"""A DDP step's gradient all-reduces predicted on the presets, and what the step costs at a GPU-hour price."""
import math

import pytest

import labcore as lc
from labcore.sim import tuner
from labcore.sim.apps.ddp_step import MIB, ddp_buckets, predict_ddp_step, steps_table
from labcore.sim.apps.pricing import EXAMPLE_PRICES, compute_seconds, price_steps, step_cost

pytestmark = pytest.mark.live


def test_buckets_follow_torchs_reducer():
    import torch
    import torch.distributed as dist

    params = [torch.zeros(n) for n in (100, 300_000, 10, 400_000, 5, 2_000_000, 70_000, 9)]
    ready = list(reversed(params))                       # gradients become ready last layer first
    for first, cap in ((1 * MIB, 25 * MIB), (1 * MIB, 1 * MIB), (256 << 10, 2 * MIB)):
        groups, _ = dist._compute_bucket_assignment_by_size(ready, [first, cap])
        want = [sum(ready[i].numel() * 4 for i in g) for g in groups]
        assert ddp_buckets([p.numel() * 4 for p in ready], cap_bytes=cap, first_cap_bytes=first) == want


def test_buckets_of_a_total_are_full_buckets():
    assert ddp_buckets(100 * MIB, cap_bytes=25 * MIB) == [MIB] + [25 * MIB] * 3 + [24 * MIB]
    assert ddp_buckets(50 * MIB, cap_bytes=25 * MIB, first_cap_bytes=None) == [25 * MIB, 25 * MIB]
    assert ddp_buckets(10, cap_bytes=25 * MIB) == [10]
    for bad in (0, -1, 1.5, True, []):
        with pytest.raises(ValueError):
            ddp_buckets(bad)


def test_the_step_lays_buckets_out_against_compute():
    step = predict_ddp_step(200 * MIB, "nvswitch8", compute_s=0.010)
    b = step.buckets
    assert int(b["bytes"].sum()) == 200 * MIB and step.ranks == 8 and step.nodes == 1
    assert (b["start_s"] >= b["ready_s"]).all() and (b["start_s"].iloc[1:].to_numpy() >= b["end_s"].iloc[:-1].to_numpy()).all()
    assert b["ready_s"].iloc[-1] == pytest.approx(0.010)          # the last bucket is ready when backward ends
    assert step.comm_s == pytest.approx(b["predicted_us"].sum() * 1e-6)
    assert step.compute_s <= step.step_s <= step.serial_s
    assert step.exposed_s == pytest.approx(step.step_s - step.compute_s)
    # with nothing to hide behind, the step is its communication, one all-reduce after another
    bare = predict_ddp_step(200 * MIB, "nvswitch8", compute_s=0.0)
    assert bare.step_s == pytest.approx(bare.comm_s) and bare.comm_share == pytest.approx(1.0)


def test_each_bucket_gets_the_tuners_pick_or_the_forced_algorithm():
    m = tuner.MACHINES["dgx_h100_ib"].with_ranks(32, 4)
    tuned = predict_ddp_step(100 * MIB, "multinode", compute_s=0.01, timing="nccl")
    for r in tuned.buckets.itertuples():
        pick = tuner.choose("all_reduce", r.bytes, m)
        assert r.nccl == pick.name and r.predicted_us == pytest.approx(pick.time_us)
    ring = predict_ddp_step(100 * MIB, "multinode", compute_s=0.01, nccl_algo="Ring")
    assert ring.buckets["nccl"].str.startswith("Ring/").all()
    assert (ring.buckets["source"] == "simulator").all()
    full = ring.buckets[ring.buckets["bytes"] == 25 * MIB].iloc[0]
    sim = lc.sim.simulate("all_reduce", "ring", 32, 25 * MIB, topology="multinode", values=False)
    assert full["predicted_us"] == pytest.approx(sim.time_s * 1e6)
    # NVLSTree across nodes runs on the nodes' NVLS engines with a ring among the heads
    default = predict_ddp_step(100 * MIB, "multinode", compute_s=0.01)
    big = default.buckets[default.buckets["bytes"] == 25 * MIB].iloc[0]
    assert big["nccl"] == "NVLSTree/Simple" and big["source"] == "simulator"
    nvls = lc.sim.simulate("all_reduce", "nvls", 32, 25 * MIB, topology="multinode", values=False, across="ring")
    assert big["predicted_us"] == pytest.approx(nvls.time_s * 1e6)


def test_scale_out_presets_and_bad_input():
    step = predict_ddp_step(100 * MIB, "ib_8x200", nodes=4, compute_s=0.01)
    assert step.ranks == 32 and step.buckets["source"].str.startswith("simulator").all()
    with pytest.raises(ValueError, match="needs NCCL's tuner"):
        predict_ddp_step(100 * MIB, "ib_8x200", nodes=4, compute_s=0.01, nccl_algo="Ring")
    with pytest.raises(ValueError, match="no machine"):
        predict_ddp_step(100 * MIB, "ib_8x200", compute_s=0.01, timing="nccl")
    with pytest.raises(ValueError, match="unknown topology"):
        predict_ddp_step(100 * MIB, "dragonfly", compute_s=0.01)
    for kwargs in (dict(compute_s=-1.0), dict(compute_s=math.nan), dict(compute_s=0.1, backward_fraction=0),
                   dict(compute_s=0.1, timing="guess")):
        with pytest.raises(ValueError):
            predict_ddp_step(100 * MIB, "nvswitch8", **kwargs)


def test_smaller_buckets_pay_the_latency_more_often():
    big = predict_ddp_step(1 << 30, "multinode", compute_s=0.0)
    small = predict_ddp_step(1 << 30, "multinode", compute_s=0.0, cap_bytes=MIB, first_cap_bytes=None)
    assert len(small.buckets) == 1024 and len(big.buckets) == 42
    assert small.comm_s > big.comm_s
    table = steps_table([big, small])
    assert table["buckets"].tolist() == [42, 1024] and set(table["topology"]) == {"multinode"}


def test_step_cost_arithmetic():
    # one hour of 8 GPUs at $2 per GPU-hour costs $16
    assert step_cost(3600.0, 8, 2.0) == pytest.approx(16.0)
    assert step_cost(0.0, 8, 2.0) == 0.0
    for bad in (dict(step_s=-1, gpus=8, usd_per_gpu_hour=2), dict(step_s=1, gpus=0, usd_per_gpu_hour=2),
                dict(step_s=1, gpus=8, usd_per_gpu_hour=0), dict(step_s=1, gpus=8.5, usd_per_gpu_hour=2)):
        with pytest.raises(ValueError):
            step_cost(**bad)


def test_compute_seconds_is_six_flops_per_parameter_and_token():
    assert compute_seconds(1e9, 1000, mfu=0.5, peak_flops=1e12) == pytest.approx(6e12 / 0.5e12)
    with pytest.raises(ValueError):
        compute_seconds(1e9, 1000, mfu=0)


def test_price_steps_prices_waiting_and_serial_steps():
    steps = [predict_ddp_step(14 * 10 ** 9, "multinode", compute_s=0.2),
             predict_ddp_step(14 * 10 ** 9, "multinode", compute_s=0.2, cap_bytes=MIB, first_cap_bytes=None)]
    costs = price_steps(steps, usd_per_gpu_hour=8.0, n_steps=1000)
    for s, row in zip(steps, costs.itertuples()):
        assert row.usd == pytest.approx(s.step_s * 32 * 8.0 / 3600 * 1000)
        assert row.usd_waiting == pytest.approx(s.exposed_s * 32 * 8.0 / 3600 * 1000)
        assert 0 <= row.usd_waiting <= row.usd <= row.usd_if_serial
    assert costs["usd_waiting"].iloc[1] > costs["usd_waiting"].iloc[0]
    with pytest.raises(ValueError):
        price_steps(steps, 8.0, n_steps=0)


def test_example_prices_say_where_they_come_from():
    for p in EXAMPLE_PRICES.values():
        assert p.usd_per_gpu_hour > 0 and "dstackai/dstack" in p.source and "20" in p.source
    aws = EXAMPLE_PRICES["AWS p5en.48xlarge on demand (8 x H200), us-east-1"]
    assert aws.usd_per_gpu_hour == pytest.approx(63.296 / 8) and "#4110" in aws.source


def test_sim_side_needs_no_torch():
    import subprocess
    import sys

    code = ("import sys, labcore.sim.apps.ddp_step as d, labcore.sim.apps.pricing as p; "
            "d.predict_ddp_step(1 << 26, 'nvswitch8', compute_s=0.01); print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
