"""``read_nccl_tests``: a real nccl-tests run's stdout, read into the DataFrame ``sweep`` returns.

A learner with access to a real cluster runs ``all_reduce_perf`` (or any ``*_perf``)
there and brings its output into a notebook: the simulator can be calibrated on it
and the lab's own measurements drawn beside it.

What it reads: the current layout (nccl-tests 2.19.6, commit a0b82b2) and older ones
(no root column, no redop column, an ``error`` column of largest deviations instead of
``#wrong``, ``%6.2f`` bandwidths), per-iteration columns (``-I 1``), several collectives
or runs in one text (each ``# Collective test starting`` or ``# nThread`` line starts a
section), repeated cycles (``-N``: rows repeat, numbered by ``repeat``), MPI runs with
every rank listed, and output tagged by the launcher (``[1,0]<stdout>:``, ``[0]``). Lines
that are not results (NCCL INFO lines, prompts, ``...``) are skipped; a result line cut
short is skipped and listed in ``df.attrs["skipped"]``.

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
import numbers
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from labcore.bench import ops as _ops
from labcore.bench.harness import PLACEMENTS

_MPI_TAG = re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:")
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
_PROGRAM = re.compile(r"\b([a-z_]+)_perf(?:_mpi)?\b")
_TIME = ("time", "cputime")
_ITEMSIZE = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2,
             "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8}
# Result lines without a header above them: the layout follows from the number of fields.
_KEYS_BY_FIELDS = {13: ["size", "count", "type", "redop", "root"], 12: ["size", "count", "type", "redop"],
                   11: ["size", "count", "type"]}
_GROUP = ["time", "algbw", "busbw", "#wrong"]


class _Section:
    """One run's worth of output: its parameters, devices, column layout and result lines."""

    def __init__(self, version=None):
        self.version = version
        self.program = None
        self.mentioned = None
        self.params: dict = {}
        self.devices: list[dict] = []
        self.keys: list[str] | None = None
        self.groups: list[list[str]] | None = None
        self.lines: list[list[str]] = []
        self.footer: dict = {}


def _clean(line: str) -> str:
    line = _MPI_TAG.sub("", line.rstrip("\r\n"))
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
    return tokens[:first], groups[:2]


def _sections(lines):  # noqa: C901 (to be split)
    sections = [_Section()]
    for raw in lines:
        line = _clean(raw)
        sec = sections[-1]
        stripped = line.strip()
        if not stripped:
            continue
        m = _VERSION.match(stripped)
        if m:
            if sec.lines or sec.version or sec.program:
                sections.append(_Section())
            sections[-1].version = m.group(1)
            continue
        m = _STARTING.match(stripped)
        if m:
            if sec.lines or sec.program:
                sec = _Section()
                sections.append(sec)
            sec.program = m.group(1)
            continue
        m = _PARAMS.match(stripped)
        if m:
            if sec.lines:
                sec = _Section()
                sections.append(sec)
            names = ["nthreads", "ngpus", "min_bytes", "max_bytes", "step", "step_kind", "warmup", "iters"]
            sec.params = {k: (v if k == "step_kind" else int(v)) for k, v in zip(names, m.groups())}
            continue
        m = _RANK.match(stripped)
        if m:
            rank, pid, host, device, bus, name = m.groups()
            sec.devices.append(dict(rank=int(rank), pid=int(pid), host=host, device=int(device),
                                    bus=bus, name=name.strip()))
            continue
        m = _CONCLUDED.match(stripped)
        if m:
            sec.program = sec.program or m.group(1)
            continue
        m = _ERRORS.match(stripped)
        if m:
            sec.footer.update(out_of_bounds=int(m.group(1)), ok=m.group(2) == "OK")
            continue
        m = _AVG.match(stripped)
        if m:
            sec.footer["avg_busbw"] = float(m.group(1))
            continue
        tokens = stripped.lstrip("#").split()
        layout = _header(tokens)
        if layout:
            sec.keys, sec.groups = layout
            continue
        if stripped.startswith("#"):
            continue
        if tokens and tokens[0].isdigit():
            sec.lines.append(tokens)
            continue
        m = _PROGRAM.search(stripped)
        if m and sec.mentioned is None:
            sec.mentioned = m.group(1)
    return [s for s in sections if s.lines]


def _number(text: str) -> float:
    return -1.0 if text == "N/A" else float(text)


def _rows(sec: _Section, skipped: list) -> list[dict]:
    rows = []
    for number, tokens in enumerate(sec.lines):
        if sec.keys is not None:
            keys, groups = sec.keys, sec.groups
        else:
            keys, groups = _KEYS_BY_FIELDS.get(len(tokens), (None,)), [_GROUP, _GROUP]
        width = len(keys) + sum(len(g) for g in groups)
        if keys == (None,) or len(tokens) < width:
            skipped.append(" ".join(tokens))
            continue
        try:
            key = dict(zip(keys, tokens))
            base = dict(size=int(key["size"]), count=int(key["count"]), type=key["type"],
                        redop=key.get("redop"), root=int(key.get("root", -1)), line=number)
            at = len(keys)
            parts = []
            for group in groups:
                values = dict(zip(group, tokens[at:at + len(group)]))
                at += len(group)
                parts.append(values)
            for placement, values in zip(PLACEMENTS, parts):
                wrong, note = -1, ""
                if "#wrong" in values:
                    wrong = int(_number(values["#wrong"]))
                elif "error" in values:
                    note = f"nccl-tests' old error column (largest deviation): {values['error']}"
                rows.append(dict(base, placement=placement, time_us=float(values["time"]),
                                 algbw=float(values["algbw"]), busbw=float(values["busbw"]),
                                 wrong=wrong, note=note))
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
    spec = _ops.OPS[op]
    if spec.split in ("recv", "send", "both"):
        for r in rows:
            item = _ITEMSIZE.get(r["type"])
            if item and r["count"]:
                return round(r["size"] / (r["count"] * item))
        return None
    if op != "all_reduce":
        return None
    # busbw / algbw = 2(n-1)/n. The printed numbers carry 2 decimals, so keep the rank counts
    # that every line agrees with to within that rounding, and answer only if one is left.
    lines = [r for r in rows if r["busbw"] > 0 and r["time_us"] > 0]
    if not lines:
        return None
    feasible = []
    for n in range(2, 4097):
        factor = 2 * (n - 1) / n
        if all(abs(r["size"] / (r["time_us"] * 1e3) * factor - r["busbw"])
               <= 0.005 + 5e-4 * r["busbw"] for r in lines):
            feasible.append(n)
    return feasible[0] if len(feasible) == 1 else None


def _op_of(sec: _Section, op: str | None) -> str:
    name = sec.program or sec.mentioned or op
    if not name:
        raise ValueError("the text does not say which collective ran (no 'Collective test starting' "
                         "line or *_perf command): pass op='all_reduce' (or the collective it measured)")
    return _ops.canonical(name)


def read_nccl_tests(source, *, op: str | None = None, ranks: int | None = None) -> pd.DataFrame:
    """Read nccl-tests' stdout (text, or a path to a file holding it) into a sweep DataFrame.

    Parameters
    ----------
    source : the text (str or bytes), or a ``pathlib.Path`` / path string of a file with it.
    op : the collective, where the text does not say (a quote of result lines only).
    ranks : the rank count, where the text lists no devices and the numbers do not imply it.

    Returns
    -------
    pandas.DataFrame with :data:`labcore.bench.COLUMNS`: one row per size, placement and
    repeat, ``backend`` "nccl", ``median_us`` NaN (nccl-tests reports means), ``wrong`` -1
    where the text shows N/A or an old error column, ``ranks`` -1 where unknown. A column
    the text lacks is filled with nccl-tests' default (redop ``sum`` for reductions, else
    ``none``; root -1). ``attrs``: ``params`` (nThread, nGpus, sizes, iters of the first run),
    ``version``, ``devices``, ``footer`` (out-of-bounds count and average busbw as printed),
    ``skipped`` (result lines cut short) and ``sections``.

    Raises
    ------
    ValueError
        When the text holds no result line, or does not say which collective ran and
        ``op`` is not given; when ``source`` is a folder or a string that is neither.
    FileNotFoundError
        When a ``Path`` names no file.
    TypeError
        When ``source`` is not text, bytes or a path.
    """
    from labcore.bench.sweep import COLUMNS

    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, numbers.Integral) or ranks < 1):
        raise ValueError(f"ranks must be the whole number of ranks that ran (1 or more), not {ranks!r}")
    text = _read(source)
    skipped: list[str] = []
    frames, meta = [], []
    for sec in _sections(text.splitlines()):
        name = _op_of(sec, op)
        rows = _rows(sec, skipped)
        if not rows:
            continue
        listed = len({d["rank"] for d in sec.devices}) or None
        n = listed or ranks or _infer_ranks(name, rows) or -1
        spec = _ops.OPS[name]
        for r in rows:
            if r["redop"] is None:
                r["redop"] = "sum" if spec.kind == "reduce" else "none"
            r.update(op=name, ranks=n, backend="nccl", median_us=math.nan, wrong_ranks=math.nan)
        _number_repeats(rows)
        frames.append(pd.DataFrame(rows))
        meta.append(sec)
    if not frames:
        raise ValueError("found no nccl-tests result lines: pass the stdout of an *_perf run "
                         "(the lines under '#  size  count  type ...')")
    df = pd.concat(frames, ignore_index=True)[COLUMNS]
    first = meta[0]
    df.attrs.update(params=dict(first.params, source="nccl-tests"), version=first.version,
                    devices=first.devices, footer=first.footer, skipped=skipped,
                    sections=[dict(op=_op_of(s, op), params=s.params, footer=s.footer, version=s.version)
                              for s in meta])
    return df


def _read(source) -> str:
    """The text of ``source``; bytes that are not UTF-8 (a log cut mid-character) become U+FFFD."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source).decode("utf-8", errors="replace")
    if isinstance(source, Path):
        return _read_file(source)
    if not isinstance(source, str):
        raise TypeError(f"read_nccl_tests takes nccl-tests' output as text (str), or the path of a file "
                        f"holding it, not {type(source).__name__}")
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
    if path.is_dir():
        raise ValueError(f"{path} is a folder: pass the file that holds nccl-tests' output")
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        raise FileNotFoundError(f"no file {path}: pass the path of a file that holds nccl-tests' output, "
                                "or the text itself") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path} ({exc.strerror}): check the path and its permissions") from None
