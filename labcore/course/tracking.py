"""Learners' progress: every ``check()`` appends one line to a small local file.

The file is JSON lines, one attempt each (time, notebook, exercise, title, status, learner),
at ``~/.labcore/progress.jsonl`` or where ``LABCORE_PROGRESS`` points (``off`` records nothing).
Recording can never hurt what the path names:

- it only **appends** (one ``write`` of one line, ``O_APPEND``): history is never rewritten, and a file
  that reaches :data:`MAX_FILE_BYTES` (about 100,000 attempts) records no more (one warning says so);
- it writes only to a **regular file of this user's**, opened without following a link and without
  blocking: a device, a FIFO, a folder, a link, a file with other names (hard links) or another
  user's file is left untouched and the attempt is not recorded;
- it waits at most :data:`LOCK_WAIT_S` for another kernel's lock, then drops the attempt;
- a failure to record never breaks a check (:mod:`labcore.events` drops it).

Reading (:func:`read_progress`) takes regular files only, bounded, not through a link; a line that is
not an attempt of one of the lab's exercises is skipped and named in a :class:`ProgressWarning`.
:func:`progress` is a learner's table, one row per notebook; :func:`class_view` merges many
learners' files into one table and a plot for the instructor; both count the catalog's exercises only.

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
import stat
import time
import warnings
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from labcore.course.catalog import NOTEBOOK_TITLES, all_exercises, exercise_name
from labcore.files import read_bytes_limited

ENV = "LABCORE_PROGRESS"
MAX_FILE_BYTES = 16 << 20           # ~160 bytes an attempt: about 100,000 of them
LOCK_WAIT_S = 2.0                   # another kernel writing the same file holds its lock for microseconds
STATUSES = ("correct", "incorrect")
_FIELDS = ("time", "notebook", "exercise", "title", "status", "learner")
_NAMED = 5                          # bad lines a warning names (the rest are counted)

__all__ = ["ENV", "MAX_FILE_BYTES", "LOCK_WAIT_S", "ProgressWarning", "progress_path", "record_attempt", "attempts",
           "progress", "class_view", "class_table", "class_plot", "read_progress"]


class ProgressWarning(UserWarning):
    """A progress file's lines that were skipped, or attempts that were not recorded, and why."""


def progress_path() -> Path | None:
    """Where attempts are recorded, or None when ``LABCORE_PROGRESS=off``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value).expanduser() if value else Path.home() / ".labcore" / "progress.jsonl"


def record_attempt(exercise, result) -> None:
    """Append one attempt at one of the lab's exercises (a checked answer, right or wrong; "not attempted"
    is not one, nor an exercise made up outside the lab's notebooks)."""
    path = progress_path()
    if path is None or result.status not in STATUSES:
        return
    name, notebook = exercise_name(exercise)
    if not notebook:
        return
    line = json.dumps(dict(time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           notebook=notebook, exercise=name, title=str(getattr(exercise, "title", name)),
                           status=result.status, learner=_learner()))
    _append(path, (line + "\n").encode())


def _learner() -> str:
    try:
        return getpass.getuser()
    except Exception:               # no user name in this environment (some containers)
        return ""


_FULL_SAID: set[str] = set()


def _append(path: Path, line: bytes) -> None:
    """Append ``line`` to ``path`` if it is (or can be made) a regular file of this user's; see the module."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileNotFoundError):
        before = os.lstat(path)
        if not stat.S_ISREG(before.st_mode):
            raise ValueError(f"{path} is not a regular file: attempts are not recorded there")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or \
                (hasattr(os, "getuid") and info.st_uid != os.getuid()):
            raise ValueError(f"{path} is not a progress file of this user's (a device, a FIFO, a hard link or "
                             "another user's file): attempts are not recorded there")
        if info.st_size + len(line) > MAX_FILE_BYTES:
            if str(path) not in _FULL_SAID:
                _FULL_SAID.add(str(path))
                warnings.warn(f"{path} holds {MAX_FILE_BYTES >> 20} MiB of attempts: no more are recorded (move "
                              "it away to start a new one; lc.progress() still reads it)", ProgressWarning,
                              stacklevel=2)
            return
        if _lock(fd):
            os.write(fd, line)
    finally:
        os.close(fd)


def _lock(fd: int) -> bool:
    """An exclusive lock on the open file within :data:`LOCK_WAIT_S` (True where the OS has no flock)."""
    try:
        import fcntl
    except ImportError:             # Windows: appends alone
        return True
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)


def _exercises() -> dict[str, str]:
    """{exercise: notebook} of the lab's catalog."""
    return {name: notebook for name, (notebook, _) in all_exercises().items()}


def read_progress(path) -> list[dict]:
    """The attempts in one progress file, each an exercise of the lab's catalog (its notebook the
    catalog's). Lines that are not are skipped, and named in one :class:`ProgressWarning`."""
    path = Path(path)
    try:
        data = read_bytes_limited(path, MAX_FILE_BYTES, "a progress file", follow_links=False,
                                  fix="give a learner's progress.jsonl")
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None
    known = _exercises()
    rows, bad = [], []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        row, why = _attempt(line, known)
        if row is None:
            bad.append(f"line {number} ({why})")
        else:
            rows.append(row)
    if bad:
        more = f" and {len(bad) - _NAMED} more" if len(bad) > _NAMED else ""
        warnings.warn(f"{path}: skipped {', '.join(bad[:_NAMED])}{more}", ProgressWarning, stacklevel=2)
    return rows


def _attempt(line: str, known: dict[str, str]) -> tuple[dict | None, str]:
    """(the attempt a line holds, or None and why not)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None, "not JSON"
    if not isinstance(row, dict):
        return None, "not an attempt"
    if any(not isinstance(row.get(f, ""), str) for f in _FIELDS):
        return None, "a field that is not text"
    if row.get("status") not in STATUSES:
        return None, f"status {str(row.get('status'))[:20]!r}"
    if row.get("exercise") not in known:
        return None, f"{str(row.get('exercise'))[:40]!r} is not an exercise of the lab"
    return {**{f: row.get(f, "") for f in _FIELDS}, "notebook": known[row["exercise"]]}, ""


def attempts(path=None) -> list[dict]:
    """This learner's attempts of the lab's exercises, oldest first."""
    path = progress_path() if path is None else Path(path)
    if path is None or not os.path.lexists(path):
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
    for notebook in sorted(totals.index):
        mine = frame[frame["notebook"] == notebook]
        rows.append(dict(notebook=notebook, title=NOTEBOOK_TITLES.get(notebook, "other"),
                         exercises=int(totals[notebook]),
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
    _inside_their_folder(list(files.values()))
    return files


def _inside_their_folder(paths: list[Path]) -> None:
    """Refuse a file that a link leads out of the folder the files were given in (``learners/``)."""
    folder = Path(os.path.commonpath([os.path.abspath(p.parent) for p in paths]))
    real = os.path.realpath(folder)
    for p in paths:
        if os.path.lexists(p) and os.path.commonpath([real, os.path.realpath(p)]) != real:
            raise ValueError(f"{p} leads out of {folder} through a link: not a progress file of this class")


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
