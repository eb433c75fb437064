"""Learners' progress: every ``check()`` appends one line to a small local file.

The file is JSON lines, one attempt each (time, notebook, exercise, title, status, learner),
at ``~/.labcore/progress.jsonl`` or where ``LABCORE_PROGRESS`` points (``off`` records nothing).
It keeps the latest :data:`MAX_ATTEMPTS` attempts, and every write replaces the whole file
atomically (a temporary file beside it, then ``os.replace``), so a crash or a second kernel
never leaves half a line; a write that fails is dropped and the check still prints.

:func:`progress` is a learner's table, one row per notebook; :func:`class_view` merges many
learners' files into one table and a plot for the instructor.

Example
-------
>>> import os, tempfile
>>> os.environ["LABCORE_PROGRESS"] = os.path.join(tempfile.mkdtemp(), "progress.jsonl")
>>> from labcore.exercises.operations import q_all_reduce
>>> q_all_reduce.check(3)                       # doctest: +ELLIPSIS
All-reduce by hand: not quite. ...
>>> q_all_reduce.check(10)
All-reduce by hand: correct!
>>> [a["status"] for a in attempts()]
['incorrect', 'correct']
>>> progress().loc["01", ["attempted", "passed", "attempts"]].tolist()
[1, 1, 2]
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import getpass
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from labcore.course.catalog import NOTEBOOK_TITLES, all_exercises, exercise_name

ENV = "LABCORE_PROGRESS"
MAX_ATTEMPTS = 5000                 # ~150 bytes each: the file stays under 1 MiB
MAX_FILE_BYTES = 4 << 20            # a file larger than this is not read (not a progress file)
STATUSES = ("correct", "incorrect")

__all__ = ["ENV", "MAX_ATTEMPTS", "progress_path", "record_attempt", "attempts", "progress", "class_view",
           "class_table", "class_plot", "read_progress"]


def progress_path() -> Path | None:
    """Where attempts are recorded, or None when ``LABCORE_PROGRESS=off``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value).expanduser() if value else Path.home() / ".labcore" / "progress.jsonl"


def record_attempt(exercise, result) -> None:
    """Append one attempt (a checked answer, right or wrong; "not attempted" is not one)."""
    path = progress_path()
    if path is None or result.status not in STATUSES:
        return
    name, notebook = exercise_name(exercise)
    line = json.dumps(dict(time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           notebook=notebook, exercise=name, title=str(getattr(exercise, "title", name)),
                           status=result.status, learner=_learner()))
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        kept = _read_lines(path)[-(MAX_ATTEMPTS - 1):] + [line]
        fd, tmp = tempfile.mkstemp(prefix=".progress-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write("\n".join(kept) + "\n")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _learner() -> str:
    try:
        return getpass.getuser()
    except Exception:               # no user name in this environment (some containers)
        return ""


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold an exclusive lock on the folder while a file in it is rewritten (where the OS has flock)."""
    try:
        import fcntl
    except ImportError:             # Windows: the atomic replace alone
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_lines(path: Path) -> list[str]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return []
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def read_progress(path) -> list[dict]:
    """The attempts in one progress file (lines that are not attempts are skipped)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a progress file: give the path of a learner's progress.jsonl")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_FILE_BYTES >> 20} MiB: not a progress file")
    rows = []
    for line in _read_lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("status") in STATUSES and isinstance(row.get("exercise"), str):
            rows.append(row)
    return rows


def attempts(path=None) -> list[dict]:
    """This learner's attempts, oldest first."""
    path = progress_path() if path is None else Path(path)
    if path is None or not path.exists():
        return []
    return read_progress(path)


def _per_exercise(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["time", "notebook", "exercise", "title", "status", "learner"])
    frame["passed"] = frame["status"] == "correct"
    return frame


def _totals() -> pd.Series:
    """Exercises per notebook, from the lab's own modules."""
    counts: dict[str, int] = {}
    for notebook, _ in all_exercises().values():
        counts[notebook] = counts.get(notebook, 0) + 1
    return pd.Series(counts, dtype=int)


def progress(path=None) -> pd.DataFrame:
    """A learner's table, one row per notebook: exercises, attempted, passed, attempts, last attempt.

    ``path``: a progress file (default: this learner's, see :func:`progress_path`).
    """
    frame = _per_exercise(attempts(path))
    totals = _totals()
    rows = []
    for notebook in sorted(set(totals.index) | set(frame["notebook"])):
        mine = frame[frame["notebook"] == notebook]
        rows.append(dict(notebook=notebook, title=NOTEBOOK_TITLES.get(notebook, "other"),
                         exercises=int(totals.get(notebook, mine["exercise"].nunique())),
                         attempted=int(mine["exercise"].nunique()),
                         passed=int(mine.loc[mine["passed"], "exercise"].nunique()),
                         attempts=len(mine), last_attempt=mine["time"].max() if len(mine) else ""))
    return pd.DataFrame(rows).set_index("notebook")


def _learner_files(paths) -> dict[str, Path]:
    """{learner label: file}: a mapping as given, else each file's name (its folder's for progress.jsonl)."""
    if isinstance(paths, Mapping):
        return {str(k): Path(v) for k, v in paths.items()}
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: dict[str, Path] = {}
    for p in paths:
        p = Path(p)
        label = p.parent.name if p.stem == "progress" and p.parent.name else p.stem
        while label in files:
            label += "'"
        files[label] = p
    if not files:
        raise ValueError("class_view needs one or more learners' progress files")
    return files


def class_table(paths: Iterable | Mapping) -> pd.DataFrame:
    """One row per learner, one column per notebook: exercises passed (of those in the notebook)."""
    totals = _totals()
    rows = []
    for learner, path in _learner_files(paths).items():
        frame = _per_exercise(read_progress(path))
        row = {"learner": learner}
        for notebook in sorted(totals.index):
            mine = frame[(frame["notebook"] == notebook) & frame["passed"]]
            row[notebook] = int(mine["exercise"].nunique())
        row["passed"] = int(frame.loc[frame["passed"], "exercise"].nunique())
        row["attempts"] = len(frame)
        rows.append(row)
    table = pd.DataFrame(rows).set_index("learner")
    table.attrs["exercises"] = {nb: int(n) for nb, n in totals.items()}
    return table


def class_plot(table: pd.DataFrame, title: str = "Exercises passed, per learner and notebook"):
    """A plotly heatmap of :func:`class_table`: the share of each notebook's exercises each learner passed.

    Sized for a 1280 x 800 window: 40 learners take 14 px a row; more than that scroll nothing away,
    they only make the rows thinner.
    """
    import plotly.graph_objects as go

    totals = table.attrs.get("exercises") or {}
    notebooks = [c for c in table.columns if c in totals]
    share = table[notebooks].astype(float).div(pd.Series({nb: max(totals[nb], 1) for nb in notebooks}))
    text = table[notebooks].astype(int).astype(str) + "/" + pd.Series({nb: str(totals[nb]) for nb in notebooks})
    fig = go.Figure(go.Heatmap(
        z=share.to_numpy(), x=[f"{nb} {NOTEBOOK_TITLES.get(nb, '')}" for nb in notebooks], y=list(table.index),
        text=text.to_numpy(), texttemplate="%{text}", zmin=0, zmax=1, colorscale="Greens",
        colorbar=dict(title="passed", tickformat=".0%"),
        hovertemplate="%{y}, notebook %{x}: %{text} passed<extra></extra>"))
    height = min(700, 220 + 16 * len(table))
    fig.update_layout(title=title, height=height, width=None, autosize=True,
                      margin=dict(l=120, r=20, t=60, b=120), yaxis=dict(autorange="reversed"))
    return fig


def class_view(paths: Iterable | Mapping):
    """(table, figure): many learners' progress files merged (see :func:`class_table`, :func:`class_plot`).

    ``paths``: the files (each learner's label is the file's name, or its folder's for a
    ``progress.jsonl``), or ``{learner: file}``.
    """
    table = class_table(paths)
    return table, class_plot(table)
