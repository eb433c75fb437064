"""Does the evidence gate hold on this noisy machine? False alarms and detection, measured.

For each rank count (2 and 4, gloo): one baseline sweep of all_reduce with repeats,
then 20 unchanged reruns of the same sweep, each gated against the baseline with
``labcore.bench.compare`` (permutation test, Bonferroni over sizes, stated
false-alarm rate ``alpha``); then a run slowed down for real, 2x: every timed call
issues the collective twice (``sweep(..., slowdown=2)``: twice the bytes moved).

Goals: at most ``alpha`` x 20 reruns flagged (5%: 1 of 20; none expected), and the
2x slowdown flagged as a regression at every size and placement, on 2 and 4 ranks.
Also shown: the gate against a run beside noisy neighbours (``lc.bench.noisy_neighbours``),
for information (how much they slow a run depends on the machine).

``--record DIR`` saves every repeat of every run (baseline, reruns, slowed), so the
tests can pin the gate's behaviour on recorded data instead of timing anything.

Run:  python benchmarks/bench_gate.py [--ranks 2 4] [--reruns 20] [--repeats 11] [--record tests/data]
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
        with lc.bench.noisy_neighbours(args.neighbours, max_seconds=600):
            runs["neighbours"] = lc.bench.sweep(cl, "all_reduce", **sweep)
    return runs


def report(n: int, runs: dict, args) -> bool:
    import labcore as lc

    base = runs["baseline"]
    verdicts = {}
    for name, df in runs.items():
        if name != "baseline":
            verdicts[name] = lc.bench.compare(base, df, tolerance=args.tolerance, alpha=args.alpha)
    reruns = [v for k, v in verdicts.items() if k.startswith("rerun")]
    count = {s: sum(v.attrs["verdict"] == s for v in reruns) for s in ("regression", "inconclusive", "pass")}
    sizes = len(verdicts["slowed2x"])
    caught = int((verdicts["slowed2x"]["status"] == "regression").sum())
    print(f"\n{n} ranks: {len(reruns)} unchanged reruns against the baseline: {count['regression']} flagged "
          f"(false alarms), {count['inconclusive']} inconclusive, {count['pass']} pass")
    print(f"{n} ranks: 2x slowdown (each call twice): {caught} of {sizes} size/placements flagged")
    print(verdicts["slowed2x"][["size", "placement", "baseline_us", "current_us", "slowdown",
                                "slowdown_low", "slowdown_high", "p_slower", "status"]].to_string(index=False))
    nb = verdicts["neighbours"]
    print(f"{n} ranks: beside {args.neighbours} noisy neighbours: verdict {nb.attrs['verdict']}, "
          f"median slowdown {nb['slowdown'].median():.2f}x")
    allowed = args.alpha * len(reruns)
    met = count["regression"] <= max(1, allowed) and caught == sizes
    print(f"{n} ranks: goals (<= {max(1, allowed):g} false alarms, every size caught): "
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--reruns", type=int, default=20)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--min-bytes", default="1K")
    p.add_argument("--max-bytes", default="1M")
    p.add_argument("--factor", type=float, default=32)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--tolerance", type=float, default=0.25)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--neighbours", type=int, default=2)
    p.add_argument("--record", type=Path, default=None, help="folder for the recorded repeats")
    args = p.parse_args()
    ok = True
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
