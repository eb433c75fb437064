"""nbgrader grades the lab's notebooks with the lab's own checks: two sample submissions, end to end."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labcore.course.grading import _check_calls, assert_correct, exercise_cells, make_assignment, read_grades
from labcore.course.release import ReleaseError
from labcore.exercises.operations import q_all_reduce, q_which

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("01", "03")


def test_assert_correct_passes_a_right_answer_and_fails_the_rest_with_the_checks_message():
    assert_correct(q_all_reduce, 10)
    for wrong, says in ((3, "what rank 2 started with"), ("all_reduce", "not quite"), (None, "not quite")):
        with pytest.raises(AssertionError, match=says):
            assert_correct(q_all_reduce, wrong)
    with pytest.raises(AssertionError, match="not attempted"):
        assert_correct(q_which)


def test_each_exercise_cell_is_followed_by_a_locked_one_point_cell_that_runs_its_check(tmp_path):
    source = make_assignment(tmp_path / "course", NOTEBOOKS)
    assert (tmp_path / "course" / "nbgrader_config.py").exists()
    for number in NOTEBOOKS:
        original = nbformat.read(next((ROOT / "notebooks").glob(f"{number}_*.ipynb")), as_version=4)
        graded = nbformat.read(next(source.glob(f"{number}_*.ipynb")), as_version=4)
        wanted = [name for _, name in exercise_cells(original)]
        assert wanted and [name for _, name in exercise_cells(graded)] == wanted
        tests = [(i, c) for i, c in enumerate(graded.cells) if c.metadata.get("nbgrader", {}).get("grade")]
        assert [c.metadata["nbgrader"]["grade_id"] for _, c in tests] == wanted
        for (i, cell), name in zip(tests, wanted):
            meta = cell.metadata["nbgrader"]
            assert meta["locked"] and meta["points"] == 1 and not meta["solution"]
            assert f"assert_correct({name}, " in cell.source
            assert _check_calls(graded.cells[i - 1].source)[0].func.value.id == name   # right after its exercise
        assert len(graded.cells) == len(original.cells) + len(wanted)


def test_a_check_of_a_blank_gets_a_named_answer_the_test_cell_can_see(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\nq_algbw.check(____)")])
    (tmp_path / "lab" / "notebooks").mkdir(parents=True)
    (tmp_path / "lab" / "pyproject.toml").write_text("")
    nbformat.write(nb, tmp_path / "lab" / "notebooks" / "04_measuring.ipynb")
    source = make_assignment(tmp_path / "course", ["04"], root=tmp_path / "lab")
    cells = nbformat.read(source / "04_measuring.ipynb", as_version=4).cells
    assert cells[0].source == "x = 1\nanswer_q_algbw = ____\nq_algbw.check(answer_q_algbw)"
    assert cells[1].source.endswith("assert_correct(q_algbw, answer_q_algbw)")


@pytest.mark.parametrize("kwargs, says", [(dict(notebooks=["42"]), "no notebook 42"),
                                          (dict(notebooks=[]), "at least one notebook"),
                                          (dict(notebooks=["00"]), "no exercise cell"),
                                          (dict(name="a b"), "letters, digits")])
def test_bad_assignment_inputs_are_refused_with_the_fix(tmp_path, kwargs, says):
    with pytest.raises(ReleaseError, match=says):
        make_assignment(tmp_path / "course", **{"notebooks": NOTEBOOKS, **kwargs})


# -- end to end, with nbgrader's own commands ---------------------------------------------------------
def _answer_source(q, value, attribute: str) -> str:
    """The answer as code: a literal where it is one, else the lab's own object by name."""
    try:
        text = repr(value)
        if ast.literal_eval(text) == value and type(ast.literal_eval(text)) is type(value):
            return text
    except (ValueError, SyntaxError, TypeError):
        pass
    return attribute


def _fill(nb, plan: dict[str, str]) -> None:
    """Answer each exercise of ``plan`` (name -> "right", "mistake" or "blank") in the released notebook."""
    from labcore.course.catalog import all_exercises

    by_var = {name.split(".")[1]: q for name, (_, q) in all_exercises().items()}
    for index, var in exercise_cells(nb):
        if plan[var] == "blank":
            continue
        q = by_var[var]
        call = _check_calls(nb.cells[index].source)[0]
        target = call.args[0].id
        value, attr = ((q.correct_example, f"{var}.correct_example") if plan[var] == "right"
                       else (q.wrong_examples[0], f"{var}.wrong_examples[0]"))
        lines = nb.cells[index].source.split("\n")
        lines.insert(call.lineno - 1, f"{target} = {_answer_source(q, value, attr)}")
        nb.cells[index].source = "\n".join(lines)


def _nbgrader(course: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


@pytest.mark.live
@pytest.mark.slow
def test_nbgrader_grades_a_right_and_a_mistaken_submission_with_the_labs_checks(tmp_path):
    pytest.importorskip("nbgrader")
    course = tmp_path / "course"
    make_assignment(course, NOTEBOOKS, name="lab")
    _nbgrader(course, "generate_assignment", "lab", "--force")
    released = sorted((course / "release" / "lab").glob("*.ipynb"))
    assert [p.name[:2] for p in released] == list(NOTEBOOKS)

    expected = {}
    for student in ("right", "mistakes"):
        folder = course / "submitted" / student / "lab"
        folder.mkdir(parents=True)
        for path in released:
            nb = nbformat.read(path, as_version=4)
            names = [var for _, var in exercise_cells(nb)]
            # the mistaken learner leaves the first exercise blank, gets the second right, the rest wrong
            plan = ({v: "right" for v in names} if student == "right" else
                    {v: "blank" if i == 0 else "right" if i == 1 else "mistake" for i, v in enumerate(names)})
            _fill(nb, plan)
            nbformat.write(nb, folder / path.name)
            for var, what in plan.items():
                expected[(student, path.stem, var)] = 1.0 if what == "right" else 0.0
        (folder / "timestamp.txt").write_text("2026-12-01 12:00:00 UTC")
    _nbgrader(course, "autograde", "lab", "--force")

    grades = read_grades(course, "lab")
    got = {(r.student, r.notebook, r.exercise): r.score for r in grades.itertuples()}
    assert got == expected
    assert set(grades["max_score"]) == {1.0}
    totals = grades.groupby("student")["score"].sum()
    assert totals["right"] == len(expected) / 2 and totals["mistakes"] == len(NOTEBOOKS)
    assert (course / "autograded" / "mistakes" / "lab" / released[0].name).exists()
    shutil.rmtree(course)
