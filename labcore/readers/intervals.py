"""Spans of time as sorted, disjoint intervals: the one set of helpers the recorder, the trace reader and
replay use to say when communication ran, when compute ran, and what of one hid the other.

A span is ``(start, end)`` in any unit; an *interval list* is sorted and disjoint, as :func:`union` makes it.
Each operation is one pass over its inputs, so a step of n collectives costs n, not n**2.

Example
-------
>>> comm = union([(0, 4), (3, 6), (10, 12)])
>>> comm
[(0, 6), (10, 12)]
>>> intersect(comm, [(5, 11)]), subtract(comm, [(5, 11)]), length(comm)
([(5, 6), (10, 11)], [(0, 5), (11, 12)], 8.0)
>>> overlaps(comm, 6, 10), overlaps(comm, 5, 7)
(False, True)
"""
from __future__ import annotations

from bisect import bisect_right

__all__ = ["union", "intersect", "subtract", "length", "overlaps"]


def union(spans) -> list[tuple]:
    """The sorted, disjoint intervals covering ``spans`` (empty and reversed spans left out)."""
    out: list[list] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        elif b > a:
            out.append([a, b])
    return [(a, b) for a, b in out]


def intersect(x: list, y: list) -> list[tuple]:
    """Where two interval lists overlap."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(base: list, cut: list) -> list[tuple]:
    """``base`` minus ``cut``, both interval lists."""
    out, j = [], 0
    for a, b in base:
        while j < len(cut) and cut[j][1] <= a:       # cuts wholly before this interval
            j += 1
        x, k = a, j
        while k < len(cut) and cut[k][0] < b:        # cuts reaching into it, in order
            c, d = cut[k]
            if c > x:
                out.append((x, c))
            x = max(x, d)
            if d >= b:
                break
            k += 1
        if x < b:
            out.append((x, b))
    return out


def length(spans) -> float:
    """The total length of an interval list."""
    return float(sum(b - a for a, b in spans))


def overlaps(intervals: list, a, b) -> bool:
    """Does any interval of the list intersect the open span (a, b)?"""
    i = bisect_right(intervals, a, key=lambda span: span[1])
    return i < len(intervals) and intervals[i][0] < b
