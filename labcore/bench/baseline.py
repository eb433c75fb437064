"""A sweep saved to JSON, every repeat, and read back: what ``--json FILE`` writes and a baseline is.

Define the target first (a baseline measured on a known-good setup, with repeats),
measure again under real load, and let :func:`labcore.evidence.compare` (see
:mod:`labcore.evidence.stats`) say whether a size regressed. The file keeps
every repeat, so a later gate can test against the baseline's spread, not just
its median.

Example
-------
>>> import pandas as pd, tempfile, pathlib
>>> from labcore.bench.baseline import save_baseline, load_baseline
>>> df = pd.DataFrame(dict(op="all_reduce", size=[1024, 1024], count=256, type="float",
...                        redop="sum", root=-1, ranks=2, placement="in-place", time_us=[10.0, 11.0],
...                        busbw=0.1, wrong=0, median_us=[9.8, 10.9], repeat=[0, 1]))
>>> path = save_baseline(df, pathlib.Path(tempfile.mkdtemp()) / "base.json")
>>> load_baseline(path)["repeat"].tolist()
[0, 1]
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from labcore.files import read_bytes_limited

FORMAT = "labcore-bench-baseline/2"
# Version 1 files hold a single run (no repeat column); they still load.
READS = (FORMAT, "labcore-bench-baseline/1")
NEEDED = ["op", "size", "type", "placement", "time_us", "busbw"]
# A baseline of the lab is a few KiB to a few MiB (4096 sizes x 2 placements x repeats); a
# larger file is not one, and is refused before it is read (``--baseline /dev/zero`` would
# otherwise fill the memory).
MAX_BASELINE_BYTES = 64 << 20
_GIVE = "give the JSON file saved with --json FILE"


def save_baseline(df: pd.DataFrame, path) -> Path:
    """Write a sweep (every row and repeat, and its parameters) to a JSON file; returns the path."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"cannot save to {path}: it is a folder; give a file name such as {path / 'sweep.json'}")
    params = df.attrs.get("params", {})
    doc = {"format": FORMAT, "params": json.loads(json.dumps(params, default=str)),
           "rows": json.loads(df.to_json(orient="records"))}
    _replace(path, json.dumps(doc, indent=1))
    return path


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a file beside it, then renamed over it (a link
    at ``path`` is replaced, its target left alone)."""
    fd, partial = tempfile.mkstemp(prefix=".labcore-sweep-", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


def load_baseline(path) -> pd.DataFrame:
    """Read a file written by :func:`save_baseline` (or the CLI's ``--json``) back into a sweep.

    Raises FileNotFoundError when there is no file, ValueError naming the file when it
    is not a readable baseline (a folder, a device or pipe, larger than
    :data:`MAX_BASELINE_BYTES`, not JSON, another format, rows without the columns a gate needs)
    or when reading it failed in any other way (out of memory, say).
    """
    path = Path(path)
    data = _read_bounded(path)
    try:
        doc = _parse(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a readable baseline (corrupt JSON: {_one_line(exc)}); save it again "
                         "with --json FILE") from None
    except MemoryError:
        raise ValueError(f"ran out of memory reading the baseline {path} ({len(data)} bytes); free some "
                         "memory, or give a baseline saved with --json FILE") from None
    except RecursionError:
        raise ValueError(f"{path} is not a readable baseline (its JSON is nested too deeply); save it "
                         "again with --json FILE") from None
    try:
        return _from_doc(doc, path)
    except ValueError:
        raise
    except MemoryError:
        raise ValueError(f"ran out of memory reading the baseline {path}; free some memory, or give a "
                         "baseline saved with --json FILE") from None
    except Exception as exc:  # noqa: BLE001 - any other failure is still one line naming the file
        raise ValueError(f"cannot read the baseline {path} ({_named(exc)}); save it again with "
                         "--json FILE") from None


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, at most 300 characters ('' when it has none)."""
    text = " ".join(str(exc).split())
    return text[:300] + "..." if len(text) > 300 else text


def _named(exc: BaseException) -> str:
    """``exc`` as 'Type: message', or just 'Type' when its message is blank."""
    text = _one_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _parse(data: bytes):
    return json.loads(data.decode("utf-8"))


def _read_bounded(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most :data:`MAX_BASELINE_BYTES`
    (:func:`labcore.files.read_bytes_limited`: never a device or pipe, never read past the limit)."""
    return read_bytes_limited(path, MAX_BASELINE_BYTES, "a baseline", fix=_GIVE,
                              missing="save one first with lc.evidence.save_baseline(df, path) or --json FILE",
                              too_large=f"it is not a baseline of the lab; {_GIVE}")


def _from_doc(doc, path: Path) -> pd.DataFrame:
    """The sweep a parsed baseline document holds, checked."""
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
