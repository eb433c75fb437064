"""How fast the chunk-flow animation builds, and how big it is.

Goals: an 8-rank ring all-reduce animation builds in under 0.5 s with figure
JSON under 2 MB; a 32-rank one builds in under 3 s. The anchor beside it is
the same animation with every frame carrying every trace (the static ranks and
links included), the usual way frames are written; labcore's frames carry only
the traces that change, as plain dicts with numpy arrays.

Run: ``python benchmarks/bench_viz.py`` (prints a table; exits 1 if a goal is missed).
"""
from __future__ import annotations

import sys
import time

import plotly.io as pio

import labcore.sim as sim
from labcore.viz import chunk_flow, link_timeline

GOALS = {8: 0.5, 32: 3.0}      # seconds to build
JSON_GOAL_MB = {8: 2.0}


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def every_trace_in_every_frame(spec: dict) -> dict:
    """The anchor: the same figure where each frame restates all traces."""
    frames = []
    for frame in spec["frames"]:
        data = [dict(t) for t in spec["data"]]
        for index, update in zip(frame["traces"], frame["data"]):
            data[index] = {**data[index], **update}
        frames.append({"name": frame["name"], "data": data})
    return {**spec, "frames": frames}


def main() -> int:
    ok = True
    print(f"{'ranks':>5} {'steps':>5} {'simulate s':>10} {'chunk_flow s':>12} {'goal s':>6} "
          f"{'JSON MB':>7} {'all-trace frames MB':>19} {'smaller':>7} {'timeline s':>10}")
    for ranks in (4, 8, 16, 32):
        t_sim, trace = best_of(lambda ranks=ranks: sim.simulate("all_reduce", algorithm="ring", ranks=ranks, nbytes=64 << 20))
        t_fig, fig = best_of(lambda trace=trace: chunk_flow(trace))
        size_mb = len(fig.to_json()) / 1e6
        full_mb = len(pio.to_json(every_trace_in_every_frame(fig.to_plotly_json()), validate=False)) / 1e6
        t_tl, _ = best_of(lambda trace=trace: link_timeline(trace))
        build = t_sim + t_fig
        goal = GOALS.get(ranks)
        if goal is not None and build >= goal:
            ok = False
        if ranks in JSON_GOAL_MB and size_mb >= JSON_GOAL_MB[ranks]:
            ok = False
        print(f"{ranks:>5} {trace.schedule.n_steps:>5} {t_sim:>10.3f} {t_fig:>12.3f} "
              f"{(f'{goal:.1f}' if goal else '-'):>6} {size_mb:>7.2f} {full_mb:>19.2f} "
              f"{full_mb / size_mb:>6.1f}x {t_tl:>10.3f}")
    print("goals met" if ok else "a goal was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
