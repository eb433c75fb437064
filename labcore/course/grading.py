"""Grading with nbgrader: each exercise's ``check()`` becomes the grade of an autograded cell.

:func:`make_assignment` writes an nbgrader course folder (``nbgrader_config.py`` and
``source/<name>/``) from the lab's notebooks. In each exercise cell the answer has a name (a
cell that checks ``q_algbw.check(____)`` gets ``answer_q_algbw = ____`` before its check), so a learner gets
the check's feedback as in the lab; after it comes a locked *autograder tests* cell worth one
point, ``assert_correct(q_which, answer)``, which raises (no point) unless the lab's
check says "correct". Then the instructor runs nbgrader's own commands in the course folder:

    nbgrader generate_assignment lab      # release/lab/: what students get
    nbgrader autograde lab                # runs submitted/<student>/lab/ in the instructor's labcore
    python -m labcore course grades .     # or nbgrader export: the gradebook

Autograding runs every submission with the full package (not the student release), so a
submission is graded by the same checks the lab's tests hold to their right answers and mistakes.

Example
-------
>>> from labcore.exercises.operations import q_all_reduce
>>> assert_correct(q_all_reduce, 10)
>>> assert_correct(q_all_reduce, 3)
Traceback (most recent call last):
...
AssertionError: All-reduce by hand: not quite. 3 is what rank 2 started with: all_reduce replaces it with the combined value.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from labcore.course.release import ReleaseError, _repo_root

CONFIG = '''"""nbgrader settings for the Collective Communication Lab (written by python -m labcore course assignment)."""
import os

os.environ.setdefault("LABCORE_PROGRESS", "off")      # autograding is no learner's progress
c = get_config()  # noqa: F821 (nbgrader's config loader defines it)
c.CourseDirectory.course_id = "collective-communication-lab"
c.ExecutePreprocessor.timeout = 600                   # a live cell starts ranks: seconds on a busy machine
c.Execute.timeout = 600
'''
ANSWER = "answer_{name}"
TEST_CELL = ("# Autograded: the lab's own check of {name} ({points} point{s}).\n"
             "from labcore.course import assert_correct\n"
             "assert_correct({name}, {args})")

__all__ = ["make_assignment", "assert_correct", "read_grades", "exercise_cells", "ANSWER"]


def assert_correct(exercise, *answer, **context) -> None:
    """Raise AssertionError with the check's message unless ``exercise`` finds ``answer`` correct.

    A not-attempted answer fails too (no point); the attempt is not recorded as progress.
    """
    result = exercise.evaluate(*answer, **context)
    if result.status != "correct":
        raise AssertionError(result.message)


def _check_calls(source: str) -> list[ast.Call]:
    """The top-level ``q_x.check(...)`` statements of a cell (none in a cell of magics)."""
    if source.lstrip().startswith("%"):
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "check" \
                and isinstance(call.func.value, ast.Name) and call.func.value.id.startswith("q_"):
            calls.append(call)
    return calls


def exercise_cells(nb) -> list[tuple[int, str]]:
    """(cell index, exercise variable) for each exercise cell of a notebook (one check per cell)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            found += [(i, call.func.value.id) for call in _check_calls(cell.source)]
    return found


def _rewrite(source: str, call: ast.Call) -> tuple[str, str]:
    """(the cell with its answer bound to a name, the arguments the test cell passes)."""
    name = call.func.value.id
    extra = [ast.get_source_segment(source, k) for k in call.keywords]
    if call.args and isinstance(call.args[0], ast.Name) and call.args[0].id != "____":   # named already
        return source, ", ".join([call.args[0].id, *extra])
    var = ANSWER.format(name=name)
    answer = ast.get_source_segment(source, call.args[0]) if call.args else "____"
    args = ", ".join([var, *extra])
    lines = source.split("\n")
    first, last = call.lineno - 1, call.end_lineno
    indent = re.match(r"\s*", lines[first]).group(0)
    lines[first:last] = [f"{indent}{var} = {answer}", f"{indent}{name}.check({args})"]
    return "\n".join(lines), args


def _graded(nb, notebook: str, points: int = 1):
    """The notebook with an autograded cell after each exercise cell."""
    import nbformat

    cells = []
    for cell in nb.cells:
        calls = _check_calls(cell.source) if cell.cell_type == "code" else []
        if len(calls) > 1:
            raise ReleaseError(f"{notebook}: a cell checks {len(calls)} exercises; give each its own cell")
        if not calls:
            cells.append(cell)
            continue
        name = calls[0].func.value.id
        cell.source, args = _rewrite(cell.source, calls[0])
        cells.append(cell)
        test = nbformat.v4.new_code_cell(TEST_CELL.format(name=name, args=args, points=points,
                                                          s="" if points == 1 else "s"))
        test.metadata["nbgrader"] = dict(grade=True, grade_id=name, locked=True, points=points, schema_version=3,
                                         solution=False, task=False)
        cells.append(test)
    nb.cells = cells
    return nb


def _notebook_paths(root: Path, numbers) -> list[Path]:
    paths = []
    for n in numbers:
        n = str(n).zfill(2)
        found = sorted((root / "notebooks").glob(f"{n}_*.ipynb"))
        if len(found) != 1:
            have = ", ".join(p.name[:2] for p in sorted((root / "notebooks").glob("*.ipynb")))
            raise ReleaseError(f"no notebook {n}: the lab has {have}")
        paths.append(found[0])
    if not paths:
        raise ReleaseError("name at least one notebook, e.g. --notebooks 01 03")
    return paths


def make_assignment(course, notebooks=("01", "03"), name: str = "lab", root=None) -> Path:
    """Write an nbgrader course folder for ``notebooks``; returns ``course/source/<name>``.

    Parameters
    ----------
    course : a new or empty folder (becomes the nbgrader course root).
    notebooks : notebook numbers ("01", 3, ...).
    name : the assignment's name.
    root : the lab's repository (default: the one this labcore comes from).
    """
    import nbformat

    if not re.fullmatch(r"[A-Za-z0-9_-]+", name or ""):
        raise ReleaseError(f"assignment name {name!r}: use letters, digits, - and _ only")
    root = Path(root) if root is not None else _repo_root()
    course = Path(course)
    if course.exists() and (not course.is_dir() or any(course.iterdir())):
        raise ReleaseError(f"{course} exists and is not an empty folder: give a new folder for the course")
    paths = _notebook_paths(root, notebooks)
    source = course / "source" / name
    source.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if not exercise_cells(nb):
            raise ReleaseError(f"{path.name} has no exercise cell (q_x.check(...)): nothing to grade")
        nbformat.write(_graded(nb, path.name), source / path.name)
    return source


def read_grades(course, name: str = "lab"):
    """The gradebook of ``course`` for assignment ``name``: one row per student and exercise.

    Columns: student, notebook, exercise, score, max_score (nbgrader's own records, read with its API).
    """
    import pandas as pd
    from nbgrader.api import Gradebook, MissingEntry

    db = Path(course) / "gradebook.db"
    if not db.is_file():
        raise ReleaseError(f"no gradebook in {course}: run nbgrader autograde {name} there first")
    rows = []
    with Gradebook(f"sqlite:///{db}") as gb:
        try:
            assignment = gb.find_assignment(name)
        except MissingEntry:
            raise ReleaseError(f"the gradebook has no assignment {name!r}") from None
        for submission in assignment.submissions:
            for nb in submission.notebooks:
                for grade in nb.grades:
                    rows.append(dict(student=submission.student.id, notebook=nb.name, exercise=grade.name,
                                     score=float(grade.score), max_score=float(grade.max_score)))
    return pd.DataFrame(rows, columns=["student", "notebook", "exercise", "score", "max_score"]).sort_values(
        ["student", "notebook", "exercise"], ignore_index=True)
