"""Answers as data: what crosses from a learner's notebook to the grader, and back from their code.

A graded answer leaves the notebook as JSON, never as a pickle (unpickling runs whatever the
pickle names): :func:`encode` turns a value into JSON-able data, and :func:`decode` turns that data
back into values of the lab's own types, running nothing. A function or class travels as its
**source text** with the notebook globals it reads (modules by name, objects of installed modules
by import path, the notebook's other functions and classes by their source, data as data); decoded,
it is a :class:`Sourced`, which holds text and runs nothing until :meth:`Sourced.define` is called
where the learner's code may run (the grader's sandbox, the ranks of a live check). Pickling a
:class:`Sourced` (as a live check does, to send it to the ranks) defines it on the other side.

What cannot travel (an open file, a lock, a generator, an object of the learner's class) becomes an
*opaque* entry naming its type; using it there raises a NameError saying why. Encoding never runs a
method of the learner's: values are told apart by ``type()``, a class is read through ``type``'s own
descriptors (its metaclass is not asked), and an opaque value's ``repr`` is not taken. So the same
encoding sends a notebook's answer to the checker's child process (:mod:`labcore.exercises.checker`)
and to the grader, and what passes one passes the other.

Bounds: :data:`MAX_DEPTH` levels of nesting, :data:`MAX_NODES` values, :data:`MAX_BYTES` of JSON.

Example
-------
>>> data = encode([1, 2.5, "x", (True, None)])
>>> decode(data)
[1, 2.5, 'x', (True, None)]
>>> def double(n):
...     return 2 * n
>>> fn = decode(encode(double))
>>> fn.kind, fn.name
('function', 'double')
>>> fn.define()(21)
42
"""
from __future__ import annotations

import ast
import base64
import builtins
import collections
import decimal
import fractions
import functools
import importlib
import inspect
import itertools
import json
import linecache
import math
import os
import sys
import sysconfig
import textwrap
import types
from typing import Any

import numpy as np

from labcore.exercises.answers import type_name
from labcore.exercises.blank import ____, Blank

__all__ = ["encode", "decode", "dumps", "loads", "materialize", "Sourced", "CodecError", "MAX_BYTES", "MAX_DEPTH",
           "MAX_NODES"]

MAX_DEPTH = 32
MAX_NODES = 2_000_000
MAX_BYTES = 64 << 20
_NUMERIC = "biufc"


class CodecError(ValueError):
    """Data that is not an encoded answer (the message says where)."""


# -- encoding (the learner's side) ----------------------------------------------------------------
def dumps(value, *, inline_exercises: bool = False) -> str:
    """``value`` encoded, as JSON text of at most :data:`MAX_BYTES`. ``inline_exercises``: send the lab's own
    exercise code by its source too, not by import path (for a copy of the lab without it: a student release)."""
    text = json.dumps(encode(value, _seen={"inline": inline_exercises}), allow_nan=False, separators=(",", ":"))
    if len(text) > MAX_BYTES:
        raise CodecError(f"the answer is {len(text) >> 20} MiB as data, over the {MAX_BYTES >> 20} MiB the grader "
                         "reads: hand in something smaller")
    return text


_NUMPY_SCALARS = frozenset({np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                            np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128})
_WRAPPERS = frozenset({functools._lru_cache_wrapper})          # the standard decorators' own wrapper types
_SCALARS = {
    bytes: lambda v: {"bytes": base64.b64encode(v).decode()},
    complex: lambda v: {"complex": [encode(v.real), encode(v.imag)]},
    fractions.Fraction: lambda v: {"fraction": [str(v.numerator), str(v.denominator)]},
    decimal.Decimal: lambda v: {"decimal": str(v)},
    range: lambda v: {"range": [v.start, v.stop, v.step]},
    type(Ellipsis): lambda v: {"ellipsis": True},
    Blank: lambda v: {"blank": True},
}


def encode(value, _depth: int = 0, _seen: dict | None = None) -> Any:
    """JSON-able data for ``value`` (see the module docstring)."""
    seen = {} if _seen is None else _seen          # {id of code sent: its name}, and the "inline" option (a str key)
    if _depth > MAX_DEPTH:
        return _opaque(value, "nested too deeply")
    t = type(value)
    if value is None or t in (bool, str):
        return value
    if t is int:
        return value if abs(value) < 2 ** 53 else {"int": str(value)}
    if t is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if t in (list, tuple, set, frozenset):
        return {t.__name__: [encode(v, _depth + 1, seen) for v in value]}
    if t is dict:
        return {"dict": [[encode(k, _depth + 1, seen), encode(v, _depth + 1, seen)] for k, v in value.items()]}
    if t in _SCALARS:
        return _SCALARS[t](value)
    return _arrays_and_code(value, _depth, seen)


def _arrays_and_code(value, depth: int, seen: dict) -> Any:
    t = type(value)
    if t is np.ndarray and value.dtype.kind in _NUMERIC:
        return {"ndarray": [value.dtype.str, list(value.shape), base64.b64encode(value.tobytes()).decode()]}
    if t in _NUMPY_SCALARS:
        return {"npscalar": [np.dtype(t).str, base64.b64encode(np.asarray(value).tobytes()).decode()]}
    special = _special(value, depth, seen)
    if special is not None:
        return special
    if t is types.ModuleType:
        return {"module": value.__name__}
    wrapped = value.__dict__.get("__wrapped__") if t is types.FunctionType else \
        value.__wrapped__ if t in _WRAPPERS else None
    if type(wrapped) is types.FunctionType:                # a decorated function: its own source holds the decorator
        return _code(wrapped, depth, seen)
    if t is types.FunctionType or issubclass(t, type):
        return _code(value, depth, seen)
    return _opaque(value, "not data that can be copied")


def _special(value, depth: int, seen: dict):
    """A tensor, a DataFrame: types the answers may hold, found without importing them."""
    t = type(value)
    torch = sys.modules.get("torch")
    if torch is not None and t in (torch.Tensor, torch.nn.Parameter) and not value.dtype.is_complex:
        try:
            tensor = value.detach().cpu()
            array = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).contiguous().numpy()
        except (RuntimeError, TypeError) as err:
            return _opaque(value, f"a tensor numpy cannot hold ({err})")
        return {"tensor": [array.dtype.str, list(array.shape), base64.b64encode(array.tobytes()).decode()]}
    pandas = sys.modules.get("pandas")
    if pandas is not None and t is pandas.DataFrame:
        return {"frame": [[encode(c, depth + 1, seen), encode(value[c].tolist(), depth + 1, seen)]
                          for c in value.columns]}
    if pandas is not None and t is pandas.Series:
        return {"series": [encode(value.index.tolist(), depth + 1, seen), encode(value.tolist(), depth + 1, seen),
                           encode(value.name, depth + 1, seen)]}
    if pandas is not None and t is pandas.Index:
        return {"index": [encode(value.tolist(), depth + 1, seen), encode(value.name, depth + 1, seen)]}
    if t in (collections.OrderedDict, collections.defaultdict, collections.Counter):    # read as the dict it is
        return {"dict": [[encode(k, depth + 1, seen), encode(v, depth + 1, seen)] for k, v in dict.items(value)]}
    return None


def _opaque(value, why: str) -> dict:
    """What cannot travel, named by its type (read without asking it); its repr is not taken."""
    return {"opaque": [type_name(value), "", why]}


def _installed(module) -> bool:
    """Whether a module comes with Python or an installed package (the lab's own included), not from the
    notebook's folder: only those are found again where the answer is checked."""
    path = getattr(module, "__file__", None)
    if path is None:
        return module is not None                           # built into the interpreter
    path = os.path.realpath(path)
    roots = {os.path.realpath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
             for p in [sysconfig.get_paths().get(key)] if p}
    lab = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    return path.startswith(lab + os.sep) or any(path.startswith(r + os.sep) for r in roots)


def _names(value) -> tuple:
    """(module, qualname) of a function or class, read without asking the class's metaclass."""
    if type(value) is types.FunctionType:
        return value.__module__, value.__qualname__
    return type.__dict__["__module__"].__get__(value), type.__dict__["__qualname__"].__get__(value)


def _importable(value, inline: bool = False) -> tuple[str, str] | None:
    """(module, qualname) when ``value`` is found again by importing it from an installed module."""
    module, qualname = _names(value)
    if type(module) is not str or type(qualname) is not str or module == "__main__" or "<" in qualname:
        return None
    if inline and module.startswith("labcore.exercises."):
        return None
    found = sys.modules.get(module)
    if not _installed(found):
        return None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return (module, qualname) if found is value else None


def _code(value, depth: int, seen: dict) -> dict:
    """A function or class: where to import it from, or its source and the globals it reads."""
    where = _importable(value, seen.get("inline", False))
    if where is not None:
        return {"import": list(where)}
    key = id(value)
    name = _names(value)[1].rsplit(".", 1)[-1]
    if key in seen:
        return {"ref": seen[key]}
    seen[key] = name
    kind = "class" if issubclass(type(value), type) else "function"
    source = _source(value)
    if source is None:
        return _opaque(value, "its source cannot be read (define it with def in a notebook cell)")
    codes = [value.__code__] if kind == "function" else _method_codes(value)
    names = _source_names(source)
    for code in codes:
        names |= _global_names(code)
    scope = value.__globals__ if kind == "function" else _class_globals(value)
    glob = {n: encode(scope[n], depth + 1, seen) for n in sorted(names) if n in scope and n != name}
    spec = {"name": name, "source": source, "globals": glob}
    if kind == "function" and value.__closure__:
        spec["closure"] = {n: encode(_cell(c), depth + 1, seen)
                           for n, c in zip(value.__code__.co_freevars, value.__closure__)}
    return {kind: spec}


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:                  # a cell not yet filled
        return None


def _global_names(code: types.CodeType, depth: int = 0) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if type(const) is types.CodeType and depth < MAX_DEPTH:
            names |= _global_names(const, depth + 1)
    return names


def _source_names(source: str) -> set[str]:
    """The names a source reads, decorators, defaults and annotations included (they run at definition)."""
    try:
        return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def _class_vars(cls) -> dict:
    """A class's own attributes, through ``type``'s descriptor (its metaclass is not asked)."""
    return type.__dict__["__dict__"].__get__(cls)


def _method_codes(cls) -> list[types.CodeType]:
    out = []
    for value in _class_vars(cls).values():
        fn = value.__func__ if type(value) in (staticmethod, classmethod) else value
        if type(fn) is types.FunctionType:
            out.append(fn.__code__)
    return out


def _class_globals(cls) -> dict:
    for value in _class_vars(cls).values():
        fn = value.__func__ if type(value) in (staticmethod, classmethod) else value
        if type(fn) is types.FunctionType:
            return fn.__globals__
    return {}


def _source(value) -> str | None:
    """The source of a function or class, the lambda alone for a lambda; None when it cannot be read."""
    if issubclass(type(value), type):
        return _class_source(value)
    try:
        lines, _ = inspect.getsourcelines(value)
    except (OSError, TypeError):
        return None
    if value.__name__ != "<lambda>":
        return textwrap.dedent("".join(lines))
    return _lambda_source("".join(lines), value.__code__)


def _lambda_source(text: str, code: types.CodeType) -> str | None:
    """The lambda of ``text`` whose body starts where ``code``'s does: the longest piece from its
    ``lambda`` on that parses as one expression (the lines around it need not parse)."""
    positions = [p for p in code.co_positions() if p[0] is not None and p[2] is not None and p[3] > p[2]]
    if not positions:
        return None
    line, column = min((p[0], p[2]) for p in positions)
    lines = text.splitlines(keepends=True)
    row = line - code.co_firstlineno
    if not 0 <= row < len(lines):
        return None
    start = text.rfind("lambda", 0, sum(len(x) for x in lines[:row]) + column)   # its body's start, then back
    if start < 0:
        return None
    rest = text[start:]
    for end in range(len(rest), 0, -1):
        if end < len(rest) and rest[end] not in "),]}\n":
            continue
        try:
            node = ast.parse(f"({rest[:end]})", mode="eval").body
        except SyntaxError:
            continue
        if isinstance(node, ast.Lambda):
            return rest[:end]
    return None


def _class_source(cls) -> str | None:
    """A class's source, found from its methods' code (a notebook's class has no file to look in)."""
    for code in _method_codes(cls):
        lines = linecache.getlines(code.co_filename)
        if not lines:
            continue
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == _names(cls)[1].rsplit(".", 1)[-1] \
                    and node.lineno <= code.co_firstlineno <= node.end_lineno:
                return textwrap.dedent(ast.get_source_segment("".join(lines), node, padded=True))
    return None


# -- decoding (the grader's side: runs nothing) ----------------------------------------------------------
def loads(text: str):
    """:func:`decode` of JSON text (at most :data:`MAX_BYTES`)."""
    if not isinstance(text, str) or len(text) > MAX_BYTES:
        raise CodecError(f"an answer is JSON text of at most {MAX_BYTES >> 20} MiB")
    try:
        return decode(json.loads(text))
    except (ValueError, RecursionError) as err:
        raise CodecError(f"not an encoded answer: {err}") from None


def decode(data, _depth: int = 0, _count: list | None = None):
    """The value ``data`` encodes; functions and classes as :class:`Sourced` (never run here)."""
    count = [0] if _count is None else _count
    count[0] += 1
    if _depth > MAX_DEPTH + 2 or count[0] > MAX_NODES:
        raise CodecError("the answer is nested too deeply or holds too many values")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is not dict or len(data) != 1:
        raise CodecError(f"unexpected {type(data).__name__} in an encoded answer")
    (kind, body), = data.items()
    rec = lambda v: decode(v, _depth + 1, count)           # noqa: E731
    try:
        if kind in ("list", "tuple", "set", "frozenset"):
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](rec(v) for v in body)
        if kind == "dict":
            return {rec(k): rec(v) for k, v in body}
        return _DECODERS[kind](body, rec)
    except CodecError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise CodecError(f"a malformed {kind!r} in an encoded answer ({err})") from None


def _array(body) -> np.ndarray:
    dtype, shape, raw = body
    dtype = np.dtype(str(dtype))
    if dtype.kind not in _NUMERIC:
        raise CodecError(f"an array of {dtype} is not data")
    return np.frombuffer(base64.b64decode(raw), dtype=dtype).reshape([int(s) for s in shape]).copy()


def _tensor(body, rec):
    import torch

    return torch.from_numpy(_array(body))


def _frame(body, rec):
    import pandas as pd

    return pd.DataFrame({rec(c): rec(v) for c, v in body})


def _series(body, rec):
    import pandas as pd

    index, values, name = body
    return pd.Series(rec(values), index=rec(index), name=rec(name))


def _index(body, rec):
    import pandas as pd

    values, name = body
    return pd.Index(rec(values), name=rec(name))


_DECODERS = {
    "int": lambda b, rec: int(str(b)),
    "float": lambda b, rec: float({"nan": "nan", "inf": "inf", "-inf": "-inf"}[b]),
    "bytes": lambda b, rec: base64.b64decode(b),
    "complex": lambda b, rec: complex(float(b[0]), float(b[1])),
    "fraction": lambda b, rec: fractions.Fraction(int(b[0]), int(b[1])),
    "decimal": lambda b, rec: decimal.Decimal(str(b)),
    "range": lambda b, rec: range(int(b[0]), int(b[1]), int(b[2])),
    "ellipsis": lambda b, rec: Ellipsis,
    "ndarray": lambda b, rec: _array(b),
    "npscalar": lambda b, rec: np.frombuffer(base64.b64decode(b[1]), dtype=np.dtype(str(b[0])))[0],
    "tensor": _tensor,
    "frame": _frame,
    "series": _series,
    "index": _index,
    "blank": lambda b, rec: ____,
    "function": lambda b, rec: Sourced("function", b),
    "class": lambda b, rec: Sourced("class", b),
    "import": lambda b, rec: Sourced("import", {"module": str(b[0]), "name": str(b[1])}),
    "module": lambda b, rec: Sourced("module", {"module": str(b)}),
    "ref": lambda b, rec: Sourced("ref", {"name": str(b)}),
    "opaque": lambda b, rec: Sourced("opaque", {"type": str(b[0]), "repr": str(b[1]), "why": str(b[2])}),
}


# -- the learner's code, held as text -----------------------------------------------------------------------
class Sourced:
    """A function or class of the learner's, held as its source and the globals it reads.

    ``kind``: "function", "class", "import" (an object of an installed module), "module", "ref" (the
    function being defined, named again), or "opaque". Nothing runs until :meth:`define`.
    """

    def __init__(self, kind: str, spec: dict):
        if not isinstance(spec, dict):
            raise CodecError(f"a malformed {kind} in an encoded answer")
        self.kind, self.spec = kind, spec
        if kind in ("function", "class"):
            for key in ("name", "source"):
                if not isinstance(spec.get(key), str):
                    raise CodecError(f"a {kind} in an encoded answer without its {key}")
            if not isinstance(spec.get("globals", {}), dict) or not isinstance(spec.get("closure", {}), dict):
                raise CodecError(f"a malformed {kind} in an encoded answer")

    @property
    def name(self) -> str:
        return str(self.spec.get("name", self.spec.get("module", "?")))

    @property
    def source(self) -> str:
        return self.spec.get("source", "")

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name} (handed in as source)>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self!r} runs only where learners' code may run: define() it there")

    def __reduce__(self):
        return (_define, (self.kind, self.spec))

    def items(self) -> dict:
        """The globals this code reads, decoded (as Sourced where they are code)."""
        return {name: decode(value) for name, value in self.spec.get("globals", {}).items()}

    def define(self):
        """The function or class itself, defined here from its source (this runs the learner's code)."""
        return _define(self.kind, self.spec)


def _define(kind: str, spec: dict, namespace: dict | None = None):
    """Build what a Sourced holds (see :meth:`Sourced.define`); the notebook's functions it reads are
    defined in the same namespace, so that they find each other by name as in the notebook."""
    if kind == "module":
        return importlib.import_module(spec["module"])
    if kind == "import":
        found = importlib.import_module(spec["module"])
        for part in spec["name"].split("."):
            found = getattr(found, part)
        return found
    if kind == "opaque":
        return _Missing(spec.get("type", "value"), spec)
    if kind not in ("function", "class"):
        raise CodecError(f"{kind} is not code to define")
    namespace = {"__name__": "__main__", "__builtins__": builtins} if namespace is None else namespace
    for name, value in spec.get("globals", {}).items():
        item = decode(value)
        if isinstance(item, Sourced):
            if item.kind == "ref":
                continue                   # defined in this namespace by the code that named it
            item = (_Missing(name, item.spec) if item.kind == "opaque" else
                    _define(item.kind, item.spec, namespace) if item.kind in ("function", "class") else item.define())
        namespace[name] = item
    source, name = spec["source"], spec["name"]
    if name == "<lambda>":
        source, name = f"__lambda__ = (\n{source}\n)", "__lambda__"
    closure = {n: decode(v) for n, v in spec.get("closure", {}).items()}
    if closure:
        outer = f"def __outer__({', '.join(closure)}):\n{textwrap.indent(source, '    ')}\n    return {name}\n"
        exec(_compiled(outer, spec["name"]), namespace)
        values = [v.define() if isinstance(v, Sourced) else v for v in closure.values()]
        return namespace.pop("__outer__")(*values)
    exec(_compiled(source, spec["name"]), namespace)
    return namespace[name]


_DEFINED = itertools.count()


def _compiled(source: str, name: str):
    """``source`` compiled under a name of its own, its lines kept where ``inspect`` looks (as IPython keeps a
    cell's): a function defined here has its source, to be sent on or shown in a traceback."""
    filename = f"<{name}: handed in #{next(_DEFINED)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return compile(source, filename, "exec")


def materialize(value):
    """A decoded answer made whole where the learner's code may run: its functions and classes defined
    (in a tuple or list too), what could not travel a stand-in that says so when used."""
    if type(value) is Sourced:
        return _Missing("your answer", value.spec) if value.kind == "opaque" else value.define()
    if type(value) in (tuple, list):
        return type(value)(materialize(v) for v in value)
    return value


class _Missing:
    """A value the learner's code reads that could not be copied with it: any use says so."""

    def __init__(self, name: str, spec: dict):
        self._why = (f"{name} (a {spec.get('type', 'value')}) cannot be copied to where your code is checked "
                     f"({spec.get('why', '')}): define it inside your function")

    def __getattr__(self, attr):
        raise NameError(self._why)

    def __call__(self, *args, **kwargs):
        raise NameError(self._why)

