"""Put the notebook's file names and source lines back into tracebacks from the ranks.

cloudpickle ships a function's code with its file name replaced by
"<dynamic-code>", so a rank's traceback cannot show the learner's line. The
notebook process still knows where each function came from (IPython keeps cell
sources in linecache), so the parent rewrites those frames before showing them.
"""
from __future__ import annotations

import linecache
import re
import types

_DYNAMIC = re.compile(r'File "<dynamic-code>", line (?P<line>\d+),? in (?P<name>\S+)(?P<rest>.*)')


def code_origins(fn) -> dict[str, str]:
    """Map code names to file names for ``fn``, its nested functions and the functions it calls by name."""
    origins: dict[str, str] = {}
    seen: set[int] = set()

    def visit(code: types.CodeType, namespace: dict) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        origins.setdefault(code.co_name, code.co_filename)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit(const, namespace)
        for name in code.co_names:
            ref = namespace.get(name)
            if isinstance(ref, types.FunctionType):
                visit(ref.__code__, ref.__globals__)

    code = getattr(fn, "__code__", None)
    if code is not None:
        visit(code, getattr(fn, "__globals__", {}))
    return origins


def restore_frames(text: str, origins: dict[str, str]) -> str:
    """Rewrite "<dynamic-code>" frames with the original file name and, when known, the source line."""
    if "<dynamic-code>" not in text or not origins:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        match = _DYNAMIC.search(line)
        filename = origins.get(match["name"]) if match else None
        if filename is None:
            out.append(line)
            continue
        comma = "," if ", in " in match.group(0) else ""
        out.append(line[:match.start()] + f'File "{filename}", line {match["line"]}{comma} '
                   f'in {match["name"]}{match["rest"]}\n')
        source = linecache.getline(filename, int(match["line"])).strip()
        if source and comma:  # a traceback (not a faulthandler dump): show the line, as Python would
            out.append(f"    {source}\n")
    return "".join(out)
