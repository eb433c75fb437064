"""How far is the simulator from published nccl-tests runs? Simulated / published busbw, per collective, table and size band.

Reads every table of tests/data/published_index.json (nccl-tests output and vendor busbw tables quoted
from public threads and docs, each with its collective, machine and set), simulates each size as the
table's collective on the table's preset (or, until the preset exists, on the stand-in the index names)
and prints, per table and per size band (up to 64 KiB, 64 KiB-16 MiB, 16 MiB and up), the n, min,
median and max of simulated / published busbw (nccl-tests' busbw factor of the collective) and how many
sizes lie within 25% and 40%; then, per collective and set, the issue's goal: every size of 64 KiB and up
within 25%, smaller sizes within 40%. Calibration and held-out sets are kept apart: a held-out table must
never set a parameter (tests/data/README.md). A collective without a calibration table says so.

Only public API is used (labcore.sim.simulate, labcore.sim.machines.topologies, labcore.sim.nccl.tuner,
labcore.read_nccl_tests): the script needs no change when the model or the presets improve.

``--mechanisms`` names which of NCCL's mid-size mechanisms the simulator plays (``labcore.sim.nccl.mechanisms``:
channels, chunks, correction, netlatency, plateau, netoverhead; "default" (all but the plateau and
netoverhead) unless told, "all", "none" for the model without them), so each one's effect can be measured alone.

Run:  python benchmarks/fidelity_report.py [--set held-out] [--collective all_gather] [--algorithm best|tuner]
      [--max-ranks 128] [--mechanisms default|all|none|channels,chunks,...] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import published  # noqa: E402  (tests/published.py: the index and the comparison)


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", default="all", choices=("all", *published.SETS), help="which tables (default all)")
    p.add_argument("--collective", default="all", choices=("all", *published.collectives()),
                   help="which collective's tables (default all)")
    p.add_argument("--algorithm", default="best", choices=("best", "tuner"),
                   help="best: the fastest of NCCL's algorithms as simulated; tuner: NCCL's pick (the lab's tuner port)")
    p.add_argument("--max-ranks", type=int, default=128, help="skip tables of more ranks (default 128)")
    p.add_argument("--mechanisms", default="default",
                   help="NCCL's mechanisms to play: default (channels, chunks, correction, netlatency), all, none, "
                        "or names joined by commas (channels, chunks, correction, plateau, netlatency, netoverhead)")
    p.add_argument("--json", type=Path, help="also write the numbers to this file")
    a = p.parse_args(argv)
    if a.max_ranks < 1:
        p.error(f"--max-ranks must be 1 or more, not {a.max_ranks}")
    from labcore.sim import mechanisms

    try:
        a.mechanisms = mechanisms.selected({"default": "default", "all": "all", "none": ()}.get(
            a.mechanisms, a.mechanisms.split(",")))
    except ValueError as e:
        p.error(f"--mechanisms: {e}")
    if a.json is not None and not a.json.parent.is_dir():
        p.error(f"--json: no folder {a.json.parent} to write into")
    return a


def _band_line(band: str, s: dict) -> str:
    return (f"    {band:>12}  n={s['n']:<3} min {s['min']:5.2f}  median {s['median']:5.2f}  max {s['max']:5.2f}"
            f"  within 25%: {s['within25']}/{s['n']}  within 40%: {s['within40']}/{s['n']}")


def _goal(rows: list) -> tuple[int, int]:
    """(sizes meeting the issue's goal, sizes): 64 KiB and up within 25%, smaller within 40%."""
    ok = sum(abs(r[3] - 1) <= (0.40 if published.band_of(r[0]) == published.BANDS[0] else 0.25) for r in rows
             if not math.isnan(r[3]))
    return ok, sum(not math.isnan(r[3]) for r in rows)


def _report_table(entry: dict, algorithm: str, max_ranks: int, mechanisms=()) -> dict:
    head = (f"{entry['file']}  [{entry['set']}]  {entry['gpu']}, {entry['nodes']} node(s) x {entry['gpus_per_node']}"
            f" GPUs, {entry['network']}")
    print(head)
    if entry["ranks"] > max_ranks:
        result = dict(file=entry["file"], set=entry["set"], rows=[], errors={}, topology="",
                      status=f"skipped: {entry['ranks']} ranks > --max-ranks {max_ranks}")
    else:
        result = published.table_ratios(entry, algorithm, mechanisms)
    if result["topology"]:
        print(f"    topology: {result['topology']}")
    if result["status"] != "ok":
        print(f"    no comparison: {result['status']}")
    for band, s in published.band_summary(result["rows"]).items():
        print(_band_line(band, s))
    if result["errors"]:
        size, why = next(iter(result["errors"].items()))
        print(f"    {len(result['errors'])} sizes not simulated, e.g. {size} B: {why}")
    ran = sorted({r[4] for r in result["rows"]})
    if ran:
        print(f"    ran: {', '.join(ran)}")
    return result


def main(argv=None) -> int:
    a = _args(argv)
    rule = published.split_rule()
    print(f"Split of {rule['date']}: {rule['rule']}")
    print(f"Other collectives, split of {published.split_of_collectives()['date']}: "
          f"{published.split_of_collectives()['rule']}")
    print(f"Algorithm: {a.algorithm}; mechanisms: {', '.join(a.mechanisms) or 'none'}; "
          "ratio = simulated busbw / published busbw (in-place column)\n")
    start = time.perf_counter()
    results, summary = {}, []
    for collective in published.collectives():
        if a.collective not in ("all", collective):
            continue
        for which in published.SETS:
            if a.set not in ("all", which):
                continue
            entries = published.index_entries(which, collective)
            print(f"=== {collective}, {which} set ===")
            if not entries:
                print(f"    no {which} table of {collective} in the index\n")
                summary.append((collective, which, None))
                continue
            rows = []
            for entry in entries:
                r = _report_table(entry, a.algorithm, a.max_ranks, a.mechanisms)
                results[entry["file"]] = r
                rows += r["rows"]
            print(f"--- {collective}, {which}, all tables together ---")
            for band, s in published.band_summary(rows).items():
                print(_band_line(band, s))
            ok, n = _goal(rows)
            print(f"    goal (>=64 KiB within 25%, smaller within 40%): {ok}/{n} sizes\n")
            summary.append((collective, which, rows))
    print("=== summary: sizes meeting the goal, per collective and set (per band: within the goal / sizes,"
          " median) ===")
    for collective, which, rows in summary:
        if rows is None:
            print(f"    {collective:>14} {which:>11}: no table")
            continue
        bands = published.band_summary(rows)
        cells = "  ".join(f"{band} {_band_goal(band, rows)}/{s['n']} {s['median']:.2f}" for band, s in bands.items())
        ok, n = _goal(rows)
        print(f"    {collective:>14} {which:>11}: {ok}/{n}   {cells}")
    print(f"({time.perf_counter() - start:.0f} s)")
    if a.json is not None:
        a.json.write_text(json.dumps({"algorithm": a.algorithm, "mechanisms": list(a.mechanisms), "split": rule,
                                      "tables": results}, indent=1) + "\n")
    return 0


def _band_goal(band: str, rows: list) -> int:
    """Sizes of one band within the goal (40% up to 64 KiB, 25% above)."""
    return _goal([r for r in rows if published.band_of(r[0]) == band])[0]


if __name__ == "__main__":
    sys.exit(main())
