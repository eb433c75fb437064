"""The evidence gate: save a sweep as a baseline, compare a new sweep with it, flag regressions.

Define the target (a baseline measured on a known-good setup), measure under
real load, and catch a regression before scaling out. Each (op, size, type,
redop, placement) of the current sweep is compared with the baseline by
**speed ratio** = baseline time / current time (for a fixed size this is also
current busbw / baseline busbw): below ``1 - tolerance`` it is a regression.

Example
-------
>>> import pandas as pd
>>> from labcore.live.bench.baseline import compare
>>> base = pd.DataFrame(dict(op="all_reduce", size=[1024, 2048], type="float", redop="sum",
...                          root=-1, ranks=2, placement="in-place", time_us=[10.0, 20.0],
...                          busbw=[0.1, 0.1]))
>>> now = base.assign(time_us=[10.5, 40.0], busbw=[0.095, 0.05])
>>> compare(base, now, tolerance=0.2)["status"].tolist()
['pass', 'regression']
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

KEYS = ["op", "size", "type", "redop", "root", "ranks", "placement"]
FORMAT = "labcore-bench-baseline/1"


def save_baseline(df: pd.DataFrame, path) -> Path:
    """Write a sweep (its rows and parameters) to a JSON file; returns the path."""
    path = Path(path)
    params = df.attrs.get("params", {})
    doc = {"format": FORMAT, "params": json.loads(json.dumps(params, default=str)),
           "rows": json.loads(df.to_json(orient="records"))}
    path.write_text(json.dumps(doc, indent=1))
    return path


def load_baseline(path) -> pd.DataFrame:
    """Read a file written by :func:`save_baseline` (or ``--json``) back into a sweep DataFrame."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no baseline at {path}: save one first with "
                                "lc.bench.save_baseline(df, path) or --json FILE") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not a labcore bench baseline (expected format {FORMAT!r})")
    df = pd.DataFrame(doc["rows"])
    df.attrs["params"] = doc.get("params", {})
    return df


def compare(baseline: pd.DataFrame, current: pd.DataFrame, tolerance: float = 0.2,
            min_bytes: int = 0) -> pd.DataFrame:
    """Mark each measured size ``pass`` or ``regression`` against ``baseline``.

    Parameters
    ----------
    baseline, current : sweep DataFrames (``current`` may be a subset of the baseline's sizes).
    tolerance : a size regresses when current speed < (1 - tolerance) x baseline speed.
    min_bytes : ignore smaller sizes (tiny messages are noisy on a shared CPU).

    Returns
    -------
    DataFrame with the keys, ``baseline_us``, ``current_us``, ``baseline_busbw``,
    ``current_busbw``, ``ratio`` (baseline time / current time) and ``status``:
    pass, regression, or "not in baseline".
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance is a fraction between 0 and 1 (0.2 = 20% slower allowed), not {tolerance}")
    keys = [k for k in KEYS if k in baseline and k in current]
    cur = current[current["size"] >= min_bytes]
    merged = cur[keys + ["time_us", "busbw"]].merge(
        baseline[keys + ["time_us", "busbw"]], on=keys, how="left", suffixes=("_cur", "_base"))
    out = merged[keys].copy()
    out["baseline_us"], out["current_us"] = merged["time_us_base"], merged["time_us_cur"]
    out["baseline_busbw"], out["current_busbw"] = merged["busbw_base"], merged["busbw_cur"]
    out["ratio"] = out["baseline_us"] / out["current_us"]
    out["status"] = "pass"
    out.loc[out["ratio"] < 1 - tolerance, "status"] = "regression"
    out.loc[out["baseline_us"].isna(), "status"] = "not in baseline"
    out.attrs["tolerance"] = tolerance
    return out


def regressed(result: pd.DataFrame) -> bool:
    """True when :func:`compare` found at least one regression."""
    return bool((result["status"] == "regression").any())
