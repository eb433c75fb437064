"""``read_nccl_tests``: a real nccl-tests run's stdout, read into the DataFrame ``sweep`` returns.

A learner with access to a real cluster runs ``all_reduce_perf`` (or any ``*_perf``)
there and brings its output into a notebook: the simulator can be calibrated on it
and the lab's own measurements drawn beside it.

What it reads: the current layout (nccl-tests 2.19.6, commit a0b82b2) and older ones
(no root column, no redop column or a blank redop field, an ``error`` column of largest
deviations instead of ``#wrong``, ``%6.2f`` bandwidths), per-iteration columns (``-I 1``),
several collectives, runs or pasted tables in one text (each ``# Collective test starting``,
``# nThread`` or version line, a column header after results, or results after a footer
start a section; the ``run`` column numbers them), repeated cycles (``-N``: rows repeat,
numbered by ``repeat``), MPI runs with every rank listed, and output tagged by the launcher
(srun --label's `` 0: ``, mpirun's ``[1,0]<stdout>:`` with anything an orchestrator puts before it,
such as SkyPilot's ``(head, rank=0, pid=3808)``, ``[0]``). Lines that are not results
(NCCL INFO lines, prompts, ``...``) are skipped; a result line cut short is skipped and
listed in ``df.attrs["skipped"]``. The text is bounded (:data:`labcore.files.MAX_TEXT_BYTES`)
and read in one pass.

Example
-------
>>> text = '''# Collective test starting: all_gather_perf
... #  Rank  0 Group  0 Pid   1 on h device  0 [0000:18:00] NVIDIA H100 80GB HBM3
... #  Rank  1 Group  0 Pid   2 on h device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
... #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
...      1048576        131072     float    none      -1    20.00   52.43   26.21       0    19.00   55.19   27.59       0
... '''
>>> df = read_nccl_tests(text)
>>> df[["op", "size", "ranks", "placement", "busbw"]].values.tolist()
[['all_gather', 1048576, 2, 'out-of-place', 26.21], ['all_gather', 1048576, 2, 'in-place', 27.59]]
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from labcore import collectives, validate
from labcore.files import MAX_TEXT_BYTES, check_text_limited, read_text_limited

__all__ = ["read_nccl_tests", "COLUMNS", "PLACEMENTS", "TABLES"]

COLUMNS = ["op", "size", "count", "type", "redop", "root", "ranks", "backend", "placement",
           "time_us", "algbw", "busbw", "wrong", "note", "median_us", "repeat", "wrong_ranks"]
"""The columns of an nccl-tests table as the lab keeps them (``lc.bench.sweep`` returns the same)."""
PLACEMENTS = ("out-of-place", "in-place")
"""nccl-tests' two runs of every size, in the order it prints them."""
TABLES = [c.name for c in collectives.COLLECTIVES.values() if c.program]
"""The collectives nccl-tests prints a table of (those with a ``*_perf`` program)."""

# Open MPI's --tag-output tag, after whatever an orchestrator puts before it (SkyPilot's
# "(head, rank=0, pid=3808) "): everything up to the tag is the launcher's
_MPI_TAG = re.compile(r"(\[\d+,\d+\]<std(?:out|err)>:)")
_SRUN_LABEL = re.compile(r"^\s*\d+: ")
_RANK_TAG = re.compile(r"\[\d+\]")
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_PARAMS = re.compile(r"^#\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((\w+)\)"
                     r" warmup iters: (\d+) iters: (\d+)")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*)$")
_ERRORS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
# A command that ran a test ("./build/all_reduce_perf -b 8 ..."); the name's length is bounded so
# that a long run of letters is scanned once, not once per starting position.
_PROGRAM = re.compile(r"\b([a-z_]{1,40})_perf(?:_mpi)?\b")
_TIME = ("time", "cputime")
_ITEMSIZE = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2,
             "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8}
# Result lines without a header above them: the layout follows from the number of fields.
_KEYS_BY_FIELDS = {13: ["size", "count", "type", "redop", "root"], 12: ["size", "count", "type", "redop"],
                   11: ["size", "count", "type"]}
_GROUP = ["time", "algbw", "busbw", "#wrong"]
_REDUCTIONS = {"sum", "prod", "max", "min", "avg", "mulsum"}
_OWN_LINE = "its own 'Collective test' line"


class _Section:
    """One run's (or one pasted table's) worth of output: parameters, devices, layout, result lines."""

    def __init__(self, mentioned=None):
        self.version = None
        self.program = None          # nccl-tests' own name for the run ("Collective test starting")
        self.mentioned = mentioned   # the last command quoted before the table's first result
        self.first_line = None       # the text's line number of the first result
        self.params: dict = {}
        self.devices: list[dict] = []
        self.keys: list[str] | None = None
        self.groups: list[list[str]] | None = None
        self.lines: list[list[str]] = []
        self.footer: dict = {}


def _clean(line: str) -> str:
    """The line without what launchers put before it (srun --label, mpirun --tag-output, rank tags)."""
    line = _SRUN_LABEL.sub("", line.rstrip("\r\n"), count=1)
    tag = _MPI_TAG.search(line)
    if tag:
        # Open MPI repeats a rank's tag inside a line its output reached in pieces; another rank's
        # tag there means two ranks' output interleaved, and the line is left to be skipped
        line = line[tag.end():].replace(tag.group(1), " ")
    return _RANK_TAG.sub("", line) if not line.lstrip().startswith("#  Rank") else line


def _header(tokens: list[str]):
    """(key columns, placement groups) from a column-header line, or None."""
    if "size" not in tokens or "count" not in tokens or not any(t in _TIME for t in tokens):
        return None
    first = next(i for i, t in enumerate(tokens) if t in _TIME)
    groups, current = [], None
    for t in tokens[first:]:
        if t in _TIME:
            current = ["time"]
            groups.append(current)
        elif t in ("algbw", "busbw", "#wrong", "error") or t.startswith("i_"):
            current.append(t)
        elif t == "wrong":          # a copy that dropped the '#' (web pages' terminal widgets do)
            current.append("#wrong")
    return tokens[:first], groups[:2]


class _Scanner:
    """Splits the lines into sections: a version, 'Collective test starting' or parameter line
    after results, a column header after results, or results after a footer start the next one."""

    def __init__(self):
        self.sections = [_Section()]
        self.mention = None

    @property
    def sec(self) -> _Section:
        return self.sections[-1]

    def start(self) -> _Section:
        self.sections.append(_Section())
        return self.sec

    def version(self, m):
        if self.sec.lines or self.sec.version or self.sec.program:
            self.start()
        self.sec.version = m.group(1)

    def starting(self, m):
        if self.sec.lines or self.sec.program:
            self.start()
        self.sec.program = m.group(1)

    def params(self, m):
        if self.sec.lines:
            self.start()
        names = ["nthreads", "ngpus", "min_bytes", "max_bytes", "step", "step_kind", "warmup", "iters"]
        self.sec.params = {k: (v if k == "step_kind" else int(v)) for k, v in zip(names, m.groups())}

    def rank(self, m):
        rank, pid, host, device, bus, name = m.groups()
        self.sec.devices.append(dict(rank=int(rank), pid=int(pid), host=host, device=int(device), bus=bus,
                                     name=name.strip()))

    def concluded(self, m):
        self.sec.program = self.sec.program or m.group(1)

    def errors(self, m):
        self.sec.footer.update(out_of_bounds=int(m.group(1)), ok=m.group(2) == "OK")

    def average(self, m):
        self.sec.footer["avg_busbw"] = float(m.group(1))

    def other(self, stripped: str, number: int):
        """A column header, a result line, a command quoted in the text, or nothing of ours."""
        tokens = stripped.lstrip("#").split()
        layout = _header(tokens)
        if layout:
            if self.sec.lines:
                self.start()
            self.sec.keys, self.sec.groups = layout
        elif stripped.startswith("#"):
            return
        elif tokens[0].isdigit():
            self.result(tokens, number)
        else:
            m = _PROGRAM.search(stripped)
            if m:
                self.mention = m.group(1)

    def result(self, tokens: list[str], number: int):
        if self.sec.lines and "avg_busbw" in self.sec.footer:      # a run ended: the next one's results
            keys, groups = self.sec.keys, self.sec.groups
            self.start()
            self.sec.keys, self.sec.groups = keys, groups
        if not self.sec.lines:
            self.sec.mentioned, self.sec.first_line = self.mention, number
        self.sec.lines.append(tokens)


_HANDLERS = ((_VERSION, _Scanner.version), (_STARTING, _Scanner.starting), (_PARAMS, _Scanner.params),
             (_RANK, _Scanner.rank), (_CONCLUDED, _Scanner.concluded), (_ERRORS, _Scanner.errors),
             (_AVG, _Scanner.average))


def _sections(lines) -> list[_Section]:
    scanner = _Scanner()
    for number, raw in enumerate(lines, 1):
        stripped = _clean(raw).strip()
        if not stripped:
            continue
        for pattern, handler in _HANDLERS:
            m = pattern.match(stripped)
            if m:
                handler(scanner, m)
                break
        else:
            scanner.other(stripped, number)
    return [s for s in scanner.sections if s.lines]


def _number(text: str) -> float:
    return -1.0 if text == "N/A" else float(text)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _layout(sec: _Section, tokens: list[str]):
    """(keys, groups, tokens) for one result line, or None when it is cut short.

    Old layouts print nothing in the redop field of collectives without a reduction
    (alltoall_perf's rows have one field fewer than its header): the field is read as blank.
    """
    if sec.keys is not None:
        keys, groups = sec.keys, sec.groups
    elif len(tokens) in _KEYS_BY_FIELDS:
        keys, groups = _KEYS_BY_FIELDS[len(tokens)], [_GROUP, _GROUP]
    else:
        return None
    width = len(keys) + sum(len(g) for g in groups)
    if len(tokens) == width - 1 and "redop" in keys and _is_number(tokens[keys.index("redop")]):
        at = keys.index("redop")
        tokens = [*tokens[:at], "", *tokens[at:]]
    return (keys, groups, tokens) if len(tokens) >= width else None


def _row(keys, groups, tokens, number: int) -> list[dict]:
    key = dict(zip(keys, tokens))
    base = dict(size=int(key["size"]), count=int(key["count"]), type=key["type"], redop=key.get("redop"),
                root=int(key.get("root", -1)), line=number)
    rows, at = [], len(keys)
    for placement, group in zip(PLACEMENTS, groups):
        values = dict(zip(group, tokens[at:at + len(group)]))
        at += len(group)
        wrong, note = -1, ""
        if "#wrong" in values:
            wrong = int(_number(values["#wrong"]))
        elif "error" in values:
            note = f"nccl-tests' old error column (largest deviation): {values['error']}"
        rows.append(dict(base, placement=placement, time_us=float(values["time"]), algbw=float(values["algbw"]),
                         busbw=float(values["busbw"]), wrong=wrong, note=note))
    return rows


def _rows(sec: _Section, skipped: list) -> list[dict]:
    rows = []
    for number, tokens in enumerate(sec.lines):
        layout = _layout(sec, tokens)
        try:
            if layout is None:
                raise ValueError
            rows += _row(*layout, number)
        except (ValueError, KeyError):
            skipped.append(" ".join(tokens))
    return rows


def _number_repeats(rows: list[dict]) -> None:
    """Sizes grow within one pass of the sweep; a smaller size of the same type, reduction and
    root starts the next pass (nccl-tests' ``-N`` cycles)."""
    last, passes, of_line = {}, Counter(), {}
    for r in rows:
        if r["line"] not in of_line:
            key = (r["type"], r["redop"], r["root"])
            if key in last and r["size"] < last[key]:
                passes[key] += 1
            last[key] = r["size"]
            of_line[r["line"]] = passes[key]
        r["repeat"] = of_line[r["line"]]


def _infer_ranks(op: str, rows: list[dict]) -> int | None:
    """The rank count implied by the numbers: size / count for split buffers, else busbw / algbw."""
    spec = collectives.describe(op)
    if spec.chunked:
        for r in rows:
            item = _ITEMSIZE.get(r["type"])
            if item and r["count"]:
                return round(r["size"] / (r["count"] * item))
        return None
    if op != "all_reduce":
        return None
    # busbw = size / time x 2(n-1)/n. The printed numbers carry 2 decimals, so each line bounds the
    # factor to an interval; answer only if one rank count's factor lies in every line's interval.
    low, high = 0.0, math.inf
    for r in rows:
        if r["busbw"] > 0 and r["time_us"] > 0:
            rate = r["size"] / (r["time_us"] * 1e3)
            slack = 0.005 + 5e-4 * r["busbw"]
            low, high = max(low, (r["busbw"] - slack) / rate), min(high, (r["busbw"] + slack) / rate)
    if high == math.inf:
        return None
    feasible = [n for n in range(2, 4097) if low <= 2 * (n - 1) / n <= high]
    return feasible[0] if len(feasible) == 1 else None


def _disagreement(name: str, rows: list[dict]) -> str | None:
    """Why rows cannot be ``name``'s (the reduction printed, or sizes that are many counts), or None."""
    spec = collectives.describe(name)
    printed = {r["redop"] for r in rows if r["redop"] is not None}
    if spec.reduces and printed and not printed & _REDUCTIONS:
        return f"its rows name no reduction (redop {'blank' if printed == {''} else 'none'}), as only " \
               "collectives that move data print"
    if not spec.reduces and spec.redop != "op" and printed & _REDUCTIONS:
        return f"its rows name the reduction {sorted(printed & _REDUCTIONS)[0]}, as only reductions print"
    if not spec.chunked:
        for r in rows:
            item = _ITEMSIZE.get(r["type"])
            if item and r["count"] and r["size"] != r["count"] * item:
                return (f"its size {r['size']} is {r['size'] / (r['count'] * item):g} times its count of "
                        f"{item}-byte elements, as only collectives that split their buffer across ranks print")
    return None


def _table_name(name: str) -> str:
    """The lab's name of a collective nccl-tests may have run (also its program's name, ``alltoall_perf``)."""
    try:
        key = collectives.canonical(name)
    except ValueError:
        key = None
    if key not in TABLES and key != "barrier":
        raise ValueError(f"unknown collective {name!r}; choose one of: {', '.join([*TABLES, 'barrier'])}")
    return key


def _table_op(sec: _Section, given: str | None, index: int, notes: list[str]) -> tuple[str, str]:
    """(collective, where it was read from) of one table: nccl-tests' own header, else ``op``, else the
    command quoted before it; a disagreement between them is noted."""
    label = f"table {index + 1} (its first result at line {sec.first_line})"
    named = [(sec.program, _OWN_LINE), (given, "op="), (sec.mentioned, "the command quoted above it")]
    named = [(_table_name(n), where) for n, where in named if n]
    if not named:
        raise ValueError(f"{label} does not say which collective ran (no 'Collective test starting' line or "
                         "*_perf command): pass op='all_reduce' (or the collective it measured)")
    name, where = named[0]
    for other, source in named[1:]:
        if other != name:
            notes.append(f"{label}: read as {name} from {where}; {source} says {other}")
    if name not in TABLES:
        raise ValueError(f"{label} is a {name} run: nccl-tests prints no table of it the lab reads")
    return name, where


def _checked(name: str, where: str, rows: list[dict], sec: _Section, index: int, many: bool) -> None:
    """Refuse to label a table with a collective its rows contradict (unless nccl-tests named it)."""
    why = None if where == _OWN_LINE else _disagreement(name, rows)
    if why:
        fix = ("pass op= naming each table's collective, a list in the order of the tables" if many else
               "pass op= naming the collective it measured")
        raise ValueError(f"table {index + 1} (its first result at line {sec.first_line}) is not {name} "
                         f"(read from {where}): {why}; {fix}")


def _ops_per_table(op, count: int) -> list:
    if op is None or isinstance(op, str):
        return [op] * count
    names = list(op) if isinstance(op, (list, tuple)) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"op is a collective's name, or a list of them (one per table), not {op!r}")
    if len(names) != count:
        raise ValueError(f"op names {len(names)} collectives but the text holds {count} table(s) of results: "
                         "give one name per table, in order")
    return names


def read_nccl_tests(source, *, op=None, ranks: int | None = None) -> pd.DataFrame:
    """Read nccl-tests' stdout (text, or a path to a file holding it) into a sweep DataFrame.

    Parameters
    ----------
    source : the text (str or bytes), or a ``pathlib.Path`` / path string of a file with it
        (at most :data:`labcore.files.MAX_TEXT_BYTES`, a regular file).
    op : the collective, where the text does not say (a quote of result lines only); a list
        names one per table when several are pasted one after another.
    ranks : the rank count, where the text lists no devices and the numbers do not imply it.

    Returns
    -------
    pandas.DataFrame with :data:`COLUMNS` and ``run``: one row per size, placement
    and repeat of each table, ``run`` numbering the tables (runs pasted one after another) from
    0 in the order of the text; ``backend`` "nccl", ``median_us`` NaN (nccl-tests reports
    means), ``wrong`` -1 where the text shows N/A or an old error column, ``ranks`` -1 where
    unknown. A column the text lacks (or leaves blank) is filled with nccl-tests' default
    (redop ``sum`` for reductions, else ``none``; root -1). ``attrs``: ``params`` (nThread,
    nGpus, sizes, iters of the first run), ``version``, ``devices``, ``footer`` (out-of-bounds
    count and average busbw as printed), ``skipped`` (result lines cut short), ``sections``
    (each run's op, params, footer, version), ``notes`` (where the text names two collectives
    for one table: which one was read).

    A table's collective is the one nccl-tests' own "Collective test starting" line names,
    else ``op``, else the last ``*_perf`` command quoted before it. A table whose rows
    contradict the collective read for it otherwise (a reduction's table without a
    reduction, sizes many times their element count under a collective that splits none)
    is refused, naming the table, rather than relabelled.

    Raises
    ------
    ValueError
        When the text holds no result line, does not say which collective ran and ``op``
        is not given, a table's rows contradict its collective, or ``source`` is a folder,
        a device or FIFO, a file over the size limit, or a string that is neither.
    FileNotFoundError
        When a ``Path`` names no file.
    TypeError
        When ``source`` is not text, bytes or a path.
    """

    if ranks is not None:
        validate.whole_number(ranks, "ranks", least=1, must="the whole number of ranks that ran (1 or more)")
    sections = _sections(_read(source).splitlines())
    names = _ops_per_table(op, len(sections))
    skipped: list[str] = []
    frames, meta, notes = [], [], []
    for index, sec in enumerate(sections):
        name, where = _table_op(sec, names[index], index, notes)
        rows = _rows(sec, skipped)
        if not rows:
            continue
        _checked(name, where, rows, sec, index, len(sections) > 1)
        frames.append(_frame(name, rows, sec, ranks, run=len(frames)))
        meta.append((sec, name))
    if not frames:
        raise ValueError("found no nccl-tests result lines: pass the stdout of an *_perf run "
                         "(the lines under '#  size  count  type ...')")
    df = pd.concat(frames, ignore_index=True)[[*COLUMNS, "run"]]
    first = meta[0][0]
    df.attrs.update(params=dict(first.params, source="nccl-tests"), version=first.version,
                    devices=first.devices, footer=first.footer, skipped=skipped, notes=notes,
                    sections=[dict(op=name, params=s.params, footer=s.footer, version=s.version)
                              for s, name in meta])
    return df


def _frame(name: str, rows: list[dict], sec: _Section, ranks, run: int) -> pd.DataFrame:
    listed = len({d["rank"] for d in sec.devices}) or None
    n = listed or ranks or _infer_ranks(name, rows) or -1
    fill = collectives.describe(name).fill_redop("sum")
    for r in rows:
        if not r["redop"]:
            r["redop"] = fill
        r.update(op=name, ranks=n, backend="nccl", median_us=math.nan, wrong_ranks=math.nan, run=run)
    _number_repeats(rows)
    return pd.DataFrame(rows)


def _read(source) -> str:
    """The text of ``source``, at most :data:`labcore.files.MAX_TEXT_BYTES`; bytes that are not
    UTF-8 (a log cut mid-character) become U+FFFD."""
    if isinstance(source, (bytes, bytearray)):
        check_text_limited(source, MAX_TEXT_BYTES, "the output given", "pass the file that holds it instead")
        return bytes(source).decode("utf-8", errors="replace")
    if isinstance(source, Path):
        return _read_file(source)
    if not isinstance(source, str):
        raise TypeError(f"read_nccl_tests takes nccl-tests' output as text (str), or the path of a file "
                        f"holding it, not {type(source).__name__}")
    check_text_limited(source, MAX_TEXT_BYTES, "the output given", "pass the file that holds it instead")
    if not source.strip():
        raise ValueError("the text is empty: pass the stdout of an *_perf run, or the path of a file holding it")
    if "\n" not in source and len(source) < 4096:
        path = Path(source)
        if path.exists():
            return _read_file(path)
        raise ValueError(f"{source!r} is neither nccl-tests output nor a file: pass the text, or the "
                         "path of a file that holds it")
    return source


def _read_file(path: Path) -> str:
    return read_text_limited(path, MAX_TEXT_BYTES, "a file of nccl-tests output",
                             fix="pass the file that holds an *_perf run's stdout",
                             missing="pass the path of a file that holds nccl-tests' output, or the text itself")
