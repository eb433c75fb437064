"""Does labcore.bench measure what a bare torch.distributed loop measures?

all_reduce on 4 gloo ranks, 1 MiB to 64 MiB, side by side in one run: labcore's
harness (``labcore.bench.measure``) against the plainest possible timing loop
(barrier, N timed ``dist.all_reduce`` calls, ``time.perf_counter``), both on
the same ranks, both combined across ranks the same way (mean of per-rank
times). The two run in back-to-back pairs inside one call to the ranks, in
alternating order, many pairs per size, and the median of the per-pair ratios
is compared: 4 ranks on a 2-core machine are noisy, and a pair sees the same
background load.

Goals: busbw ratio labcore / bare >= 0.95 at every size; at 8 bytes, labcore's
time within 10% of the bare loop's.

Run:  python benchmarks/bench_fidelity.py [--rounds 21] [--ranks 4]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def bare_loop(nbytes: int, warmup: int, iters: int) -> float:
    """Seconds per all_reduce on this rank, timed the simplest way."""
    import torch
    import torch.distributed as dist

    buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / iters


def pair(spec: dict, ours_first: bool) -> tuple[float, float]:
    """One labcore measurement and one bare loop back to back on this rank: (labcore s, bare s)."""
    from labcore.bench import measure

    def ours():
        return measure(spec)[0]["time_us"] / 1e6

    def bare():
        return bare_loop(spec["nbytes"], spec["warmup"], spec["iters"])

    if ours_first:
        a = ours()
        return a, bare()
    b = bare()
    return ours(), b


def _iters_for(nbytes: int) -> int:
    # About a tenth of a second per timed loop on this machine (~1 ms latency, ~0.5 GB/s), at least 5 calls:
    # many such loops, paired, average out the scheduler noise of 4 ranks sharing 2 cores.
    estimate_s = 1e-3 + nbytes / 0.5e9
    return max(5, int(0.1 / estimate_s))


def main(argv=None) -> int:
    import labcore as lc
    from labcore.bench import BUSBW_FACTORS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args(argv)
    n = args.ranks
    sizes = [8] + [1 << k for k in range(20, 27)]  # 8 B, then 1 MiB .. 64 MiB
    factor = BUSBW_FACTORS["all_reduce"](n)
    ours = {s: [] for s in sizes}
    bare = {s: [] for s in sizes}
    start = time.perf_counter()
    with lc.Cluster(n, backend="gloo", timeout=600, show_output=False) as cl:
        for size in sizes:
            iters, warmup = _iters_for(size), 2
            spec = dict(op="all_reduce", nbytes=size, warmup=warmup, iters=iters,
                        placements=("in-place",), check=False)

            # Each pair runs back to back inside one call, in alternating order, so both
            # halves see the same background load.
            for rnd in range(args.rounds):
                got = cl.call(pair, args=(spec, rnd % 2 == 0))
                ours[size].append(got[0][0])  # already the mean over ranks
                bare[size].append(sum(b for _, b in got) / n)  # mean over ranks, as labcore does
            print(f"{size:>10} B: {args.rounds} pairs of {iters} calls "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)

    print(f"\nall_reduce, {n} gloo ranks, {args.rounds} interleaved pairs per size; medians, and the "
          "median of the per-pair ratios")
    print(f"{'size':>10}  {'labcore us':>11}  {'bare us':>9}  {'labcore busbw':>13}  {'bare busbw':>10}  "
          f"{'ratio':>6}  goal")
    ok = True
    for size in sizes:
        t_ours, t_bare = statistics.median(ours[size]), statistics.median(bare[size])
        bw_ours = size / t_ours / 1e9 * factor
        bw_bare = size / t_bare / 1e9 * factor
        if size == 8:
            ratio = statistics.median(o / b for o, b in zip(ours[size], bare[size]))
            goal, met = "labcore time / bare time within 10%", abs(ratio - 1) <= 0.10
        else:
            ratio = statistics.median(b / o for o, b in zip(ours[size], bare[size]))
            goal, met = "busbw ratio labcore / bare >= 0.95", ratio >= 0.95
        ok &= met
        print(f"{size:>10}  {t_ours * 1e6:11.1f}  {t_bare * 1e6:9.1f}  {bw_ours:13.3f}  {bw_bare:10.3f}  "
              f"{ratio:6.3f}  {goal}: {'met' if met else 'MISSED'}")
    print(f"\nall goals {'met' if ok else 'NOT met'}; total {time.perf_counter() - start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
