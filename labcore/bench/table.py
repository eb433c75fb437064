"""nccl-tests' text table: the same header, column widths, number format and footer.

Ported from nccl-tests 2.19.6 (github.com/NVIDIA/nccl-tests, commit
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432; ``src/util.cu``): a two-line column
header (out-of-place, then in-place), one line per size with numbers written by
``getFloatStr`` as it is after the alignment fix of 2026 (commit 379ca38: the
widest of 2, 1, 0 decimals that fits, else an exponent), ``#wrong`` as ``%6g``
or ``N/A`` where a result is not checked, and the footer: "Out of bounds values"
(how many checks found wrong elements: one per rank, size and placement),
"Avg bus bandwidth" (the mean busbw over every line and placement printed, size-0
lines included) and "Collective test concluded".

Example
-------
>>> from labcore.bench.table import format_number
>>> format_number(12.3456, 6), format_number(123456.0, 7), format_number(1234567.0, 6)
(' 12.35', ' 123456', ' 1e+06')
"""
from __future__ import annotations

import math

import pandas as pd

from labcore.bench.ops import nccl_tests_program

_KEY = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}"
_SIDE = "  {:>7}  {:>6}  {:>6}  {:>6}"
# nccl-tests' writeBenchMarkLineNullBody: the blank for a placement that was not run.
_NO_SIDE = " " * 32


def header_lines() -> list[str]:
    """The column-header lines nccl-tests prints above its results (``writeResultHeader``)."""
    return [
        "#",
        _KEY.format("", "", "", "", "") + "           out-of-place                       in-place          ",
        _KEY.format("size", "count", "type", "redop", "root")
        + _SIDE.format("time", "algbw", "busbw", "#wrong") + _SIDE.format("time", "algbw", "busbw", "#wrong")
        + " ",
        _KEY.format("(B)", "(elements)", "", "", "")
        + _SIDE.format("(us)", "(GB/s)", "(GB/s)", "") + _SIDE.format("(us)", "(GB/s)", "(GB/s)", "") + " ",
    ]


def format_number(value: float, width: int) -> str:
    """``value`` in ``width`` characters, as nccl-tests' ``getFloatStr``.

    The first of ``%.2f``, ``%.1f``, ``%.0f`` that fits in ``width``; else an
    exponent (``%.1e`` from width 7, ``%.0e`` below), cut to ``width`` as
    ``snprintf`` into a buffer of ``width + 1`` would.
    """
    for decimals in (2, 1, 0):
        text = f"{value:{width}.{decimals}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"[:width]


def _side(row) -> str:
    if row is None:
        return _NO_SIDE
    body = "  {:>7}  {:>6}  {:>6}".format(format_number(row["time_us"], 7), format_number(row["algbw"], 6),
                                         format_number(row["busbw"], 6))
    wrong = row["wrong"]
    if wrong is None or (isinstance(wrong, float) and math.isnan(wrong)) or wrong < 0:
        return body + "    N/A"
    return body + f"  {float(wrong):6g}"


def row_line(out_of_place, in_place) -> str:
    """One result line: size, count, type, redop, root, then each placement (either may be None)."""
    first = out_of_place if out_of_place is not None else in_place
    key = "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}".format(
        int(first["size"]), int(first["count"]), first["type"], first["redop"], int(first["root"]))
    line = key + _side(out_of_place)
    return line if in_place is None else line + _side(in_place)


def _line_groups(df: pd.DataFrame):
    keys = [k for k in ("repeat", "size", "count", "type", "redop", "root") if k in df]
    return df.groupby(keys, sort=False, dropna=False)


def result_lines(df: pd.DataFrame) -> list[str]:
    """One line per (repeat, size, type, redop, root), out-of-place beside in-place."""
    lines = []
    for _, group in _line_groups(df):
        by = {row["placement"]: row for _, row in group.iterrows()}
        lines.append(row_line(by.get("out-of-place"), by.get("in-place")))
    return lines


def failed_checks(df: pd.DataFrame) -> int:
    """nccl-tests' "Out of bounds values": checks that found wrong elements, one per rank.

    Uses ``wrong_ranks`` (ranks whose check failed, per line and placement) where it is
    known, else counts each line with wrong elements once (output read back from text).
    """
    checked = df[df["wrong"] >= 0]
    if "wrong_ranks" not in checked:
        return int((checked["wrong"] > 0).sum())
    known = checked["wrong_ranks"].notna()
    return int(checked.loc[known, "wrong_ranks"].sum() + (checked.loc[~known, "wrong"] > 0).sum())


def average_busbw(df: pd.DataFrame) -> float:
    """nccl-tests' "Avg bus bandwidth": mean busbw over every line and placement, size 0 included."""
    return float(df["busbw"].mean()) if len(df) else float("nan")


def footer_lines(df: pd.DataFrame, notes: list[str] = ()) -> list[str]:
    """nccl-tests' footer for one collective, with the lab's ``# note:`` lines before its last line."""
    errors = failed_checks(df)
    op = str(df["op"].iloc[0]) if len(df) else "?"
    lines = [f"# {'Out of bounds values':<20} : {errors} {'FAILED' if errors else 'OK'}",
             f"# {'Avg bus bandwidth':<20} : {average_busbw(df):g} ",
             "#",
             f"# Collective test concluded: {nccl_tests_program(op) if op != '?' else op}",
             "#"]
    if "note" in df:
        for (name, placement), group in df[df["note"] != ""].groupby(["op", "placement"], sort=False):
            lines.append(f"# note: {name} {placement}: {group['note'].iloc[0]}")
    lines += [f"# note: {text}" for text in notes]
    return lines + [""]


def format_table(df: pd.DataFrame) -> str:
    """A sweep's DataFrame as nccl-tests prints it: header, lines, footer (one table per collective)."""
    tables = []
    for _, part in df.groupby("op", sort=False):
        tables.append("\n".join(header_lines() + result_lines(part) + footer_lines(part)))
    return "\n".join(tables)
