"""Does the evidence gate hold on this noisy machine? False alarms and detection, measured.

For each rank count (2 and 4, gloo): one baseline sweep of all_reduce with repeats,
then 20 unchanged reruns of the same sweep, then a run slowed down for real, 2x: every
timed call issues the collective twice (``sweep(..., slowdown=2)``: twice the bytes
moved), then one beside noisy neighbours (``lc.evidence.noisy_neighbours``, for information).
Each is gated with ``labcore.evidence.compare`` (permutation test, Bonferroni over sizes,
stated false-alarm rate ``alpha``) two ways:

- against the run just before it (seconds apart): what the statistics promise, since the
  machine had no time to change: at most ``alpha`` x 20 reruns flagged (1 of 20);
- against the saved baseline (minutes apart): what a saved baseline meets on a machine
  shared with other jobs, whose load drifts; a real change of the machine is flagged too.

Goals: at most 1 of 20 unchanged reruns flagged against the run before it, and the 2x
slowdown flagged at every size and placement, on 2 and 4 ranks.

``--record DIR`` saves every repeat of every run (baseline, reruns, slowed), so the
tests can pin the gate's behaviour on recorded data instead of timing anything.

Run:  python benchmarks/bench_gate.py [--ranks 2 4] [--reruns 20] [--repeats 11] [--record tests/data]
      python benchmarks/bench_gate.py --replay tests/data   (the recorded runs, gated again)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

KEEP = ["op", "size", "count", "type", "redop", "root", "ranks", "placement", "time_us", "busbw",
        "wrong", "median_us", "repeat"]


def gate_runs(n: int, args) -> dict:
    import labcore as lc

    sweep = dict(min_bytes=args.min_bytes, max_bytes=args.max_bytes, factor=args.factor,
                 warmup=args.warmup, iters=args.iters, repeats=args.repeats, progress=False)
    runs = {}
    with lc.Cluster(n, backend="gloo", timeout=120) as cl:
        lc.bench.sweep(cl, "all_reduce", **{**sweep, "repeats": 1})  # settle the new ranks first
        runs["baseline"] = lc.bench.sweep(cl, "all_reduce", **sweep)
        for i in range(args.reruns):
            runs[f"rerun{i:02d}"] = lc.bench.sweep(cl, "all_reduce", **sweep)
        runs["slowed2x"] = lc.bench.sweep(cl, "all_reduce", slowdown=2, **sweep)
        with lc.evidence.noisy_neighbours(args.neighbours, max_seconds=600):
            runs["neighbours"] = lc.bench.sweep(cl, "all_reduce", **sweep)
    return runs


def gate_counts(runs: dict, tolerance: float, alpha: float) -> dict:
    """The gate's verdicts on recorded runs: reruns against the run before and the baseline."""
    import labcore as lc

    names = sorted(k for k in runs if k.startswith("rerun"))
    before = ["baseline"] + names[:-1]
    gate = lambda a, b: lc.evidence.compare(runs[a], runs[b], tolerance=tolerance, alpha=alpha)  # noqa: E731
    return dict(adjacent=[gate(a, b) for a, b in zip(before, names)],
                saved=[gate("baseline", b) for b in names],
                slowed_adjacent=gate(names[-1], "slowed2x"), slowed_saved=gate("baseline", "slowed2x"),
                neighbours=gate(names[-1], "neighbours"))


def report(n: int, runs: dict, args) -> bool:
    g = gate_counts(runs, args.tolerance, args.alpha)
    met = True
    for way, label in (("adjacent", "against the run before"), ("saved", "against the saved baseline")):
        verdicts = [r.attrs["verdict"] for r in g[way]]
        counts = {v: verdicts.count(v) for v in ("regression", "inconclusive", "pass")}
        drift = sorted(float(r["slowdown"].median()) for r in g[way])
        print(f"{n} ranks, {len(verdicts)} unchanged reruns {label}: {counts['regression']} flagged, "
              f"{counts['inconclusive']} inconclusive, {counts['pass']} pass "
              f"(median slowdown {drift[0]:.2f}x..{drift[-1]:.2f}x)")
        if way == "adjacent":
            met &= counts["regression"] <= max(1, args.alpha * len(verdicts))
    for way, label in (("slowed_adjacent", "against the run before"), ("slowed_saved", "against the saved baseline")):
        r = g[way]
        caught = int((r["status"] == "regression").sum())
        print(f"{n} ranks, 2x slowdown (each call twice) {label}: {caught} of {len(r)} size/placements flagged")
        print(r[["size", "placement", "baseline_us", "current_us", "slowdown", "slowdown_low", "slowdown_high",
                 "p_slower", "status"]].to_string(index=False))
        if way == "slowed_adjacent":
            met &= caught == len(r)
    nb = g["neighbours"]
    print(f"{n} ranks, beside {args.neighbours} noisy neighbours: {nb.attrs['verdict']}, "
          f"median slowdown {nb['slowdown'].median():.2f}x")
    print(f"{n} ranks: goals (<= 1 of 20 flagged against the run before, 2x caught at every size): "
          f"{'met' if met else 'MISSED'}")
    return met


def record(n: int, runs: dict, folder: Path, args) -> Path:
    rows = []
    for name, df in runs.items():
        rows += [dict(r, run=name) for r in json.loads(df[KEEP].to_json(orient="records"))]
    doc = dict(what=f"labcore bench all_reduce on {n} gloo ranks, recorded by benchmarks/bench_gate.py: "
                    "a baseline, unchanged reruns, a run slowed 2x (each call twice) and one beside "
                    "noisy neighbours; every repeat",
               recorded=time.strftime("%Y-%m-%d"), settings=vars(args) | {"record": None},
               rows=rows)
    path = folder / f"bench_gate_recorded_{n}ranks.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def load_recorded(path: Path) -> dict:
    """{run name: sweep DataFrame} from a file written by ``--record``."""
    import pandas as pd

    df = pd.DataFrame(json.loads(path.read_text())["rows"])
    return {name: run.drop(columns="run").reset_index(drop=True) for name, run in df.groupby("run")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--reruns", type=int, default=20)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--min-bytes", default="1K")
    p.add_argument("--max-bytes", default="1M")
    p.add_argument("--factor", type=float, default=32)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--tolerance", type=float, default=0.25)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--neighbours", type=int, default=2)
    p.add_argument("--record", type=Path, default=None, help="folder for the recorded repeats")
    p.add_argument("--replay", type=Path, default=None, help="gate the runs recorded in this folder again")
    args = p.parse_args()
    ok = True
    if args.replay:
        for n in args.ranks:
            ok &= report(n, load_recorded(args.replay / f"bench_gate_recorded_{n}ranks.json"), args)
        return 0 if ok else 1
    for n in args.ranks:
        start = time.perf_counter()
        runs = gate_runs(n, args)
        ok &= report(n, runs, args)
        if args.record:
            print(f"recorded {record(n, runs, args.record, args)}")
        print(f"({time.perf_counter() - start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
