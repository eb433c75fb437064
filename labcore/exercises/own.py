"""The lab's own answers, recognised when a learner hands them in.

An exercise's right answer is often a function the lab ships for its notebooks to demonstrate
(``ring_all_reduce`` runs in notebook 02; ``Zero3LinearFn`` in 06). Handing that function in, a
copy of its code, or a function of one's own that only calls it, proves nothing, so a check
refuses each with a line asking for the learner's own code:

- **the same object**, or a class whose methods are the lab's;
- **the same code**: the same bytecode, constants and names (:func:`same_code`), however the
  function and its variables were renamed; a copy of the lab's source compiles to it. Only for
  answers of :data:`MIN_LINES` lines or more: a one-line formula written alone can match the lab's;
- **a call of it**: a name in the learner's code that stands for one of the lab's answers (a global
  bound to it, an attribute of a module holding it, or a name imported from ``labcore`` inside
  the function).

What is compared never runs: code objects are read, not called; an answer handed in as source
(:class:`labcore.exercises.codec.Sourced`, what the grader receives) is compiled, never run, and its
imports and globals are read by name (:func:`refused`). The lab's own tests check its answers with
:meth:`labcore.exercises.core.Exercise.self_test`, which skips this.

Example
-------
>>> def ref(n):
...     steps = 0
...     while n > 1:
...         n, steps = n // 2, steps + 1
...     return steps
>>> def copied(k):
...     s = 0
...     while k > 1:
...         k, s = k // 2, s + 1
...     return s
>>> same_code(copied.__code__, ref.__code__)
True
>>> refused(copied, [ref])
'ref'
>>> refused(lambda k: ref(k), [ref])          # a call of it
'ref'
"""
from __future__ import annotations

import ast
import importlib
import types
from typing import Any, Iterable

__all__ = ["lab_answers", "same_code", "refused", "refusal", "MIN_LINES"]

_DEPTH = 8          # code objects nested this deep are compared (functions inside functions)
MIN_LINES = 4       # the lab's answers this long (lines of code, the def's own not counted) are compared by code


def lab_answers(exercise) -> list:
    """The functions and classes that answer ``exercise``: its correct example (or each of a pair's)
    and a function exercise's reference."""
    found = []
    for value in (getattr(exercise, "correct_example", None), getattr(exercise, "reference", None)):
        items = value if type(value) in (tuple, list) else (value,)
        found += [v for v in items if type(v) is types.FunctionType or issubclass(type(v), type)]
    return list({id(f): f for f in found}.values())


def same_code(a: types.CodeType, b: types.CodeType, _depth: int = 0) -> bool:
    """Whether two code objects do the same: bytecode, names and constants (nested code compared the
    same way); variable names, file names and line numbers are not compared."""
    if type(a) is not types.CodeType or type(b) is not types.CodeType or _depth > _DEPTH:
        return False
    if a.co_code != b.co_code or a.co_names != b.co_names or a.co_argcount != b.co_argcount:
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    consts = zip(a.co_consts, b.co_consts)
    if _depth == 0 and a.co_consts and all(type(c) in (str, type(None)) for c in (a.co_consts[0], b.co_consts[0])):
        next(consts)                         # a function's docstring (or its None): a copy may drop or reword it
    for x, y in consts:
        if type(x) is types.CodeType or type(y) is types.CodeType:
            if not same_code(x, y, _depth + 1):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _methods(cls) -> dict:
    """{name: code} of the functions a class defines itself (static and class methods too)."""
    out = {}
    for name, value in type.__dict__["__dict__"].__get__(cls).items():     # a metaclass of the learner's is not asked
        fn = value.__func__ if type(value) in (staticmethod, classmethod) else value
        if type(fn) is types.FunctionType:
            out[name] = fn.__code__
    return out


def _codes(answer) -> list[types.CodeType]:
    if type(answer) is types.FunctionType:
        return [answer.__code__]
    if issubclass(type(answer), type):
        return list(_methods(answer).values())
    return []


def _lines(code: types.CodeType, _depth: int = 0) -> set[int]:
    """The line numbers a code object (and the code nested in it) runs, its first line left out."""
    lines = {line for _, _, line in code.co_lines() if line is not None and line != code.co_firstlineno}
    if _depth < _DEPTH:
        for const in code.co_consts:
            if type(const) is types.CodeType:
                lines |= _lines(const, _depth + 1) | {const.co_firstlineno}
    return lines


def _substantial(lab) -> bool:
    return sum(len(_lines(code)) for code in _codes(lab)) >= MIN_LINES


def _same(answer, lab) -> bool:
    if answer is lab:
        return True
    if not _substantial(lab):
        return False
    if type(answer) is types.FunctionType and type(lab) is types.FunctionType:
        return same_code(answer.__code__, lab.__code__)
    if issubclass(type(answer), type) and issubclass(type(lab), type):
        mine, theirs = _methods(answer), _methods(lab)
        return mine.keys() == theirs.keys() and all(same_code(mine[k], theirs[k]) for k in theirs)
    return False


def _names(code: types.CodeType, _depth: int = 0) -> set[str]:
    """Every global, attribute and imported name a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    if _depth < _DEPTH:
        for const in code.co_consts:
            if type(const) is types.CodeType:
                names |= _names(const, _depth + 1)
    return names


def _calls(answer, labs: list) -> Any:
    """The lab answer that ``answer``'s code names (see the module docstring), or None."""
    scope = getattr(answer, "__globals__", None)
    if type(answer) is not types.FunctionType or type(scope) is not dict:
        return None
    cells = zip(answer.__code__.co_freevars, answer.__closure__ or ())
    scope = {**scope, **{name: _contents(cell) for name, cell in cells}}     # what a function defined in one closes over
    names = set(answer.__code__.co_freevars)
    for code in _codes(answer):
        names |= _names(code)
    reaches_lab = any(n == "labcore" or n.startswith("labcore.") for n in names)
    for lab in labs:
        wanted = lab.__name__
        for name in names:
            bound = scope.get(name)
            if bound is not None and _same(bound, lab):
                return lab
            if type(bound) is types.ModuleType and wanted in names and \
                    _same(types.ModuleType.__dict__["__dict__"].__get__(bound).get(wanted), lab):
                return lab
        if reaches_lab and wanted in names and wanted not in scope:      # imported from labcore inside the function
            return lab
    return None


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:              # a cell not filled yet
        return None


def _items(answer) -> list:
    """An answer's functions: itself, or the items of a pair of functions."""
    return list(answer) if type(answer) in (tuple, list) else [answer]


def _imported(module: str, name: str):
    """The lab's object at ``module``.``name`` (only the lab's own modules are imported), or None."""
    if not (module == "labcore" or module.startswith("labcore.")):
        return None
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _compiled(sourced) -> list:
    """The function (or class methods') code of an answer handed in as source, compiled, never run."""
    try:
        module = compile(sourced.source if sourced.name != "<lambda>" else f"_ = (\n{sourced.source}\n)", "<answer>", "exec")
    except (SyntaxError, ValueError):
        return []
    found = [c for c in module.co_consts if type(c) is types.CodeType]
    if sourced.kind == "function":
        return [c for c in found if c.co_name == sourced.name or sourced.name == "<lambda>"][:1]
    body = [c for c in found if c.co_name == sourced.name]
    return [c for c in body[0].co_consts if type(c) is types.CodeType] if body else []


def _sourced_refused(sourced, labs: list) -> str | None:
    """The lab answer a handed-in source is (imported), copies (same code) or names (imports, globals)."""
    if sourced.kind == "import":
        found = _imported(sourced.spec["module"], sourced.spec["name"])
        return next((lab.__name__ for lab in labs if found is not None and _same(found, lab)), None)
    if sourced.kind not in ("function", "class"):
        return None
    codes = _compiled(sourced)
    for lab in labs:
        theirs = _codes(lab)
        if _substantial(lab) and codes and len(codes) == len(theirs) and all(
                any(same_code(mine, other) for other in theirs) for mine in codes):
            return lab.__name__
    return _names_lab(sourced, labs)


def _names_lab(sourced, labs: list) -> str | None:
    """The lab answer a handed-in source names: imported from labcore inside it, or through its globals."""
    from labcore.exercises.codec import Sourced, decode

    try:
        tree = ast.parse(sourced.source)
    except SyntaxError:
        return None
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith("labcore") for a in n.names}
    glob = {}
    for name, value in {**sourced.spec.get("globals", {}), **sourced.spec.get("closure", {})}.items():
        try:
            item = decode(value)
        except ValueError:
            continue
        if type(item) is Sourced and name in named:
            glob[name] = item
    for lab in labs:
        if lab.__name__ in imported:
            return lab.__name__
        for item in glob.values():
            if item.kind == "import" and _same(_imported(item.spec["module"], item.spec["name"]), lab):
                return lab.__name__
            if item.kind == "module" and lab.__name__ in named and \
                    _same(_imported(item.spec["module"], lab.__name__), lab):
                return lab.__name__
            if item.kind in ("function", "class") and _sourced_refused(item, [lab]) is not None:
                return lab.__name__
    return None


def refused(answer, labs: Iterable) -> str | None:
    """The name of the lab's answer in ``labs`` that ``answer`` is, copies or calls; None if none."""
    labs = list(labs)
    if not labs:
        return None
    for item in _items(answer):
        from labcore.exercises.codec import Sourced

        if type(item) is Sourced:
            name = _sourced_refused(item, labs)
            if name is not None:
                return name
            continue
        if not (type(item) is types.FunctionType or issubclass(type(item), type)):
            continue
        for lab in labs:
            if _same(item, lab):
                return lab.__name__
        called = _calls(item, labs)
        if called is not None:
            return called.__name__
    return None


def refusal(name: str) -> str:
    """The line a check says when the answer is the lab's own ``name``."""
    return (f"that is the lab's own {name} (or a copy of it, or a call of it), which the notebook shows; "
            "hand in a function you wrote yourself.")
