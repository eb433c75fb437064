"""nccl-tests' text table: the same header, column widths, number format and footer.

The layout follows nccl-tests' ``src/util.cu`` (v2.19): a two-line column
header (out-of-place, then in-place), one line per size, and a footer with
"Out of bounds values" (elements that failed the data check) and "Avg bus
bandwidth" (the mean busbw over every measured line). Anyone used to reading
``all_reduce_perf`` output reads this one the same way.

Example
-------
>>> from labcore.live.bench.table import format_number
>>> format_number(12.3456, 6), format_number(123456.0, 7)
(' 12.35', ' 123456')
"""
from __future__ import annotations

import math

import pandas as pd

_KEY = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}"
_SIDE = "  {:>7}  {:>6}  {:>6}  {:>6}"


def header_lines() -> list[str]:
    """The three column-header lines nccl-tests prints above its results."""
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
    """A number in ``width`` characters: 2 decimals while they fit, then fewer, then exponent."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "N/A".rjust(width)
    digits = len(str(int(abs(value)))) if abs(value) >= 1 else 0
    if digits < width - 2:
        return f"{value:{width}.2f}"
    if digits < width - 1:
        return f"{value:{width}.1f}"
    if digits < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def _side(row) -> str:
    if row is None:
        return _SIDE.format("", "", "", "")
    wrong = "N/A" if int(row["wrong"]) < 0 else str(int(row["wrong"]))
    return _SIDE.format(format_number(row["time_us"], 7), format_number(row["algbw"], 6),
                        format_number(row["busbw"], 6), wrong)


def row_line(out_of_place, in_place) -> str:
    """One result line: size, count, type, redop, root, then each placement (either may be None)."""
    first = out_of_place if out_of_place is not None else in_place
    key = "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}".format(
        int(first["size"]), int(first["count"]), first["type"], first["redop"], int(first["root"]))
    return key + _side(out_of_place) + _side(in_place)


def result_lines(df: pd.DataFrame) -> list[str]:
    """One line per (op, size, type, redop, root), out-of-place beside in-place."""
    lines = []
    keys = ["op", "size", "count", "type", "redop", "root"]
    for _, group in df.groupby(keys, sort=False):
        by = {row["placement"]: row for _, row in group.iterrows()}
        lines.append(row_line(by.get("out-of-place"), by.get("in-place")))
    return lines


def footer_lines(df: pd.DataFrame) -> list[str]:
    """nccl-tests' footer, plus one ``# note:`` line per emulated placement."""
    checked = df[df["wrong"] >= 0]
    wrong = int(checked["wrong"].sum()) if len(checked) else 0
    moved = df[df["size"] > 0]
    avg = float(moved["busbw"].mean()) if len(moved) else 0.0
    lines = [f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}",
             f"# {'Avg bus bandwidth':<20} : {avg:g} ",
             "#"]
    if "note" in df:
        for (op, placement), notes in df[df["note"] != ""].groupby(["op", "placement"], sort=False)["note"]:
            lines.append(f"# note: {op} {placement}: {notes.iloc[0]}")
    return lines


def format_table(df: pd.DataFrame) -> str:
    """The whole nccl-tests-style table of a sweep's DataFrame (header, lines, footer)."""
    return "\n".join(header_lines() + result_lines(df) + footer_lines(df))
