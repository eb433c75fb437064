"""The gate's runs recorded on the lab's 2-core machine, for a lesson a busy machine cannot show live.

``benchmarks/bench_gate.py`` recorded every repeat of an all_reduce sweep (1 KiB to 1 MiB, 11 repeats,
both placements) on gloo ranks: a baseline, 20 unchanged reruns, a run slowed 2x (every call issued
twice) and one beside two busy processes (``tests/data/bench_gate_recorded_<name>.json``, 2026-12-01;
``2ranks``, ``4ranks`` and ``4ranks_busy``, the last while other jobs raised the machine's load from
about 2 to 10). A notebook whose live run cannot show a lesson (on a loaded machine 7 repeats a side
may not separate a real 2x slowdown from the noise) says so and shows it on these instead.

Example
-------
>>> base = recorded_run("2ranks", "baseline", placements=("in-place",))
>>> sorted(base["size"].unique().tolist()), base["repeat"].nunique()
([1024, 32768, 1048576], 11)
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

__all__ = ["RECORDED_DIR", "recorded_runs", "recorded_run"]

RECORDED_DIR = Path(__file__).resolve().parents[2] / "tests" / "data"


def recorded_runs(name: str = "2ranks") -> tuple[dict, pd.DataFrame]:
    """``(what was recorded, every row)`` of ``bench_gate_recorded_<name>.json``; the rows have the bench's
    columns and ``run`` (baseline, rerun00..rerun19, slowed2x, neighbours)."""
    path = RECORDED_DIR / f"bench_gate_recorded_{name}.json"
    if not path.is_file():
        names = sorted(p.stem.removeprefix("bench_gate_recorded_") for p in RECORDED_DIR.glob("bench_gate_recorded_*"))
        raise ValueError(f"no recorded gate run {name!r}; the recordings are {names}")
    doc = json.loads(path.read_text())
    meta = {k: v for k, v in doc.items() if k != "rows"}
    return meta, pd.DataFrame(doc["rows"])


def recorded_run(name: str, run: str, placements=None) -> pd.DataFrame:
    """One run of a recording, as ``lc.bench.sweep(..., repeats=11)`` returns it (``placements``: keep only those)."""
    _, rows = recorded_runs(name)
    if run not in set(rows["run"]):
        raise ValueError(f"recording {name!r} has no run {run!r}; it has {sorted(set(rows['run']))}")
    out = rows[rows["run"] == run].drop(columns="run")
    if placements is not None:
        out = out[out["placement"].isin(placements)]
    return out.reset_index(drop=True)
