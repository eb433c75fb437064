"""A large JSON document of many records, read one record at a time within a memory budget.

``json.loads`` of a profiler trace holds about five times the file in Python objects, and far
more for a file of tiny records (``{}`` is 3 bytes of text and about 70 of objects). :func:`read_records`
reads a top-level object whose one big field is a list of records (a Kineto trace's ``traceEvents``):

1. **a structural scan** (numpy, a quarter MiB at a time, strings and escapes honoured) finds where
   each top-level field's value ends, the largest record, the nesting depth and, in each quarter
   MiB, a comma between two records, holding nothing of the document;
2. the records are then decoded a batch at a time (``json.loads`` of the records between two of
   those commas, a slice small enough for the budget, at C speed); a record is kept only if ``keep``
   returns something, and what is kept is counted against the budget.

Refused in one line, before the memory is spent: a document nested too deeply, a record so large
that reading it alone could pass the budget, more kept than the budget, a top-level field other
than the records over :data:`FIELD_BYTES`, a document that is not an object of fields, or not
UTF-8. The text is read as latin-1 (one byte, one character, so the scan's byte offsets are its
positions) and the strings kept are turned back into UTF-8's.

Example
-------
>>> top, rows = read_records(b'{"n": 1, "items": [{"a": 1}, {"a": 2}, 3]}', "items",
...                          keep=lambda i, r: r if isinstance(r, dict) else None, fields=("n",), budget=1 << 20)
>>> top, rows
({'n': 1}, [{'a': 1}, {'a': 2}])
"""
from __future__ import annotations

import codecs
import json
import sys
from typing import Callable

import numpy as np

__all__ = ["read_records", "scan", "size_of", "Structure", "FIELD_BYTES", "MAX_DEPTH", "OBJECTS_PER_BYTE"]

_CHUNK = 1 << 18
MAX_DEPTH = 256                  # nesting a document may have (a trace nests a handful of levels)
FIELD_BYTES = 4 << 20            # a top-level field other than the records: the most read
OBJECTS_PER_BYTE = 24            # bytes of Python objects one byte of JSON can become at worst ([] in a list)
_MAX_FIELDS = 10_000
_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


class Structure:
    """What the scan found: ``ends`` {start: end} of each top-level field's container value (byte offsets,
    end inclusive), the largest container inside one (``largest``, bytes), ``cuts`` (a comma between two
    records, at most one a quarter MiB, in order), ``ascii``."""

    def __init__(self):
        self.ends: dict[int, int] = {}
        self.largest = 0
        self.cuts: list[int] = []
        self.ascii = True


def scan(data, depth_limit: int = MAX_DEPTH) -> Structure:
    """Scan ``data`` (bytes or bytearray) for its structure; ValueError("...") on what cannot be JSON."""
    arr = np.frombuffer(data, dtype=np.uint8)
    found, depth, inside, slashes = Structure(), 0, 0, 0
    open2, open3 = None, None
    for off in range(0, len(arr), _CHUNK):
        a = arr[off:off + _CHUNK]
        found.ascii = found.ascii and not bool((a >= 0x80).any())
        slash = a == 92
        index = np.arange(len(a))
        last = np.maximum.accumulate(np.where(slash, -1, index))          # last non-backslash at or before i
        before = np.empty(len(a), dtype=np.int64)                         # backslashes right before i
        before[0] = slashes
        before[1:] = index[:-1] - last[:-1] + np.where(last[:-1] < 0, slashes, 0)
        quote = (a == 34) & (before % 2 == 0)
        in_string = (np.cumsum(quote) + inside) & 1
        opens = ((a == 123) | (a == 91)) & (in_string == 0)
        closes = ((a == 125) | (a == 93)) & (in_string == 0)
        after = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32)) + depth
        if len(after) and (after.min() < 0 or after.max() > depth_limit):
            raise ValueError("is JSON nested too deeply to be read" if after.max() > depth_limit else
                             "is not JSON (a bracket closes what was not opened)")
        commas = np.flatnonzero((a == 44) & (in_string == 0) & (after == 2))
        if commas.size:
            found.cuts.append(off + int(commas[-1]))
        for pos in np.flatnonzero((opens & (after == 2)) | (closes & (after == 1))):   # top-level fields: few
            here = off + int(pos)
            if opens[pos]:
                open2 = here
            elif open2 is not None:
                found.ends[open2] = here
                if len(found.ends) > _MAX_FIELDS:
                    raise ValueError(f"has over {_MAX_FIELDS:,} top-level fields: it is not a document of records")
        starts = np.flatnonzero(opens & (after == 3)) + off        # records (of any top-level list): many, paired
        ends = np.flatnonzero(closes & (after == 2)) + off         # alike, with numpy (they alternate)
        if open3 is not None:
            starts = np.concatenate(([open3], starts))
        paired = min(len(starts), len(ends))
        if paired:
            found.largest = max(found.largest, int((ends[:paired] - starts[:paired]).max()) + 1)
        open3 = int(starts[-1]) if len(starts) > paired else None
        depth = int(after[-1]) if len(after) else depth
        inside = int(in_string[-1]) if len(a) else inside
        slashes = (len(a) + slashes if last[-1] < 0 else len(a) - 1 - int(last[-1])) if len(a) else slashes
    if depth != 0:
        raise ValueError("is not JSON (it ends before its brackets close)")
    return found


def _utf8(value):
    """Strings read as latin-1 turned back into the UTF-8 text they are (keys and values, nested)."""
    if isinstance(value, str):
        return value.encode("latin-1").decode("utf-8")
    if isinstance(value, list):
        return [_utf8(v) for v in value]
    if isinstance(value, dict):
        return {_utf8(k): _utf8(v) for k, v in value.items()}
    return value


def _check_utf8(data) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    for off in range(0, len(data), _CHUNK):
        try:
            decoder.decode(bytes(data[off:off + _CHUNK]), final=off + _CHUNK >= len(data))
        except UnicodeDecodeError as err:
            raise ValueError(f"is not UTF-8 text ({err.reason} at byte {off + err.start})") from None


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _expect(text: str, pos: int, chars: str) -> int:
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] not in chars:
        raise ValueError(f"is not JSON (expected {' or '.join(map(repr, chars))} at byte {pos})")
    return pos


def size_of(value, depth: int = 0) -> int:
    """Bytes ``value`` holds in Python (containers and what they hold, a few levels deep; a dict's keys
    not counted: a keeper names them with its own strings, shared by every record)."""
    size = sys.getsizeof(value)
    if depth < 6 and isinstance(value, (list, tuple)):
        size += sum(size_of(v, depth + 1) for v in value)
    elif depth < 6 and isinstance(value, dict):
        size += sum(size_of(v, depth + 1) for v in value.values())
    return size


def read_records(data, key: str, keep: Callable[[int, object], object], *, fields=(), budget: int):
    """({field: value} of the top-level ``fields``, [what ``keep(index, record)`` returned that is not None])
    for a JSON object whose field ``key`` is a list of records (see the module docstring). ``data``: bytes,
    or a bytearray, which is emptied once its text is read (so that the two are never held long).

    ``budget``: bytes of Python objects the kept records, and any one record while it is read, may take.
    Raises ValueError whose message follows the file's name ("is not JSON (...)", ...).
    """
    found = scan(data)
    reading = found.largest * OBJECTS_PER_BYTE          # the most one record can take while it is read
    if reading > budget // 2:
        raise ValueError(f"holds a record of {found.largest:,} bytes, more than the lab reads in memory at once")
    if not found.ascii:
        _check_utf8(data)
    text = data.decode("latin-1")
    if isinstance(data, bytearray):
        data.clear()                                     # the caller's copy of the bytes goes: the text is read now
    fix = (lambda v: v) if found.ascii else _utf8
    pos = _expect(text, 0, "{[")
    if text[pos] != "{":
        raise ValueError(f"has no {key} list (it is not an object of fields)")
    top, records = {}, None
    pos = _skip(text, pos + 1)
    closing = pos < len(text) and text[pos] == "}"
    while not closing:
        pos = _expect(text, pos, '"')
        try:
            name, pos = json.decoder.scanstring(text, pos + 1)
            value_at = _skip(text, _expect(text, pos, ":") + 1)
            end = found.ends.get(value_at)
            if name == key and end is not None and text[value_at] == "[":
                records = _records(text, value_at, end, keep, fix, budget - reading, found.cuts)
                pos = end + 1
            elif end is not None:                     # a container: read if wanted and small, else skipped
                if name in fields:
                    if end - value_at > FIELD_BYTES:
                        raise ValueError(f"has a {name} of {end - value_at:,} bytes, over the {FIELD_BYTES >> 20} MiB "
                                         "read")
                    top[name] = fix(_DECODER.raw_decode(text, value_at)[0])
                pos = end + 1
            else:
                value, pos = _DECODER.raw_decode(text, value_at)
                if name in fields:
                    top[name] = fix(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"is not JSON ({err})") from None
        pos = _expect(text, pos, ",}")
        closing = text[pos] == "}"
        pos += 0 if closing else 1
    if _skip(text, pos + 1) != len(text):
        raise ValueError(f"is not JSON (extra data after byte {pos})")
    if records is None:
        raise ValueError(f"has no {key} list")
    return top, records


def _records(text: str, start: int, end: int, keep, fix, budget: int, cuts: list[int]) -> list:
    """The kept records of the list at ``start``..``end`` (inclusive), within ``budget`` bytes, decoded a
    batch (the records between two ``cuts``) at a time."""
    batch = max(budget // (4 * OBJECTS_PER_BYTE), 1 << 16)
    kept, spent, index = [], 0, 0
    inside = [c for c in cuts if start < c < end] + [end]
    pos, k = start + 1, 0
    while pos < end:
        while inside[k] < pos + batch and inside[k] != end:
            k += 1
        cut = inside[k]
        try:
            records = json.loads(f"[{text[pos:cut]}]")
        except json.JSONDecodeError as err:
            raise ValueError(f"is not JSON ({err.msg} near byte {pos + max(err.pos - 1, 0)})") from None
        for record in records:
            item = keep(index, record)
            index += 1
            if item is not None:
                kept.append(fix(item))
                spent += size_of(item) + 8
                if spent > budget:
                    raise ValueError(f"holds more records than the lab reads in memory ({len(kept):,} kept, "
                                     f"{spent >> 20} MiB)")
        del records
        pos = cut + 1
    return kept
