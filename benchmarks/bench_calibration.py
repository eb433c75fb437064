"""How well two numbers (alpha, beta) describe this machine's all_reduce.

Sweeps gloo all_reduce on 2 and 4 ranks (4 KiB-64 MiB, factor 2), fits the ring's
alpha-beta closed form per rank count with ``labcore.sim.calibrate`` and prints the
median relative error over 4 KiB-64 MiB, side by side for:

  * the time column fitted: nccl-tests' mean per call (``time_us``) or the median call
    (``median_us``), which a call delayed by the operating system does not move;
  * plain relative least squares, or the robust fit (least median of squares: the line
    most sizes agree with).

Goal: median error <= 10% for 2 and 4 ranks.

Run:  .venv/bin/python benchmarks/bench_calibration.py
"""
from __future__ import annotations

import pandas as pd

MIN, MAX = 4 << 10, 64 << 20


def main() -> None:
    import labcore as lc

    frames = []
    for ranks in (2, 4):
        with lc.Cluster(ranks, backend="gloo", show_output=False) as cl:
            frames.append(lc.bench.sweep(cl, "all_reduce", min_bytes=MIN, max_bytes=MAX, factor=2,
                                         warmup=5, iters=20, placements=("in-place",), progress=False))
    df = pd.concat(frames, ignore_index=True)
    rows = []
    for time in ("time_us", "median_us"):
        for robust in (False, True):
            cal = lc.sim.calibrate(df, placement="in-place", time=time, robust=robust)
            rows.append({"time column": time, "fit": "robust" if robust else "least squares",
                         **{f"{r} ranks": f"{cal.median_error(r, MIN, MAX):.1%}" for r in (2, 4)}})
    print("median |predicted/measured - 1|, gloo all_reduce, 4 KiB-64 MiB (goal <= 10%):")
    print(pd.DataFrame(rows).to_string(index=False))
    best = lc.sim.calibrate(df, placement="in-place", time="median_us", robust=True)
    print("\nfit on median_us, robust:")
    print(best.summary().round(3).to_string(index=False))


if __name__ == "__main__":
    main()
