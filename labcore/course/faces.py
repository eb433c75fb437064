"""What a student release ships of each exercise module: its face and its checks, as source.

- :func:`faces`: the code a notebook imports. For each notebook's module, the names its notebooks
  use (a word of a notebook's code that is a public name of the module), the module-level code those
  need (followed through the package's own modules), and its questions as
  :class:`labcore.exercises.question.Question` calls with a title, a prompt and every hint but the
  last. Nothing else: no check, no solution, no example, no known mistake, no reference the notebooks
  do not run. The lab's answers that a notebook demonstrates stay (``ring_all_reduce``); a check
  refuses them handed in (:mod:`labcore.exercises.own`).
- :func:`checks_source`: the whole module for the checks, renamed under ``labcore.exercises._full``
  (:mod:`labcore.exercises.sealed`), without docstrings, solutions, last hints, wrong examples or
  the modules of known mistakes; a correct example is kept only where it names one of the lab's
  functions or classes (so that a check can refuse it handed in).

Example
-------
>>> text = checks_source('from labcore.exercises.ring.reference import f\\n'
...                      'q = E("t", "p", hints=["a", "b"], solution="f", correct_example=3)', "m", {})
>>> print(text)
from labcore.exercises._full.ring.reference import f
q = E('t', 'p', hints=['a'])
"""
from __future__ import annotations

import ast
import inspect
import re
from typing import Iterable

from labcore.course.catalog import NOTEBOOK_OF, PREFIX
from labcore.exercises.sealed import FULL

__all__ = ["sealed_module", "faces", "checks_source", "question_call", "FaceError"]

WITHHELD = ("solution", "wrong_examples", "correct_example")


class FaceError(ValueError):
    """A module cannot be split into face and checks as written (the message names the fix)."""


def sealed_module(name: str) -> bool:
    """Whether ``name`` is a notebook's exercise module (or part of its package): shipped compiled."""
    return name.startswith(PREFIX) and name[len(PREFIX):].split(".")[0] in NOTEBOOK_OF


def _mistakes(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == "mistakes"


# -- the checks ---------------------------------------------------------------------------------------
class _Docstrings(ast.NodeTransformer):
    """Drops every docstring (module, class, function)."""

    def _drop_docstring(self, node):
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_Module = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _drop_docstring


class _Checks(_Docstrings):
    """Drops docstrings and the answers of every exercise constructor; moves sealed imports to ``_full``."""

    def __init__(self, module: str, namespace: dict):
        self.module, self.namespace, self.dropped = module, namespace, set()

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if "solution" not in {k.arg for k in node.keywords}:
            return node
        kept = []
        for k in node.keywords:
            if k.arg in WITHHELD and not (k.arg == "correct_example" and self._names_code(k.value)):
                continue
            if k.arg == "hints":
                if not isinstance(k.value, (ast.List, ast.Tuple)):
                    raise FaceError(f"{self.module}, line {node.lineno}: hints= is not a list written out, so the "
                                    "release cannot withhold the last hint; write the hints as a list")
                k.value.elts = k.value.elts[:-1]
            kept.append(k)
        node.keywords = kept
        return node

    def _names_code(self, value) -> bool:
        """Whether an expression names the lab's functions or classes only (``f``, ``(f, g)``)."""
        items = value.elts if isinstance(value, ast.Tuple) else [value]
        found = [self.namespace.get(i.id) for i in items if isinstance(i, ast.Name)]
        return len(found) == len(items) and all(inspect.isfunction(f) or inspect.isclass(f) for f in found)

    def _moved(self, module: str) -> str:
        return FULL + module[len("labcore.exercises"):] if sealed_module(module) else module

    def visit_ImportFrom(self, node: ast.ImportFrom):
        module = node.module or ""
        if _mistakes(module):
            self.dropped |= {a.asname or a.name for a in node.names}
            return None
        if module == "labcore.exercises":
            inside = [a for a in node.names if sealed_module(f"{module}.{a.name}")]
            rest = [a for a in node.names if a not in inside]
            self.dropped |= {a.asname or a.name for a in inside if _mistakes(a.name)}
            moved = [ast.ImportFrom(FULL, [a], 0) for a in inside if not _mistakes(a.name)]
            return ([ast.ImportFrom(module, rest, 0)] if rest else []) + moved
        node.names = [a for a in node.names if not _mistakes(f"{module}.{a.name}")
                      or self.dropped.add(a.asname or a.name)]
        node.module = self._moved(module)
        return node if node.names else None

    def visit_Import(self, node: ast.Import):
        for alias in node.names:
            if sealed_module(alias.name):
                raise FaceError(f"{self.module}, line {node.lineno}: `import {alias.name}` binds a sealed module by "
                                "its own name; write `from ... import ... as ...`")
        return node


def checks_source(source: str, module: str, namespace: dict) -> str:
    """The checks' code of ``module`` (see the module docstring); ``namespace`` is the module's own
    (it tells a correct example that names a function from one that is a value)."""
    strip = _Checks(module, namespace)
    tree = ast.fix_missing_locations(strip.visit(ast.parse(source)))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if strip.dropped & used:
        raise FaceError(f"{module} uses {', '.join(sorted(strip.dropped & used))} from the known mistakes beyond "
                        "wrong_examples=; the release leaves the mistakes out: move that code out of mistakes.py")
    return ast.unparse(tree)


# -- the faces ----------------------------------------------------------------------------------------
def _bound(stmt) -> set[str]:
    """The names a top-level statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _used(stmt) -> set[str]:
    """The names a statement reads (annotations left out: with postponed evaluation they never run)."""
    skip = set()
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs,
                        node.args.vararg, node.args.kwarg]:
                if arg is not None and arg.annotation is not None:
                    skip |= {id(n) for n in ast.walk(arg.annotation)}
            if node.returns is not None:
                skip |= {id(n) for n in ast.walk(node.returns)}
        elif isinstance(node, ast.AnnAssign):
            skip |= {id(n) for n in ast.walk(node.annotation)}
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and id(n) not in skip}


def _public(tree, namespace: dict) -> list[str]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            return list(ast.literal_eval(stmt.value))
    return [n for n in namespace if not n.startswith("_")]


class _Module:
    """One sealed module's source, read for the face: which statement binds and reads which names."""

    def __init__(self, name: str, source: str, namespace: dict):
        self.name, self.namespace = name, namespace
        self.tree = ast.parse(source)
        self.public = _public(self.tree, namespace)
        self.binds = [_bound(s) for s in self.tree.body]
        self.kept: set[int] = set()

    def keep(self, names: Iterable[str]) -> dict[str, set[str]]:
        """Keep the statements ``names`` need; returns {sealed module: names this face imports from it}."""
        todo, wanted = list(names), {}
        while todo:
            name = todo.pop()
            if name.startswith("q_"):           # a question is written as its face, never as its exercise
                continue
            for i, (stmt, binds) in enumerate(zip(self.tree.body, self.binds)):
                if name not in binds:
                    continue
                if isinstance(stmt, ast.ImportFrom) and sealed_module(self._absolute(stmt)):
                    for alias in stmt.names:
                        if (alias.asname or alias.name) == name:
                            wanted.setdefault(self._absolute(stmt), set()).add(alias.name)
                if i not in self.kept:
                    self.kept.add(i)
                    todo += _used(stmt)
        return wanted

    def _absolute(self, stmt: ast.ImportFrom) -> str:
        if not stmt.level:
            return stmt.module or ""
        package = self.name.rsplit(".", stmt.level)[0]
        return f"{package}.{stmt.module}" if stmt.module else package

    def source(self, names: set[str], questions: list[str], exports: list[str]) -> str:
        """The face: the kept statements (imports cut to the names kept code reads), then the questions."""
        needed = set(names)
        for i in self.kept:
            needed |= _used(self.tree.body[i])
        body = []
        for i, stmt in enumerate(self.tree.body):
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                body.append(stmt)
            elif i in self.kept and not any(isinstance(t, ast.Name) and t.id == "__all__"
                                            for t in getattr(stmt, "targets", ())):
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    stmt.names = [a for a in stmt.names if (a.asname or a.name).split(".")[0] in needed
                                  and not (a.asname or a.name).startswith("q_")]
                    if not stmt.names:
                        continue
                body.append(stmt)
        tree = _Docstrings().visit(ast.Module(body=body, type_ignores=[]))
        text = ast.unparse(ast.fix_missing_locations(tree))
        return "\n".join([text, *questions, f"__all__ = {sorted(set(exports))!r}", ""])


def question_call(var: str, catalog_name: str, module: str, exercise, visible_hints: list[str]) -> str:
    """The line of a face that builds ``var``, the face of ``exercise`` (see the module docstring)."""
    fields = dict(name=catalog_name, full=FULL + module[len("labcore.exercises"):], title=exercise.title,
                  prompt=exercise.prompt, hints=list(visible_hints), expects=exercise.expects, var=exercise.var,
                  time_limit=exercise.time_limit, given=dict(getattr(exercise, "given", {}) or {}),
                  live=_is_live(exercise))
    text = repr(fields)
    try:
        if ast.literal_eval(text) != fields:
            raise ValueError
    except (ValueError, SyntaxError):
        raise FaceError(f"{catalog_name}: its prompt's numbers (given=) are not plain values the release can "
                        "write out; give numbers, text, lists and dicts of them") from None
    return f"{var} = _Question(**{text})"


def _is_live(exercise) -> bool:
    return any(cls.__name__ == "LiveExercise" for cls in type(exercise).__mro__)


def faces(modules: dict, namespaces: dict, questions: dict, notebook_code: str) -> dict[str, str]:
    """{module: face source} for the sealed modules that have one.

    Parameters
    ----------
    modules : {sealed module name: its source}.
    namespaces : {sealed module name: the module's namespace, as imported from the full lab}.
    questions : {face root (a notebook's module): [(var, catalog name, exercise, visible hints)]}, the
        primary name of each exercise first; a later var of the same exercise is an alias.
    notebook_code : every code cell of the notebooks (a word of it keeps a public name).
    """
    words = set(re.findall(r"[A-Za-z_]\w*", notebook_code))
    read = {name: _Module(name, text, namespaces.get(name, {})) for name, text in modules.items()}
    requested = {name: set() for name in read}
    for root in questions:
        requested[root] |= {n for n in read[root].public if n in words and not n.startswith("q_")}
    done: dict[str, set[str]] = {name: set() for name in read}
    changed = True
    while changed:
        changed = False
        for name, module in read.items():
            new = requested[name] - done[name]
            if not new:
                continue
            done[name] |= new
            changed = True
            for other, names in module.keep(new).items():
                if other not in read:
                    raise FaceError(f"{name} imports {other}, which is not a module of the lab")
                requested[other] |= names
    out = {}
    for name, module in read.items():
        lines, exports = [], [n for n in module.public if n in done[name]]
        seen: dict[int, str] = {}
        for var, catalog_name, exercise, hints in questions.get(name, []):
            if id(exercise) in seen:
                lines.append(f"{var} = {seen[id(exercise)]}")
            else:
                seen[id(exercise)] = var
                lines.append(question_call(var, catalog_name, name, exercise, hints))
            exports.append(var)
        if not done[name] and not lines:
            continue
        if lines:
            lines.insert(0, "from labcore.exercises.question import Question as _Question")
        out[name] = module.source(done[name], lines, exports)
    return out
