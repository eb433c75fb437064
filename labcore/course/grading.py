"""Grading with nbgrader: each exercise's answer handed in, and judged by the lab's check out of its reach.

:func:`make_assignment` writes an nbgrader course folder from the lab's notebooks:
``nbgrader_config.py``, ``source/<name>/`` and ``lab_release/`` (the student release the graded
notebooks import: questions without answers, see :mod:`labcore.course.release`). In each exercise
cell the answer gets a name (a cell that checks ``q_algbw.check(____)`` gets ``answer_q_algbw = ____``
before its check), so a learner gets the check's feedback as in the lab; after it comes a locked
*autograder tests* cell worth one point that hands the answer in::

    from labcore.course.handin import hand_in
    hand_in("measuring.q_algbw", answer_q_algbw)

The cell decides nothing. ``nbgrader autograde`` (or ``python -m labcore course autograde``) runs
each submission confined (:class:`labcore.course.autograde.JailedExecute`), then
:class:`labcore.course.autograde.JudgeHandIns` has every hand-in judged in a clean process by the
lab's full checks (:mod:`labcore.course.judge`) and writes the verdict into the cell, which nbgrader
grades: a right answer keeps its point; anything else is an error, no point. Then:

    nbgrader generate_assignment lab      # release/lab/: what students get
    python -m labcore course autograde .  # nbgrader autograde, confined and judged
    nbgrader generate_feedback lab        # feedback/: each cell's verdict
    python -m labcore course grades .     # or nbgrader export: the gradebook

Example
-------
>>> print(TEST_CELL.format(name="q_all_reduce", exercise="operations.q_all_reduce", args="answer_q_all_reduce",
...                        points=1, s=""))
# Autograded: the lab's check of q_all_reduce, run by the grader out of this notebook's reach (1 point).
from labcore.course.handin import hand_in
hand_in("operations.q_all_reduce", answer_q_all_reduce)
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from labcore.course.release import ReleaseError, _repo_root, build_release

CONFIG = '''"""nbgrader settings for the Collective Communication Lab (written by python -m labcore course assignment)."""
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput, SaveAutoGrades

from labcore.course.autograde import JailedExecute, JudgeHandIns

os.environ.setdefault("LABCORE_PROGRESS", "off")      # autograding is no learner's progress
c = get_config()  # noqa: F821 (nbgrader's config loader defines it)
c.CourseDirectory.course_id = "collective-communication-lab"
# each notebook runs confined, and each hand-in is judged out of its reach (labcore.course.autograde)
c.Autograde.autograde_preprocessors = [JailedExecute, JudgeHandIns, IgnorePattern, ClearMetadataPreprocessor,
                                       LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
c.JailedExecute.release = c.JudgeHandIns.release = "lab_release"
c.JailedExecute.isolation = c.JudgeHandIns.isolation = "required"
c.Execute.timeout = 600                               # a live cell starts ranks: seconds on a busy machine
'''
ANSWER = "answer_{name}"
TEST_CELL = ("# Autograded: the lab's check of {name}, run by the grader out of this notebook's reach "
             "({points} point{s}).\n"
             "from labcore.course.handin import hand_in\n"
             "hand_in(\"{exercise}\", {args})")
RELEASE = "lab_release"

__all__ = ["make_assignment", "read_grades", "exercise_cells", "ANSWER", "TEST_CELL"]


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


def _catalog_names(notebook: str) -> dict[str, str]:
    """{q_ variable: catalog name} for the exercises of notebook ``notebook`` ("01")."""
    from labcore.course.catalog import all_exercises

    return {name.split(".")[1]: name for name, (nb, _) in all_exercises().items() if nb == notebook}


def _graded(nb, notebook: str, points: int = 1):
    """The notebook with an autograded cell after each exercise cell."""
    import nbformat

    names = _catalog_names(notebook[:2])
    cells = []
    for cell in nb.cells:
        calls = _check_calls(cell.source) if cell.cell_type == "code" else []
        if len(calls) > 1:
            raise ReleaseError(f"{notebook}: a cell checks {len(calls)} exercises; give each its own cell")
        if not calls:
            cells.append(cell)
            continue
        name = calls[0].func.value.id
        if name not in names:
            raise ReleaseError(f"{notebook}: {name} is not an exercise of notebook {notebook[:2]} in the catalog "
                               "(labcore/course/catalog.py)")
        cell.source, args = _rewrite(cell.source, calls[0])
        cells.append(cell)
        test = nbformat.v4.new_code_cell(TEST_CELL.format(name=name, exercise=names[name], args=args, points=points,
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


def make_assignment(course, notebooks=("01", "03"), name: str = "lab", root=None, release=None) -> Path:
    """Write an nbgrader course folder for ``notebooks``; returns ``course/source/<name>``.

    Besides nbgrader's files it holds ``lab_release/``, the student release the graded notebooks import,
    built from the lab this labcore comes from.

    Parameters
    ----------
    course : a new or empty folder (becomes the nbgrader course root).
    notebooks : notebook numbers ("01", 3, ...).
    name : the assignment's name.
    root : where the notebooks are (default: the lab's repository).
    release : a student release built already (``python -m labcore course build``), copied in; default: build one.
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
    if release is None:
        build_release(course / RELEASE)
    else:
        _copy_release(Path(release), course / RELEASE)
    course.chmod(0o700)                                   # the grading user must not read the course
    return source


def _copy_release(release: Path, target: Path) -> None:
    import shutil

    from labcore.exercises.setting import MARKER

    if not (release / "labcore" / "exercises" / MARKER.name).is_file():
        raise ReleaseError(f"{release} is not a student release: build one with python -m labcore course build")
    shutil.copytree(release, target, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))


def read_grades(course, name: str = "lab"):
    """The gradebook of ``course`` for assignment ``name``: one row per student and exercise.

    Columns: student, notebook, exercise, score, max_score (nbgrader's own records, read with its API).
    """
    import pandas as pd
    from nbgrader.api import Gradebook, MissingEntry

    from sqlalchemy.exc import SQLAlchemyError

    db = Path(course) / "gradebook.db"
    if not db.is_file() or db.is_symlink():
        raise ReleaseError(f"no gradebook in {course}: run nbgrader autograde {name} there first")
    with open(db, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise ReleaseError(f"{db} is not an SQLite database (a damaged gradebook?): restore it from a backup, "
                               f"or run nbgrader autograde {name} again")
    rows = []
    try:
        with Gradebook(f"sqlite:///file:{db.resolve()}?mode=ro&uri=true") as gb:      # read: never written
            try:
                assignment = gb.find_assignment(name)
            except MissingEntry:
                raise ReleaseError(f"the gradebook has no assignment {name!r}") from None
            for submission in assignment.submissions:
                for nb in submission.notebooks:
                    for grade in nb.grades:
                        rows.append(dict(student=submission.student.id, notebook=nb.name, exercise=grade.name,
                                         score=float(grade.score or 0), max_score=float(grade.max_score)))
    except SQLAlchemyError as err:
        reason = str(getattr(err, "orig", err)).splitlines()[0][:200]
        raise ReleaseError(f"{db} cannot be read as an nbgrader gradebook ({reason}): restore it from a backup, "
                           f"or run nbgrader autograde {name} again") from None
    return pd.DataFrame(rows, columns=["student", "notebook", "exercise", "score", "max_score"]).sort_values(
        ["student", "notebook", "exercise"], ignore_index=True)
