"""What recording costs a training step, and how fast a recording replays.

Side by side in one run:
  * recording overhead: DDP steps of notebook 05's deeper MLP (float32, 256 KiB buckets) on 4
    gloo ranks, bare and recorded as a training loop is (``with record() as rec:`` around
    ``STEPS`` steps, each ``with rec.step():``; the profiler's start and stop included), in 21
    interleaved pairs (which one goes first alternates); per pair the slowest rank's time per
    step; the median of the 21 pairs' ratios (each pair runs back to back, so a machine that
    gets busier or quieter during the run moves both halves of a pair together). Reading the flight recorder into the Recording happens after
    all the loops and is printed on its own line (once per recording, not per step);
  * replay: a recording of about 1,000 collectives (notebook 05's one-all-reduce-per-parameter
    training, 18 per step) replayed on the 32-rank multinode preset with NCCL's tuner; then the
    same recording with every collective given a size of its own, so that nothing is simulated
    twice.

Targets: overhead <= 10%; replay of 1,000 collectives < 1 s.
Run:  .venv/bin/python benchmarks/bench_recorder.py
"""
from __future__ import annotations

import statistics
import time

PAIRS = 21
STEPS = 20              # steps per recording, as a short recorded training loop
BUCKET = 256 << 10


def _pairs(pairs: int, bucket: int, steps: int):
    """On every rank, per pair: (bare, recorded) seconds per step, and the seconds reading the recording."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from labcore.exercises import data_parallel as dp
    from labcore.live.recorder import record

    rank, n = dist.get_rank(), dist.get_world_size()
    model = dp.make_model(dims=dp.DEEP, dtype=torch.float32)
    ddp = DDP(model, bucket_cap_mb=bucket / 2 ** 20)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = dp.local_batch(0, rank, n, per_rank=16, dims=dp.DEEP, dtype=torch.float32)

    def step():
        opt.zero_grad(set_to_none=True)
        dp.loss_fn(ddp(x), y).backward()
        opt.step()

    def bare():
        dist.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) / steps

    def recorded():
        dist.barrier()
        start = time.perf_counter()
        with record("bench") as rec:
            for _ in range(steps):
                with rec.step():
                    step()
        return (time.perf_counter() - start) / steps, rec

    def read(rec):
        start = time.perf_counter()
        rec.recording()
        return time.perf_counter() - start

    for _ in range(3):                  # DDP rebuilds its buckets after the first step; warm everything
        step()
        read(recorded()[1])
    out, recs = [], []
    for i in range(pairs):
        if i % 2:
            b = bare()
            r, rec = recorded()
        else:
            r, rec = recorded()
            b = bare()
        out.append((b, r))
        recs.append(rec)
    # read the recordings after the loop, as after a recorded training loop (the flight recorder
    # keeps the last 2000 collectives: enough for all of them)
    return [(b, r, read(rec)) for (b, r), rec in zip(out, recs)]


def overhead(cluster) -> tuple[float, float, list[float], float]:
    """Median bare and recorded seconds per step, the pairs' ratios, the median reading time."""
    per_rank = cluster.run(_pairs, PAIRS, BUCKET, STEPS)
    bare = [max(r[i][0] for r in per_rank) for i in range(PAIRS)]
    recorded = [max(r[i][1] for r in per_rank) for i in range(PAIRS)]
    reading = [max(r[i][2] for r in per_rank) for i in range(PAIRS)]
    ratios = [r / b for b, r in zip(bare, recorded)]
    return statistics.median(bare), statistics.median(recorded), ratios, statistics.median(reading)


def thousand_collectives(cluster):
    import torch

    from labcore.exercises import data_parallel as dp
    from labcore.live.recorder import combine

    steps = 56                          # 18 parameters -> 18 all-reduces per step: 1,008 collectives
    results = cluster.run(dp.train, "per_parameter", steps=steps, dims=dp.DEEP, dtype=torch.float32)
    return combine([rec for _, rec in results])


def main() -> None:
    import labcore as lc

    with lc.Cluster(4, backend="gloo", show_output=False) as cluster:
        bare, recorded, ratios, reading = overhead(cluster)
        rec = thousand_collectives(cluster)
    ratio = statistics.median(ratios)
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(f"DDP step, 4 ranks, {PAIRS} interleaved pairs of {STEPS}-step loops (slowest rank, per step):")
    print(f"  bare {bare * 1e3:.2f} ms, recorded {recorded * 1e3:.2f} ms (medians); median of the pairs' "
          f"ratios {ratio:.3f}, quartiles {q1:.3f}-{q3:.3f} "
          f"(overhead {ratio - 1:+.1%}; target <= +10%: {'pass' if ratio <= 1.10 else 'FAIL'})")
    print(f"  reading the flight recorder into the Recording afterwards: {reading * 1e3:.2f} ms per recording")

    n = len(rec.collectives())
    start = time.perf_counter()
    r = lc.sim.replay(rec, "multinode")
    took = time.perf_counter() - start
    distinct = r.collectives.groupby(["op", "bytes"]).ngroups
    print(f"replay of {n} collectives ({distinct} distinct sizes) on multinode (32 ranks): {took:.3f} s "
          f"({took:.3f} / 1 s target: {'pass' if took < 1 else 'FAIL'})")
    rec.frame["bytes"] += rec.frame["seq"] * 4      # the same on every rank, different for every collective
    start = time.perf_counter()
    r = lc.sim.replay(rec, "multinode")
    took = time.perf_counter() - start
    print(f"the same with every collective a different size ({r.collectives.groupby('bytes').ngroups} sizes): "
          f"{took:.3f} s")
    print(f"predicted communication per step on multinode: {r.comm_s / rec.n_steps * 1e6:.1f} us "
          f"(recorded on gloo: {rec.collectives()['time_us'].sum() / rec.n_steps:.0f} us)")


if __name__ == "__main__":
    main()
