"""Reading an answer with the lab's own types, so that the answer never decides its own grade.

An answer is any object a learner hands to ``check()``: a number, a list, a tensor, or an object
of their own whose ``__eq__`` says True to everything, whose ``__repr__`` raises, or whose
``__class__`` claims to be a float. The functions here turn an answer into a value of a type the
lab knows (int, float, str, list, a float64 ``numpy`` array, a dict with the lab's own keys) by
looking at ``type(answer)`` (never ``isinstance``, which ``__class__`` can fool) and reading the
value through the base type's own methods (``float.__float__(x)``, ``list.__getitem__(x, i)``),
so that no method of the answer runs. What cannot be read that way is not a number, not a list,
...: the check says so. Comparisons (:func:`equal`, :func:`close_number`) are then between the
lab's own values. The only methods of an answer the lab calls are its ``repr`` (for feedback, in
:func:`describe_answer`) and the learner's own functions; both run as the learner's code
(:func:`labcore.exercises.timing.learner_code`: time-limited), and what they raise is a message
about the answer.

Example
-------
>>> class Liar:
...     def __eq__(self, other):
...         return True
>>> equal(Liar(), 3)
False
>>> as_number(3.5), as_number("3.5"), as_items((1, 2))
(3.5, None, [1, 2])
"""
from __future__ import annotations

import decimal
import fractions
import math
import sys

import numpy as np

from labcore.exercises.blank import Blank
from labcore.exercises.timing import learner_code

__all__ = ["type_name", "describe_answer", "safe_repr", "safe_str", "as_number", "as_whole", "as_text", "as_items",
           "as_array", "as_one_number", "as_mapping", "as_pairs", "as_tensor", "holds_text", "equal", "close_number",
           "spelling", "is_plain"]

_NUMPY_REALS = frozenset({np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                          np.float16, np.float32, np.float64, np.longdouble})
_PLAIN = frozenset({int, float, bool, complex, str, bytes, type(None), type(Ellipsis)})
_DEPTH = 32          # nesting a list may have (a list that holds itself is not a value)
_PLAIN_ITEMS = 100_000   # items :func:`is_plain` looks at before it calls an answer code


def type_name(x) -> str:
    """The name of ``x``'s class, read without asking ``x`` (or its metaclass) anything."""
    try:
        name = type.__dict__["__name__"].__get__(type(x))
    except Exception:
        return "object"
    return name if type(name) is str else "object"


def safe_str(x, limit: int = 400) -> str:
    """``str(x)`` for an exception or answer that may be the learner's: never raises (a str that
    raises says so), time-limited as the learner's code."""
    if type(x) in _PLAIN:
        text = str(x)
    else:
        try:
            text = learner_code(str, x)
        except Exception as err:
            text = f"<its str raised {type_name(err)}>"
        if type(text) is not str:
            text = f"<a {type_name(x)}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def safe_repr(x, limit: int = 60) -> str:
    """What feedback shows of an answer: the lab's own repr for plain values, the answer's own
    ``repr`` otherwise (run as the learner's code; one that raises is named, not propagated)."""
    if type(x) is float:
        text = f"{x:.6g}"
    elif type(x) in _PLAIN:
        text = repr(x)
    else:
        try:
            text = learner_code(repr, x)
        except Exception as err:
            text = f"<a {type_name(x)} whose repr raised {type_name(err)}>"
        if type(text) is not str:
            text = f"<a {type_name(x)}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe_answer(x) -> str:
    """``x`` for feedback: its repr (cut to 60 characters) and its type, e.g. ``'3' (a str)``."""
    return f"{safe_repr(x)} (a {type_name(x)})"


def is_plain(x) -> bool:
    """Whether ``x`` is data only: numbers, text, bytes, None and exact lists, tuples, dicts and sets of
    them, numpy numbers and arrays of numbers, plain tensors (no subclass: nothing of the learner's
    that a check could call). A function, a class, an object of the learner's, or more than
    100,000 items is not: its check runs apart (:mod:`labcore.exercises.checker`)."""
    todo, seen = [(x, 0)], 0
    while todo:
        item, depth = todo.pop()
        seen += 1
        t = type(item)
        if seen > _PLAIN_ITEMS or depth > _DEPTH:
            return False
        if t in _PLAIN or t in _NUMPY_REALS or t in (np.bool_, fractions.Fraction, decimal.Decimal, range):
            continue
        if t is np.ndarray:
            if item.dtype.kind not in "biufc":
                return False
            continue
        if _torch_tensor(item):
            continue
        if t in (list, tuple, set, frozenset):
            todo += [(i, depth + 1) for i in (list.__iter__ if t is list else tuple.__iter__ if t is tuple
                                              else (set if t is set else frozenset).__iter__)(item)]
            continue
        if t is dict:
            todo += [(v, depth + 1) for pair in dict.items(item) for v in pair]
            continue
        if t is Blank:
            continue
        return False
    return True


def _torch():
    return sys.modules.get("torch")          # a tensor can only be an answer once torch is imported


def _pandas_vector(x) -> bool:
    """Whether ``x`` is exactly a pandas Series or Index (what a hint's ``gate.loc[..., 'size']`` gives)."""
    pd = sys.modules.get("pandas")
    return pd is not None and type(x) in (pd.Series, pd.Index)


def _torch_tensor(x) -> bool:
    torch = _torch()
    return torch is not None and type(x) in (torch.Tensor, torch.nn.Parameter)


def _read_number(x):
    """``(value, eps)`` when ``x`` is one real number of a type the lab knows (value an int or a
    float; eps the precision of its floating type, 0 otherwise); None for anything else."""
    t = type(x)
    if t is bool or t is np.bool_:
        return None                                   # a yes/no is not a number
    if t in _NUMPY_REALS:
        value = np.generic.item(x)
        return value, (float(np.finfo(t).eps) if issubclass(t, np.floating) else 0.0)
    if issubclass(t, int):
        return int.__index__(x), 0.0                  # IntEnum and other subclasses: the int itself
    if issubclass(t, float):
        return float.__float__(x), 0.0
    if t in (fractions.Fraction, decimal.Decimal):
        return float(x), 0.0
    if t is np.ndarray and x.ndim == 0 and x.dtype.kind in "iuf":
        return x.item(), (float(np.finfo(x.dtype).eps) if x.dtype.kind == "f" else 0.0)
    if _torch_tensor(x) and x.dim() == 0 and not x.dtype.is_complex and x.dtype != _torch().bool:
        eps = float(_torch().finfo(x.dtype).eps) if x.dtype.is_floating_point else 0.0
        return x.item(), eps
    return None


def as_number(x) -> int | float | None:
    """``x`` as one int or float (numpy and torch numbers too), or None if it is none (text, yes/no,
    containers and objects of the learner's own are not numbers)."""
    read = _read_number(x)
    return None if read is None else read[0]


def as_whole(x) -> int | None:
    """``x`` as an int when it is a whole number (int, numpy or torch integer, 8.0), else None."""
    v = as_number(x)
    if v is None or (type(v) is float and (not math.isfinite(v) or not v.is_integer())):
        return None
    return int(v)



def as_text(x) -> str | None:
    """``x`` as a str when it is one (a subclass gives its characters; its methods are not asked)."""
    return str.__str__(x) if issubclass(type(x), str) else None


def as_items(x) -> list | None:
    """The items of a list, tuple, range, numpy array or tensor (one level), or None."""
    t = type(x)
    if issubclass(t, list):
        return [list.__getitem__(x, i) for i in range(list.__len__(x))]
    if issubclass(t, tuple):
        return [tuple.__getitem__(x, i) for i in range(tuple.__len__(x))]
    if t is range:
        return list(x)
    if t is np.ndarray and x.ndim >= 1:
        return list(x)
    if _pandas_vector(x):
        return list(x.to_numpy())             # the values, in order (a Series' index is not the answer)
    if _torch_tensor(x) and x.dim() >= 1:
        return list(x.detach().cpu().unbind(0))
    return None


def as_array(x, _depth: int = 0) -> np.ndarray | None:
    """``x`` as a float64 numpy array: a number, or (nested) lists, tuples, arrays and tensors of
    numbers with one shape; None for anything else (text, yes/no, ragged lists, other objects)."""
    if _depth > _DEPTH:
        return None
    number = as_number(x)
    if number is not None:
        return np.array(float(number))
    if type(x) is np.ndarray:
        return x.astype(float) if x.dtype.kind in "iuf" else None
    if _torch_tensor(x):
        if x.dtype.is_complex or x.dtype == _torch().bool:
            return None
        return x.detach().cpu().double().numpy()
    items = as_items(x)
    if items is None:
        return None
    parts = [as_array(item, _depth + 1) for item in items]
    if any(p is None for p in parts) or len({p.shape for p in parts}) > 1:
        return None
    return np.stack(parts) if parts else np.zeros(0)


def as_one_number(x) -> int | float | None:
    """``x`` as one number, also when it is a container of exactly one (``[10]``, ``tensor([10.])``,
    ``np.array([10.])``): the value a learner printed is the answer. None for anything else."""
    number = as_number(x)
    if number is not None:
        return number
    values = as_array(x)
    if values is None or values.size != 1 or holds_text(x):
        return None
    return float(values.reshape(-1)[0])


def as_mapping(x) -> list[tuple] | None:
    """The ``(key, value)`` pairs of a dict (read with dict's own methods), or None."""
    if not issubclass(type(x), dict):
        return None
    return list(dict.items(x))


def as_pairs(x) -> list[tuple] | None:
    """The ``(key, value)`` pairs of a dict, or of a list or tuple of two-item lists or tuples
    (``[("a", 1), ("b", 2)]``, what ``list(d.items())`` gives); None for anything else."""
    pairs = as_mapping(x)
    if pairs is not None:
        return pairs
    if not issubclass(type(x), (list, tuple)):
        return None
    items = as_items(x)
    out = []
    for item in items:
        two = as_items(item) if issubclass(type(item), (list, tuple)) else None
        if two is None or len(two) != 2:
            return None
        out.append((two[0], two[1]))
    return out


def spelling(text: str) -> str:
    """A word or name as the lab compares it: lower case, ``_`` and ``-`` read as spaces, single spaces,
    no quotes or full stop around it (``"Double-Tree."`` -> ``"double tree"``)."""
    words = text.strip().strip("'\"").rstrip(".").lower().replace("_", " ").replace("-", " ")
    return " ".join(words.split())


def as_tensor(x):
    """``x`` as a torch tensor: a tensor itself (detached), or a numpy array or nested numbers; None otherwise."""
    torch = _torch()
    if torch is None:
        import torch
    if _torch_tensor(x):
        return x.detach()
    values = as_array(x)
    return None if values is None else torch.from_numpy(values)


def holds_text(x, _depth: int = 0) -> bool:
    """Whether ``x`` is, or holds in its lists and tuples, text (a str or bytes)."""
    if issubclass(type(x), (str, bytes)):
        return True
    items = as_items(x) if issubclass(type(x), (list, tuple)) else None
    return items is not None and _depth < _DEPTH and any(holds_text(i, _depth + 1) for i in items)


def close_number(got, want: float, rtol: float = 1e-9, atol: float = 0.0) -> bool:
    """Whether ``got`` is one number within ``atol + rtol * |want|`` of ``want``.

    Text, yes/no and containers are not numbers; numpy and torch scalars are, judged at their
    own precision (a float32 result is exact only to about 1e-7).

    >>> close_number(0.1 + 0.2, 0.3), close_number("0.3", 0.3)
    (True, False)
    """
    read = _read_number(got)
    if read is None:
        return False
    value, eps = read
    tol = max(rtol, 4 * eps)
    value, want = float(value), float(want)
    return math.isfinite(value) and abs(value - want) <= atol + tol * abs(want)


def equal(got, want, _depth: int = 0) -> bool:
    """Whether ``got`` (the learner's) equals ``want`` (the lab's), read as ``want``'s type:
    numbers within 1e-12 (floats) or exactly (ints), text exactly, lists and tuples item by
    item, arrays and tensors with ``numpy.allclose``; any other type only when it is ``want``'s own
    and ``want`` says so."""
    if _depth > _DEPTH:
        return False
    t = type(want)
    if want is None:
        return got is None
    if t is bool or t is np.bool_:
        return type(got) in (bool, np.bool_) and bool(got) == bool(want)
    if hasattr(want, "shape") and (t is np.ndarray or _torch_tensor(want)) and getattr(want, "ndim", 1) > 0:
        g, w = as_array(got), as_array(want)
        return g is not None and g.shape == w.shape and bool(np.allclose(g, w))
    if t in _NUMPY_REALS or issubclass(t, (int, float)) or _torch_tensor(want) or t is np.ndarray:
        value = as_number(want)
        if type(value) is float or type(as_number(got)) is float:
            return close_number(got, value, atol=1e-12)
        return as_number(got) == value and as_number(got) is not None
    if issubclass(t, str):
        return as_text(got) == want
    if issubclass(t, (list, tuple)):
        items, wants = as_items(got), as_items(want)
        return (items is not None and issubclass(type(got), (list, tuple)) and len(items) == len(wants)
                and all(equal(g, w, _depth + 1) for g, w in zip(items, wants)))
    return type(got) is t and bool(want == got)
