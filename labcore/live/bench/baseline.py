"""Baselines for the evidence gate: a sweep (every repeat) saved to JSON and read back.

Define the target first (a baseline measured on a known-good setup, with repeats),
measure again under real load, and let :func:`labcore.bench.compare` (see
:mod:`labcore.live.bench.stats`) say whether a size regressed. The file keeps
every repeat, so a later gate can test against the baseline's spread, not just
its median.

Example
-------
>>> import pandas as pd, tempfile, pathlib
>>> from labcore.live.bench.baseline import save_baseline, load_baseline
>>> df = pd.DataFrame(dict(op="all_reduce", size=[1024, 1024], count=256, type="float",
...                        redop="sum", root=-1, ranks=2, placement="in-place", time_us=[10.0, 11.0],
...                        busbw=0.1, wrong=0, median_us=[9.8, 10.9], repeat=[0, 1]))
>>> path = save_baseline(df, pathlib.Path(tempfile.mkdtemp()) / "base.json")
>>> load_baseline(path)["repeat"].tolist()
[0, 1]
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

FORMAT = "labcore-bench-baseline/2"
# Version 1 files hold a single run (no repeat column); they still load.
READS = (FORMAT, "labcore-bench-baseline/1")
NEEDED = ["op", "size", "type", "placement", "time_us", "busbw"]


def save_baseline(df: pd.DataFrame, path) -> Path:
    """Write a sweep (every row and repeat, and its parameters) to a JSON file; returns the path."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"cannot save to {path}: it is a folder; give a file name such as {path / 'sweep.json'}")
    params = df.attrs.get("params", {})
    doc = {"format": FORMAT, "params": json.loads(json.dumps(params, default=str)),
           "rows": json.loads(df.to_json(orient="records"))}
    path.write_text(json.dumps(doc, indent=1))
    return path


def load_baseline(path) -> pd.DataFrame:
    """Read a file written by :func:`save_baseline` (or the CLI's ``--json``) back into a sweep.

    Raises FileNotFoundError when there is no file, ValueError naming the file when it
    is not a readable baseline (not JSON, another format, rows without the columns a gate needs).
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no baseline at {path}: save one first with "
                                "lc.bench.save_baseline(df, path) or --json FILE") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not a baseline: give the JSON file saved with --json FILE") from None
    except OSError as exc:
        raise ValueError(f"cannot read the baseline {path} ({exc.strerror}): check the path and its "
                         "permissions") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a readable baseline (corrupt JSON: {exc}); save it again "
                         "with --json FILE") from None
    if not isinstance(doc, dict) or doc.get("format") not in READS:
        raise ValueError(f"{path} is not a labcore bench baseline (expected format {FORMAT!r}); "
                         "save one with --json FILE")
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path} holds no measured rows; save the baseline again with --json FILE")
    df = pd.DataFrame(rows)
    missing = [c for c in NEEDED if c not in df]
    if missing:
        raise ValueError(f"{path} lacks the columns {missing}; save the baseline again with --json FILE")
    _check_values(df, path)
    if "repeat" not in df:
        df["repeat"] = 0
    df.attrs["params"] = doc.get("params", {})
    df.attrs["path"] = str(path)
    return df


def _check_values(df: pd.DataFrame, path: Path) -> None:
    """Sizes are whole bytes and times positive numbers, or the gate would compare garbage."""
    size = pd.to_numeric(df["size"], errors="coerce")
    if size.isna().any() or (size < 0).any() or (size != size.round()).any():
        bad = df["size"][size.isna() | (size < 0) | (size != size.round())].iloc[0]
        raise ValueError(f"{path} has a size of {_shown(bad)}, not a whole number of bytes; save the baseline "
                         "again with --json FILE")
    df["size"] = size.astype("int64")
    for col in ("time_us", "median_us"):
        if col not in df:
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df[col][(values.isna() & df[col].notna()) | (values <= 0) | values.isin([float("inf")])]
        if len(bad):
            raise ValueError(f"{path} has a {col} of {_shown(bad.iloc[0])}, not a positive number of "
                             "microseconds; save the baseline again with --json FILE")
        df[col] = values.astype(float)


def _shown(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)
