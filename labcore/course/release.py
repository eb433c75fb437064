"""The student release: the notebooks and a labcore whose exercises hold no solutions.

``python -m labcore course build OUT`` (or :func:`build_release`) writes, into a new folder:

- ``notebooks/``: the lab's notebooks, outputs cleared;
- ``labcore/``: the package with the course setting on (a ``STUDENT`` file, see
  :mod:`labcore.exercises.setting`) and every exercise module **sealed**: its code, with each
  exercise's ``solution=``, last hint, ``correct_example=`` and ``wrong_examples=`` and every
  docstring taken out, is compiled to bytecode (``labcore/course/sealed-<python>.bin``), and the
  module's file is a stub that loads it. The reference implementations that solutions point to
  (``ring_all_reduce``, ``shard_of``, ...) still run, for the checks and the notebooks' demos, but
  have no source to read (``inspect.getsource`` raises OSError) and no text in the package;
- ``tests/data/`` (the recorded logs and runs the notebooks read), ``pyproject.toml``, ``README.md``,
  ``binder/`` and ``environment.yml``, and ``RELEASE.md`` saying what was withheld.

Bytecode is specific to a Python version: the release holds code for the Python that builds
it and for each ``--python`` interpreter given. What it keeps out of reach is text: a student
who disassembles a check can still see what it compares with, as with any check that runs on
the student's machine; the grade that counts is the autograder's, run by the instructor with
the full package (:mod:`labcore.course.grading`).

Example
-------
>>> out = build_release("/tmp/student-release")          # doctest: +SKIP
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from labcore.exercises.setting import MARKER

# Modules under labcore.exercises that ship as source: the framework, and code learners read.
OPEN_MODULES = {"labcore.exercises", "labcore.exercises.core", "labcore.exercises.hang_cases"}
WITHHELD_KEYWORDS = ("solution", "correct_example", "wrong_examples")
STUB = ('"""Exercises of the Collective Communication Lab (student release: compiled, without solutions)."""\n'
        "from labcore.course.sealed import load as _load\n\n_load(globals())\n")

__all__ = ["build_release", "ReleaseError", "OPEN_MODULES", "seal_source"]


class ReleaseError(ValueError):
    """The release cannot be built as asked (the message names the fix)."""


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"{out} exists and is not an empty folder: give a new folder for the release")
    if MARKER.exists():
        raise ReleaseError("this labcore is a student release already: build from the lab's repository")


# -- taking the answers out of a module's source --------------------------------------------------
class _Strip(ast.NodeTransformer):
    """Drops docstrings, and from every exercise constructor (a call with ``solution=``) the answers."""

    def __init__(self, module: str):
        self.module = module
        self.exercises = 0

    def _drop_docstring(self, node):
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_Module = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _drop_docstring

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        names = {k.arg for k in node.keywords}
        if "solution" not in names:
            return node
        self.exercises += 1
        kept = []
        for k in node.keywords:
            if k.arg in WITHHELD_KEYWORDS:
                continue
            if k.arg == "hints":
                if not isinstance(k.value, (ast.List, ast.Tuple)):
                    raise ReleaseError(f"{self.module}, line {node.lineno}: hints= is not a list written out, so "
                                       "the release cannot withhold the last hint; write the hints as a list")
                k.value.elts = k.value.elts[:-1]
            kept.append(k)
        node.keywords = kept
        return node


def seal_source(source: str, module: str = "module") -> tuple[str, int]:
    """(source without solutions, last hints, examples and docstrings; how many exercises it held).

    >>> text, n = seal_source('q = E("t", "p", hints=["a", "b"], solution="42", correct_example=42)')
    >>> text, n
    ("q = E('t', 'p', hints=['a'])", 1)
    """
    strip = _Strip(module)
    tree = strip.visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree)), strip.exercises


# -- compiling for each Python ----------------------------------------------------------------------
_COMPILER = r"""
import json, marshal, sys
sources = json.load(sys.stdin)
code = {name: marshal.dumps(compile(text, f"<{name}: compiled in the student release>", "exec", dont_inherit=True))
        for name, text in sources.items()}
with open(sys.argv[1], "wb") as out:
    out.write(marshal.dumps(code))
print("%d.%d" % sys.version_info[:2])
"""


def _compile_for(python: str, sources: dict[str, str], folder: Path) -> str:
    """Compile ``sources`` with interpreter ``python``; returns its version ("3.11")."""
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".bin")
    os.close(fd)
    try:
        try:
            done = subprocess.run([python, "-I", "-c", _COMPILER, tmp], input=json.dumps(sources), text=True,
                                  capture_output=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ReleaseError(f"--python {python}: cannot run it ({err}); give the path of a Python interpreter")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ReleaseError(f"--python {python} could not compile the exercises: {last}")
        version = done.stdout.strip()
        os.replace(tmp, folder / f"sealed-{version}.bin")
        return version
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# -- the release ------------------------------------------------------------------------------------------
def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _copy_package(root: Path, out: Path) -> dict[str, str]:
    """Copy labcore/ into ``out``, sealing the exercise modules; returns {module: sealed source}."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "STUDENT", "sealed-*.bin")
    shutil.copytree(root / "labcore", out / "labcore", ignore=ignore)
    sources, counted = {}, 0
    for path in sorted((root / "labcore" / "exercises").rglob("*.py")):
        name = _module_name(root, path)
        if name in OPEN_MODULES:
            continue
        text, n = seal_source(path.read_text(encoding="utf-8"), name)
        sources[name] = text
        counted += n
        (out / path.relative_to(root)).write_text(STUB, encoding="utf-8")
    if not counted:
        raise ReleaseError("found no exercise (a call with solution=) under labcore/exercises: nothing to seal")
    return sources


def _copy_notebooks(root: Path, out: Path) -> list[str]:
    import nbformat

    (out / "notebooks").mkdir()
    names = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, out / "notebooks" / path.name)
        names.append(path.name)
    if not names:
        raise ReleaseError(f"no notebooks in {root / 'notebooks'}: build from the lab's repository")
    return names


_PACKAGE_DATA = '\n[tool.setuptools.package-data]\nlabcore = ["exercises/STUDENT", "course/sealed-*.bin"]\n'


def _copy_extras(root: Path, out: Path) -> None:
    for name in ("README.md", "environment.yml"):
        if (root / name).exists():
            shutil.copy2(root / name, out / name)
    if (root / "binder").is_dir():
        shutil.copytree(root / "binder", out / "binder")
    if (root / "tests" / "data").is_dir():
        shutil.copytree(root / "tests" / "data", out / "tests" / "data")
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    if "[tool.setuptools.package-data]" not in text:
        text += _PACKAGE_DATA
    (out / "pyproject.toml").write_text(text, encoding="utf-8")


def _git_commit(root: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30)
        return done.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _release_notes(out: Path, notebooks: list[str], sources: dict[str, str], versions: list[str], commit: str) -> None:
    from labcore.course.catalog import all_exercises

    lines = ["# Student release of the Collective Communication Lab", "",
             f"Built from commit {commit} for Python {', '.join(versions)}. The course setting is on (student):",
             "`solution()` and each exercise's last hint are off; every check works as in the lab.", "",
             "Install: `python3 -m venv .venv && .venv/bin/pip install -e \".[lab]\"`, then",
             "`.venv/bin/jupyter lab notebooks/`.", "", "## Notebooks", ""]
    lines += [f"- notebooks/{n}" for n in notebooks]
    lines += ["", "## Exercise modules shipped compiled, without solutions", ""]
    lines += [f"- {name}" for name in sorted(sources)]
    lines += ["", f"{len(all_exercises())} exercises: their solutions, last hints and example answers are not "
              "in this release."]
    (out / "RELEASE.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_release(out, *, pythons=(), root=None) -> Path:
    """Write the student release into ``out`` (a new or empty folder); returns its path.

    Parameters
    ----------
    out : the folder to write.
    pythons : more interpreters to compile the sealed exercises for (one per Python version the
        students use); the running one is always included.
    root : the lab's repository (default: the one this labcore was imported from).
    """
    root = Path(root) if root is not None else _repo_root()
    out = Path(out)
    _check_out(out)
    if not (root / "labcore" / "exercises").is_dir() or not (root / "pyproject.toml").is_file():
        raise ReleaseError(f"{root} is not the lab's repository (no labcore/exercises, no pyproject.toml)")
    out.mkdir(parents=True, exist_ok=True)
    try:
        sources = _copy_package(root, out)
        notebooks = _copy_notebooks(root, out)
        _copy_extras(root, out)
        course = out / "labcore" / "course"
        versions = sorted({_compile_for(p, sources, course) for p in (sys.executable, *pythons)})
        commit = _git_commit(root)
        (out / "labcore" / "exercises" / MARKER.name).write_text(f"student release, commit {commit}\n",
                                                                 encoding="utf-8")
        _release_notes(out, notebooks, sources, versions, commit)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out
